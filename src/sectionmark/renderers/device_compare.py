"""The outputs of `sectionmark compare` of two runs on several devices (`DeviceComparison`): each device's.

The table is each device's comparison table (`sectionmark.renderers.compare`)
under its heading; the CSV a leading ``device`` column (the ordinal) before a
comparison's columns, each device's rows in turn; the JSON
`DeviceComparison.to_json`.
"""

from __future__ import annotations

import json

from sectionmark.profiling.device_compare import DeviceComparison
from sectionmark.renderers import compare
from sectionmark.renderers.csv_format import csv_text


def heading(ordinal: int, device: object) -> str:
    return f"── device {ordinal}" + (f" ({device})" if device else "") + " ──\n"


def render_table(comparison: DeviceComparison, width: int = 140) -> str:
    return "\n".join(heading(device.ordinal, device.device) + compare.render_table(device.comparison, width)
                     for device in comparison.devices)


def render_csv(comparison: DeviceComparison) -> str:
    return csv_text(["device", *compare.CSV_COLUMNS], ([device.ordinal, *row] for device in comparison.devices
                                                       for row in compare.csv_rows(device.comparison)))


def render_json(comparison: DeviceComparison) -> str:
    return json.dumps(comparison.to_json(), ensure_ascii=False, indent=1) + "\n"
