"""Reads section paths back from MLIR locations (the one reader every stage uses).

Works on the printed form of a location (``str(op.location)`` or a ``loc(...)``
in MLIR text) so it does not depend on which MLIR Python bindings are loaded.
It understands our NameLoc ``sectionmark:<path>`` (torch importer), JAX name
stacks (``jit(f)/sm:Block/transpose(jvp(sm:MLP))/dot_general``), and finds
them inside FusedLoc, CallSiteLoc and nested NameLocs.
"""

from __future__ import annotations

import re
from typing import Iterator

from sectionmark.paths import (
    BACKWARD_SUFFIX,
    JAX_SCOPE_PREFIX,
    LOC_PREFIX,
    SectionPath,
    decode_jax_scope,
    decode_path,
)

# An MLIR string literal; group 1 is its escaped body.
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(\\|\"|n|t|[0-9A-Fa-f]{2})")
_SIMPLE_ESCAPES = {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}
_TRANSFORM = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$", re.S)


def unescape_mlir_string(body: str) -> str:
    """Undo MLIR's string printing (``\\5C``-style hex and simple escapes)."""
    if "\\" not in body:
        return body
    out = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(body):
        out += body[pos:match.start()].encode("utf-8")
        code = match.group(1)
        out += _SIMPLE_ESCAPES.get(code) or bytes([int(code, 16)])
        pos = match.end()
    out += body[pos:].encode("utf-8")
    return out.decode("utf-8", errors="surrogateescape")


def _name_strings(loc_text: str) -> Iterator[str]:
    """Yield the decoded name strings of a location (file names excluded)."""
    for match in _STRING.finditer(loc_text):
        following = loc_text[match.end():match.end() + 1]
        if following == ":":  # "file.py":12:3 is a FileLineColLoc
            continue
        yield unescape_mlir_string(match.group(1))


def path_from_jax_name_stack(stack: str) -> SectionPath | None:
    """Section path of a JAX name stack; names under ``transpose(...)`` are backward."""
    names: list[str] = []
    backward = False
    for component in stack.split("/"):
        inner = component
        while (wrapped := _TRANSFORM.match(inner)) is not None:
            backward = backward or inner.startswith("transpose(")
            inner = wrapped.group(1)
        if inner.startswith(JAX_SCOPE_PREFIX):
            names.append(decode_jax_scope(inner))
    if not names:
        return None
    if backward:
        names = [name + BACKWARD_SUFFIX for name in names]
    return tuple(names)


def path_from_name(name: str) -> SectionPath | None:
    """Section path carried by one NameLoc name, or None."""
    if name.startswith(LOC_PREFIX):
        return decode_path(name[len(LOC_PREFIX):])
    if JAX_SCOPE_PREFIX in name:
        return path_from_jax_name_stack(name)
    return None


def _paths_in(loc_text: str) -> Iterator[SectionPath]:
    """Yield the section path of each name of a location that carries one, outermost name first."""
    for name in _name_strings(str(loc_text)):
        path = path_from_name(name)
        if path is not None:
            yield path


def section_paths(loc_text: str) -> list[SectionPath]:
    """All distinct section paths found in a location, outermost name first."""
    return list(dict.fromkeys(_paths_in(loc_text)))


def section_path(loc_text: str) -> SectionPath | None:
    """The section path of a location: the first one found (the rest is not read), or None if unmarked."""
    return next(_paths_in(loc_text), None)


_NO_OWN_LOCATION = re.compile(r"^(?:loc\()?(?:callsite\()*unknown\b")


def has_no_own_location(loc_text: str) -> bool:
    """True for ``loc(unknown)`` and ``loc(callsite(unknown at ...))`` (an unknown location inlined).

    Such an op says nothing of where it came from (the implicit body of a named
    op such as ``linalg.matmul``, an op the compiler made from nothing): it
    belongs to the op around it, unlike an op whose location names no section.
    """
    return _NO_OWN_LOCATION.match(loc_text) is not None


def strip_sectionmark_names(loc_text: str) -> str:
    """The printed location without sectionmark's NameLoc wrappers (sections and site ids).

    ``loc("sectionmark:A"(callsite(...)))`` -> ``loc(callsite(...))``; a wrapper
    without a child (an unknown location) becomes ``unknown``. Everything else
    is kept verbatim, so parsing the result gives the location the op had
    before sectionmark touched it (FusedLoc de-duplicates again on parsing).
    """
    out: list[str] = []
    pos = 0
    for match in _STRING.finditer(loc_text):
        if match.start() < pos:
            continue  # inside a wrapper already copied by the recursive call
        following = loc_text[match.end():match.end() + 1]
        if not match.group(1).startswith(_OWN_PREFIXES) or following == ":":
            continue
        out.append(loc_text[pos:match.start()])
        if following == "(":
            close = _matching_paren(loc_text, match.end())
            out.append(strip_sectionmark_names(loc_text[match.end() + 1:close]))
            pos = close + 1
        else:
            out.append("unknown")
            pos = match.end()
    out.append(loc_text[pos:])
    return "".join(out)


_OWN_PREFIXES = (LOC_PREFIX, "sectionmark.site:")


def _matching_paren(text: str, open_index: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``open_index``, skipping string literals."""
    depth = 0
    index = open_index
    while index < len(text):
        char = text[index]
        if char == '"':
            index = _STRING.match(text, index).end()
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise ValueError(f"unbalanced location text: {text[:200]}")
