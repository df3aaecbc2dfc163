"""PNG roofline: each section's achieved GFLOP/s against its arithmetic intensity, under the device's roofs.

Log-log: x is FLOPs per byte moved, y GFLOP/s; the memory roof is
``intensity x peak bandwidth``, the compute roof ``peak FLOP/s``, meeting at
the ridge point; the DRAM bandwidth's lower roof is dashed. One labelled point per section (`sectionmark.profiling.roofline`);
a section that computes nothing (a copy, a transpose) has no place on a log
axis and is listed under the chart instead. The peaks are given (``peak=``: the
caller measures or loads them, `sectionmark.workflows.peak`); a view never
measures. A profile that beats them raises the roofs drawn to its fastest
kernel (`bounding_peak`), so no point is above them.
"""

from __future__ import annotations

from typing import Optional

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.roofline import Peak, bounding_peak, roofline
from sectionmark.renderers.chart import names_as_text, png_bytes, pyplot


def render(session, peak: Optional[Peak] = None, title: str | None = None) -> bytes:
    """The roofline as PNG bytes against ``peak`` (a `Peak`: ``sm.peak()``), raised where the session beats it."""
    if peak is None:
        raise SectionmarkError("the roofline chart needs the machine's peaks: save(..., peak=sm.peak()) "
                               "('sectionmark peak' measures them)")
    plt = pyplot("roofline")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    peak = bounding_peak(session, peak)
    rows = roofline(session, peak)
    drawn = [row for row in rows if row.intensity and row.gflop_per_s > 0]
    flat = [row.name for row in rows if row not in drawn]
    title = title or (f"sectionmark: {session.function or 'profile'} — roofline on {peak.device} "
                      f"({peak.bandwidth_gb_per_s:.0f} GB/s, {peak.gflop_per_s:.0f} GFLOP/s"
                      f"{', raised to this profile' if peak.raised_by else ''})")
    with names_as_text():
        figure, axes = plt.subplots(figsize=(9, 6))
        intensities = [row.intensity for row in drawn] + [peak.ridge]
        low, high = min(intensities) / 4, max(intensities) * 4
        xs = [low, peak.ridge, high]
        axes.plot(xs, [min(x * peak.bandwidth_gb_per_s, peak.gflop_per_s) for x in xs], color="black", linewidth=1.5,
                  label=f"roofs: {peak.bandwidth_gb_per_s:.1f} GB/s x intensity, {peak.gflop_per_s:.1f} GFLOP/s")
        if peak.dram_gb_per_s < peak.bandwidth_gb_per_s:  # the roof came from the cache-sized add
            dram_ridge = peak.gflop_per_s / peak.dram_gb_per_s
            dram_xs = [low, dram_ridge, max(high, dram_ridge)]
            axes.plot(dram_xs, [min(x * peak.dram_gb_per_s, peak.gflop_per_s) for x in dram_xs], color="grey",
                      linestyle="--", linewidth=1, label=f"DRAM roof: {peak.dram_gb_per_s:.1f} GB/s x intensity")
        axes.axvline(peak.ridge, color="grey", linestyle=":", linewidth=0.8,
                     label=f"ridge point {peak.ridge:.2f} FLOPs/byte")
        for row in drawn:
            color = "#C6C6C6" if not row.path else ("#4C8BF5" if row.bound == "memory" else "#E8710A")
            axes.scatter(row.intensity, row.gflop_per_s, color=color, zorder=3, s=24)
            axes.annotate(row.name, (row.intensity, row.gflop_per_s), xytext=(4, 3), textcoords="offset points",
                          fontsize=7)
        axes.set_xscale("log")
        axes.set_yscale("log")
        for axis in (axes.xaxis, axes.yaxis):  # plain numbers: log ticks are mathtext, which is off here
            axis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
            axis.set_minor_formatter(NullFormatter())
        axes.set_xlabel("arithmetic intensity (FLOPs per byte read + written)")
        axes.set_ylabel("achieved GFLOP/s (blue: memory bound side, orange: compute bound side)")
        axes.set_title(title, fontsize=10)
        axes.legend(fontsize=8, loc="lower right")
        if flat:
            figure.text(0.01, 0.01, "no FLOPs, not drawn: " + ", ".join(flat), fontsize=7, wrap=True)
        figure.tight_layout(rect=(0, 0.04 if flat else 0, 1, 1))
        return png_bytes(plt, figure)
