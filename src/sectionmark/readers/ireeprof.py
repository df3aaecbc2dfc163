"""Read an IREE HAL profile into compact numpy arrays, refusing anything inconsistent.

``read_profile`` picks one of two readers by the file's first bytes; both
produce the same :class:`~sectionmark.readers.event_model.Profile`:

* the bundle reader (``ireeprof_bundle``) decodes the ``.ireeprof`` file itself (its container,
  chunks and record layouts: ``bundle_records``; their decode: ``bundle_events``). Events are fixed
  size records, gathered from the mapped file with whole-array numpy
  operations, and every check below is one over the whole table (a million
  dispatches in a fraction of a second); the record walk and the split of the
  host events into tables run in C (``_ireeprof.c``) when the extension is
  built, with the same results in numpy when not. It only accepts the bundle layout it was checked
  against (bundle 1.x with 152-byte host execution events and 120-byte command
  operations, as written by IREE 3.13) and says so when a record looks different;
* the JSONL reader (``ireeprof_jsonl``) streams ``iree-profile export --format=ireeperf-jsonl``
  (schema-versioned, slower). ``read_profile`` falls back to it when the bundle
  reader does not recognise a layout, and it reads exported ``.jsonl`` files.

What we keep (see docs/profile-json.md for how it is used):

* ``dispatches``: one row per timed dispatch (host execution event of type
  dispatch; on a GPU such as Vulkan a device-timed dispatch event, its ticks
  mapped onto the host clock by `sectionmark.readers.device_events`): submission, command buffer id, command index, key (index into
  ``keys``), device/queue, start/end ns on IREE's host clock, and the summed
  per-workgroup time (``tile_ns``: CPU time across worker threads) and the
  number of tiles (``tile_count``); both 0 where the driver records no tiles
  (Vulkan, Tracy captures);
* ``submissions``: one row per executed command buffer (host execution event of
  type execute; on a GPU the queue's execute event, spanning its dispatches), in submission order: the unit we group into calls;
* ``command_buffers``: for every runtime command buffer id, its recorded
  commands ``(command_index, op, key)`` — the sequence matched against the
  section map;
* ``exports``: the executable functions of the loaded module(s), which the
  section map's module fingerprint is checked against.
* ``queue_ops``: the queue operations outside command buffers (host
  execution events of type alloca, dealloca, fill, copy, update, read, write,
  barrier, host call): the time of a call beside its dispatches;
* ``memory``: memory events (``memory-events`` family): pool reservations and
  queue allocations with the pool's live bytes after each, for device memory.

A profile has no checksum, so a wrong number is caught only when it makes the
profile inconsistent. Both readers check the same things (``checks``), and anything else is
one error line naming the problem (docs/limitations.md lists what cannot be
detected):

* structure: known record, chunk and event types (chunks that carry no CPU
  dispatch timing are skipped by name, ``IGNORED_CHUNKS``), no truncated chunk,
  no dropped records, the session ended OK and every event has status OK;
* identity: no event recorded twice (a duplicated execution would be a phantom
  call; memory events included), no command or executable function recorded twice with different
  contents;
* time: timestamps in [0, 2^62), no event ending before it starts or lasting
  more than an hour, a session shorter than 30 days, every dispatch inside the
  execution of its command buffer;
* links: every dispatch belongs to an execution of the command buffer it names,
  every executed command buffer is recorded, and every execution has exactly
  one event for each of its dispatches that runs workgroups (a static count
  above zero; dispatches with zero workgroups leave no event).
"""

from __future__ import annotations

import os
from pathlib import Path

from sectionmark.artifacts.files import open_regular
from sectionmark.errors import SectionmarkError
from sectionmark.readers.bundle_records import BUNDLE_MAGIC, UnsupportedLayout
from sectionmark.readers.checks import corrupt
from sectionmark.readers.event_model import Profile
from sectionmark.readers.ireeprof_bundle import read_bundle
from sectionmark.readers.ireeprof_jsonl import export_jsonl, jsonl_lines, read_jsonl_lines


def read_profile(path: str | Path, reader: str = "auto") -> Profile:
    """Read a ``.ireeprof`` bundle or an exported ``ireeperf-jsonl`` file.

    ``reader``: "auto" (bundle reader, falling back to ``iree-profile export``
    for layouts it does not know), "bundle" or "jsonl" (always go through
    ``iree-profile export``; for tests and benchmarks). The file type is
    decided by its first bytes, before anything else is read.
    """
    path = Path(path)
    with open_regular(path, "profile") as file:
        head = file.read(4)
        if head == BUNDLE_MAGIC:
            if reader == "jsonl":
                return export_jsonl(path)
            try:
                return read_bundle(path, file, os.fstat(file.fileno()).st_size)
            except UnsupportedLayout as why:
                if reader == "bundle":
                    raise SectionmarkError(f"{path}: unsupported profile layout ({why})") from None
                return export_jsonl(path)
        if head[:1] == b"{":
            file.seek(0)
            return read_jsonl_lines(path, jsonl_lines(path, file))
    if not head:
        raise SectionmarkError(f"{path}: the profile file is empty")
    raise corrupt(path, "neither an .ireeprof bundle nor ireeperf-jsonl")
