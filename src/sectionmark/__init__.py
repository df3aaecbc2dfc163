"""sectionmark: name parts of a model once, see the names wherever IREE runs it.

The public API (see docs/): ``section`` marks code; ``sm.torch.export`` /
``sm.jax.export`` keep the names in MLIR (a `SectionedExport`; a torch one is
also iree-turbine's ``ExportOutput``); ``compile`` carries them through
IREE; ``load`` runs a module; ``profile`` / ``report`` measure per-section
times; ``slice`` cuts one section out into its own program (docs/slice.md).
Heavy modules (frameworks, the compiler) load on first use.
"""

import importlib
from typing import Any

from sectionmark.markers import section
from sectionmark.paths import SectionPath

__all__ = [
    "section", "SectionPath", "SectionedExport", "torch", "jax", "compile", "load", "profile", "report", "tracing", "slice",
]
__version__ = "0.1.0"

_LAZY = {
    "SectionedExport": ("sectionmark.importers.exported", "SectionedExport"),
    "torch": ("sectionmark.importers.torch", None),
    "jax": ("sectionmark.importers.jax", None),
    "compile": ("sectionmark.compiler", "compile"),
    "load": ("sectionmark.runtime", "load"),
    "profile": ("sectionmark.profiling", "profile"),
    "report": ("sectionmark.profiling", "report"),
    "tracing": ("sectionmark.tracy", "enable"),
    "slice": ("sectionmark.compiler.slicing", "slice_section"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sectionmark' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
