"""The frameworks that trace models, as sections see them: the markers' one seam to the importers.

While a framework traces a model, a section enters that framework's scope
instead of a zone: that is how its name reaches the traced graph. The marker
(marker.py) knows frameworks only through this registry. Each `Framework`
has a probe, asked at every section entry while the framework is imported
(whether it traces right now), and the scope a section enters then, which
the framework's importer registers (`register`). This module imports that
importer on the first section the framework traces, never before the
framework itself is imported: the one import against the data flow
(listed in tests/entry/test_import_graph.py).

The probes are the frameworks' own (``torch.compiler.is_exporting``, JAX's
current trace), which the C fast path (_zonestack.c) reads itself without a
call. An importer that needs a wider probe (``sm.torch.sections``: also while
``aot.jittable`` traces) puts it in with `replace_probe`; the marker, told
through `on_change`, then asks the probe on every entry.

TorchDynamo compiles the model's Python itself and carries only its own
scope, ``torch.fx.traceback.annotate``: while `compiling` says so, the
`section` constructor returns that scope (`compiled_scope`) keyed by
`new_compiled_scope_key`.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, ContextManager, Optional, Sequence

__all__ = ["Framework", "FRAMEWORKS", "framework", "register", "replace_probe", "on_change", "on_bind",
           "probes_are_native", "compiling", "compiled_scope", "new_compiled_scope_key"]

_modules = sys.modules

# (section name, names of the sections open around it on this thread) -> the entered scope, to exit when the
# section exits, or None when the framework does not trace on this thread.
EnterScope = Callable[[str, Sequence[str]], Optional[ContextManager]]


class Framework:
    """One framework that traces models: when it traces, and the scope a section enters then."""

    __slots__ = ("module", "tracing", "native_probe", "enter", "compiled_scope_key", "_import_importer")

    def __init__(self, module: str, native_probe: Callable[[], bool], import_importer: Callable[[], None]):
        self.module = module  # its name in sys.modules: nothing of it traces before it is imported
        self.native_probe = native_probe  # what the C fast path reads itself
        self.tracing = native_probe  # the probe asked at each entry: the native one unless replaced
        self.enter: Optional[EnterScope] = None  # registered by the importer
        self.compiled_scope_key: Optional[Callable[[], str]] = None  # registered where it compiles Python (Dynamo)
        self._import_importer = import_importer

    def enter_scope(self, name: str, enclosing: Sequence[str]) -> Optional[ContextManager]:
        """Enter ``name``'s scope in this framework's trace (importing its importer the first time)."""
        if self.enter is None:
            self._import_importer()
        return self.enter(name, enclosing)


def framework(module: str) -> Framework:
    """The registry's entry of the framework imported as ``module`` ("torch", "jax")."""
    return _by_module[module]


def register(module: str, enter: EnterScope, compiled_scope_key: Optional[Callable[[], str]] = None) -> None:
    """An importer's scope for ``module``: what a section enters while that framework traces.

    ``compiled_scope_key``: for a framework that compiles the model's Python
    (TorchDynamo), a new key of the scope the constructor returns then.
    """
    entry = framework(module)
    entry.enter, entry.compiled_scope_key = enter, compiled_scope_key


def replace_probe(module: str, probe: Callable[[], bool]) -> Callable[[], None]:
    """Ask ``probe`` instead of the framework's own whether ``module`` traces; returns the undo."""
    entry = framework(module)
    entry.tracing = probe

    def undo() -> None:
        entry.tracing = entry.native_probe
        _changed()

    _changed()
    return undo


def on_change(callback: Callable[[], None]) -> None:
    """Call ``callback`` whenever a probe is replaced or put back (the marker's fast path follows)."""
    _listeners.append(callback)


def on_bind(callback: Callable[[], None]) -> None:
    """Call ``callback`` once torch's probes are bound (the marker keeps `compiling` and `compiled_scope`).

    Apart from `on_change`: binding may happen while TorchDynamo traces the
    constructor, which the callback must not leave (no C calls).
    """
    _bind_listeners.append(callback)


def probes_are_native() -> bool:
    """Whether every probe is the framework's own, which the C fast path reads without a call."""
    return all(entry.tracing is entry.native_probe for entry in FRAMEWORKS)


def new_compiled_scope_key() -> str:
    """A new key of the scope a section returns while TorchDynamo compiles (importing the torch importer the
    first time)."""
    if _TORCH.compiled_scope_key is None:
        _TORCH._import_importer()
    return _TORCH.compiled_scope_key()


def _changed() -> None:
    for callback in _listeners:
        callback()


_listeners: list[Callable[[], None]] = []
_bind_listeners: list[Callable[[], None]] = []


# torch: its probes are bound once torch is imported (see _bind_torch), so that the code Dynamo traces never
# looks anything up in sys.modules (Dynamo would wrap that dict, thousands of entries, at every section).
def _first_torch_exporting() -> bool:
    _bind_torch()
    return _TORCH.native_probe()


def _first_compiling() -> bool:
    """Before torch's probes are bound: nothing compiles while torch is not imported."""
    if "torch" not in _modules:
        return False
    _bind_torch()
    return compiling()


def _bind_torch() -> None:
    global compiling, compiled_scope
    torch = _modules["torch"]
    if _TORCH.tracing is _TORCH.native_probe:
        _TORCH.tracing = torch.compiler.is_exporting
    _TORCH.native_probe = torch.compiler.is_exporting  # one flag for the whole process: true while any thread exports
    compiling, compiled_scope = torch.compiler.is_dynamo_compiling, torch.fx.traceback.annotate
    for callback in _bind_listeners:
        callback()


def _import_torch_importer() -> None:
    from sectionmark.importers import torch  # noqa: F401 - registers its scope (sectionmark.importers.torch.scope)


def _jax_tracing() -> bool:
    """Whether JAX traces on this thread: its current trace is not the eager one.

    ``trace_state_strong_ref.value`` is what ``trace_ctx.trace`` returns,
    without the property call; the C fast path asks the same.
    (``trace_ctx.is_top_level()`` also compares the axis environment, which
    only matters under a trace, at twice the cost.)
    """
    jax_core = _modules.get("jax._src.core")
    return jax_core is not None and jax_core.trace_state_strong_ref.value is not jax_core.eval_trace


def _import_jax_importer() -> None:
    from sectionmark.importers import jax  # noqa: F401 - registers its scope


_TORCH = Framework("torch", _first_torch_exporting, _import_torch_importer)
_JAX = Framework("jax", _jax_tracing, _import_jax_importer)
FRAMEWORKS: tuple[Framework, ...] = (_TORCH, _JAX)
_by_module = {framework.module: framework for framework in FRAMEWORKS}

# TorchDynamo's probe and scope (torch.compiler.is_dynamo_compiling, torch.fx.traceback.annotate), once bound.
compiling: Callable[[], bool] = _first_compiling
compiled_scope: Optional[Callable[[dict], Any]] = None
if "torch" in _modules:
    _bind_torch()
