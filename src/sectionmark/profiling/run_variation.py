"""How much one run's figures move between runs on this machine, measured by an earlier ``--runs K`` profile.

A profile of one run cannot say how much its figures would move if the tool ran again: that takes several
runs (`sectionmark.profiling.runs`), and profiling every time K-fold is too slow for a default. So every
profile of K >= 2 runs leaves what it measured in the user's cache, per host, device and worker count: the
coefficient of variation (CV) across its runs of the total busy time per call, the median and the worst of
the sections' CVs, K, the module and when. A profile of one run on the same host, device and workers then
says, under its table, how much such figures moved there (`RunVariation`, the session's
``run_variation``), naming the profile that measured it; with none cached it says that the variation was not
measured, and how to measure it. Measured, never assumed: nothing is shown that no run on this machine
measured.

The cache (``$XDG_CACHE_HOME`` or ``~/.cache``, ``sectionmark/run-variation-HOST.json``) is an input like any
other: read bounded and without blocking, checked as strictly as the profile JSON; one that cannot be read or
does not check is ignored (and replaced by the next ``--runs`` profile); a cache that cannot be written costs
the profile nothing.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from sectionmark import serialization
from sectionmark.artifacts.files import read_regular
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import write_atomic

if TYPE_CHECKING:
    from sectionmark.profiling.session import ProfileSession

CACHE_VERSION = 1
_CACHE_LIMIT = 1 << 20  # bytes: a few entries per device and worker count, far under this


@dataclass
class RunVariation:
    """What an earlier profile of several runs measured on this machine: coefficients of variation (sample
    standard deviation / mean) across its runs, of the total busy time per call and of each section's."""

    runs: int  # K, the runs it had
    total_cv: float
    median_section_cv: float
    worst_section_cv: float
    device: str
    workers: Optional[int]  # local-task's workers; None: another device
    module: Optional[str]  # the module's file name; None: compiled in that process
    measured_at: str  # UTC, ISO 8601 to the second

    @classmethod
    def of(cls, session: "ProfileSession") -> Optional["RunVariation"]:
        """The variation a profile of several runs measured; None for one run (or an unknown device)."""
        if session.total_runs is None or session.device is None:
            return None
        section_cvs = [row.runs.coefficient_of_variation for row in session.sections
                       if row.runs is not None and row.path and row.busy_ns > 0]
        if not section_cvs:
            return None
        return cls(runs=session.runs, total_cv=session.total_runs.coefficient_of_variation,
                   median_section_cv=float(np.median(section_cvs)), worst_section_cv=float(max(section_cvs)),
                   device=session.device, workers=session.workers, module=session.module,
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @property
    def key(self) -> str:
        return _key(self.device, self.workers)


def _key(device: str, workers: Optional[int]) -> str:
    return f"{device} workers={workers}" if workers is not None else device


def cache_path() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"run-variation-{socket.gethostname()}")
    return root / "sectionmark" / f"{name}.json"


def _read_cache() -> dict[str, RunVariation]:
    """The cached variations by device and workers; {} when there is no cache or it does not check."""
    try:
        data = json.loads(read_regular(cache_path(), "run-variation cache", _CACHE_LIMIT))
        serialization.check_version(data, CACHE_VERSION, "run-variation cache", "it is measured again")
        entries = data.get("entries")
        if not isinstance(entries, list):
            return {}
        found = {}
        for index, entry in enumerate(entries):
            variation = serialization.from_json(RunVariation, entry, f"entries[{index}]")
            if variation.runs >= 2 and all(value >= 0 for value in (variation.total_cv, variation.median_section_cv,
                                                                     variation.worst_section_cv)):
                found[variation.key] = variation
        return found
    except (SectionmarkError, ValueError, RecursionError, OSError):
        return {}


def remember(session: "ProfileSession") -> None:
    """Store what a profile of several runs measured (replacing the entry of its device and workers). A cache
    that cannot be written is left as it is: the profile does not depend on it."""
    variation = RunVariation.of(session)
    if variation is None:
        return
    entries = _read_cache()
    entries[variation.key] = variation
    document = {"version": CACHE_VERSION, "entries": [serialization.to_json(entry) for entry in entries.values()]}
    try:
        cache_path().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache_path(), json.dumps(document, indent=1) + "\n")
    except (SectionmarkError, OSError):
        pass


def recall(session: "ProfileSession") -> Optional[RunVariation]:
    """What an earlier profile of several runs measured on this host for the device and workers of ``session``
    (a profile of one run); None when none did."""
    if session.device is None or session.total_runs is not None:
        return None
    return _read_cache().get(_key(session.device, session.workers))


def note_run_variation(session: "ProfileSession") -> None:
    """After a profile: store its variation (several runs), or attach the one measured earlier (one run)."""
    if session.total_runs is not None:
        remember(session)
    else:
        session.run_variation = recall(session)
