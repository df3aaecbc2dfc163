"""From a profile file to its session, a window at a time (the one path from any profile file to a session), and
the run that keeps the file.

The reader (`sectionmark.readers.sources`) gives the profile's layout first
(its submissions and queue operations), so the calls are numbered before any
dispatch is read: each window's dispatches are placed in the map's slots and
given their call (`placed_events`), the warmup calls' are dropped, and the
rest are folded into the running totals (`section_time.EventFold`: each sum
grows in event order as one pass over all events would add them). Wall time
is a sweep over the events' intervals; it is carried across windows: the
events of the union blocks that end before any later submission's execution
can start are final and swept, the others wait for the next window (with
pipelined calls, one submission's dispatches may overlap the next one's).
Only sums stay: what is kept grows with the calls and the map, not with the
events. A whole read (a capture, JSONL, a device-timed profile, a replay's
in-memory profile) is one window and takes the same path.

`ProfileRun` is what `sectionmark.profile` and `sectionmark.report` return:
the session (the figures) and the profile file its events come from.
Timelines, Perfetto and Tracy traces and the HTML report's call need every
event of the run: the run reads them from its file when such a view asks
(checking the file has not changed since the figures were read) and keeps
them for the next view. `sectionmark.profile` returns a run owning a scratch
copy of the profile, removed by `close` (or at the end of its ``with``
block; at the latest when the process exits); `sectionmark.report` returns
one reading the user's own file, which it never removes. Everything of the
session is reachable on the run: ``prof.table()``, ``prof.sections``.
"""

from __future__ import annotations

import atexit
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling import display
from sectionmark.profiling.attribute import (Attribution, SlotMatcher, attribute, attribution_without_events,
                                             call_numbers, check_fingerprint, measured_rows, placed_events)
from sectionmark.profiling.queue_time import SubmissionFrontier, measured_windows
from sectionmark.profiling.section_time import EventFold, EventTotals
from sectionmark.profiling.session import ProfileOutputs, ProfileSession
from sectionmark.readers.event_model import Profile
from sectionmark.readers.sources import EventSource, WholeProfile, read_events
from sectionmark.section_map import SectionMap


def read_session(source: EventSource, section_map: SectionMap, *, calls: Optional[int] = None, warmup: int = 0,
                 function: Optional[str] = None, workers: Optional[int] = None,
                 device: Optional[str] = None) -> ProfileSession:
    """The session of ``source``'s events joined with ``section_map`` (`sectionmark.report` documents the
    arguments); the reader's error line for a file it refuses, attribution's for events the map cannot place."""
    try:
        attribution, totals = attributed_totals(source, section_map, calls=calls, warmup=warmup, function=function)
    except SectionmarkError as problem:
        raise source.explain(problem) from None
    return ProfileSession.from_totals(attribution, totals, section_map, function, workers, device)


def profile_session(profile: Profile, section_map: SectionMap, **options) -> ProfileSession:
    """The session of a profile held in memory (one window)."""
    return read_session(WholeProfile(profile), section_map, **options)


def attributed_totals(source: EventSource, section_map: SectionMap, *, calls: Optional[int], warmup: int,
                      function: Optional[str]) -> tuple[Attribution, EventTotals]:
    """Everything the session needs of ``source``: the attribution without its events, and their sums."""
    layout = source.layout()
    check_fingerprint(layout, section_map)
    matcher = SlotMatcher(section_map, function, layout.keys)
    call_of_submission, measured_calls, exact = call_numbers(layout, calls, warmup)
    attribution = attribution_without_events(layout, matcher, call_of_submission, measured_calls, exact, warmup)
    fold = EventFold(attribution, measured_windows(attribution.queue_spans, measured_calls))
    submission_ids = np.ascontiguousarray(layout.submissions["submission"])  # once, not per window
    frontiers = SubmissionFrontier(layout.submissions)
    for dispatches, executed in source.windows():
        frontier = frontiers.after(executed)
        if not len(dispatches):
            fold.add(dispatches, np.zeros(0, np.int32), np.zeros(0, np.int32), frontier)
            continue
        slots, event_calls, failures = placed_events(dispatches, matcher, source.command_buffers, layout.keys,
                                                     submission_ids, call_of_submission)
        measured = measured_rows(event_calls, failures)
        fold.add(dispatches[measured], slots[measured], event_calls[measured], frontier)
    totals = fold.finish()
    full = source.profile()
    attribution.memory, attribution.allocations = full.memory, full.allocations
    return attribution, totals


@dataclass(frozen=True)
class ReadArguments:
    """How a profile file was read into its session: the calls it holds (None: inferred), the warmup calls
    dropped, the map function preferred (`sectionmark.report`'s arguments)."""

    calls: Optional[int] = None
    warmup: int = 0
    function: Optional[str] = None


class KeptProfile:
    """What a run whose views read their events from its profile file does with the file (`ProfileRun`; the
    several-device `sectionmark.profiling.device_run.DeviceRun`): it checks the file has not changed before
    reading the events, and removes the scratch copy it owns on `close`. The class using it defines the fields
    ``profile_path``, ``scratch``, ``_identity`` and ``_events``."""

    profile_path: Path
    scratch: Optional[Path]
    _identity: Optional[tuple[int, int, int]]
    _events: Any

    def _keep_profile(self) -> None:
        self._identity = file_identity(self.profile_path)
        if self.scratch is not None:
            atexit.register(self.close)  # a run never closed still leaves nothing behind

    def __enter__(self: _Run) -> _Run:
        return self

    def __exit__(self, *_exception: object) -> None:
        self.close()

    def close(self) -> None:
        """Let the events go and remove the scratch copy of the profile this run owns (none for a user's file)."""
        self._events = None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            atexit.unregister(self.close)
            self.scratch = None

    def _check_unchanged(self) -> None:
        """One error line when the profile file changed or went away since the figures were read from it."""
        try:
            unchanged = file_identity(self.profile_path) == self._identity
        except OSError:
            unchanged = False
        if not unchanged:
            raise SectionmarkError(f"{self.profile_path}: the profile changed or went away since it was read "
                                   "(or its run was closed); read it again to draw its events")


_Run = TypeVar("_Run", bound=KeptProfile)


@dataclass(eq=False)
class ProfileRun(ProfileOutputs, KeptProfile):
    """A run's ``session`` and where its events are: ``profile_path`` read with ``section_map`` the way the
    figures were (``read_as``)."""

    session: ProfileSession
    profile_path: Path
    section_map: SectionMap
    read_as: ReadArguments = ReadArguments()
    scratch: Optional[Path] = None  # a folder this run owns (its profile's scratch copy): removed by `close`
    _identity: Optional[tuple[int, int, int]] = field(default=None, repr=False)
    _events: Optional[Attribution] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._keep_profile()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "session":  # copy/pickle probe before the fields are set
            raise AttributeError(name)
        return getattr(self.session, name)

    def events(self) -> Attribution:
        """Every measured event of the run, attributed as the figures were: read from the profile file (whole)
        on the first view that draws them, then kept."""
        if self._events is None:
            self._check_unchanged()
            read_as = self.read_as
            self._events = attribute(read_events(self.profile_path, self.section_map, read_as.function),
                                     self.section_map, calls=read_as.calls, warmup=read_as.warmup,
                                     function=read_as.function)
        return self._events

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """This run in an output format by name (`ProfileSession.render`); the views that draw events get the
        run's."""
        from sectionmark import renderers

        if renderers.get(format).events and "events" not in options:
            options["events"] = self.events()
        return self.session.render(format, **options)

    def to_json(self) -> dict[str, Any]:
        return self.session.to_json()

    # ------------------------------------------------------------------ notebooks (repr: one line; inline: the report)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html


def file_identity(path: Path) -> tuple[int, int, int]:
    """What tells a file changed or was replaced since it was read: inode, size, modification time."""
    status = os.stat(path)
    return status.st_ino, status.st_size, status.st_mtime_ns
