"""A progress line on the terminal for long work: exporting and compiling a model of real size takes minutes.

``with progress("compiling model for llvm-cpu", quiet) as step: step("dispatch creation") ...`` shows one
line on stderr, redrawn in place: what is being worked on, the current phase and the time elapsed (rich's
status line, ticking while the compiler runs without Python's lock). Nothing at all is written when
stderr is not a terminal (a pipe, a CI log, a notebook) or with ``quiet=True``: no control characters end
up in a log. The line is removed when the work ends.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

Step = Callable[[str], None]  # names the phase now running


def shows_progress(quiet: bool = False) -> bool:
    """Whether a progress line is drawn: not ``quiet`` and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress(what: str, quiet: bool = False) -> Iterator[Step]:
    """A progress line for ``what`` while the block runs; the block names each phase with the step it gets."""
    if not shows_progress(quiet):
        yield lambda phase: None
        return
    from rich.console import Console
    from rich.text import Text

    started = time.perf_counter()
    phase = [""]

    class Line:
        """Rendered at every refresh, so the elapsed time ticks between phases."""

        def __rich__(self) -> Text:
            current = f": {phase[0]}" if phase[0] else ""
            return Text(f"{what}{current} ({time.perf_counter() - started:.0f} s)")

    console = Console(stderr=True)
    with console.status(Line()) as status:

        def step(name: str) -> None:
            phase[0] = name
            status.update(Line())

        yield step
