"""The outputs of a run on several devices (`sectionmark.profiling.devices.DeviceProfile`): table, JSON, CSV, and
the views that draw every device's events (``VIEWS``: Perfetto, HTML, Tracy).

* table: the sections across devices (busy per call on each device, their
  sum, and the devices a section ran on), where each device's time went per
  call (compute / transfer / gaps / queue / waiting / idle, and untimed where a
  device-timed profile cannot tell those apart, adding up to the call's
  window, and the overlap with the other devices), then each device's own
  section table under its heading;
* JSON (version 5, docs/profile-json.md): ``devices``, each with its ordinal,
  IREE device, time split and its whole profile document (what a one-device
  profile's JSON is); ``sections`` across devices with per-device lists;
* CSV: a leading ``device`` column (the ordinal) before a one-device profile's
  columns (`sectionmark.renderers.csv_out`), one block of rows per device;
* Perfetto: a process (track group) per device, its queues' tracks under it
  (`sectionmark.renderers.perfetto.render_devices`), from each device's events.

The views that draw events (a track group per device in Perfetto, a GPU
context per device in Tracy, a lane per device in the HTML report) live beside
their one-device forms (``VIEWS``). Other outputs (charts, graph, kernels) draw
one device at a time: a several-device profile asks for them with one error
line, naming the way to one device's (``prof.device(1)``).
"""

from __future__ import annotations

import importlib
import io
import json
from typing import Any, Optional, Union

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.devices import DEVICE_TIME_PARTS, DeviceProfile, DeviceSession
from sectionmark.renderers import csv_out, table
from sectionmark.renderers.csv_format import csv_text
from sectionmark.renderers.json_out import profile_document
from sectionmark.section_path import format_path, printable

DEVICES_JSON_VERSION = 5  # 4: the time split's gaps_ns; 5: its untimed_ns (docs/profile-json.md)
FORMATS = ("table", "json", "csv", "perfetto", "html", "tracy")
# The views that draw every device's events: each module's ``render_devices(profile, events=..., **options)``
# (``events``: each device's `Attribution`, by ordinal, which `sectionmark.profiling.device_run.DeviceRun` reads).
VIEWS = {"perfetto": "sectionmark.renderers.perfetto", "html": "sectionmark.renderers.devices_html",
         "tracy": "sectionmark.renderers.tracy_out"}
TIME_BY_SECTION = {"transfer": "transfers", "waiting": "waits"}  # a section's time on a device: the session's field


def device_name(device: DeviceSession) -> str:
    return f"device {device.ordinal}" + (f" ({device.device})" if device.device else "")


def render(profile: DeviceProfile, format: str, **options: Any) -> Union[str, bytes]:
    """``profile`` in ``format`` (one of ``FORMATS``); any other is one error line."""
    if format == "table":
        return render_table(profile, **options)
    if format == "json":
        return render_json(profile)
    if format == "csv":
        return render_csv(profile)
    if format in VIEWS:
        return importlib.import_module(VIEWS[format]).render_devices(profile, **options)
    raise SectionmarkError(f"--{format} of a profile of several devices is not drawn yet ({', '.join(FORMATS)} "
                           "are); draw one device's with prof.device(ORDINAL).save(...)")


def render_table(profile: DeviceProfile, width: int = 140, **options: Any) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    sections = sections_table(profile)
    # Three columns per device with transfers and waits: as wide as they need (a header of ~16 characters and its
    # borders each), not wrapped into unreadable slivers on a terminal's width.
    names = max((len(printable(format_path(row.path))) for row in profile.sections), default=7)
    needed = names + 4 + 18 * (len(sections.columns) - 1)
    Console(file=buffer, width=max(width, needed), color_system=None, force_terminal=False).print(sections)
    if any(device.transfers is not None or device.waits is not None for device in profile.devices):
        console.print(transfer_note(profile), highlight=False, markup=False)
    times = times_table(profile)
    if times is not None:
        console.print(times)
        console.print(time_note(profile))
    else:
        console.print("each device's time split: not known (the profile has no queue operations of every call)")
    text = buffer.getvalue()
    for device in profile.devices:
        text += f"\n── {device_name(device)} ──\n" + table.render(device.session, width=width if "width" in options
                                                                      else None, **options)
    return text


TRANSFER_NOTE = ("transfer: command-buffer time with no dispatch running around its copy, fill and update commands "
                 "(the copies to and from other devices, not timed one by one) + queue copies; gaps: the rest of the "
                 "command-buffer time with no dispatch running (launches, barriers); waiting: idle while another "
                 "device ran")
UNTIMED_NOTE = ("; untimed: a device whose profile times only its dispatches (Vulkan's device-timed events): the "
                "rest of its window, its copies before its first or after its last dispatch, queue operations, "
                "waiting and idle time, which its events do not tell apart (not guessed: its queue, waiting and idle "
                "are 0)")


def sections_table(profile: DeviceProfile) -> Table:
    """The sections across devices: busy per call on each device, their sum, the devices each ran on (the table's
    and the HTML report's)."""
    calls = max(profile.calls, 1)
    sections = Table(title=f"sections across {len(profile.devices)} devices: {profile.calls} calls",
                     title_justify="left")
    sections.add_column("Section")
    for device in profile.devices:
        sections.add_column(f"Busy/call dev {device.ordinal}", justify="right")
    sections.add_column("Busy/call all", justify="right")
    sections.add_column("Ran on", justify="right")
    kinds = [kind for kind in ("transfer", "waiting")
             if any(getattr(device, TIME_BY_SECTION[kind]) is not None for device in profile.devices)]
    for kind in kinds:
        for device in profile.devices:
            sections.add_column(f"{kind.capitalize()} dev {device.ordinal}", justify="right")
    for row in profile.sections:
        by_kind = [table.format_ns(ns / calls) + (f" {table.SHARED_MARK}" if device.ordinal in getattr(
                       row, f"{kind}_split") else "")
                   for kind in kinds for device, ns in zip(profile.devices, getattr(row, f"{kind}_ns"))]
        sections.add_row(Text(printable(format_path(row.path))), *(table.format_ns(busy / calls) for busy in row.busy_ns),
                         table.format_ns(row.total_busy_ns / calls), ", ".join(map(str, row.ran_on)) or "-", *by_kind)
    return sections


def times_table(profile: DeviceProfile) -> Optional[Table]:
    """Each device's time per call split into `DEVICE_TIME_PARTS`, its window and overlap; None when not known."""
    if not all(device.time is not None for device in profile.devices):
        return None
    calls = max(profile.calls, 1)
    parts = shown_parts(profile)
    times = Table(title=f"each device's time per call ({' + '.join(parts)} = the call's window)", title_justify="left")
    times.add_column("Device")
    for part in (*parts, "window", "overlap"):
        times.add_column(part, justify="right")
    for device in profile.devices:
        time = device.time
        values = (*(getattr(time, f"{part}_ns") for part in parts), time.window_ns, time.overlap_ns)
        times.add_row(device_name(device), *(table.format_ns(value / calls) for value in values))
    return times


def time_note(profile: DeviceProfile) -> str:
    """What the time split's parts hold (under its table, in the table and the HTML report)."""
    return TRANSFER_NOTE + (UNTIMED_NOTE if "untimed" in shown_parts(profile) else "")


def shown_parts(profile: DeviceProfile) -> tuple[str, ...]:
    """The parts of the devices' time split a table shows: ``untimed`` only where a device has untimed time."""
    if any(device.time is not None and device.time.untimed_ns for device in profile.devices):
        return DEVICE_TIME_PARTS
    return tuple(part for part in DEVICE_TIME_PARTS if part != "untimed")


def transfer_note(profile: DeviceProfile) -> str:
    """What the transfer and waiting columns hold, and how a marked one was split."""
    note = ("per call: transfer: each command-buffer execution's time with no dispatch running around its copy "
            "commands, given to the sections of those copies ((unmarked): buffers that only fill or update, and "
            "queue transfers); launch and barrier gaps are no section's")
    if any(device.waits is not None for device in profile.devices):
        note += ("; waiting: the time the device waited for another, given to the section it waited to run "
                 "((unmarked): none after it in the call)")
    split = [device.transfers for device in profile.devices if device.transfers is not None and device.transfers.split]
    if split:
        rule = "by the bytes each copies" if all(transfers.by_bytes for transfers in split) else (
            "equally per copy command (the map gives no copy sizes)")
        note += f"\n{table.SHARED_MARK} transfer: shares an execution's copies with other sections: its time is split {rule}"
    if any(device.waits is not None and device.waits.split for device in profile.devices):
        note += (f"\n{table.SHARED_MARK} waiting: waited to run a fused dispatch of several sections: the wait is split "
                 "by its shares")
    return note


def render_json(profile: DeviceProfile) -> str:
    return json.dumps(devices_document(profile), ensure_ascii=False, indent=1) + "\n"


def devices_document(profile: DeviceProfile) -> dict[str, Any]:
    """The versioned document of a profile of several devices (docs/profile-json.md "Several devices")."""
    return {
        "version": DEVICES_JSON_VERSION,
        "calls": profile.calls,
        "function": profile.function,
        "devices": [{"ordinal": device.ordinal, "device": device.device,
                     "time": None if device.time is None else serialization.to_json(device.time),
                     "profile": profile_document(device.session)} for device in profile.devices],
        "sections": [{"name": format_path(row.path), **serialization.to_json(row),
                      "total_busy_ns": round(row.total_busy_ns)} for row in profile.sections],
    }


def render_csv(profile: DeviceProfile) -> str:
    """A one-device profile's rows per device, with the section's transfer and waiting time on that device (ns
    over the measured calls; empty where not known) in last ``transfer_ns`` and ``waiting_ns`` columns."""
    by_path = {json.dumps(list(row.path), ensure_ascii=False): row for row in profile.sections}

    def cells(device: DeviceSession, index: int, path: str) -> list:
        row = by_path.get(path)
        return [round(getattr(row, f"{kind}_ns")[index]) if row is not None and getattr(row, f"{kind}_ns") else
                (0 if getattr(device, field) is not None else "") for kind, field in TIME_BY_SECTION.items()]

    return csv_text(["device", *csv_out.COLUMNS, "transfer_ns", "waiting_ns"],
                    ([device.ordinal, *row, *cells(device, index, row[1])] for index, device in enumerate(profile.devices)
                     for row in csv_out.csv_rows(device.session)))
