"""The export scope: what a section puts in torch's node meta while torch.export traces.

While torch.export traces, every `section` adds one key ``sectionmark#<n>``
to ``node.meta["custom"]``; the keys of a node, in insertion order, are its
section path (one key per nesting level, so nesting stays a path and
recursion never overwrites a level).

* Strict export (TorchDynamo): the `section` constructor returns
  ``torch.fx.traceback.annotate`` with a key from `new_annotation_key`, the
  one context manager Dynamo carries.
* Non-strict export runs the model's Python: `ExportSection` puts an extended
  copy of the current ``custom`` dict in torch's node meta and the previous
  dict back on exit. (``annotate`` updates that dict in place, which leaked
  each section into every later one when the meta was saved and restored
  around it.) Only the thread that runs the export does this:
  ``torch.compiler.is_exporting()`` and torch's node meta are process-wide,
  while torch's tracing context is per thread; sections that other threads
  run meanwhile stay eager and never touch export state.

`hooks` registers both with the markers' framework registry
(`sectionmark.markers.frameworks`).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Optional

import torch
import torch.fx.traceback as fx_traceback
from torch._guards import TracingContext

from sectionmark.section_path import SectionPath

__all__ = ["ANNOTATION_PREFIX", "node_section_path", "enter_export_scope", "this_thread"]

# Section paths in torch node meta: key "sectionmark#<n>" per level.
ANNOTATION_PREFIX = "sectionmark#"
_annotation_numbers = itertools.count(1)


class _ThreadScopes(threading.local):
    def __init__(self) -> None:
        self.auto_modules: list[bool] = []  # one entry per open `sections` scope, innermost last
        self.entered: Optional[dict[SectionPath, None]] = None  # sections entered by `export` (non-strict)
        self.tracing_jittable = False  # inside aot.jittable's trace of the model's Python

    @property
    def names_modules(self) -> bool:
        """Whether the innermost open scope names unmarked ops after their module path."""
        return bool(self.auto_modules) and self.auto_modules[-1]


this_thread = _ThreadScopes()


def new_annotation_key() -> str:
    """A node meta key for one more section (its level in the path is its order among the node's keys)."""
    return ANNOTATION_PREFIX + str(next(_annotation_numbers))


def enter_export_scope(name: str) -> Optional["ExportSection"]:
    """Enter ``name`` into torch's node meta if this thread runs the export, else None.

    Called while ``torch.compiler.is_exporting()``, which is true for every
    thread as long as any thread exports; torch's tracing context is set only
    on the exporting one. ``aot.jittable`` traces outside torch.export, on
    this thread only (see `hooks`).
    """
    if TracingContext.try_get() is None and not this_thread.tracing_jittable:
        return None
    scope = ExportSection(name)
    scope.__enter__()
    return scope


class ExportSection:
    """One section while non-strict export runs the model's Python on this thread."""

    __slots__ = ("_key", "_name", "_had_custom", "_previous", "_preserve")

    def __init__(self, name: str):
        self._key = new_annotation_key()
        self._name = name

    def __enter__(self) -> "ExportSection":
        self._preserve = None
        if not fx_traceback.has_preserved_node_meta():
            # New nodes copy torch's current node meta only while this is on.
            self._preserve = fx_traceback.preserve_node_meta()
            self._preserve.__enter__()
        meta = fx_traceback.get_current_meta()
        self._had_custom, self._previous = "custom" in meta, meta.get("custom")
        meta["custom"] = {**(self._previous or {}), self._key: self._name}
        entered = this_thread.entered
        if entered is not None:
            entered.setdefault(tuple(section_annotations(meta["custom"]).values()), None)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        meta = fx_traceback.get_current_meta()
        if self._had_custom:
            meta["custom"] = self._previous
        else:
            meta.pop("custom", None)
        if self._preserve is not None:
            self._preserve.__exit__(None, None, None)


def node_section_path(node: torch.fx.Node, auto_modules: bool = False) -> Optional[SectionPath]:
    """The section path of an FX node; with ``auto_modules``, fall back to its module path."""
    path = tuple(section_annotations(node.meta.get("custom")).values())
    if path:
        return path
    if auto_modules:
        return _module_path(node.meta.get("nn_module_stack"))
    return None


def section_annotations(custom: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The section keys of a node's ``custom`` meta, in order: its path."""
    return {key: value for key, value in (custom or {}).items() if key.startswith(ANNOTATION_PREFIX)}


def other_annotations(custom: Optional[dict[str, Any]]) -> dict[str, Any]:
    """What else is in a node's ``custom`` meta (kept when sections are rewritten)."""
    return {key: value for key, value in (custom or {}).items() if not key.startswith(ANNOTATION_PREFIX)}


def _module_path(stack: Optional[dict[str, Any]]) -> Optional[SectionPath]:
    """``blocks.3.attn`` -> ``("blocks.3", "attn")``: one name per module call level."""
    if not stack:
        return None
    names: list[str] = []
    parent = ""
    for qualified_name, _module_type in stack.values():
        if not qualified_name:
            continue
        relative = qualified_name[len(parent) + 1:] if parent and qualified_name.startswith(parent + ".") else qualified_name
        names.append(relative)
        parent = qualified_name
    return tuple(names) or None

