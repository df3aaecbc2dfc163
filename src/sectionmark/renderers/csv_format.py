"""CSV text as every CSV output of sectionmark writes it: RFC 4180 line ends, text cells made inert."""

from __future__ import annotations

import csv
import io
from typing import Any, Iterable


def csv_text(columns: list[str], rows: Iterable[list]) -> str:
    """A header and rows as CSV text with RFC 4180 line ends (the csv module then quotes any field holding
    "\r" or "\n"); every CSV output of sectionmark is written so, its text cells made `inert`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    writer.writerows([inert(cell) for cell in row] for row in rows)
    return buffer.getvalue()


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert(cell: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (``=HYPERLINK(...)`` as a section name), with ``'`` before it.

    Spreadsheets evaluate a cell starting with ``= + - @`` (or a tab or
    carriage return before one); the quote makes it text. Numbers (``-1.5``)
    are left as they are.
    """
    if not isinstance(cell, str) or not cell.startswith(_FORMULA_STARTS):
        return cell
    try:
        float(cell)
        return cell
    except ValueError:
        return "'" + cell
