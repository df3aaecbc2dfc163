"""Reads section paths back from MLIR locations (the one reader every stage uses).

Works on the printed form of a location (``str(op.location)`` or a ``loc(...)``
in MLIR text) so it does not depend on which MLIR Python bindings are loaded.
It understands our NameLoc ``sectionmark:<path>`` (torch importer) and JAX name
stacks (``jit(f)/sm:Block/transpose(jvp(sm:MLP))/dot_general``), inside FusedLoc
and CallSiteLoc: an op inlined from a private function (a JAX scan body, a loop,
a nested jit) has ``callsite(<its relative name stack> at <the call's>)``, and is
in the sections of the call, then in its own.
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple, Optional

from sectionmark.section_path import (
    BACKWARD_SUFFIX,
    JAX_SCOPE_PREFIX,
    LOC_PREFIX,
    RECOMPUTE_SUFFIX,
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


def path_from_jax_name_stack(stack: str) -> SectionPath | None:
    """Section path of a JAX name stack (``jit(f)/sm:Block/transpose(jvp(sm:MLP))/dot_general``).

    Transforms wrap scopes (``jvp(sm:X)``, ``transpose(jvp(sm:X))``): names
    from the first ``transpose(...)`` on are backward (" (backward)"); names
    after ``rematted_computation`` (``jax.checkpoint`` recomputing its forward
    in the backward pass) are " (recompute)". A scope seen again right after
    itself through a transform (``transpose(jvp(sm:X))/jvp(sm:X)``) is one
    level; ``sm:X/sm:X`` as written stays two.
    """
    names: list[str] = []
    suffix = ""
    previous: Optional[str] = None  # the last level's name as written, while a transform may repeat it
    last_wrapped = False  # the last name came out of a transform
    for component in stack.split("/"):
        if component == REMAT_COMPONENT:
            suffix, previous = RECOMPUTE_SUFFIX, None  # nothing after it merges with what came before
            continue
        inner, wrapped = component, False
        while (transformed := _TRANSFORM.match(inner)) is not None:
            if inner.startswith("transpose(") and not suffix:
                suffix = BACKWARD_SUFFIX
            inner, wrapped = transformed.group(1), True
        if not inner.startswith(JAX_SCOPE_PREFIX):
            continue
        name = decode_jax_scope(inner)
        if name == previous and (wrapped or last_wrapped):
            continue
        names.append(name + suffix)
        previous, last_wrapped = name, wrapped
    return tuple(names) or None


REMAT_COMPONENT = "rematted_computation"
# The first component of a JAX name stack at the top of a jitted function; others are relative
# (the body of a scan, a loop, a nested jit: a private function, named where it is called).
_ABSOLUTE_STACK = re.compile(r"^p?jit\(")


class _Named(NamedTuple):
    """What a location says of its op's section: our NameLoc's path, or a JAX name stack."""

    path: Optional[SectionPath] = None  # from ``sectionmark:<path>``: absolute
    stack: Optional[str] = None  # a JAX name stack, relative unless it starts at a jit

    @property
    def section(self) -> Optional[SectionPath]:
        if self.path is not None:
            return self.path
        return path_from_jax_name_stack(self.stack) if self.stack is not None else None


class _Location(NamedTuple):
    kind: str  # "name", "callsite", "fused", "leaf"
    name: Optional[str] = None
    children: tuple = ()


class _Unparsable(ValueError):
    """Text that is not a printed location."""


class _LocationParser:
    """The printed form of a location as a tree: NameLoc, CallSiteLoc, FusedLoc, leaves."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def parse(self) -> _Location:
        text, pos = self.text, self.pos
        if text.startswith('"', pos):
            end = _STRING.match(text, pos).end()
            name = unescape_mlir_string(text[pos + 1:end - 1])
            self.pos = end
            if text.startswith(":", end):  # "file.py":12:3, maybe "to :5" or "to 4:5"
                self._skip_leaf()
                return _Location("leaf")
            if text.startswith("(", end):
                if not name.startswith(_SITE_PREFIX):  # the child of an op's own name is not read: skip it
                    self.pos = _matching(text, end, "(", ")") + 1
                    return _Location("name", name)
                self.pos = end + 1
                child = self.parse()
                self._expect(")")
                return _Location("name", name, (child,))
            return _Location("name", name)
        if text.startswith("callsite(", pos):
            self.pos = pos + len("callsite(")
            callee = self.parse()
            self._expect(" at ")
            caller = self.parse()
            self._expect(")")
            return _Location("callsite", children=(callee, caller))
        if text.startswith("fused", pos):
            self.pos = pos + len("fused")
            if text.startswith("<", self.pos):
                self.pos = _matching(text, self.pos, "<", ">") + 1
            self._expect("[")
            members = [self.parse()]
            while text.startswith(", ", self.pos):
                self.pos += 2
                members.append(self.parse())
            self._expect("]")
            return _Location("fused", children=tuple(members))
        self._skip_leaf()  # unknown, #loc aliases
        return _Location("leaf")

    def _skip_leaf(self) -> None:
        match = _LEAF_REST.match(self.text, self.pos)
        self.pos = match.end()

    def _expect(self, token: str) -> None:
        if not self.text.startswith(token, self.pos):
            raise _Unparsable(self.text[self.pos:self.pos + 40])
        self.pos += len(token)


# The rest of a leaf location: up to the next ", ", ")", "]" or " at " outside a string.
_LEAF_REST = re.compile(r'(?:[^"()\[\], ]|"(?:[^"\\]|\\.)*"| (?!at )(?=[^,])|,(?! ))*')


def _matching(text: str, open_index: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` that closes the ``opener`` at ``open_index``, skipping string literals."""
    depth = 0
    index = open_index
    while index < len(text):
        char = text[index]
        if char == '"':
            index = _STRING.match(text, index).end()
            continue
        if char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise _Unparsable(text[open_index:open_index + 40])


def _named(location: _Location) -> Optional[_Named]:
    """What ``location`` says of its op's section (None: nothing).

    A NameLoc is the op's own name (ours, or JAX's name stack); its child, a
    Python traceback in JAX, is not read. A call site composes: an op inlined
    from a private function whose name stack is relative (a scan body, a
    nested jit) is in the sections of the call, then in its own. A fused
    location is its first member that names a section.
    """
    kind = location.kind
    if kind == "name":
        name = location.name
        if name.startswith(LOC_PREFIX):
            return _Named(path=decode_path(name[len(LOC_PREFIX):]))
        if name.startswith(_OWN_PREFIXES):
            return _named(location.children[0]) if location.children else None
        return _Named(stack=name)
    if kind == "callsite":
        callee, caller = (_named(child) for child in location.children)
        if callee is None:
            return caller
        if callee.stack is not None and caller is not None and caller.stack is not None \
                and not _ABSOLUTE_STACK.match(callee.stack):
            return _Named(stack=caller.stack + "/" + callee.stack)
        return callee
    if kind == "fused":
        members = [named for named in map(_named, location.children) if named is not None]
        return next((named for named in members if named.section is not None), members[0] if members else None)
    return None


def _sections_of(location: _Location) -> Iterator[SectionPath]:
    """The section of ``location`` and of each member of a fused location, outermost first."""
    if location.kind == "fused":
        for member in location.children:
            yield from _sections_of(member)
        return
    named = _named(location)
    if named is not None and named.section is not None:
        yield named.section


def _parse_locations(loc_text: str) -> Iterator[_Location]:
    """Every ``loc(...)`` in ``loc_text`` (one location, or a line of MLIR), parsed."""
    for start in _LOC_START.finditer(loc_text):
        parser = _LocationParser(loc_text)
        parser.pos = start.end()
        try:
            yield parser.parse()
        except (_Unparsable, AttributeError, RecursionError):  # not a location, or nested beyond reason
            continue


_LOC_START = re.compile(r"\bloc\(")


def paths_in_location(loc_text: str) -> list[SectionPath]:
    """All distinct section paths of a location (or of every location in a line of MLIR), outermost first."""
    found: dict[SectionPath, None] = {}
    for location in _parse_locations(str(loc_text)):
        for path in _sections_of(location):
            found.setdefault(path, None)
    return list(found)


def section_path(loc_text: str) -> SectionPath | None:
    """The section path of a location (see `_named`), or None if unmarked."""
    for location in _parse_locations(str(loc_text)):
        named = _named(location)
        return named.section if named is not None else None
    return None


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


_SITE_PREFIX = "sectionmark.site:"  # the compiler's site ids (compiler/flow.py), around an op's location
_OWN_PREFIXES = (LOC_PREFIX, _SITE_PREFIX)


def _matching_paren(text: str, open_index: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``open_index``, skipping string literals."""
    return _matching(text, open_index, "(", ")")
