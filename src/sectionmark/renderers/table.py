"""The per-section console table.

Times are per measured call (the profile's totals divided by the number of
calls), which is what a user compares between runs. Nested sections are
indented under their parent and show inclusive time; a ``*`` marks sections
that share fused dispatches with other sections (their time was split).
A declared section that ran no dispatch keeps its row, with a note instead of
zeros, so that a missing section is never silent.
With ``cpu=True`` (``--cpu``) the CPU columns follow: tile time across
local-task's workers per call, parallelism (workers busy on average while the
section's dispatches ran), utilization of the run's workers and tiles per call;
a profile without tiles (Vulkan, Tracy) says "not recorded" there, never 0.
With ``memory=True`` (``--memory``): bytes read + written per call, the
working set, achieved GB/s and GFLOP/s and FLOPs per byte (the section's
`Traffic`; empty where no dispatch of the section has static sizes). With
``span=True`` (``--span``): where in the call the section runs, its median
start and end (offsets from the call's start; min and max are in the JSON,
the CSV and the ``--timeline`` chart).
A profile of several runs (``--runs K``) adds the median busy time per call
over the runs and its interval after Busy/call; the other columns are those
of the run of median total, and a note says so. A profile of one run says
under the table that run-to-run variation was not measured.

Names are data: every user-given string (section, function, zone and export
names) goes into the table as ``rich.text.Text``, never as markup, so
``"[bold]MLP[/bold]"`` or ``"[/x]"`` print as written, and with its control
characters escaped (`printable`: ``\x1b[2J`` shows as those characters and
never clears the terminal).
"""

from __future__ import annotations

import io
from typing import Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.profiling.runs import RunSpread
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import ProfilerCost, RunVariation, SectionStats, Traffic
from sectionmark.section_path import UNMARKED, format_path, printable

SHARED_MARK = "*"
NOT_RECORDED = "not recorded"


def format_ns(ns: float) -> str:
    """``1234567`` -> ``1.235 ms``: three significant decimals in a readable unit."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns:.0f} ns"


def _name(row: SectionStats) -> str:
    mark = f" {SHARED_MARK}" if row.shared_ns > 0 else ""
    return "  " * row.depth + printable(row.leaf) + mark


def _cpu_cells(session: ProfileSession, row: SectionStats, calls: int) -> list[str]:
    """CPU time/call, parallelism, utilization, tiles/call of a row; "not recorded" without tile data."""
    if row.cpu_ns is None or row.tiles is None:
        return [NOT_RECORDED] * 4
    return [
        format_ns(row.cpu_ns / calls),
        f"{row.parallelism:.2f}" if row.parallelism is not None else "",
        f"{row.utilization:.0%}" if row.utilization is not None else ("" if row.parallelism is None else "?"),
        f"{row.tiles / calls:g}",
    ]


def format_ns_range(low: float, high: float) -> str:
    """``(28590, 43753)`` -> ``28.590–43.753 µs``: both ends in the unit `format_ns` gives the larger."""
    unit = format_ns(max(abs(low), abs(high))).split()[-1]
    scale = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}[unit]
    digits = 0 if unit == "ns" else 3
    return f"{low / scale:.{digits}f}–{high / scale:.{digits}f} {unit}"


def _interval(spread: Optional[RunSpread]) -> str:
    return format_ns_range(spread.low_ns, spread.high_ns) if spread is not None else ""



def _memory_cells(traffic: Optional[Traffic], working_set_bytes: Optional[int], calls: int) -> list[str]:
    """Bytes/call, working set, GB/s, GFLOP/s, FLOPs per byte; empty where no dispatch had static sizes."""
    if traffic is None:
        return [""] * 5
    return [
        format_bytes(traffic.bytes / calls),
        format_bytes(working_set_bytes) if working_set_bytes is not None else "",
        f"{traffic.gb_per_s:.2f}" if traffic.gb_per_s is not None else "",
        f"{traffic.gflop_per_s:.2f}" if traffic.gflop_per_s is not None else "",
        f"{traffic.intensity:.3f}" if traffic.intensity is not None else "",
    ]


def _span_cells(row: SectionStats) -> list[str]:
    """Median start and end offset in the call; empty for a section that never ran."""
    return [format_ns(offsets.p50) if offsets is not None else "" for offsets in (row.start_ns, row.end_ns)]


def build_table(session: ProfileSession, cpu: bool = False, memory: bool = False, span: bool = False) -> Table:
    """A rich Table: one row per section (nested, indented), "(unmarked)" and the total; ``cpu``, ``memory``,
    ``span``: with those columns (module docstring)."""
    calls = max(session.calls, 1)
    title = f"{session.function or 'profile'}: {session.calls} calls"
    if session.warmup:
        title += f" (+{session.warmup} warmup)"
    spread = session.total_runs
    if spread is not None:
        title += f" in each of {session.runs} runs"
    table = Table(title=Text(printable(title)), title_justify="left", show_footer=True)
    table.add_column("Section", footer="Total")
    table.add_column("Share", justify="right", footer="100.0%")
    # Calls that cannot be told apart are reported as one: the columns hold totals then.
    per = "/call" if session.calls_known else " (total)"
    table.add_column(f"Busy{per}", justify="right", footer=format_ns(session.total_ns / calls))
    if spread is not None:
        table.add_column(f"Median of {spread.runs}", justify="right", footer=format_ns(spread.median_ns))
        table.add_column(f"{spread.confidence:.1%} CI", justify="right", footer=_interval(spread))
    table.add_column(f"Wall{per}", justify="right", footer=format_ns(session.wall_ns / calls))
    table.add_column(f"Excl{per}", justify="right")
    table.add_column(f"Shared{per}", justify="right")
    table.add_column("p50", justify="right")
    table.add_column("p95", justify="right")
    table.add_column(f"Dispatches{per}", justify="right",
                     footer=f"{sum(site.dispatches for site in session.sites) / calls:g}")
    if cpu:
        recorded = session.cpu_ns is not None and session.tiles is not None
        table.add_column(f"CPU{per}", justify="right",
                         footer=format_ns(session.cpu_ns / calls) if recorded else NOT_RECORDED)
        table.add_column("Parallel", justify="right",
                         footer=f"{session.parallelism:.2f}" if session.parallelism is not None else "")
        table.add_column("Util", justify="right",
                         footer=f"{session.utilization:.0%}" if session.utilization is not None else "")
        table.add_column(f"Tiles{per}", justify="right", footer=f"{session.tiles / calls:g}" if recorded else "")
    if memory:  # the footer: the whole profile's traffic (top-level rows and unmarked; working sets do not add up)
        whole = Traffic.total(row.traffic for row in session.sections if len(row.path) <= 1)
        for header, footer in zip((f"Bytes{per}", "Working set", "GB/s", "GFLOP/s", "FLOP/B"),
                                  _memory_cells(whole, None, calls)):
            table.add_column(header, justify="right", footer=footer)
    if span:
        table.add_column("Start p50", justify="right")
        table.add_column("End p50", justify="right")
    for row in session.sections:
        if not row.path and row.busy_ns == 0:
            continue
        if row.note:
            table.add_row(Text(f"{_name(row)} — {row.note}"), *[""] * (len(table.columns) - 1), style="dim")
            continue
        table.add_row(
            Text(_name(row)),
            f"{row.share:.1%}",
            format_ns(row.busy_ns / calls),
            *([format_ns(row.runs.median_ns) if row.runs else "", _interval(row.runs)] if spread is not None else []),
            format_ns(row.wall_ns / calls),
            format_ns(row.exclusive_ns / calls),
            format_ns(row.shared_ns / calls) if row.shared_ns else "",
            format_ns(row.per_call.p50_ns) if session.calls_known else "",
            format_ns(row.per_call.p95_ns) if session.calls_known else "",
            f"{row.dispatches / calls:g}",
            *(_cpu_cells(session, row, calls) if cpu else []),
            *(_memory_cells(row.traffic, row.working_set_bytes, calls) if memory else []),
            *(_span_cells(row) if span else []),
            style="dim" if not row.path else None,
        )
    return table


def build_sites_table(session: ProfileSession) -> Table:
    """One row per dispatch site: its sections, what it ran, how often and how long."""
    calls = max(session.calls, 1)
    table = Table(title="dispatch sites", title_justify="left")
    for column in ("Site", "Section(s)", "Export key", "Workgroups", "Bytes bound (whole buffers)", "Dispatches/call",
                   "Busy/call"):
        table.add_column(column, justify="left" if column in ("Section(s)", "Export key") else "right",
                         no_wrap=column == "Export key", overflow="ellipsis")
    for site in sorted(session.sites, key=lambda s: -s.busy_ns):
        sections = ", ".join(
            format_path(path) + (f" {weight:.0%}" if len(site.sections) > 1 else "")
            for path, weight in site.sections
        )
        key = site.key + (f" {SHARED_MARK}" if site.shared_executable else "")
        table.add_row(
            str(site.site), Text(printable(sections)), Text(printable(key)),
            "x".join(map(str, site.workgroups)) if site.workgroups else "",
            f"{site.binding_bytes:,}" if site.binding_bytes is not None else "",
            f"{site.dispatches / calls:g}", format_ns(site.busy_ns / calls),
        )
    table.caption = f"{SHARED_MARK} executable also runs for another section (deduplicated)"
    return table


def render_sites_text(session: ProfileSession, width: int = 160) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(build_sites_table(session))
    return buffer.getvalue()


def zone_stats_text(rows: list, width: int = 160) -> str:
    """``sectionmark tracy-stats``: one row per (zone name, track kind) of a capture."""
    # Zone spans run from a zone's begin to its end, gaps between its dispatches included: they are
    # longer than the section table's busy time (summed dispatch durations) and do not add up to it.
    table = Table(title="Tracy zones: zone spans (begin to end, gaps between dispatches included), "
                        "not busy time", title_justify="left")
    for column in ("Zone", "Track", "Count", "Total", "Mean", "Min", "Max", "p95"):
        table.add_column(column, justify="left" if column in ("Zone", "Track") else "right")
    for row in rows:
        table.add_row(Text(printable(row.name)), "GPU" if row.kind == "gpu" else "CPU", str(row.count),
                      *(format_ns(v) for v in (row.total_ns, row.mean_ns, row.min_ns, row.max_ns, row.p95_ns)))
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
    return buffer.getvalue()


RULE_WORDS = {"cost": "by estimated cost (FLOPs and bytes)", "op-count": "by op count (shapes not static)",
              "root": "to the section of the root op (nothing to cost)"}


def split_rule_text(session: ProfileSession) -> str:
    """How fused dispatches were split: the one rule, or each rule with its number of sites."""
    rules = session.split_rules
    if len(rules) <= 1:
        return RULE_WORDS.get(session.weight_rule, f"by {session.weight_rule} weight")
    return ", ".join(f"{RULE_WORDS.get(rule, rule)} at {count} site{'s' if count != 1 else ''}"
                     for rule, count in sorted(rules.items(), key=lambda item: -item[1]))


def notes(session: ProfileSession) -> list[str]:
    """Lines printed under the table: coverage check and how to read it."""
    covered = sum(row.busy_ns for row in session.sections if len(row.path) == 1) + session.unmarked_ns
    lines = [
        f"coverage: sections + {UNMARKED} = {format_ns(covered)} of {format_ns(session.total_ns)} "
        f"measured dispatch time over {session.calls} calls (error {session.coverage_error:.4%})"
    ]
    if session.wall_ns < session.total_ns:
        lines.append("wall: where k dispatches overlapped, each got 1/k of that time, split between sections like busy time")
    if any(row.shared_ns for row in session.sections):
        lines.append(f"{SHARED_MARK} shares fused dispatches with other sections; their time is split {split_rule_text(session)}")
    if not session.calls_known:
        lines.append("calls could not be told apart in this profile: per-call percentiles are not shown")
    return lines + run_lines(session) + cpu_lines(session) + call_time_lines(session) + profiler_cost_lines(session)


def profiler_cost_lines(session: ProfileSession) -> list[str]:
    """The profiler's own cost, when the run measured it (`ProfilerCost`)."""
    cost = session.profiler_cost
    return [] if cost is None else [f"profiler cost: {profiler_cost_text(cost)}"]


def profiler_cost_text(cost: ProfilerCost) -> str:
    """The cost as the table and the report say it: the median ratio of the paired rounds with its interval, or
    "no measurable cost" where the interval reaches 1 (never a ratio below 1 on its own: a profiler cannot speed
    a call up). A file from before the rounds has one unpaired run of each, said so, without an interval."""
    calls = f"median call {format_ns(cost.profiled_ns)} profiled vs {format_ns(cost.unprofiled_ns)} unprofiled"
    if not cost.ratios:
        if cost.ratio <= 1.0:
            return f"no measurable cost (one unpaired run each, {calls}: {cost.ratio:.2f}x, no interval)"
        return f"{cost.ratio:.2f}x per call ({calls}; one unpaired run each, no interval)"
    interval = (f"{cost.low:.2f}–{cost.high:.2f}x over {cost.rounds} paired rounds ({cost.confidence:.0%} "
                "confidence), each round's median call timed by iree-benchmark-module, same calls and inputs")
    if not cost.measurable:
        return f"no measurable cost (profiled / unprofiled {interval})"
    return f"{cost.ratio:.2f}x per call (interval {interval}; {calls})"


def run_lines(session: ProfileSession) -> list[str]:
    """How much the figures move between runs: measured over ``--runs K``, or said not to be."""
    spread = session.total_runs
    if spread is None:
        return [one_run_line(session.run_variation)]
    return [f"runs: Median of {spread.runs} and its CI (confidence interval) are the busy time per call over "
            f"{spread.runs} fresh runs (total "
            f"{format_ns_range(min(spread.values_ns), max(spread.values_ns))}, CV "
            f"{spread.coefficient_of_variation:.1%}); the interval is two of the run values (order statistics) "
            f"covering the median with {spread.confidence:.1%} confidence; the other columns are run "
            f"{session.shown_run} (median total)"]


def one_run_line(variation: Optional[RunVariation]) -> str:
    """How much a one-run profile's figures move between runs: as an earlier --runs profile measured it on this
    machine (`sectionmark.workflows.measure`), or said not to be measured."""
    if variation is None:
        return ("run-to-run variation not measured (one run, and no --runs profile on this machine, device and "
                "workers yet): --runs 5 (runs=5) shows how much these figures move between runs, and later one-run "
                "profiles here say it")
    workers = f", {variation.workers} workers" if variation.workers is not None else ""
    return (f"one run: on this machine ({variation.device}{workers}) figures like these moved between runs by CV "
            f"{variation.total_cv:.1%} (total per call), {variation.median_section_cv:.1%} (median section), "
            f"{variation.worst_section_cv:.1%} (worst section), as measured by --runs {variation.runs} of "
            f"{variation.module or 'a module compiled in-process'} at {variation.measured_at}; --runs 5 measures "
            "this module's own")


def cpu_lines(session: ProfileSession) -> list[str]:
    """The run's CPU time across workers and its parallelism (local-task profiles record tiles)."""
    if session.cpu_ns is None or session.parallelism is None:
        return []
    calls = max(session.calls, 1)
    workers = (f"{session.parallelism:.2f} of {session.workers} workers ({session.utilization:.0%})"
               if session.workers and session.utilization is not None
               else f"{session.parallelism:.2f} workers (worker count unknown)")
    return [f"CPU: {format_ns(session.cpu_ns / calls)}/call of tile time across workers; {workers} busy on average "
            "while dispatches ran; per section with --cpu (parallelism there: CPU / busy time)"]


CALL_TIME_LABELS = {"dispatch": "dispatches", "command_buffer_gap": "command-buffer gaps (fills/copies/barriers)",
                    "transfer": "transfers", "allocation": "alloc/dealloc", "other_queue": "other queue ops",
                    "idle": "idle"}


def format_bytes(count: float) -> str:
    """``32768`` -> ``32.0 KiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(count) >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def call_time_lines(session: ProfileSession) -> list[str]:
    """Where each call's time went beside dispatches, and its device memory (when the profile has them)."""
    calls = max(session.calls, 1)
    lines = []
    timing = session.call_time
    if timing is not None:
        parts = " + ".join(f"{label} {format_ns(timing.rows[name] / calls)}"
                           for name, label in CALL_TIME_LABELS.items() if timing.rows[name] or name == "dispatch")
        lines.append(f"call time {format_ns(timing.call_ns / calls)}/call = {parts} "
                     f"(command-buffer executions {format_ns(timing.execute_ns / calls)})")
    memory = session.memory
    if memory is not None:
        lines.append(f"device memory: peak {format_bytes(memory.peak_bytes)}, average {format_bytes(memory.average_bytes)}"
                     f"; {memory.allocations / calls:g} allocations of {format_bytes(memory.allocated_bytes / calls)}/call")
    return lines


def print_table(session: ProfileSession, console: Console, cpu: bool = False, memory: bool = False,
                span: bool = False) -> None:
    """Print the table (with the columns asked for: `build_table`) and its notes to ``console``."""
    console.print(build_table(session, cpu, memory, span))
    for line in notes(session):
        console.print(line, style="dim", highlight=False, markup=False)


def render(session: ProfileSession, width: Optional[int] = None, cpu: bool = False, memory: bool = False,
           span: bool = False) -> str:
    """The table and its notes as plain text, ``width`` columns wide (default 140, wider by what the CPU, memory
    and span columns and the runs' median and interval need to keep their headers on one line); ``cpu``,
    ``memory``, ``span``: with those columns."""
    buffer = io.StringIO()
    width = width or 140 + 50 * cpu + 60 * memory + 26 * span + 40 * (session.total_runs is not None)
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    print_table(session, console, cpu, memory, span)
    return buffer.getvalue()
