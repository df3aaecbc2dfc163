"""JAX: sections as ``jax.named_scope`` scopes, read back from StableHLO name stacks.

Inside ``jax.jit`` tracing, a `section` enters a named scope ``sm:<name>``
(see `sectionmark.paths.encode_jax_scope`); JAX prints the name stack in each
op's location (``jit(f)/sm:Block/sm:MLP/dot_general``), which
`sectionmark.locations` reads. Ops of the backward pass sit under
``transpose(...)`` and get " (backward)" appended to each name.

`export` also notes which sections the trace entered on this thread, so that
a section that produced no ops is reported (one warning line each) instead of
silently missing from every table.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import jax
from jax._src import source_info_util

from sectionmark.importers.exported import SectionedExport, warn_empty_sections
from sectionmark.locations import path_from_jax_name_stack
from sectionmark.paths import encode_jax_scope

__all__ = ["export"]

_entered = threading.local()  # .paths: the sections entered by the export running on this thread


def enter_named_scope(name: str):
    scope = jax.named_scope(encode_jax_scope(name))
    scope.__enter__()
    paths: Optional[dict] = getattr(_entered, "paths", None)
    if paths is not None:
        path = path_from_jax_name_stack(str(source_info_util.current_name_stack()))
        if path is not None:
            paths.setdefault(path, None)
    return scope


def export(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SectionedExport:
    """Lower ``fn`` (plain or ``jax.jit``-ed) for ``args`` to StableHLO MLIR with locations."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    _entered.paths = {}
    try:
        lowered = jitted.lower(*args, **kwargs)
        entered = list(_entered.paths)
    finally:
        _entered.paths = None
    exported = SectionedExport(text=lowered.as_text(debug_info=True), input_type="stablehlo", framework="jax")
    warn_empty_sections(entered, exported.sections)
    return exported
