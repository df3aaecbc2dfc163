"""sectionmark: name parts of a model once, see the names wherever IREE runs it.

``sm.torch`` and ``sm.jax`` (the importers) load on first use, so importing
sectionmark never imports a framework.
"""

import importlib
from typing import Any

from sectionmark.markers import current_path, section
from sectionmark.paths import SectionPath

__all__ = ["section", "current_path", "SectionPath", "torch", "jax"]
__version__ = "0.1.0"

_LAZY_MODULES = {"torch": "sectionmark.importers.torch", "jax": "sectionmark.importers.jax"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        module = importlib.import_module(_LAZY_MODULES[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'sectionmark' has no attribute {name!r}")
