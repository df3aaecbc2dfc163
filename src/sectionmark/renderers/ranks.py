"""Several ranks' profiles of one module (`sectionmark.profiling.ranks.RankReport`) as a table, JSON and CSV.

The formats that have a ranks form are marked ``ranks=True`` in the registry
(`sectionmark.renderers.RENDERERS`) and rendered by ``FORMS`` here:

* ``table``: per section its busy time per call across the ranks (min, median,
  max), the slowest rank and how far it is from the median; the ranks' files
  by index under it;
* ``json``: the versioned ranks document (docs/profile-json.md, kind
  ``"ranks"``), each rank's own profile document inside it, exactly as
  ``sectionmark report`` of that file alone writes it;
* ``csv``: one row per section, its busy time per call on each rank as a JSON
  list (``per_rank_ns``, in rank order), like ``path``.

Ranks of a run on several devices (`DeviceRankReport`): the table is each
device's ranks table under its heading; the JSON the ``"ranks-devices"``
document, each rank's own profile of several devices inside it; the CSV a
leading ``device`` column (the ordinal), each device's rows in turn.
"""

from __future__ import annotations

import io
import json
from typing import Any, Callable, Optional, Union

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.profiling.ranks import DeviceRankReport, RankReport, SectionAcrossRanks
from sectionmark.renderers.csv_format import csv_text
from sectionmark.renderers.devices import devices_document
from sectionmark.renderers.json_out import profile_document
from sectionmark.renderers.table import format_ns
from sectionmark.section_path import UNMARKED, printable

CSV_COLUMNS = ["section", "path", "depth", "ranks", "min_ns", "median_ns", "max_ns", "slowest_rank", "slowest_file",
               "slowest_over_median", "per_rank_ns"]


def _slowest_cells(report: RankReport, row: SectionAcrossRanks) -> list[str]:
    if row.slowest_rank is None:
        return ["", ""]
    ratio = row.slowest_over_median
    return [f"{row.slowest_rank} ({printable(report.ranks[row.slowest_rank].name)})",
            f"{ratio:.2f}x" if ratio is not None else ""]


def render_table(report: RankReport, width: Optional[int] = None) -> str:
    """The ranks table and the files of the ranks, as plain text ``width`` columns wide (default 140)."""
    table = Table(title=Text(f"{len(report.ranks)} ranks: busy time per call of each section across the ranks"),
                  title_justify="left", show_footer=True)
    total = report.total
    table.add_column("Section", footer="Total")
    table.add_column("Ranks", justify="right", footer=str(total.ranks))
    for header, footer in (("Min/call", total.min_ns), ("Median/call", total.median_ns), ("Max/call", total.max_ns)):
        table.add_column(header, justify="right", footer=format_ns(footer))
    slowest, ratio = _slowest_cells(report, total)
    table.add_column("Slowest rank", footer=slowest)
    table.add_column("Max/median", justify="right", footer=ratio)
    for row in report.sections:
        if not row.path and row.max_ns == 0:  # no unmarked time on any rank
            continue
        name = "  " * max(len(row.path) - 1, 0) + printable(row.path[-1] if row.path else UNMARKED)
        table.add_row(Text(name), str(row.ranks), format_ns(row.min_ns), format_ns(row.median_ns),
                      format_ns(row.max_ns), *_slowest_cells(report, row), style="dim" if not row.path else None)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width or 140, color_system=None, force_terminal=False)
    console.print(table)
    for index, rank in enumerate(report.ranks):
        session = rank.session
        console.print(f"rank {index}: {printable(rank.file)} ({session.calls} calls, coverage error "
                      f"{session.coverage_error:.4%})", highlight=False, markup=False)
    console.print("per rank: each file's own table is `sectionmark report FILE --map MAP`; every rank's full profile "
                  "is in --json", style="dim", highlight=False, markup=False)
    return buffer.getvalue()


def render_json(report: RankReport) -> str:
    """The ranks document (`RankReport.to_json`) with each rank's own profile document."""
    document = report.to_json()
    for written, rank in zip(document["ranks"], report.ranks):
        written["profile"] = profile_document(rank.session)
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


def render_csv(report: RankReport) -> str:
    """One row per section (``CSV_COLUMNS``), RFC 4180 line ends."""
    return csv_text(CSV_COLUMNS, csv_rows(report))


def csv_rows(report: RankReport) -> list[list]:
    """The CSV's rows, one per section (``CSV_COLUMNS``)."""
    rows = []
    for row in report.sections:
        slowest = row.slowest_rank
        ratio = row.slowest_over_median
        rows.append([row.name, json.dumps(list(row.path), ensure_ascii=False), len(row.path), row.ranks,
                     round(row.min_ns), round(row.median_ns), round(row.max_ns),
                     "" if slowest is None else slowest, "" if slowest is None else report.ranks[slowest].file,
                     "" if ratio is None else f"{ratio:.4f}",
                     json.dumps([None if ns is None else round(ns) for ns in row.per_rank_ns])])
    return rows


def render_device_table(report: DeviceRankReport, width: Optional[int] = None) -> str:
    """Each device's ranks table (`render_table`) under its heading."""
    return "\n".join(f"── device {device.ordinal}" + (f" ({printable(device.device)})" if device.device else "")
                     + " ──\n" + render_table(device.report, width) for device in report.devices)


def render_device_json(report: DeviceRankReport) -> str:
    """The ``"ranks-devices"`` document (`DeviceRankReport.to_json`) with each rank's own profile document, exactly
    what ``sectionmark report`` of that file alone writes."""
    document = report.to_json()
    for written, rank in zip(document["ranks"], report.ranks):
        written["profile"] = devices_document(rank.profile)
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


def render_device_csv(report: DeviceRankReport) -> str:
    """A leading ``device`` column (the ordinal) before the ranks CSV's columns, each device's rows in turn."""
    return csv_text(["device", *CSV_COLUMNS], ([device.ordinal, *row] for device in report.devices
                                               for row in csv_rows(device.report)))


def _form(one: Callable[..., str], several: Callable[..., str]) -> Callable[..., str]:
    """A format's renderer of ranks of one device (``one``) or of several (``several``: a `DeviceRankReport`)."""
    def render(report: Union[RankReport, DeviceRankReport], **options: Any) -> str:
        return (several if isinstance(report, DeviceRankReport) else one)(report, **options)
    return render


FORMS: dict[str, Callable[..., str]] = {"table": _form(render_table, render_device_table),
                                        "json": _form(render_json, render_device_json),
                                        "csv": _form(render_csv, render_device_csv)}
