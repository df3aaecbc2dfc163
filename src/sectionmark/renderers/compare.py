"""`sm.compare` on two modules or two profile files, and the outputs of `sectionmark compare`: table, CSV and JSON.

Not in ``RENDERERS``: those render one profile; these render the comparison
of two (`sectionmark.profiling.compare`): of two modules run alternately
(`sectionmark.workflows.interleave`), or of two profiles read here from the
profile JSON files `--json` writes (`json_out.read`, every value checked,
samples beyond what a profile keeps thinned as it keeps them). Times are busy time per call, as in
the section table; names are data (``rich.text.Text``, never markup). The
table has the sections, then the components (sections of one name summed
across blocks); the CSV has both, told apart by its ``kind`` column.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.errors import SectionmarkError
from sectionmark.section_path import format_path
from sectionmark.profiling.compare import (CALLS, CONFIDENCE, FASTER, RESAMPLES, ROUNDS, RUNS, SEED,
                                           SLOWER, Change, Comparison, checked_times, compare_sessions)
from sectionmark.profiling.section_time import MAX_SAMPLES, call_samples
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import json_out
from sectionmark.renderers.csv_format import csv_text
from sectionmark.renderers.table import format_ns
from sectionmark.workflows.replay import ReplayProfile

CSV_COLUMNS = ["section", "path", "verdict", "a_ns", "b_ns", "ratio", "low", "high", "change_percent", "a_calls",
               "b_calls", "coverage", "a_runs", "b_runs", "bound", "kind", "basis"]
VERDICT_STYLES = {SLOWER: "red", FASTER: "green"}


def compare(a: Union[ProfileSession, Any, str, Path], b: Union[ProfileSession, Any, str, Path],
            args: Sequence[Any] = (), *, function: Optional[str] = None, resamples: int = RESAMPLES,
            confidence: float = CONFIDENCE, seed: int = SEED, min_change: Optional[float] = None,
            **run_options: Any) -> Comparison:
    """Compare ``b`` against ``a``, per section and per component (by name): busy time per call in A and B, the
    ratio B/A, its interval, and "faster"/"slower" only when the interval lies beyond ``min_change`` percent
    (None: 10 over rounds, 25 over runs; `sectionmark.profiling.compare`).

    Two modules (compiled programs, or .vmfb paths): both run alternately on
    ``args``, in rounds (`sectionmark.workflows.interleave.compare_modules`,
    whose options ``run_options`` are: ``rounds``, ``iterations``,
    ``warmup``, ``workers``, ``device``, ``parameters``, ``timeout``,
    ``quiet``); ``function`` defaults to "main". Two profiles: sessions,
    profile JSON files (``prof.save("run.json")``, ``--json``), or a
    recording's replay JSON (``sectionmark profile RECORDING --json F``:
    ``function``'s profile, `load_profile`); the interval is then over their
    runs (``--runs``) when both have several, else over the calls of one run,
    whose verdict only goes beyond the drift between runs.
    """
    from sectionmark.workflows.interleave import compare_modules, is_module

    labels = [str(x) if isinstance(x, (str, Path)) else name for x, name in ((a, "A"), (b, "B"))]
    options = dict(resamples=resamples, confidence=confidence, seed=seed, min_change=min_change)
    modules = [is_module(source) for source in (a, b)]
    if any(modules):
        if not all(modules):
            raise SectionmarkError(f"{labels[modules.index(False)]} is a profile and {labels[modules.index(True)]} a "
                                   "module: compare two modules (run alternately) or two profiles")
        return compare_modules(a, b, args, function=function or "main", labels=labels, **options, **run_options)
    if args or run_options:
        given = ["args" if args else "", *run_options]
        raise SectionmarkError(f"{', '.join(name for name in given if name)}: only for two modules (compiled programs "
                               "or .vmfb paths), not profiles")
    return compare_sessions(load_profile(a, function), load_profile(b, function), labels=labels, **options)


def load_profile(source: Union[ProfileSession, str, Path], function: Optional[str] = None) -> ProfileSession:
    """A session as is, a profile JSON file read back, or one function's profile from a recording's replay JSON
    (``function``, or the one function of the replay that ran dispatches); an error names the file.

    ``function`` given for a profile JSON of another function is an error too: the comparison would not be
    of what was asked for.
    """
    if isinstance(source, ProfileSession):
        return source
    try:
        data = json_out.read(source)
        for document in _profile_documents(data):
            _thin_samples(document)
        if isinstance(data, dict) and data.get("kind") == "replay":
            return _replayed_function(ReplayProfile.from_json(data), function)
        session = ProfileSession.from_json(data)
        if function is not None and session.function is not None and session.function != function:
            raise SectionmarkError(f"a profile of function {session.function!r}, not {function!r}")
        return session
    except SectionmarkError as error:
        message = str(error)
        raise SectionmarkError(message if str(source) in message else f"{source}: {message}") from None


def _profile_documents(data: Any) -> list[dict]:
    """The profile documents of a file: itself, or each function's of a replay JSON."""
    if isinstance(data, dict) and data.get("kind") == "replay" and isinstance(data.get("functions"), list):
        return [entry["profile"] for entry in data["functions"]
                if isinstance(entry, dict) and isinstance(entry.get("profile"), dict)]
    return [data] if isinstance(data, dict) else []


def _thin_samples(document: dict) -> None:
    """A section with more per-call samples than a profile keeps (a file written by hand or by another tool)
    keeps ``MAX_SAMPLES`` of them, evenly spaced as a profile keeps them (`call_samples`), checked first in C
    (`checked_times`): the rest of the comparison, and reading the file back, then take bounded time and memory."""
    for row in document.get("sections") or []:
        samples = row.get("samples") if isinstance(row, dict) else None
        if isinstance(samples, list) and len(samples) > MAX_SAMPLES:
            where = f"section {format_path(tuple(map(str, row.get('path') or ())))!r}"
            row["samples"] = call_samples(checked_times(where, "per-call sample", samples))


def _replayed_function(replay: ReplayProfile, function: Optional[str]) -> ProfileSession:
    if function is not None:
        return replay.function(function)
    profiled = [entry.function for entry in replay.functions if entry.profile is not None]
    if len(profiled) != 1:
        raise SectionmarkError(f"a replay of {len(profiled)} functions that ran dispatches ({', '.join(profiled)}): "
                               "name one with --function")
    return replay.function(profiled[0])


def _ratio(value: Optional[float]) -> str:
    return f"{value:.3f}" if value is not None else ""


def _change(row: Change) -> str:
    return f"{row.change_percent:+.1f}%" if row.change_percent is not None else ""


def method_caption(comparison: Comparison) -> str:
    """What the intervals are over (each basis present), and the change each must lie beyond for a verdict."""
    judged = [row for row in [*comparison.sections, *comparison.components] if row.low is not None]
    parts = []
    for row in ([next((row for row in judged if row.basis == basis), None) for basis in (ROUNDS, RUNS, CALLS)]):
        if row is None:
            continue
        if row.basis == ROUNDS:
            parts.append(f"interval: {row.a_runs} interleaved rounds of {comparison.calls_per_round or '?'} calls, "
                         f"median B/A of the rounds and its sign-test interval ({row.coverage:.1%}); slower/faster: "
                         f"beyond {row.bound:g}%")
        elif row.basis == RUNS:
            parts.append(f"interval: runs ({row.a_runs} of A, {row.b_runs} of B), median B/A of every pair and its "
                         f"rank-test interval ({row.coverage:.1%}); slower/faster: beyond {row.bound:g}% (profiles "
                         "taken apart drift as wholes)")
        else:
            parts.append(f"interval: bootstrap of the calls of one run, {comparison.resamples} resamples, seed "
                         f"{comparison.seed} ({comparison.confidence:.0%}); slower/faster: beyond {row.bound:g}% "
                         "(the drift between runs)")
    return "; ".join(parts)


def build_table(comparison: Comparison, components: bool = False) -> Table:
    """One row per section (``components``: per component), time per call in A and B, B/A with its interval, the
    verdict."""
    if components:
        table = Table(title="components (sections of one name summed across blocks)", title_justify="left")
        table.add_column("Component")
        table.add_column("Sections A/B", justify="right")
    else:
        table = Table(title=Text(f"B: {comparison.b}  vs  A: {comparison.a}"), title_justify="left",
                      caption=method_caption(comparison), caption_justify="left")
        table.add_column("Section")
    for column in ("A/call", "B/call", "B/A", "Interval", "Change"):
        table.add_column(column, justify="right")
    table.add_column("Verdict")
    for row in comparison.components if components else comparison.sections:
        if components:
            name = [Text(row.name), f"{row.a_sections}/{row.b_sections}"]
        else:
            name = [Text("  " * max(len(row.path) - 1, 0) + (row.path[-1] if row.path else "(unmarked)"))]
        table.add_row(
            *name,
            format_ns(row.a_ns) if row.a_ns is not None else "",
            format_ns(row.b_ns) if row.b_ns is not None else "",
            _ratio(row.ratio),
            f"{row.low:.3f} – {row.high:.3f}" if row.low is not None and row.high is not None else "",
            _change(row),
            Text(row.verdict, style=VERDICT_STYLES.get(row.verdict, "")),
        )
    return table


def render_table(comparison: Comparison, width: int = 140) -> str:
    """The sections' table, then the components', as plain text; then the note on rows without a verdict."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(build_table(comparison))
    console.print(build_table(comparison, components=True))
    if comparison.note:
        console.print(Text(f"note: {comparison.note}"))
    return buffer.getvalue()


def render_csv(comparison: Comparison) -> str:
    """One row per section (``kind`` "section"), then per component (``kind`` "component": its name in
    ``section``, ``path`` empty); empty cells where a figure does not exist (a section in one profile only)."""
    def cell(value: Optional[float], digits: int) -> object:
        return "" if value is None else round(value) if digits == 0 else round(value, digits)

    def figures(row: Change) -> list:
        return [row.verdict, cell(row.a_ns, 0), cell(row.b_ns, 0), cell(row.ratio, 6), cell(row.low, 6),
                cell(row.high, 6), cell(row.change_percent, 3), row.a_calls, row.b_calls, cell(row.coverage, 6),
                row.a_runs, row.b_runs, cell(row.bound, 3)]

    return csv_text(CSV_COLUMNS, [
        *([row.name, json.dumps(list(row.path), ensure_ascii=False), *figures(row), "section", row.basis]
          for row in comparison.sections),
        *([row.name, "", *figures(row), "component", row.basis] for row in comparison.components),
    ])


def render_json(comparison: Comparison) -> str:
    return json.dumps(comparison.to_json(), ensure_ascii=False, indent=1) + "\n"
