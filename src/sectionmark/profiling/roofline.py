"""Roofline: where each section and component sits under the device's measured peaks.

The peaks are a `Peak`, measured and cached by `sectionmark.workflows.peak`
(``sectionmark peak``, ``sm.peak``): the best bandwidth and FLOP/s of
benchmark kernels, each its fastest dispatch as the profiler times it.

A profile can still beat them (a peak measured while the machine was busy,
or a kernel shape none of the benchmarks has): `bounding_peak` raises the
ceiling to the fastest kernel, section or component of the profile and says
which in ``raised_by`` (one line of the roofline table), and every placement
here goes through it, so no figure is ever above 100%.

A section's achieved figures are its traffic (`sectionmark.profiling.stats.Traffic`):
the kernel table's bytes and FLOPs per execution times executions, split by
the site's section weights (the same split as its time), over the site time
so split; sites whose sizes are dynamic are left out. A component (sections
of one name summed across blocks, `sectionmark.profiling.components`) is
placed the same way with its sections' traffic summed. A row whose intensity
(FLOPs per byte) is below the ridge point (peak FLOP/s / peak bandwidth) is
nearer the memory roof, else the compute roof.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

from sectionmark.profiling import display
from sectionmark.profiling.components import components
from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import Traffic
from sectionmark.section_path import SectionPath, format_path

DRAM_KERNEL = "add 64 MiB"  # the benchmark kernel whose figure is the DRAM bandwidth (beyond any L3 this runs on)


@dataclass(frozen=True)
class MeasuredKernel:
    """One benchmark kernel as measured: bytes and FLOPs per dispatch (the kernel table's) and its fastest dispatch."""

    name: str
    bytes: int  # read + written per dispatch
    flops: float
    best_ns: float  # the fastest of ``dispatches`` timed dispatches
    dispatches: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.best_ns

    @property
    def gflop_per_s(self) -> float:
        return self.flops / self.best_ns


@dataclass(frozen=True)
class Peak:
    """Measured peaks of one device on one machine, and how they were measured."""

    device: str
    bandwidth_gb_per_s: float  # the roof: the best bytes read + written per ns of any kernel
    dram_gb_per_s: float  # the 64 MiB add alone
    gflop_per_s: float  # the best of any kernel
    workers: int  # local-task workers
    host: str
    cpu_model: str
    iree_version: str
    date: str  # UTC, ISO 8601: when the measure finished
    load: list[float]  # the 1, 5 and 15 minute load averages then (os.getloadavg)
    kernels: list[MeasuredKernel]
    # Set by `bounding`: the profile's kernel (or section) that ran above the measured peaks and is now the
    # ceiling; None for peaks as measured.
    raised_by: Optional[str] = None

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the two roofs meet: below it a kernel cannot be compute bound."""
        return self.gflop_per_s / self.bandwidth_gb_per_s

    def bounding(self, session: ProfileSession, by: str = "name") -> "Peak":
        """These peaks, or raised to the fastest kernel, section or component of ``session`` (`bounding_peak`)."""
        return bounding_peak(session, self, by)

    def roofline(self, session) -> list["RooflineRow"]:
        """Each section of ``session`` against these peaks (`roofline`)."""
        return roofline(session, self)

    def component_roofline(self, session, by: str = "name") -> list["RooflineRow"]:
        """Each component of ``session`` against these peaks (`component_roofline`)."""
        return component_roofline(session, self, by)

    def text(self) -> str:
        """What ``sectionmark peak`` prints: the figures, how and when they were measured, each kernel's figures."""
        load = ", ".join(f"{value:.2f}" for value in self.load)
        lines = [f"peak on {self.device} ({self.cpu_model}, {self.workers} worker{'s' * (self.workers != 1)}, "
                 f"{self.host}, IREE {self.iree_version}, measured {self.date} at load {load}):",
                 f"  memory bandwidth {self.bandwidth_gb_per_s:9.1f} GB/s    (the roof: the best kernel's bytes read "
                 "+ written / fastest dispatch)",
                 f"  DRAM bandwidth   {self.dram_gb_per_s:9.1f} GB/s    ({DRAM_KERNEL} alone)",
                 f"  compute          {self.gflop_per_s:9.1f} GFLOP/s (the best kernel's FLOPs / fastest dispatch)",
                 f"  ridge point      {self.ridge:9.2f} FLOPs/byte"]
        if self.raised_by:
            lines.append(f"  {self.raised_by}")
        width = max(len(kernel.name) for kernel in self.kernels) if self.kernels else 6
        lines.append(f"{'kernel':<{width}}  {'GB/s':>8}  {'GFLOP/s':>8}  {'fastest':>10}  dispatches")
        lines += [f"{kernel.name:<{width}}  {kernel.gb_per_s:8.1f}  {kernel.gflop_per_s:8.1f}  "
                  f"{kernel.best_ns / 1e3:8.1f}µs  {kernel.dispatches}" for kernel in self.kernels]
        return "\n".join(lines)

    # ------------------------------------------------------------------ notebooks (repr: the figures in one line; inline: `text`)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html


@dataclass(frozen=True)
class RooflineRow:
    """One section's (or component's) achieved bandwidth and FLOP/s, as fractions of the peaks."""

    path: Optional[SectionPath]  # None for a component
    time_ns: float  # time of the dispatches whose bytes are known, split by section weight
    bytes: float
    flops: float
    gb_per_s: float
    gflop_per_s: float
    bandwidth_fraction: float
    compute_fraction: float
    intensity: Optional[float]  # FLOPs per byte; None when no bytes were moved
    bound: str  # "memory" or "compute": the roof nearer at this intensity
    component: Optional[str] = None  # the component's name (sections of one name summed); None for a section

    @property
    def name(self) -> str:
        return self.component if self.path is None else format_path(self.path)


def roofline(session: ProfileSession, peak: Peak) -> list[RooflineRow]:
    """One row per section of ``session`` that ran a dispatch of known size (report order, "(unmarked)" last),
    against ``peak`` raised to the session's fastest kernel where it beat it (`bounding_peak`)."""
    peak = bounding_peak(session, peak)
    return [_placed(row.traffic, peak, path=row.path) for row in session.sections if _measured(row.traffic)]


def component_roofline(session: ProfileSession, peak: Peak, by: str = "name") -> list[RooflineRow]:
    """One row per component of ``session`` (`components(session, by)`, its order) that ran a dispatch of known size,
    against ``peak`` raised as `roofline` raises it."""
    peak = bounding_peak(session, peak, by)
    return [_placed(component.traffic, peak, component=component.name) for component in components(session, by)
            if _measured(component.traffic)]


def bounding_peak(session: ProfileSession, peak: Peak, by: str = "name") -> Peak:
    """``peak``, or, when a kernel, section or component (``by``) of ``session`` ran above it, ``peak`` raised to
    the fastest one, with ``raised_by`` saying which (the measured peak was a lower bound: taken on a busy
    machine, or without that kernel's shape). No roofline figure is then above 100%."""
    rates = [(row.gb_per_s or 0.0, row.gflop_per_s or 0.0, f"kernel {row.key} (site {row.site})")
             for row in kernels(session)]
    rates += [(row.traffic.gb_per_s, row.traffic.gflop_per_s, f"section {format_path(row.path)}")
              for row in session.sections if _measured(row.traffic)]
    rates += [(component.traffic.gb_per_s, component.traffic.gflop_per_s, f"component {component.name}")
              for grouping in dict.fromkeys(("name", by)) for component in components(session, grouping)
              if _measured(component.traffic)]
    if not rates:
        return peak
    (bandwidth, bandwidth_by), (compute, compute_by) = _fastest(rates, 0), _fastest(rates, 1)
    above = [f"{what} ran at {rate:.1f} {unit}, above the peak's {roof:.1f}"
             for rate, what, roof, unit in ((bandwidth, bandwidth_by, peak.bandwidth_gb_per_s, "GB/s"),
                                            (compute, compute_by, peak.gflop_per_s, "GFLOP/s"))
             if rate > roof]
    if not above:
        return peak
    load = f"{peak.load[0]:.2f}" if peak.load else "?"
    line = (f"note: {' and '.join(above)} (measured {peak.date} at load {load}): that is the ceiling here "
            "('sectionmark peak --refresh' measures again)")
    return dataclasses.replace(peak, bandwidth_gb_per_s=max(peak.bandwidth_gb_per_s, bandwidth),
                               gflop_per_s=max(peak.gflop_per_s, compute), raised_by=line)


def _fastest(rates: list[tuple[float, float, str]], index: int) -> tuple[float, str]:
    """The fastest of ``rates[index]`` (the ceiling: nothing above it) and what to name for it: the first of
    ``rates`` (kernels come first) that ties it to float rounding. A section's or component's rate is an average
    of its kernels' (time and size split by one weight), so it ties the kernel it ran, computed in another order
    (``n * flops / busy`` against ``flops / (busy / n)``), and the kernel is the one to name."""
    fastest = max(rate[index] for rate in rates)
    return fastest, next(rate[2] for rate in rates if rate[index] >= fastest * (1 - 1e-9))

def _measured(traffic: Optional[Traffic]) -> bool:
    return traffic is not None and traffic.time_ns > 0


def _placed(traffic: Traffic, peak: Peak, path: Optional[SectionPath] = None,
            component: Optional[str] = None) -> RooflineRow:
    """The traffic of a section or component against the peaks: its fractions and the nearer roof."""
    gb_per_s, gflop_per_s, intensity = traffic.gb_per_s, traffic.gflop_per_s, traffic.intensity
    return RooflineRow(
        path=path, component=component, time_ns=traffic.time_ns, bytes=traffic.bytes, flops=traffic.flops,
        gb_per_s=gb_per_s, gflop_per_s=gflop_per_s, bandwidth_fraction=gb_per_s / peak.bandwidth_gb_per_s,
        compute_fraction=gflop_per_s / peak.gflop_per_s, intensity=intensity,
        bound="memory" if intensity is None or intensity < peak.ridge else "compute",
    )


def roofline_text(rows: list[RooflineRow], peak: Peak, components: Sequence[RooflineRow] = ()) -> str:
    """The roofline as a text table (what ``--roofline`` prints beside its chart): the sections' rows, then the
    components' under a line of their own; ``peak`` as the rows were placed (`bounding_peak`: its line, when raised,
    under the header)."""
    header = (f"roofline vs peak {peak.bandwidth_gb_per_s:.1f} GB/s, {peak.gflop_per_s:.1f} GFLOP/s "
              f"(ridge {peak.ridge:.2f} FLOPs/byte, {peak.device}, {peak.date[:10]})")
    width = max([len(row.name) for row in [*rows, *components]] + [9])
    lines = [header, *([peak.raised_by] if peak.raised_by else [])]
    for title, group in (("section", rows), ("component", components)):
        if title == "section" or group:
            lines.append(f"{title:<{width}}  {'GB/s':>8} {'% bw':>6}  {'GFLOP/s':>8} {'% flop':>6}  "
                         f"{'FLOP/B':>8}  bound")
        for row in group:
            intensity = f"{row.intensity:8.3f}" if row.intensity is not None else f"{'-':>8}"
            lines.append(f"{row.name:<{width}}  {row.gb_per_s:8.2f} {100 * row.bandwidth_fraction:5.1f}%  "
                         f"{row.gflop_per_s:8.2f} {100 * row.compute_fraction:5.1f}%  {intensity}  {row.bound}")
    return "\n".join(lines)
