"""The kernel table (sectionmark.profiling.kernels) as text; kernels_csv.py writes it as CSV, the profile JSON has it as `kernels`.

Times are busy time (dispatch durations); "time/exec" is one execution of the
dispatch, "busy/call" all its executions in one measured call. Bytes are the
exact slices each execution loads and stores.
"""

from __future__ import annotations

import io
from typing import Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.section_path import format_path
from sectionmark.profiling.kernels import KernelRow, kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers.table import format_ns
from sectionmark.section_map import Binding

EXTENSION = ".txt"
DATA_MOVEMENT_MARK = "[data movement]"
SHARED_MARK = "*"


def format_bytes(size: Optional[float]) -> str:
    if size is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size:.0f} B"


def format_binding(binding: Binding) -> str:
    """``R input0 f32[128x128]`` (``of [50304x768]`` when the slice is part of a bigger tensor)."""
    access = {"read": "R", "write": "W", "readwrite": "RW"}[binding.access]
    shape = "x".join(str(size) if size >= 0 else "?" for size in binding.shape)
    text = f"{access} {binding.tensor} {binding.dtype}[{shape}]"
    if binding.tensor_shape != binding.shape:
        text += " of [" + "x".join(str(size) if size >= 0 else "?" for size in binding.tensor_shape) + "]"
    return text


def format_sections(row: KernelRow) -> str:
    return ", ".join(format_path(path) + (f" {weight:.0%}" if len(row.sections) > 1 else "")
                     for path, weight in row.sections)


def build_kernels_table(session: ProfileSession) -> Table:
    """The kernel table as a rich Table (printed by `render`, converted by the HTML report)."""
    calls = max(session.calls, 1)
    table = Table(title="kernels: one row per dispatch site, execution order (busy time; bytes = exact slices)",
                  title_justify="left")
    for column in ("Site", "Section(s)", "Export", "Arguments", "Read", "Written", "FLOPs", "Time/exec",
                   "Busy/call", "GB/s", "GFLOP/s", "FLOP/B"):
        table.add_column(column, justify="left" if column in ("Section(s)", "Export", "Arguments") else "right",
                         overflow="fold")
    for row in kernels(session):
        key = row.key + (f" {SHARED_MARK}" if row.shared_with else "")
        if row.data_movement:
            key += f" {DATA_MOVEMENT_MARK}"
        table.add_row(
            str(row.site), Text(format_sections(row)), Text(key),
            Text("\n".join(format_binding(binding) for binding in row.bindings)),
            format_bytes(row.read_bytes), format_bytes(row.written_bytes),
            f"{row.flops:.3g}" if row.flops is not None else "?",
            format_ns(row.time_per_dispatch_ns), format_ns(row.busy_ns / calls),
            f"{row.gb_per_s:.2f}" if row.gb_per_s is not None else "",
            f"{row.gflop_per_s:.2f}" if row.gflop_per_s is not None else "",
            f"{row.intensity:.2f}" if row.intensity is not None else "",
        )
    table.caption = Text(f"{SHARED_MARK} one deduplicated executable runs at several sites; "
                     f"{DATA_MOVEMENT_MARK}: bytes moved, (almost) no FLOPs (transpose, copy)")  # Text: brackets are not markup
    return table


def render(session: ProfileSession, width: int = 200) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(build_kernels_table(session))
    return buffer.getvalue()


def _blank(value) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
