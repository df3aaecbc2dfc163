"""JAX: sections as ``jax.named_scope`` scopes, read back from StableHLO name stacks.

Inside ``jax.jit`` tracing, a `section` enters a named scope ``sm:<name>``
(see `sectionmark.section_path.encode_jax_scope`; registered with the markers'
framework registry, `sectionmark.markers.frameworks`, on import); JAX prints the name stack in each
op's location (``jit(f)/sm:Block/sm:MLP/dot_general``), which
`sectionmark.locations` reads. Ops of the backward pass sit under
``transpose(...)`` and get " (backward)" appended to each name.

`export` also notes which sections the trace entered on this thread, so that
a section that produced no ops is reported (one warning line each) instead of
silently missing from every table. Those notes need the Python of every
section to run, so `export` always traces afresh: JAX reuses the trace of a
function that already ran (a jitted step called once for a reference, a scan
body or nested jit traced before), and no section would be entered then. A
value of a JAX user context (part of every tracing cache's key) unique to
each export makes JAX trace again, leaving the user's own caches as they are.

A function sharded for several devices gets one line saying what IREE 3.13
does with its sharding (it partitions none); `to_device` places work on a
device explicitly (`sectionmark.importers.jax_devices`).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Optional, Sequence

import jax
from jax._src import source_info_util

from sectionmark.progress import progress
from sectionmark.importers.exported import SectionedExport, warn_empty_sections
from sectionmark.importers.jax_devices import check_sharding, to_device
from sectionmark.locations import path_from_jax_name_stack
from sectionmark.markers import frameworks
from sectionmark.section_path import PASS_SUFFIXES, SectionPath, encode_jax_scope

__all__ = ["export", "to_device"]

# .paths: the sections entered by the export running on this thread, each as JAX names it
# (relative inside a function traced on its own) -> the paths the Python sections open around it had.
_entered = threading.local()


def enter_named_scope(name: str, enclosing: Sequence[str] = ()):
    """Enter ``name``'s JAX scope; ``enclosing``: the names of the sections open around it in Python."""
    scope = jax.named_scope(encode_jax_scope(name))
    scope.__enter__()
    paths: Optional[dict] = getattr(_entered, "paths", None)
    if paths is not None:
        path = path_from_jax_name_stack(str(source_info_util.current_name_stack()))
        if path is not None:
            paths.setdefault(path, set()).add((*enclosing, name))
    return scope


frameworks.register("jax", enter_named_scope)

# Made once, at import (JAX: adding user contexts is not thread-safe); each export enters its own value.
_FRESH_TRACE = jax.make_user_context(None) if hasattr(jax, "make_user_context") else None
_exports = itertools.count(1)


def _path_aliases(entered: dict[SectionPath, set[SectionPath]]) -> dict[SectionPath, SectionPath]:
    """Relative paths (as JAX names a scan body's or nested jit's sections) -> the one path they run in.

    JAX hoists a loop body's loop-invariant ops out of the loop under ``grad`` and names them
    with the body's relative name stack at the top (``jit(f)/sm:Inner/mul`` for an ``Inner``
    inside ``Outer``'s scan). Where a relative path was only ever entered inside one Python
    path, and never on its own, it means that path.
    """
    python_paths = {path for paths in entered.values() for path in paths}
    aliases = {}
    for path, runs_in in entered.items():
        if len(runs_in) != 1 or path in python_paths or any(name.endswith(PASS_SUFFIXES) for name in path):
            continue
        (full,) = runs_in
        if len(full) > len(path) and full[-len(path):] == path:
            aliases[path] = full
    return aliases


def export(fn: Callable[..., Any], *args: Any, quiet: bool = False, **kwargs: Any) -> SectionedExport:
    """Lower ``fn`` (plain or ``jax.jit``-ed) for ``args`` (and ``kwargs``, as ``jit(fn).lower`` takes them) to
    StableHLO MLIR with locations. On a terminal a progress line shows the phase and the time elapsed
    (`sectionmark.progress`); ``quiet=True`` hides it."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    _entered.paths = {}
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        with progress(f"exporting {name} with jax.jit", quiet) as step:
            step("tracing and lowering")
            if _FRESH_TRACE is None:  # a JAX before user contexts
                jax.clear_caches()
                lowered = jitted.lower(*args, **kwargs)
            else:
                with _FRESH_TRACE(next(_exports)):
                    lowered = jitted.lower(*args, **kwargs)
            entered = dict(_entered.paths)
            step("writing StableHLO with locations")
            text = lowered.as_text(debug_info=True)
    finally:
        _entered.paths = None
    check_sharding(text)
    exported = SectionedExport(text=text, input_type="stablehlo", framework="jax", path_aliases=_path_aliases(entered))
    warn_empty_sections(list(entered), exported.sections)
    return exported
