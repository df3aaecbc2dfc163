"""The `section` marker: one object that is a decorator and a context manager.

A section has two roles. While a framework traces the model (torch.export,
jax.jit) it enters that framework's scope, which the importers turn into MLIR
locations. While plain Python runs it is a zone of the installed zone emitter
(Tracy, see `sectionmark.tracy.enable`) — or, with none installed, nothing.

Speed matters on the eager path: ``with section(...)`` may wrap every call of
a decode loop. So a section keeps no state of its own: open zones live in
the emitter's per-thread zone stack (`sectionmark.zonestack`), entered
framework scopes in a per-thread list here, and neither is touched unless
something was ever switched on.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import Any, Callable, Optional, Protocol, TypeVar

__all__ = ["section", "ZoneEmitter", "set_zone_emitter", "zone_emitter"]

F = TypeVar("F", bound=Callable[..., Any])

_modules = sys.modules


class ZoneEmitter(Protocol):
    """What eager sections open and close zones with (see `sectionmark.tracy.TracyZones`)."""

    def location(self, name: str, color: Optional[int]) -> object:
        """A handle for (name, color); asked once per pair and cached here."""

    def open(self, marker: "section", location: object) -> None:
        """Open a zone for ``marker`` on the calling thread."""

    def close(self, marker: "section") -> None:
        """Close ``marker``'s zone on this thread (and any opened inside it); none open: no-op."""


class _ThreadScopes(threading.local):
    def __init__(self) -> None:
        self.open: list[tuple["section", tuple]] = []  # (marker, entered scopes), innermost last


_emitter: Optional[ZoneEmitter] = None
# The emitter's open and close, read on the hot path without attribute lookups.
# `_close` outlives `set_zone_emitter(None)` so that zones already open still close.
_open: Optional[Callable[["section", object], None]] = None
_close: Optional[Callable[["section"], None]] = None
_locations: dict = {}  # section key -> the emitter's location
_scopes = _ThreadScopes()
_scopes_used = False  # until a framework scope was entered, exits skip `_scopes`


def set_zone_emitter(emitter: Optional[ZoneEmitter]) -> None:
    """Install (or with None, remove) the emitter that eager sections open zones with."""
    global _emitter, _open, _close, _locations
    if emitter is None:
        _emitter = _open = None
        return
    if emitter is not _emitter:
        _locations = {}
    _emitter, _open, _close = emitter, emitter.open, emitter.close


def zone_emitter() -> Optional[ZoneEmitter]:
    return _emitter


def _framework_scopes(name: str) -> Optional[tuple]:
    """Enter the tracing scopes of whichever framework is tracing right now.

    Returns the entered context managers (to exit in reverse order), or None
    when nothing traces.
    """
    entered = []
    torch = _modules.get("torch")
    if torch is not None and torch.compiler.is_exporting():
        from sectionmark.importers import torch as torch_importer

        entered.extend(torch_importer.enter_export_scope(name))
    jax_core = _modules.get("jax._src.core")
    if jax_core is not None and not jax_core.trace_ctx.is_top_level():
        from sectionmark.importers import jax as jax_importer

        entered.append(jax_importer.enter_named_scope(name))
    return tuple(entered) if entered else None


def _dynamo_compiling() -> bool:
    torch = _modules.get("torch")
    return torch is not None and torch.compiler.is_dynamo_compiling()


class section:
    """Names a part of a model: ``@section("MLP")`` or ``with section("MLP"):``.

    Nesting builds a path (``("Block 3", "Self Attention")``). Names are any
    non-empty text; ``color`` is an optional 0xRRGGBB hint for viewers. One
    object may be entered again while open, and from several threads.
    Under TorchDynamo (strict torch.export) the constructor returns the
    equivalent ``torch.fx.traceback.annotate`` scope, the only context manager
    Dynamo can carry into node metadata.
    """

    __slots__ = ("name", "color", "_key")

    def __new__(cls, name: str, color: Optional[int] = None) -> "section":
        if not isinstance(name, str):
            raise TypeError(f"section name must be a str, got {type(name).__name__}")
        if not name:
            raise ValueError("section name must not be empty")
        if color is not None:
            if not isinstance(color, int) or isinstance(color, bool):
                raise TypeError(f"section color must be an int 0xRRGGBB, got {type(color).__name__}")
            if not 0 <= color <= 0xFFFFFF:
                raise ValueError(f"section color must be within 0x000000..0xFFFFFF, got {color:#x}")
        if "torch" in _modules and _dynamo_compiling():
            from sectionmark.importers import torch as torch_importer

            return torch_importer.dynamo_scope(name)  # type: ignore[return-value]
        self = object.__new__(cls)
        self.name = name
        self.color = color
        self._key = name if color is None else (name, color)  # of the emitter's locations
        return self

    def __repr__(self) -> str:
        return f"section({self.name!r})" if self.color is None else f"section({self.name!r}, color={self.color:#08x})"

    def __enter__(self) -> "section":
        global _scopes_used
        if "torch" in _modules or "jax" in _modules:
            scopes = _framework_scopes(self.name)
            if scopes is not None:
                _scopes_used = True
                _scopes.open.append((self, scopes))
                return self
        open_zone = _open
        if open_zone is not None:
            location = _locations.get(self._key)
            if location is None:
                location = _locations[self._key] = _emitter.location(self.name, self.color)
            open_zone(self, location)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if _scopes_used:
            entries = _scopes.open
            if entries and entries[-1][0] is self:
                for scope in reversed(entries.pop()[1]):
                    scope.__exit__(exc_type, exc, tb)
                return
        if _close is not None:
            _close(self)

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"section({self.name!r}) decorates callables, got {type(fn).__name__}")
        # One marker serves every call (recursion and threads included), except
        # under Dynamo, which needs the annotate scope the constructor returns.
        name, color, marker = self.name, self.color, self
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                with section(name, color) if "torch" in _modules and _dynamo_compiling() else marker:
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with section(name, color) if "torch" in _modules and _dynamo_compiling() else marker:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
