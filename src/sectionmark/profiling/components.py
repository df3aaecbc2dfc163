"""Components: sections with the same name summed across repeated blocks.

A model marked like the LLM visualisation has "Self Attention" inside every
"Block i"; the question "how much time goes to attention?" is the sum over
the blocks. ``components(session)`` groups the session's section rows by
their innermost name (``by="name"``) or gathers every row whose path matches
a pattern such as ``"*/Self Attention"`` (``by=<pattern>``, fnmatch on the
path joined with "/").

Two times per component, both **busy** time (summed dispatch durations, as
in the section table):

* ``busy_ns`` (inclusive): the rows' inclusive time, each dispatch counted
  once: a matching row nested inside another matching row (a "Layer Norm"
  inside a "Layer Norm") is already in its ancestor's time. It equals the sum
  of the per-block rows of the table;
* ``exclusive_ns``: the rows' exclusive time. Every nanosecond of the profile
  is exclusive time of exactly one section or of "(unmarked)", so with
  ``by="name"`` the exclusive shares of all components plus "(unmarked)" add
  up to 100%.

Per-call statistics need the per-event data of a profiled run; a session
read back from JSON has none, and its components say so (``per_call`` None).
The per-call samples a comparison resamples (``samples``) and the traffic
(bytes, FLOPs: ``Traffic``) are the outermost rows' summed, from the rows
themselves, so a session read back from JSON has them too.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.stats import CallStats, SectionStats, Traffic
from sectionmark.section_path import UNMARKED, SectionPath
from sectionmark.serialization import json_field

if TYPE_CHECKING:  # the session offers this view (`ProfileSession.components`): it imports this module
    from sectionmark.profiling.session import ProfileSession

BY_NAME = "name"


@dataclass
class ComponentStats:
    """One component: the sections of one name (or matching one pattern), summed."""

    name: str  # the sections' innermost name, the pattern, or "(unmarked)"
    sections: list[SectionPath]  # the rows summed, in table order
    busy_ns: float = json_field(rounded=True)  # inclusive busy time, each dispatch once
    exclusive_ns: float = json_field(rounded=True)  # the rows' exclusive busy time
    wall_ns: float = json_field(rounded=True)  # inclusive wall time, apportioned like busy time
    share: float  # busy_ns / total busy
    exclusive_share: float  # exclusive_ns / total busy
    dispatches: int  # dispatch events of the outermost rows (each event once)
    calls: Optional[int]  # measured calls in which the component ran; None without per-event data
    per_call: Optional[CallStats] = json_field(rounded=True)  # inclusive busy time per call; None without per-event data
    # the outermost rows' per-call samples summed call by call (`SectionStats.samples`); None when a row has none
    samples: Optional[list[float]] = json_field(rounded=True, default=None)
    traffic: Optional[Traffic] = None  # the outermost rows' traffic summed; None when none of them has any

    @property
    def dispatched(self) -> bool:
        """Whether any measured dispatch carried (part of) one of its sections."""
        return self.dispatches > 0


def components(session: ProfileSession, by: str = BY_NAME) -> list[ComponentStats]:
    """The component view of ``session``: by innermost name (most time first, "(unmarked)" last), or one pattern.

    ``by``: ``"name"``, or a pattern over section paths joined with "/"
    (``"*/Self Attention"``, ``"Block 1?/*"``); a pattern that matches no
    section is an error naming the known sections.
    """
    rows = session.section_rows
    per_call = session.per_call_busy  # None after from_json: no per-call data
    if by == BY_NAME:
        groups: dict[str, list[int]] = {}
        for index, row in enumerate(rows):
            groups.setdefault(row.leaf, []).append(index)
        found = [_component(session, name, members, per_call) for name, members in groups.items()]
        found.sort(key=lambda component: -component.exclusive_ns)
        return found + [_component(session, UNMARKED, [len(session.sections) - 1], per_call)]
    members = [index for index, row in enumerate(rows) if fnmatch.fnmatchcase("/".join(row.path), by)]
    if not members:
        known = ", ".join("/".join(row.path) for row in rows[:12]) + (", …" if len(rows) > 12 else "")
        raise SectionmarkError(f"no section matches {by!r} (sections: {known}); patterns match paths like 'Block 0/MLP'")
    return [_component(session, by, members, per_call)]


def _component(
    session: ProfileSession, name: str, members: list[int], per_call_matrix: Optional[np.ndarray]
) -> ComponentStats:
    rows: list[SectionStats] = session.sections
    outer = set(outermost([rows[index].path for index in members]))
    outermost_rows = [index for index in members if rows[index].path in outer]
    total = float(session.total_ns)
    busy = sum(rows[index].busy_ns for index in outermost_rows)
    exclusive = sum(rows[index].exclusive_ns for index in members)
    per_call = None if per_call_matrix is None else per_call_matrix[:, outermost_rows].sum(axis=1)
    return ComponentStats(
        name=name,
        sections=[rows[index].path for index in members],
        busy_ns=busy,
        exclusive_ns=exclusive,
        wall_ns=sum(rows[index].wall_ns for index in outermost_rows),
        share=busy / total if total else 0.0,
        exclusive_share=exclusive / total if total else 0.0,
        dispatches=sum(rows[index].dispatches for index in outermost_rows),
        calls=None if per_call is None else int((per_call > 0).sum()),
        per_call=None if per_call is None else CallStats.of(per_call),
        samples=_summed_samples([rows[index].samples for index in outermost_rows]),
        traffic=Traffic.total(rows[index].traffic for index in outermost_rows),
    )


def _summed_samples(samples: list[Optional[list[float]]]) -> Optional[list[float]]:
    """Call by call: every row of a session keeps the samples of the same calls (`session.call_samples`)."""
    if any(row is None for row in samples):
        return None
    return np.sum(np.asarray(samples, float), axis=0).tolist()


def outermost(paths: list[SectionPath]) -> list[SectionPath]:
    """The paths not nested in another of ``paths`` (in their order): their inclusive times add up without counting
    a dispatch twice (a component's time, and its run values in `sectionmark.profiling.compare`)."""
    return [path for path in paths
            if not any(len(other) < len(path) and path[: len(other)] == other for other in paths)]
