"""The outputs of a replayed recording on several devices (`sectionmark.workflows.replay_devices`).

Each function's several-device output (`sectionmark.renderers.devices`), as a replay on one device gives each
function's: the table under the function's heading; one JSON document (``"kind": "replay-devices"``, version
1, docs/record.md) whose functions each hold their several-device profile document; one CSV whose rows lead
with the function, then the several-device CSV's columns.
"""

from __future__ import annotations

import json
from typing import Any, Union

from sectionmark.errors import SectionmarkError
from sectionmark.renderers import csv_out, devices
from sectionmark.renderers.csv_format import csv_text

REPLAY_DEVICES_JSON_VERSION = 1
FORMATS = ("table", "json", "csv")


def render(replay: Any, format: str, **options: Any) -> Union[str, bytes]:
    """``replay`` (a `DeviceReplayProfile`) in ``format`` (one of ``FORMATS``); any other: one error line."""
    if format not in FORMATS:
        raise SectionmarkError(f"--{format} of a replay on several devices is not drawn yet (table, json and csv are); "
                               "draw one function's device with prof.function(NAME).device(ORDINAL).save(...)")
    if format == "json":
        return json.dumps(_document(replay), ensure_ascii=False, indent=1) + "\n"
    if format == "csv":
        return csv_text(["function", "device", *csv_out.COLUMNS],
                        ([entry.function, device.ordinal, *row] for entry in replay.functions if entry.profile
                         for device in entry.profile.devices for row in csv_out.csv_rows(device.session)))
    parts = []
    for entry in replay.functions:
        body = "no dispatches on any device\n" if entry.profile is None else devices.render_table(entry.profile,
                                                                                                  **options)
        parts.append(f"── {replay.heading(entry)} ──\n{body}")
    return "\n".join(parts)


def _document(replay: Any) -> dict[str, Any]:
    return {"version": REPLAY_DEVICES_JSON_VERSION, "kind": "replay-devices", "replays": replay.replays,
            "warmup": replay.warmup, "calls_per_replay": replay.calls_per_replay, "devices": replay.devices,
            "functions": [{"function": entry.function, "calls_per_replay": entry.calls_per_replay,
                           "profile": None if entry.profile is None else json.loads(devices.render_json(entry.profile))}
                          for entry in replay.functions]}
