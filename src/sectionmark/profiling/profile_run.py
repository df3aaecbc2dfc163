"""ProfileRun: a profiled run's session and the profile file its events come from, for the views that draw them.

The session (`ProfileSession`) is data: figures summed a window at a time,
no events. Timelines, Perfetto and Tracy traces and the HTML report's call
need every event of the run; a `ProfileRun` reads them from its profile file
when such a view asks (checking the file has not changed since the figures
were read) and keeps them for the next view. `sectionmark.profile` returns a
run owning a scratch copy of the profile, removed by `close` (or at the end
of its ``with`` block; at the latest when the process exits); `sectionmark.report`
returns one reading the user's own file, which it never removes. Everything
of the session is reachable on the run: ``prof.table()``, ``prof.sections``.
"""

from __future__ import annotations

import atexit
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar, Union

from sectionmark.errors import SectionmarkError
from sectionmark.profiling import display
from sectionmark.profiling.attribute import Attribution, attribute
from sectionmark.profiling.session import ProfileOutputs, ProfileSession
from sectionmark.readers.sources import read_events
from sectionmark.section_map import SectionMap


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
