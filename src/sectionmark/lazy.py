"""Attributes of a package that load their module on first use (PEP 562).

``import sectionmark`` must stay cheap and framework-free: the frameworks, the
compiler and the runtime are imported only when a user first touches
``sm.torch``, ``sm.compile`` or ``sm.load``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional


def lazy_attributes(package: str, namespace: dict, table: dict[str, tuple[str, Optional[str]]]) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``table`` maps a name to (module, attribute or None for the module itself).

    The value is cached in ``namespace`` (the package's globals), so the
    lookup runs once per name.
    """

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = table[name]
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        namespace[name] = value
        return value

    return __getattr__
