"""Attributes of a package that load their module on first use (PEP 562).

``import sectionmark`` must stay cheap and framework-free: the frameworks, the
compiler and the runtime are imported only when a user first touches
``sm.torch``, ``sm.compile`` or ``sm.load``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Optional


def lazy_attributes(package: str, namespace: dict, table: dict[str, tuple[str, Optional[str]]],
                    renamed: Optional[dict[str, str]] = None) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``table`` maps a name to (module, attribute or None for the module itself).

    The value is cached in ``namespace`` (the package's globals), so the
    lookup runs once per name. ``renamed`` maps a documented name that was
    renamed to its new name: it still works, with a `DeprecationWarning`
    naming the new one on every use (so it is never cached).
    """
    renamed = renamed or {}

    def __getattr__(name: str) -> Any:
        if name in renamed:
            new = renamed[name]
            warnings.warn(f"{package}.{name} is deprecated: use {package}.{new}", DeprecationWarning, stacklevel=2)
            return __getattr__(new) if new not in namespace else namespace[new]
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = table[name]
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        namespace[name] = value
        return value

    return __getattr__
