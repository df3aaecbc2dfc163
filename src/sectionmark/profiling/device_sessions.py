"""Each device's session of a run on several devices, made once every device's events are summed.

A device's session is a one-device session of its events (`ProfileSession.from_totals`), and its table lists
every section of the map: those of its own command buffers with their figures, and those that ran on other
devices only, with no time and a note naming where they ran (`sectionmark.profiling.devices`). The per-call
figures of a section (its busy time in each call, their statistics, samples and spans) cost a column of
[calls] values each; a map of N devices' layers has N times the columns any one device runs. So each device's
session is made from the map without the sections that ran on other devices only (whose columns would be 0 in
every call), and their rows are added afterwards, all alike: the row every section gets for a column that is 0
in every call (`absent_row`), in the order the whole map gives them. The figures are those of the session of
the whole map, to the bit: a column's figures are its own (its compositions' weights), never the others'.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.section_time import (CompositionSums, EventTotals, TileSums, Weights, section_paths,
                                                section_rows)
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import SectionStats
from sectionmark.section_map import SectionMap
from sectionmark.section_path import SectionPath

# One device's events, read and summed: (ordinal, IREE device name, the map its events were placed in, their
# attribution and totals: `sectionmark.profiling.read.attributed_totals`).
DeviceRead = tuple[int, Optional[str], SectionMap, Attribution, EventTotals]


def device_sessions(read: list[DeviceRead], function: Optional[str],
                    workers: Optional[int]) -> list[ProfileSession]:
    """Each device's session of ``read`` (in its order): every section of its map, those that ran on other
    devices only as `absent_row`s. A problem is one error line naming its device."""
    ran = [ran_sections(attribution, totals) for _ordinal, _name, _map, attribution, totals in read]
    sessions = []
    for index, (ordinal, name, device_map, attribution, totals) in enumerate(read):
        present = composition_sections(attribution)
        elsewhere = set().union(*ran[:index], *ran[index + 1:]) - present
        own_map = replace(device_map, sections=[path for path in device_map.sections if path not in elsewhere])
        try:
            session = ProfileSession.from_totals(attribution, totals, own_map, function, workers, name,
                                                 without_dispatches=True)
        except SectionmarkError as problem:  # which device's events it is about
            raise SectionmarkError(f"device {ordinal}: {problem}") from None
        if elsewhere:
            session = with_absent_rows(session, section_paths(device_map.sections, attribution.compositions), totals)
        sessions.append(session)
    return sessions


def composition_sections(attribution: Attribution) -> set[SectionPath]:
    """The sections (and their parents) with a share in one of the device's compositions, run or not."""
    return {path[:depth] for parts in attribution.compositions for path, _weight in parts
            for depth in range(1, len(path) + 1)}


def ran_sections(attribution: Attribution, totals: EventTotals) -> set[SectionPath]:
    """The sections (and their parents) with a share in a composition that ran a measured dispatch: those whose
    row counts dispatches (`SectionStats.dispatches`: shares of weight 0 included)."""
    ran = np.flatnonzero(totals.sums.count).tolist()
    return {path[:depth] for composition in ran for path, _weight in attribution.compositions[composition]
            for depth in range(1, len(path) + 1)}


def with_absent_rows(session: ProfileSession, paths: list[SectionPath], totals: EventTotals) -> ProfileSession:
    """``session`` with a row for each of ``paths`` (the whole map's section columns, in report order) it has
    none for (`absent_row`), and its per-call busy time a column of zeros for each: a new session, the one given
    left as it was made."""
    own = {row.path: (column, row) for column, row in enumerate(session.sections[:-1])}
    template = absent_row(session.calls, totals.sums.tiles, session.workers)
    columns = [own[path][0] if path in own else -1 for path in paths]
    sections = [own[path][1] if path in own else
                replace(template, path=path, per_call=replace(template.per_call), shared_with={},
                        samples=list(template.samples)) for path in paths] + [session.sections[-1]]
    per_call = session.per_call_busy
    if per_call is not None:
        widened = np.zeros((len(per_call), len(paths) + 1), per_call.dtype)
        kept = np.flatnonzero(np.array(columns, np.int64) >= 0)
        widened[:, kept] = per_call[:, np.array(columns, np.int64)[kept]]
        widened[:, -1] = per_call[:, -1]
        per_call = widened
    return replace(session, sections=sections, per_call_busy=per_call)


def absent_row(calls: int, tiles: Optional[TileSums], workers: Optional[int]) -> SectionStats:
    """The row `section_rows` makes for a column that is 0 in every one of ``calls`` (a section no composition
    of the device has a share in), made by it: no time, no dispatch, no span, no traffic, its per-call
    statistics and samples of zeros. Its ``path`` is () until replaced."""
    sums = CompositionSums(np.zeros((calls, 0)), np.zeros(0), np.zeros(0, np.int64),
                           None if tiles is None else TileSums(np.zeros(0), np.zeros(0), 0, 0))
    nothing = np.zeros((0, 1))
    return section_rows([], [], Weights(nothing, nothing, nothing.astype(bool)), sums, workers)[0]
