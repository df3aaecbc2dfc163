"""JAX: sections as ``jax.named_scope`` scopes, read back from StableHLO name stacks.

Inside ``jax.jit`` tracing, a `section` enters a named scope ``sm:<name>``
(see `sectionmark.paths.encode_jax_scope`); JAX prints the name stack in each
op's location (``jit(f)/sm:Block/sm:MLP/dot_general``), which
`sectionmark.locations` reads. Ops of the backward pass sit under
``transpose(...)`` and get " (backward)" appended to each name.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from sectionmark.exported import ExportedProgram
from sectionmark.paths import encode_jax_scope

__all__ = ["export"]


def enter_named_scope(name: str):
    scope = jax.named_scope(encode_jax_scope(name))
    scope.__enter__()
    return scope


def export(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ExportedProgram:
    """Lower ``fn`` (plain or ``jax.jit``-ed) for ``args`` to StableHLO MLIR with locations."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    lowered = jitted.lower(*args, **kwargs)
    text = lowered.as_text(debug_info=True)
    return ExportedProgram(mlir=text, input_type="stablehlo", framework="jax")
