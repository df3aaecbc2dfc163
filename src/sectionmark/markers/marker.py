"""The `section` marker: one object that is a decorator and a context manager.

A section has two roles. While a framework traces the model (torch.export,
jax.jit) it enters that framework's scope, which the importers turn into MLIR
locations. While plain Python runs it is a zone of the installed zone emitter
(Tracy, see `sectionmark.tracy.enable`) — or, with none installed, nothing.

Speed matters on the eager path: ``with section(...)`` may wrap every call of
a decode loop. So a section keeps no state of its own: open zones live in
the emitter's per-thread zone stack (`sectionmark.markers.zonestack`), entered
framework scopes in a per-thread stack here, and neither is touched unless
something was ever switched on. The constructor returns one cached marker per
(name, color). Where the C extension was built, ``__enter__``/``__exit__`` are
C (`_zonestack.MarkerBase`): they read torch's export flag and JAX's current
trace without calling into either, open and close the C zone stack's zones
themselves, and run the Python logic here (`_enter`, `_exit`) only when there
is more to do; `_configure_fast_path` keeps them told.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Optional, Protocol, TypeVar

from sectionmark.markers import frameworks, zonestack
from sectionmark.markers.colors import note_color

__all__ = ["section", "ZoneEmitter", "set_zone_emitter", "zone_emitter"]

F = TypeVar("F", bound=Callable[..., Any])

_modules = sys.modules


class ZoneEmitter(Protocol):
    """What eager sections open and close zones with (see `sectionmark.tracy.TracyZones`)."""

    def location(self, name: str, color: Optional[int]) -> object:
        """A handle for (name, color); asked once per pair and cached here."""

    def open(self, marker: "section", location: object) -> None:
        """Open a zone for ``marker`` on the calling thread."""

    def close(self, marker: "section") -> object:
        """Close ``marker``'s zone on this thread (and any opened inside it); none open: no-op.

        Returns whether anything was closed.
        """


# One immutable snapshot, replaced in a single assignment, so that a thread
# switching zones on or off never shows another thread half a change:
# (emitter.open, emitter, {section key: location}) or None.
_zones: Optional[tuple] = None
# Closes the zones of every emitter installed so far (each a no-op when it has
# none open): zones stay closable after `set_zone_emitter(None)` or a swap.
_close: Optional[Callable[["section"], object]] = None
_closers: tuple = ()


def _exit_scopes(scopes: tuple) -> None:
    for scope in reversed(scopes):
        scope.__exit__(None, None, None)


# Entered framework scopes, per thread: the zone stack's logic, where "opening"
# records the scopes `_framework_scopes` already entered.
_scopes = zonestack.PythonZoneStack(begin=lambda scopes, _active: scopes, end=_exit_scopes)
_scopes_used = False  # until a framework scope was entered, exits skip `_scopes`


def set_zone_emitter(emitter: Optional[ZoneEmitter]) -> None:
    """Install (or with None, remove) the emitter that eager sections open zones with."""
    global _zones, _close, _closers
    if emitter is None:
        _zones = None
    else:
        if emitter.close not in _closers:
            _closers = _closers + (emitter.close,)
            _close = _closers[0] if len(_closers) == 1 else _close_with_every_emitter
        _zones = (emitter.open, emitter, {})
    _configure_fast_path()


def _close_with_every_emitter(marker: "section") -> None:
    for close in _closers:
        close(marker)


def zone_emitter() -> Optional[ZoneEmitter]:
    zones = _zones
    return zones[1] if zones is not None else None


def _configure_fast_path() -> None:
    """Tell the C enter/exit (`_zonestack.MarkerBase`) what it may do without the Python logic.

    Enter runs ``_enter`` while a framework's probe is not its own (see
    `frameworks.replace_probe`) or an emitter other than the C zone stack is installed; with the C stack
    installed it opens zones itself (``_enter`` caches each new location).
    Exit closes the C stack's zones itself while that stack is the only one
    ever installed and no framework scope was entered; once one was, or
    another emitter was installed, exit runs ``_exit`` from then on (their
    zones and scopes stay closable).
    """
    if _fast_path is None:
        return
    zones = _zones
    c_zones = zones is not None and zones[0] is _fast_path.open_zone
    enter_in_python = not frameworks.probes_are_native() or (zones is not None and not c_zones)
    if _scopes_used or (_close is not None and _close is not _fast_path.close_zone):
        exit_mode = _EXIT_IN_PYTHON
    else:
        exit_mode = _EXIT_NOTHING if _close is None else _EXIT_CLOSE_ZONE
    _fast_path.configure(enter_in_python, zones[2] if c_zones else None, exit_mode)


_EXIT_NOTHING, _EXIT_CLOSE_ZONE, _EXIT_IN_PYTHON = 0, 1, 2  # exit modes of the C fast path


def _dynamo_key(name: object, color: object) -> str:
    """A new key of the scope a section that TorchDynamo compiles enters, once its name and color are checked.

    Marked as ``torch.compiler.assume_constant_result`` marks a function (below,
    without importing Dynamo): Dynamo calls it as plain Python and keeps the key
    as a constant instead of tracing the check and the counter step by step
    (which it would report as a side effect on module globals). Being plain
    Python, it may import the torch importer (`frameworks.new_compiled_scope_key`),
    whose hooks then make a plain ``aot.export`` of a marked model keep its sections.
    """
    _check(name, color)
    note_color(name, color)
    return frameworks.new_compiled_scope_key()


# What torch.compiler.assume_constant_result(_dynamo_key) does, without importing Dynamo (a second).
_dynamo_key._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _bind_compiler_probes() -> None:
    """Keep the registry's compile-time probe and scope here: the constructor asks the probe each time, and the
    code Dynamo traces then finds both as plain globals of this module."""
    global _compiling, _compiled_scope
    _compiling, _compiled_scope = frameworks.compiling, frameworks.compiled_scope


_compiling: Callable[[], bool]
_compiled_scope: Optional[Callable[[dict], Any]]
_bind_compiler_probes()


_frameworks = frameworks.FRAMEWORKS


def _framework_scopes(name: str) -> Optional[tuple]:
    """Enter the tracing scopes of whichever framework traces on this thread right now.

    Returns the entered context managers (to exit in reverse order), or None
    when nothing traces here.
    """
    entered = []
    for framework in _frameworks:
        if framework.module in _modules and framework.tracing():
            scope = framework.enter_scope(name, [marker.name for marker in _scopes.markers()])
            if scope is not None:  # None: the framework traces on another thread
                entered.append(scope)
    return tuple(entered) if entered else None


def _enter(marker: "section") -> "section":
    """``section.__enter__``: a framework's scope while it traces, else a zone of the emitter, if any."""
    global _scopes_used
    for framework in _frameworks:  # the probes, inline: without the C fast path, every entry asks them
        if framework.module in _modules and framework.tracing():
            scopes = _framework_scopes(marker.name)
            if scopes is not None:
                if not _scopes_used:
                    _scopes_used = True
                    _configure_fast_path()  # before the exit that must close the scopes
                _scopes.open(marker, scopes)
                return marker
            break
    zones = _zones
    if zones is not None:
        open_zone, emitter, locations = zones
        location = locations.get(marker._key)
        if location is None:
            location = locations[marker._key] = emitter.location(marker.name, marker.color)
        open_zone(marker, location)
    return marker


def _exit(marker: "section", exc_type: object, exc: object, tb: object) -> None:
    """``section.__exit__``: closes what ``_enter`` opened for ``marker`` on this thread."""
    if _scopes_used and _scopes.close(marker):
        return
    if _close is not None:
        _close(marker)


if zonestack._zonestack is not None:
    # Enter and exit in C: they call _enter/_exit only when there is something to do.
    _fast_path = zonestack._zonestack
    if not hasattr(_fast_path, "MarkerBase"):
        raise ImportError(
            f"{_fast_path.__file__} was built from an older _zonestack.c: rebuild it "
            "(python setup.py build_ext --inplace, or reinstall sectionmark)"
        )
    _fast_path.bind_marker(_enter, _exit)
    _MarkerBase = _fast_path.MarkerBase
else:
    _fast_path = None

    class _MarkerBase:
        __slots__ = ()
        __enter__ = _enter
        __exit__ = _exit


frameworks.on_change(_configure_fast_path)
frameworks.on_bind(_bind_compiler_probes)

_markers: dict = {}  # (name, color) -> section; see section.__new__
_MAX_CACHED_MARKERS = 100_000  # programs that make names on the fly stop being cached, not growing


def _check(name: object, color: object) -> None:
    """Refuse what cannot be a section name or color, in one clear line."""
    if not isinstance(name, str):
        raise TypeError(f"section name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("section name must not be empty")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"section name must be valid Unicode text: {name[error.start]!r} at {error.start} is a lone surrogate"
            ) from None
    if color is not None:
        if not isinstance(color, int) or isinstance(color, bool):
            raise TypeError(f"section color must be an int 0xRRGGBB, got {type(color).__name__}")
        if not 0 <= color <= 0xFFFFFF:
            raise ValueError(f"section color must be within 0x000000..0xFFFFFF, got {color:#x}")


class section(_MarkerBase):
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
        if _compiling():
            # TorchDynamo's scope (torch.fx.traceback.annotate), written out here (not in a helper): Dynamo
            # traces this code and inlines each call, at a cost per section.
            return _compiled_scope({_dynamo_key(name, color): name})  # type: ignore[return-value,misc]
        # Markers keep no state of their own, so one per (name, color) serves
        # every ``with section(...)`` written inline in a model: no allocation,
        # no validation after the first time.
        try:
            return _markers[name if color is None else (name, color)]
        except (KeyError, TypeError):  # new, or not hashable (then _check says why)
            pass
        _check(name, color)
        note_color(name, color)
        self = cls._unshared(name, color)
        if cls is section and len(_markers) < _MAX_CACHED_MARKERS:
            _markers[self._key] = self
        return self

    @classmethod
    def _unshared(cls, name: str, color: Optional[int]) -> "section":
        """A marker of its own (checked names only): the zone stack tells markers apart by identity."""
        self = _MarkerBase.__new__(cls)
        self.name = name
        self.color = color
        self._key = name if color is None else (name, color)  # of the emitter's locations and of _markers
        return self

    def __repr__(self) -> str:
        return f"section({self.name!r})" if self.color is None else f"section({self.name!r}, color={self.color:#08x})"

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"section({self.name!r}) decorates callables, got {type(fn).__name__}")
        name, color, marker = self.name, self.color, self
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                # A marker per call: tasks interleave, and a shared marker would
                # let one task's exit close another task's zone.
                with section._unshared(name, color):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # One marker serves every synchronous call (their zones nest on each
            # thread), except under Dynamo, which needs the annotate scope that
            # the constructor returns.
            with _compiled_scope({_dynamo_key(name, color): name}) if _compiling() else marker:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
