"""Section paths and their text encodings.

A section path is a tuple of names, outermost first. It travels through the
compiler in two spellings:

* our own MLIR NameLoc ``sectionmark:<encoded path>``: names joined by ``/``,
  with ``\\`` and ``/`` inside a name escaped by a backslash;
* JAX name-stack scopes ``sm:<name>``: ``%``, ``/``, ``(``, ``)`` and control
  characters percent-encoded, because JAX joins scopes with ``/`` and wraps
  them in ``jvp(...)`` / ``transpose(...)``.
"""

from __future__ import annotations

from urllib.parse import unquote

SectionPath = tuple[str, ...]

LOC_PREFIX = "sectionmark:"
JAX_SCOPE_PREFIX = "sm:"
BACKWARD_SUFFIX = " (backward)"
RECOMPUTE_SUFFIX = " (recompute)"  # forward ops that jax.checkpoint recomputes in the backward pass
PASS_SUFFIXES = (BACKWARD_SUFFIX, RECOMPUTE_SUFFIX)


def without_pass_suffix(name: str) -> str:
    """A section name without " (backward)" / " (recompute)": the name as the user wrote it."""
    for suffix in PASS_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
UNMARKED = "(unmarked)"


def encode_path(path: SectionPath) -> str:
    """``("Block 0", "a/b")`` -> ``Block 0/a\\/b`` (reversible, readable)."""
    return "/".join(name.replace("\\", "\\\\").replace("/", "\\/") for name in path)


def decode_path(text: str) -> SectionPath:
    """Inverse of :func:`encode_path`."""
    names: list[str] = []
    current: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            current.append(next(chars, "\\"))
        elif char == "/":
            names.append("".join(current))
            current = []
        else:
            current.append(char)
    names.append("".join(current))
    return tuple(names)


_JAX_ESCAPES = {c: f"%{ord(c):02X}" for c in "%/()"}
_JAX_ESCAPES.update({chr(i): f"%{i:02X}" for i in [*range(0x20), 0x7F]})


def encode_jax_scope(name: str) -> str:
    return JAX_SCOPE_PREFIX + "".join(_JAX_ESCAPES.get(c, c) for c in name)


def decode_jax_scope(scope: str) -> str:
    return unquote(scope[len(JAX_SCOPE_PREFIX):])


def format_path(path: SectionPath) -> str:
    """Human-readable form for tables and zone names: ``Block 0 / MLP``."""
    return " / ".join(path) if path else UNMARKED
