"""Kernel table: one row per dispatch site, what it reads and writes, what it costs.

Joins the profile's per-site times with what the compiler recorded for each
site (sectionmark.compiler.bindings: exact tensor slices; the cost model's
FLOPs). Rows are in execution order (site ids follow the program order).

* bytes read / written: per execution, the slices the dispatch's body loads
  and stores (not whole buffers);
* time per execution: the site's busy time over its dispatch count;
* GB/s and GFLOP/s achieved at that time; arithmetic intensity = FLOPs / bytes;
* data movement: a dispatch that moves bytes but computes (almost) nothing —
  a transpose, a copy, a broadcast — has intensity below
  ``DATA_MOVEMENT_INTENSITY`` FLOPs per byte (an elementwise add has ~0.08);
* shared: the site's export function also runs at other sites (deduplicated
  executables: one compiled kernel, several call sites).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional

from sectionmark.section_map import Binding
from sectionmark.section_path import SectionPath
from sectionmark.serialization import json_field

if TYPE_CHECKING:  # the session offers this view (`ProfileSession.kernels`): it imports this module
    from sectionmark.profiling.session import ProfileSession

DATA_MOVEMENT_INTENSITY = 0.01  # FLOPs per byte


@dataclass
class KernelRow:
    """One dispatch site of the kernel table (the profile JSON's ``kernels`` rows)."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("bytes", "gb_per_s", "gflop_per_s", "intensity")

    site: int
    key: str
    sections: list[tuple[SectionPath, float]] = json_field(entries=("path", "weight"))
    bindings: list[Binding]
    read_bytes: Optional[int]  # per execution; None when a size is dynamic or the map has no bindings
    written_bytes: Optional[int]
    flops: Optional[float]  # per execution (cost model); None when the site could not be sized
    dispatches: int
    busy_ns: float = json_field(rounded=True)  # all measured executions
    time_per_dispatch_ns: float
    shared_with: list[int]  # other sites running the same export function
    data_movement: bool

    @property
    def bytes(self) -> Optional[int]:
        if self.read_bytes is None or self.written_bytes is None:
            return None
        return self.read_bytes + self.written_bytes

    @property
    def gb_per_s(self) -> Optional[float]:
        """Achieved bandwidth (bytes per ns = GB/s)."""
        return self.bytes / self.time_per_dispatch_ns if self.bytes is not None and self.time_per_dispatch_ns else None

    @property
    def gflop_per_s(self) -> Optional[float]:
        return self.flops / self.time_per_dispatch_ns if self.flops is not None and self.time_per_dispatch_ns else None

    @property
    def intensity(self) -> Optional[float]:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes if self.flops is not None and self.bytes else None


def kernels(session: ProfileSession) -> list[KernelRow]:
    """The kernel table of a profiled session (rows in execution order)."""
    sites_of_key: dict[str, list[int]] = {}
    for site in session.sites:
        sites_of_key.setdefault(site.key, []).append(site.site)
    rows = []
    for site in sorted(session.sites, key=lambda s: (s.site < 0, abs(s.site))):
        read = _total(binding.read_bytes for binding in site.bindings) if site.bindings else None
        written = _total(binding.written_bytes for binding in site.bindings) if site.bindings else None
        moved = (read or 0) + (written or 0)
        rows.append(KernelRow(
            site=site.site,
            key=site.key,
            sections=site.sections,
            bindings=site.bindings,
            read_bytes=read,
            written_bytes=written,
            flops=site.flops,
            dispatches=site.dispatches,
            busy_ns=site.busy_ns,
            time_per_dispatch_ns=site.busy_ns / site.dispatches if site.dispatches else 0.0,
            shared_with=[other for other in sites_of_key[site.key] if other != site.site],
            data_movement=moved > 0 and (site.flops or 0.0) < DATA_MOVEMENT_INTENSITY * moved,
        ))
    return rows


def _total(sizes) -> Optional[int]:
    sizes = list(sizes)
    return None if any(size is None for size in sizes) else sum(sizes)
