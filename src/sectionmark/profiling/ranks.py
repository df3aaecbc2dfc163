"""Several processes' profiles of one module reported together: per section, its spread across the ranks.

A data-parallel launcher runs the same module in several processes (ranks),
each recording its own profile. Each rank's file is read into its own
`ProfileSession` where the file is (`sectionmark.workflows.ranks`: one process
per file); what comes back is that session, the small per-section summary, and
`merge_ranks` here joins them: for every section row, its busy time per call on
each rank, their minimum, median and maximum, and the slowest rank (the
straggler). Pure: the same sessions always give the same report, and each
rank's figures are exactly its own session's (nothing re-measured, nothing
averaged into them).

The figure compared is a row's inclusive busy time per measured call
(``busy_ns / calls``, the section table's "Busy/call"): per call, so ranks that
made different numbers of calls compare. The median of an even number of ranks
is the mean of the middle two (numpy's). A section that ran no dispatch on any
rank (a declared section with a note) names no slowest rank; ties name the
first rank in the order given.

Ranks of a module run on several devices (each rank one process driving them
all, each file a profile of several devices: `DeviceProfile`) are merged
device by device (`merge_profiles`): device i's sections across the ranks
are each rank's device-i session, merged as one-device ranks are. Every rank
must have recorded the same devices; a rank of one device among ranks of
several (or of other devices) is one error line naming its file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.profiling.devices import DeviceProfile
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_path import SectionPath, format_path

RANKS_JSON_VERSION = 1
RANKS_DEVICES_JSON_VERSION = 1  # kind "ranks-devices": ranks of a run on several devices (docs/profile-json.md)


@dataclass
class RankProfile:
    """One rank: the file it recorded (as given) and that file's own session."""

    file: str
    session: ProfileSession

    @property
    def name(self) -> str:
        """The file's name without its folder, for the table (``rank2.ireeprof``)."""
        return Path(self.file).name


@dataclass
class SectionAcrossRanks:
    """One section row across the ranks: its busy ns per call on each rank (None: the rank has no such row)."""

    path: SectionPath
    per_rank_ns: list[Optional[float]]
    min_ns: float
    median_ns: float
    max_ns: float
    slowest_rank: Optional[int]  # index into the report's ranks; None where it ran on no rank
    ranks: int  # ranks that have the row

    @property
    def name(self) -> str:
        return format_path(self.path)

    @property
    def slowest_over_median(self) -> Optional[float]:
        """How far the straggler is from the typical rank (max / median); None where the median is 0."""
        return self.max_ns / self.median_ns if self.slowest_rank is not None and self.median_ns else None


class _RankOutputs:
    """The outputs of a report of ranks (its ``ranks``: each with its ``file``), by name like a profile's:
    ``render("table" | "json" | "csv")``, ``save(path)``."""

    ranks: Sequence[Any]

    @property
    def rank_files(self) -> list[str]:
        return [rank.file for rank in self.ranks]

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """This report in an output format by name: the formats with a ranks form (``table``, ``json``, ``csv``)."""
        from sectionmark import renderers

        return renderers.get(format).render_ranks(self, **options)

    def save(self, path: PathLike, format: Optional[str] = None, *, inputs: Iterable[PathLike] = (),
             **options: Any) -> Path:
        """Write this report to ``path`` in ``format`` (default: from the suffix), all at once, never onto one of
        ``inputs``."""
        from sectionmark import renderers

        return renderers.save(self, path, format, inputs=inputs, **options)

    def table(self) -> str:
        return self.render("table")


@dataclass
class RankReport(_RankOutputs):
    """Several ranks' profiles of one module and, per section, their spread (`merge_ranks`). Outputs by name like
    a profile's: ``render("table" | "json" | "csv")``, ``save(path)``."""

    ranks: list[RankProfile]
    sections: list[SectionAcrossRanks]  # the first rank's row order, then rows only later ranks have
    total: SectionAcrossRanks  # every dispatch's busy time per call (path ``()`` is not a row: the total)

    def section(self, path: SectionPath) -> SectionAcrossRanks:
        for row in self.sections:
            if row.path == tuple(path):
                return row
        raise KeyError(path)

    def to_json(self) -> dict[str, Any]:
        """The versioned ranks document without each rank's profile (`sectionmark.renderers.ranks` adds them)."""
        return {
            "version": RANKS_JSON_VERSION,
            "kind": "ranks",
            "ranks": _ranks_json(self.ranks),
            **self.spread_json(),
        }

    def spread_json(self) -> dict[str, Any]:
        """The sections' spread across the ranks: ``total`` and ``sections`` of the ranks document."""
        return {"total": {key: value for key, value in _row_json(self.total).items() if key not in ("path", "name")},
                "sections": [_row_json(row) for row in self.sections]}


@dataclass
class RankOfDevices:
    """One rank of a run on several devices: the file it recorded (as given) and that file's own profile."""

    file: str
    profile: DeviceProfile


@dataclass
class DeviceAcrossRanks:
    """One device across the ranks: its ordinal, its IREE device (the first rank's that names it; None: not known)
    and its sections' spread, each rank's session of that device being that rank's (`merge_ranks`)."""

    ordinal: int
    device: Optional[str]
    report: RankReport


@dataclass
class DeviceRankReport(_RankOutputs):
    """Several ranks' profiles of a module run on several devices: each device's `RankReport` across the ranks
    (`merge_profiles`). Outputs as a `RankReport`'s: ``render("table" | "json" | "csv")``, ``save(path)``."""

    ranks: list[RankOfDevices]
    devices: list[DeviceAcrossRanks]  # in ordinal order

    def device(self, ordinal: int) -> RankReport:
        """Device ``ordinal``'s sections across the ranks; ``.ranks[i].session`` is rank i's session of it."""
        for device in self.devices:
            if device.ordinal == ordinal:
                return device.report
        known = ", ".join(str(device.ordinal) for device in self.devices)
        raise SectionmarkError(f"the ranks have no device {ordinal} (they have: {known})")

    def to_json(self) -> dict[str, Any]:
        """The versioned document (kind ``"ranks-devices"``) without each rank's profile (`sectionmark.renderers.ranks`
        adds them): per device, its ordinal, device and sections' spread across the ranks."""
        return {
            "version": RANKS_DEVICES_JSON_VERSION,
            "kind": "ranks-devices",
            "ranks": _ranks_json(self.ranks),
            "devices": [{"ordinal": device.ordinal, "device": device.device, **device.report.spread_json()}
                        for device in self.devices],
        }


def _ranks_json(ranks: Sequence[Union[RankProfile, RankOfDevices]]) -> list[dict[str, Any]]:
    return [{"rank": index, "file": rank.file} for index, rank in enumerate(ranks)]


def _row_json(row: SectionAcrossRanks) -> dict[str, Any]:
    rounded = [None if ns is None else round(ns) for ns in row.per_rank_ns]
    return {"path": list(row.path), "name": row.name, "ranks": row.ranks, "per_rank_ns": rounded,
            "min_ns": round(row.min_ns), "median_ns": round(row.median_ns), "max_ns": round(row.max_ns),
            "slowest_rank": row.slowest_rank, "slowest_over_median": row.slowest_over_median}


def merge_profiles(files: Sequence[str],
                   profiles: Sequence[Union[ProfileSession, DeviceProfile]]) -> Union[RankReport, DeviceRankReport]:
    """Each rank's profile (``profiles``, read from ``files``, in rank order) merged: ranks of one device by
    `merge_ranks`, of several by `_merge_devices`. Every rank must have recorded the same devices: one error
    line naming the first file that did not."""
    devices = [_ordinals(profile) for profile in profiles]
    for file, found in zip(files[1:], devices[1:]):
        if found != devices[0]:
            raise SectionmarkError(f"{file}: a profile of {_devices_text(found)}, and rank 0's ({files[0]}) of "
                                   f"{_devices_text(devices[0])}: the ranks of one module record the same devices")
    if all(isinstance(profile, DeviceProfile) for profile in profiles):
        return _merge_devices([RankOfDevices(file, profile) for file, profile in zip(files, profiles)])
    return merge_ranks([RankProfile(file, profile) for file, profile in zip(files, profiles)])


def _ordinals(profile: Union[ProfileSession, DeviceProfile]) -> list[int]:
    return [device.ordinal for device in profile.devices] if isinstance(profile, DeviceProfile) else [0]


def _devices_text(ordinals: list[int]) -> str:
    return "1 device" if len(ordinals) == 1 else f"{len(ordinals)} devices ({', '.join(map(str, ordinals))})"


def _merge_devices(ranks: Sequence[RankOfDevices]) -> DeviceRankReport:
    """Device by device, the ranks' sessions of that device merged (`merge_ranks`): each rank's per-device rows are
    its own profile's. The ranks have the same devices (`merge_profiles` checked it)."""
    first = ranks[0].profile.devices
    devices = []
    for index, device in enumerate(first):
        named = next((rank.profile.devices[index].device for rank in ranks if rank.profile.devices[index].device),
                     None)
        sessions = [RankProfile(rank.file, rank.profile.devices[index].session) for rank in ranks]
        devices.append(DeviceAcrossRanks(device.ordinal, named, merge_ranks(sessions)))
    return DeviceRankReport(list(ranks), devices)


def merge_ranks(ranks: Sequence[RankProfile]) -> RankReport:
    """Per section row, the ranks' busy time per call, its min / median / max and the slowest rank."""
    if not ranks:
        raise SectionmarkError("no rank profiles to report")
    per_rank: list[dict[SectionPath, float]] = [
        {row.path: row.busy_ns / max(rank.session.calls, 1) for row in rank.session.sections} for rank in ranks]
    paths: dict[SectionPath, None] = {}
    for rank in ranks:
        paths.update(dict.fromkeys(row.path for row in rank.session.sections))
    sections = [_across(path, [figures.get(path) for figures in per_rank]) for path in paths]
    totals = [rank.session.total_ns / max(rank.session.calls, 1) for rank in ranks]
    return RankReport(list(ranks), sections, _across((), totals))


def _across(path: SectionPath, per_rank_ns: list[Optional[float]]) -> SectionAcrossRanks:
    present = np.array([ns for ns in per_rank_ns if ns is not None], dtype=np.float64)
    slowest = None
    if present.size and present.max() > 0:
        slowest = next(index for index, ns in enumerate(per_rank_ns) if ns is not None and ns == present.max())
    return SectionAcrossRanks(path, list(per_rank_ns), float(present.min()), float(np.median(present)),
                              float(present.max()), slowest, int(present.size))
