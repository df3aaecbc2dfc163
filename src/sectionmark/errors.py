"""The one exception type the CLI turns into a single error line, and the one a stopping signal raises."""

import contextlib
import signal
import threading
from typing import Iterable, Iterator


class SectionmarkError(Exception):
    """A user-facing failure: bad input, missing tool, unsupported format.

    The message is one line that says what is wrong and, where possible, what
    to do; the CLI prints it as ``sectionmark: error: <message>`` and exits 1.
    """


class SectionmarkTypeError(SectionmarkError, TypeError):
    """A public function given a value of a type it does not take: a `TypeError` as Python's own, and a
    `SectionmarkError` (one error line on the command line). The message names the type and what is taken."""


def wrong_type(function: str, value: object, accepted: str) -> SectionmarkTypeError:
    """The error for ``value`` passed to ``function``, which takes ``accepted`` (words: "an export, MLIR text ...");
    the type is named with its module (``torch.Tensor``), a builtin one alone (``int``)."""
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return SectionmarkTypeError(f"{function} takes {accepted}, not {name}")


# What iree.runtime raises for a failed IREE status: INVALID_ARGUMENT and most codes are ValueError or RuntimeError,
# OUT_OF_RANGE (a truncated parameter archive) IndexError, UNIMPLEMENTED NotImplementedError.
IREE_ERRORS = (ValueError, RuntimeError, IndexError, NotImplementedError)


def first_line(text: str, default: str = "no message") -> str:
    """The first non-blank line of a library's multi-line error, for a one-line message."""
    return next((line.strip() for line in text.splitlines() if line.strip()), default)


class Interrupted(BaseException):
    """A signal asked this process to stop (SIGTERM, SIGHUP): raised from its handler (`raise_interrupted`) so
    that every ``finally`` on the way out ends the child processes and removes the scratch files, as Ctrl-C's
    KeyboardInterrupt does. A BaseException, like KeyboardInterrupt: no ``except Exception`` swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


# The signals that end a run cleanly through `Interrupted`; SIGINT is Python's KeyboardInterrupt already.
ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def raise_interrupted(signum: int, _frame: object) -> None:
    """A signal handler: raise `Interrupted`. The ending signals are ignored from then on: the process is on its
    way out, and a second signal must not cut its clean-up short."""
    for number in ENDING_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_raising(numbers: Iterable[int] = ENDING_SIGNALS) -> Iterator[None]:
    """Within the block, the signals ``numbers`` (of `ENDING_SIGNALS`) raise `Interrupted`; after it, every ending
    signal has its previous handling again. Nothing to do outside the main thread, where Python cannot set
    handlers (a signal is handled by the main thread then)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in ENDING_SIGNALS}
    try:
        for number in numbers:
            signal.signal(number, raise_interrupted)
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
