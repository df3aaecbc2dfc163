"""The compiler hook: IREE compilation that keeps section names.

``compile`` returns a :class:`CompiledExport` (the .vmfb bytes and its section
map). Attributes load on first use, so that ``compiler.targets`` (the known
target names, used by the CLI's ``--help``) does not import ``iree.compiler``.
"""

import importlib
from typing import Any

__all__ = ["compile", "CompiledExport", "TARGET_FLAGS"]

_LAZY = {
    "compile": ("sectionmark.compiler.driver", "compile"),
    "CompiledExport": ("sectionmark.compiler.driver", "CompiledExport"),
    "TARGET_FLAGS": ("sectionmark.compiler.targets", "TARGET_FLAGS"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sectionmark.compiler' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module_name), attribute)
    globals()[name] = value
    return value
