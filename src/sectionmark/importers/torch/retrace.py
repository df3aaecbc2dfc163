"""Sections carried through torch's re-traces, which record ops without their node's meta.

``run_decompositions`` inlines each ``torch.no_grad()`` /
``set_grad_enabled`` / ``autocast`` region (a higher-order op around a
graph) and ``_export_forward_backward`` traces the joint forward+backward
graph once more: both run a graph's generated code and record its ops
without that graph's node meta. The wrappers here (installed by `hooks`)
note each graph whose code runs (`recording_regions`,
`recording_joint_graphs`) while one such re-trace runs
(`carrying_sections_through_retraces`), and `carry_sections` then gives
each op the sections of its node back, found from the op's stack trace, with
" (backward)" on backward ops (torch gives backward nodes their forward
node's sections).
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import Any, Callable, Optional

import torch

from sectionmark.importers.torch.scope import ANNOTATION_PREFIX, node_section_path, other_annotations
from sectionmark.section_path import BACKWARD_SUFFIX, SectionPath

__all__ = ["TracedCode", "carry_sections", "recording_regions", "recording_joint_graphs",
           "carrying_sections_through_retraces"]


class _ThreadRetraces(threading.local):
    def __init__(self) -> None:
        # While a re-trace runs on this thread: generated code file name -> the graph it came from.
        self.traced_code: Optional[dict[str, TracedCode]] = None


_this_thread = _ThreadRetraces()


def recording_regions(original: Callable) -> Callable:
    """``wrap_with_set_grad_enabled(enable, graph, *args)`` / ``wrap_with_autocast``: note the region's graph."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        traced = _this_thread.traced_code
        if traced is not None:
            traced.update((code.filename, code) for code in map(TracedCode, args) if code.filename)
        return original(self, *args, **kwargs)

    return __call__


def recording_joint_graphs(original: Callable) -> Callable:
    """``_aot_export_function``: note the joint graph, whose nodes still have their sections."""

    def _aot_export_function(*args: Any, **kwargs: Any):
        result = original(*args, **kwargs)
        traced = _this_thread.traced_code
        code = TracedCode(result[0]) if traced is not None and kwargs.get("trace_joint") else None
        if code is not None and code.filename:
            traced[code.filename] = code
        return result

    return _aot_export_function


def carrying_sections_through_retraces(original: Callable) -> Callable:
    """``_decompose_and_get_gm_with_new_signature_constants``: behind ``run_decompositions``
    and ``_export_forward_backward``, the two retraces that lose sections."""

    def decompose(*args: Any, **kwargs: Any):
        if _this_thread.traced_code is not None:
            return original(*args, **kwargs)
        _this_thread.traced_code = traced = {}
        try:
            graph_module, *rest = original(*args, **kwargs)
        finally:
            _this_thread.traced_code = None
        carry_sections(graph_module, traced)
        return (graph_module, *rest)

    return decompose


class TracedCode:
    """A GraphModule whose generated code torch ran while re-tracing: line -> node."""

    __slots__ = ("filename", "_first_line", "_lineno_map", "_nodes", "has_sections")

    def __init__(self, module: Any):
        self.filename, self.has_sections = None, False
        if isinstance(module, torch.fx.GraphModule) and module._lineno_map is not None:
            code = type(module).forward.__code__
            self.filename, self._first_line = code.co_filename, code.co_firstlineno
            self._lineno_map, self._nodes = module._lineno_map, list(module.graph.nodes)
            self.has_sections = any(node_section_path(node) for node in self._nodes)

    def node_at(self, line: int) -> Optional[torch.fx.Node]:
        index = self._lineno_map.get(line - self._first_line)
        return self._nodes[index] if index is not None else None


_FRAME = re.compile(r'File "([^"\n]*)", line (\d+)')


def carry_sections(graph_module: torch.fx.GraphModule, traced: dict[str, TracedCode]) -> None:
    """Give each op of a re-traced graph the sections of the node it was traced from.

    Re-tracing runs the generated code of a graph (a no_grad region's, or the
    joint forward+backward graph) and records each op without that node's
    meta. The op's stack trace names the line of generated code it came
    from, and ``_lineno_map`` maps the line to the node, the way Dynamo keeps
    the meta of graphs it re-traces.
    """
    if not traced:
        return
    carried = 0
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            path = _traced_path(node, traced) if node.op == "call_function" else None
            if path is not None:
                annotations = {f"{ANNOTATION_PREFIX}{depth}": name for depth, name in enumerate(path, 1)}
                node.meta["custom"] = {**other_annotations(node.meta.get("custom")), **annotations}
                carried += 1
    if carried == 0 and any(code.has_sections for code in traced.values()):
        warnings.warn(
            "sectionmark: torch re-traced a graph in a way sectionmark cannot follow (no stack traces); "
            "the ops of no_grad regions or of a training step are reported as (unmarked)",
            RuntimeWarning,
            stacklevel=3,
        )


def _traced_path(node: torch.fx.Node, traced: dict[str, TracedCode]) -> Optional[SectionPath]:
    """The path of the node ``node`` was traced from (innermost traced frame), or None.

    That node may itself come from an earlier re-trace (an op of a no_grad
    region inside a training step). Backward nodes, which torch tags
    ``partitioner_tag="is_backward"`` and gives their forward node's
    sections, get " (backward)" on every name.
    """
    for filename, line in reversed(_FRAME.findall(node.stack_trace or "")):
        code = traced.get(filename)
        if code is None:
            continue
        source = code.node_at(int(line))
        if source is None:
            return None
        path = _traced_path(source, traced) or node_section_path(source)
        if path and source.meta.get("partitioner_tag") == "is_backward":
            path = tuple(name + BACKWARD_SUFFIX for name in path)
        return path
    return None
