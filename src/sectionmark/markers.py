"""The `section` marker: one object that is a decorator and a context manager.

A section has two roles. While a framework traces the model (torch.export,
jax.jit) it leaves metadata that the importers turn into MLIR locations. While
plain Python runs it only maintains the current section path (per thread and
per asyncio task, through contextvars) and notifies eager listeners, such as
the Tracy zone emitter, when any are installed.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
from typing import Any, Callable, Optional, Protocol, TypeVar

from sectionmark.paths import SectionPath

__all__ = ["section", "current_path", "EagerListener", "add_eager_listener", "remove_eager_listener"]

F = TypeVar("F", bound=Callable[..., Any])

# The stack is a linked list of (parent, section, framework_exits) so that
# entering costs one tuple and two contextvar operations.
_Frame = tuple  # (parent: _Frame | None, section: section, exits: tuple | None)
_current: contextvars.ContextVar[Optional[_Frame]] = contextvars.ContextVar(
    "sectionmark_current", default=None
)
_get_frame, _set_frame = _current.get, _current.set


class EagerListener(Protocol):
    """Receives sections entered and left in plain (untraced) Python."""

    def enter(self, marker: "section") -> None: ...

    def exit(self, marker: "section") -> None: ...


_eager_listeners: list[EagerListener] = []
_modules = sys.modules


def add_eager_listener(listener: EagerListener) -> None:
    """Install a listener (e.g. Tracy zones) called on every eager enter/exit."""
    if listener not in _eager_listeners:
        _eager_listeners.append(listener)


def remove_eager_listener(listener: EagerListener) -> None:
    if listener in _eager_listeners:
        _eager_listeners.remove(listener)


def _framework_scopes(name: str) -> Optional[tuple]:
    """Enter the tracing scopes of whichever framework is tracing right now.

    Returns the entered context managers (to exit in reverse order), or None
    when nothing traces: the common eager case costs two dict lookups.
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


class section:
    """Names a part of a model: ``@section("MLP")`` or ``with section("MLP"):``.

    Nesting builds a path (``("Block 3", "Self Attention")``). Names are any
    non-empty text; ``color`` is an optional 0xRRGGBB hint for viewers.
    Under TorchDynamo (strict torch.export) the constructor returns the
    equivalent ``torch.fx.traceback.annotate`` scope, the only context manager
    Dynamo can carry into node metadata.
    """

    __slots__ = ("name", "color")

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
        torch = _modules.get("torch")
        if torch is not None and torch.compiler.is_dynamo_compiling():
            from sectionmark.importers import torch as torch_importer

            return torch_importer.dynamo_scope(name)  # type: ignore[return-value]
        self = object.__new__(cls)
        self.name = name
        self.color = color
        return self

    def __repr__(self) -> str:
        return f"section({self.name!r})" if self.color is None else f"section({self.name!r}, color={self.color:#08x})"

    def __enter__(self) -> "section":
        # Hot path: plain Python with no framework loaded costs two contextvar calls.
        exits = _framework_scopes(self.name) if ("torch" in _modules or "jax" in _modules) else None
        _set_frame((_get_frame(), self, exits))
        if _eager_listeners and exits is None:
            for listener in _eager_listeners:
                listener.enter(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        frame = _get_frame()
        if frame is None or frame[1] is not self:
            raise RuntimeError(f"{self!r} exited out of order (sections must nest)")
        _set_frame(frame[0])
        exits = frame[2]
        if exits is not None:
            for scope in reversed(exits):
                scope.__exit__(exc_type, exc, tb)
        elif _eager_listeners:
            for listener in reversed(_eager_listeners):
                listener.exit(self)

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"section({self.name!r}) decorates callables, got {type(fn).__name__}")
        name, color = self.name, self.color
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                with section(name, color):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # A new marker per call keeps recursion and threads independent.
            with section(name, color):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def current_path() -> SectionPath:
    """The section path active in this thread / asyncio task, outermost first."""
    names = []
    frame = _get_frame()
    while frame is not None:
        names.append(frame[1].name)
        frame = frame[0]
    return tuple(reversed(names))

