"""Graphviz's ``dot``, run bounded: the read/write graph's SVG when Graphviz is installed and able.

The one place sectionmark runs Graphviz (renderers draw; they start no process). A graph ``dot`` cannot read
(a name with a NUL or over ``GRAPHVIZ_MAX_STRING`` characters) or would take minutes on (over
``GRAPHVIZ_MAX_LINES`` lines of DOT) is not given to it, and ``dot`` itself is ended after
``GRAPHVIZ_TIMEOUT_S``: the caller then draws its own layout, saying why.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Optional

GRAPHVIZ_TIMEOUT_S = 60.0
GRAPHVIZ_MAX_LINES = 2_000  # of DOT (a line per node, edge, cluster): dot took 17 s on 2,000, its time grows faster
GRAPHVIZ_MAX_STRING = 16_384  # dot refuses a quoted string longer than this; a DOT line holds one statement
INSTALL_HINT = "install Graphviz for SVG (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"


def graphviz_available() -> bool:
    """Whether a Graphviz ``dot`` program is on the PATH."""
    return shutil.which("dot") is not None


def graphviz_svg(dot_text: str) -> tuple[Optional[str], str]:
    """Graphviz's SVG of `render`'s DOT text (``dot -Tsvg``), or None and why not, in a few words.

    Bounded (module docstring).
    """
    lines = dot_text.splitlines()
    if len(lines) > GRAPHVIZ_MAX_LINES:
        return None, (f"Graphviz is not used for a graph this big ({len(lines):,} lines of DOT, "
                      f"over {GRAPHVIZ_MAX_LINES:,})")
    if "\0" in dot_text or any(len(line) > GRAPHVIZ_MAX_STRING for line in lines):
        return None, f"Graphviz cannot read a name with a NUL or longer than {GRAPHVIZ_MAX_STRING:,} characters"
    try:
        done = subprocess.run(["dot", "-Tsvg"], input=dot_text, capture_output=True, encoding="utf-8", errors="replace",
                              timeout=GRAPHVIZ_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"Graphviz 'dot' did not finish within {GRAPHVIZ_TIMEOUT_S:g} s"
    except OSError as error:
        return None, f"Graphviz 'dot' could not run: {error.strerror or error}"
    if done.returncode != 0 or "<svg" not in done.stdout:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1][:200]
        return None, f"Graphviz 'dot' failed (exit {done.returncode}): {last}"
    return done.stdout, ""
