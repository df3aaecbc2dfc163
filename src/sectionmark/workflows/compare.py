"""`sm.compare` and ``sectionmark compare``'s inputs: two modules run alternately, or two profiles loaded.

Two modules (compiled programs or .vmfb paths) run in interleaved rounds
(`sectionmark.workflows.interleave`); two profiles are sessions, profile JSON
files or a recording's replay JSON, read through the bounded, non-blocking
reader (`sectionmark.artifacts.files.read_json`) and checked as any input. The
verdicts are `sectionmark.profiling.compare`'s; the tables, CSV and JSON are
`sectionmark.renderers.compare`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union, overload

from sectionmark.artifacts.files import read_json
from sectionmark.errors import SectionmarkError, wrong_type
from sectionmark.profiling.compare import CONFIDENCE, RESAMPLES, SEED, Comparison, checked_times, compare_sessions
from sectionmark.profiling.device_compare import DeviceComparison, compare_devices
from sectionmark.profiling.devices import DeviceProfile, DeviceSession, device_sections
from sectionmark.profiling.read import ProfileRun
from sectionmark.profiling.section_time import MAX_SAMPLES, call_samples
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_path import format_path
from sectionmark.workflows.replay import ReplayProfile

if TYPE_CHECKING:
    from sectionmark.compiler.pipeline import CompiledProgram

Profiled = Union[ProfileSession, ProfileRun, DeviceProfile, str, "os.PathLike[str]"]


@overload
def compare(a: Profiled, b: Profiled, *, function: Optional[str] = ..., resamples: int = ..., confidence: float = ...,
            seed: int = ..., min_change: Optional[float] = ...) -> Union[Comparison, DeviceComparison]: ...
@overload
def compare(a: "CompiledProgram", b: "CompiledProgram", args: Sequence[Any] = ..., *, function: Optional[str] = ...,
            resamples: int = ..., confidence: float = ..., seed: int = ..., min_change: Optional[float] = ...,
            **run_options: Any) -> Comparison: ...


def compare(a: Union[ProfileSession, Any, str, Path], b: Union[ProfileSession, Any, str, Path],
            args: Sequence[Any] = (), *, function: Optional[str] = None, resamples: int = RESAMPLES,
            confidence: float = CONFIDENCE, seed: int = SEED, min_change: Optional[float] = None,
            **run_options: Any) -> Union[Comparison, DeviceComparison]:
    """Compare ``b`` against ``a``, per section and per component (by name): busy time per call in A and B, the
    ratio B/A, its interval, and "faster"/"slower" only when the interval lies beyond ``min_change`` percent
    (None: 10 over rounds, 25 over runs; `sectionmark.profiling.compare`).

    Two modules (compiled programs, or .vmfb paths): both run alternately on
    ``args``, in rounds (`sectionmark.workflows.interleave.compare_modules`,
    whose options ``run_options`` are: ``rounds``, ``iterations``,
    ``warmup``, ``workers``, ``device``, ``parameters``, ``timeout``,
    ``quiet``); ``function`` defaults to "main". Two profiles: sessions,
    profile JSON files (``prof.save("run.json")``, ``--json``), or a
    recording's replay JSON (``sectionmark profile RECORDING --json F``:
    ``function``'s profile, `load_profile`); the interval is then over their
    runs (``--runs``) when both have several, else over the calls of one run,
    whose verdict only goes beyond the drift between runs. Two profiles of
    several devices (runs, or their JSON) give a `DeviceComparison`: device
    by device.
    """
    from sectionmark.workflows.interleave import compare_modules, is_module

    labels = [str(x) if isinstance(x, (str, Path)) else name for x, name in ((a, "A"), (b, "B"))]
    options = dict(resamples=resamples, confidence=confidence, seed=seed, min_change=min_change)
    modules = [is_module(source) for source in (a, b)]
    if any(modules):
        if not all(modules):
            raise SectionmarkError(f"{labels[modules.index(False)]} is a profile and {labels[modules.index(True)]} a "
                                   "module: compare two modules (run alternately) or two profiles")
        return compare_modules(a, b, args, function=function or "main", labels=labels, **options, **run_options)
    if args or run_options:
        given = ["args" if args else "", *run_options]
        raise SectionmarkError(f"{', '.join(name for name in given if name)}: only for two modules (compiled programs "
                               "or .vmfb paths), not profiles")
    first, second = load_profile(a, function), load_profile(b, function)
    several = [isinstance(profile, DeviceProfile) for profile in (first, second)]
    if any(several):
        if not all(several):
            raise SectionmarkError(f"{labels[several.index(True)]} is a profile of several devices and "
                                   f"{labels[several.index(False)]} of one: compare one device's "
                                   "(prof.device(ORDINAL))")
        return compare_devices(first, second, labels=labels, **options)
    return compare_sessions(first, second, labels=labels, **options)


def load_profile(source: Profiled, function: Optional[str] = None) -> Union[ProfileSession, DeviceProfile]:
    """A session as is, a profile JSON file read back, or one function's profile from a recording's replay JSON
    (``function``, or the one function of the replay that ran dispatches); an error names the file. A profile of
    several devices (a `DeviceProfile`, or its JSON) is one too: device by device (`compare_devices`).

    ``function`` given for a profile JSON of another function is an error too: the comparison would not be
    of what was asked for.
    """
    if isinstance(source, ProfileRun):
        return source.session
    if isinstance(source, DeviceProfile):
        return source
    if isinstance(source, ProfileSession):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise wrong_type("sm.compare", source, "profiles (ProfileSession, ProfileRun), profile JSON files (a path) "
                         "or modules (CompiledProgram, a .vmfb path)")
    try:
        data = read_json(source, "profile JSON")
        if isinstance(data, dict) and data.get("kind") == "replay-devices":  # its "devices" are names, not profiles
            raise SectionmarkError("a replay on several devices (\"kind\": \"replay-devices\": every function's "
                                   "profile); compare one function's: sectionmark profile RECORDING --function NAME "
                                   "--json F")
        for document in _profile_documents(data):
            _thin_samples(document)
        if isinstance(data, dict) and data.get("kind") == "replay":
            return _replayed_function(ReplayProfile.from_json(data), function)
        devices = _device_profile(data)
        if devices is not None:
            return devices
        session = ProfileSession.from_json(data)
        if function is not None and session.function is not None and session.function != function:
            raise SectionmarkError(f"a profile of function {session.function!r}, not {function!r}")
        return session
    except SectionmarkError as error:
        message = str(error)
        raise SectionmarkError(message if str(source) in message else f"{source}: {message}") from None


def _profile_documents(data: Any) -> list[dict]:
    """The profile documents of a file: itself, each function's of a replay JSON, or each device's of a profile
    of several devices."""
    if isinstance(data, dict) and data.get("kind") == "replay" and isinstance(data.get("functions"), list):
        return [entry["profile"] for entry in data["functions"]
                if isinstance(entry, dict) and isinstance(entry.get("profile"), dict)]
    if isinstance(data, dict) and isinstance(data.get("devices"), list):
        return [entry["profile"] for entry in data["devices"]
                if isinstance(entry, dict) and isinstance(entry.get("profile"), dict)]
    return [data] if isinstance(data, dict) else []


def _device_profile(data: Any) -> Optional[DeviceProfile]:
    """A profile of several devices read back from its JSON (docs/profile-json.md "Several devices"): each
    device's session from its profile document; None for any other document."""
    if not (isinstance(data, dict) and isinstance(data.get("devices"), list)):
        return None
    sessions = []
    for entry in data["devices"]:
        if not (isinstance(entry, dict) and isinstance(entry.get("ordinal"), int)
                and isinstance(entry.get("profile"), dict)):
            raise SectionmarkError("a profile of several devices whose 'devices' holds an entry without its "
                                   "'ordinal' and 'profile'")
        session = ProfileSession.from_json(entry["profile"])
        sessions.append(DeviceSession(entry["ordinal"], entry.get("device"), session))
    if not sessions:
        raise SectionmarkError("a profile of several devices with no device")
    return DeviceProfile(sessions, device_sections(sessions), sessions[0].session.calls, data.get("function"))


def _thin_samples(document: dict) -> None:
    """A section with more per-call samples than a profile keeps (a file written by hand or by another tool)
    keeps ``MAX_SAMPLES`` of them, evenly spaced as a profile keeps them (`call_samples`), checked first in C
    (`checked_times`): the rest of the comparison, and reading the file back, then take bounded time and memory."""
    for row in document.get("sections") or []:
        samples = row.get("samples") if isinstance(row, dict) else None
        if isinstance(samples, list) and len(samples) > MAX_SAMPLES:
            where = f"section {format_path(tuple(map(str, row.get('path') or ())))!r}"
            row["samples"] = call_samples(checked_times(where, "per-call sample", samples))


def _replayed_function(replay: ReplayProfile, function: Optional[str]) -> ProfileSession:
    if function is not None:
        return replay.function(function)
    profiled = [entry.function for entry in replay.functions if entry.profile is not None]
    if len(profiled) != 1:
        raise SectionmarkError(f"a replay of {len(profiled)} functions that ran dispatches ({', '.join(profiled)}): "
                               "name one with --function")
    return replay.function(profiled[0])
