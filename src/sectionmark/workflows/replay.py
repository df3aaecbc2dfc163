"""Per-function profiles of a replayed call sequence (`sectionmark.record`).

A replay runs the recorded sequence of calls (say prefill, then 32 decode
steps) ``replays`` times in one profiled process. Each call of a function
submits the same command buffers every time, so the profile's submissions
are, per replay, one block per recorded call. Which function submitted a
block is read from the section map (the static command buffers of each
function; `attribute.submitted_functions`); how many submissions one call of
``f`` makes is what ``f`` submitted in the first replay divided by its calls,
and the whole profile is then checked against that layout call by call, so
a profile that does not follow the recording is refused, never guessed.
Each function's submissions (with their dispatches and queue operations)
become a profile of their own, attributed exactly as `sm.profile` does for
one function called ``calls`` times.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.profiling import display
from sectionmark.profiling.attribute import attribute, public_function, submitted_functions
from sectionmark.profiling.queue_time import assign_calls
from sectionmark.profiling.runs import combine_runs
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.event_model import Profile
from sectionmark.section_map import INITIALIZER_FUNCTION, SectionMap
from sectionmark.serialization import json_field

REPLAY_JSON_VERSION = 1


def replay_calls(profile: Profile, section_map: SectionMap, sequence: Sequence[str], replays: int) -> np.ndarray:
    """The recorded call (``replay * len(sequence) + index``) of each submission; -1 for initializer submissions."""
    functions = submitted_functions(profile, section_map)
    initializers = 0
    while initializers < len(functions) and functions[initializers] == {INITIALIZER_FUNCTION}:
        initializers += 1
    labels = functions[initializers:]
    if len(labels) % replays:
        raise SectionmarkError(
            f"the profile does not follow the recording: {len(labels)} command-buffer submissions cannot be "
            f"{replays} equal replays"
        )
    per_replay = len(labels) // replays
    submitted: Counter = Counter()
    for label in labels[:per_replay]:
        if len(label) != 1:
            raise SectionmarkError(_unknown_submission(label))
        submitted[next(iter(label))] += 1
    per_call = {}
    for function, calls in Counter(sequence).items():
        count, rest = divmod(submitted.pop(function, 0), calls)
        if rest:
            raise SectionmarkError(
                f"the profile does not follow the recording: {function!r} submitted {count * calls + rest} command "
                f"buffers per replay over {calls} calls (every call of a function submits the same number)"
            )
        per_call[function] = count
    if submitted:
        raise SectionmarkError(
            f"the profile does not follow the recording: it has command buffers of {sorted(submitted)[0]!r}, "
            "which the recording never called (was it recorded from another module?)"
        )
    calls = np.full(len(functions), -1, np.int64)
    position = initializers
    for replay in range(replays):
        for index, function in enumerate(sequence):
            for _ in range(per_call[function]):
                if functions[position] != {function}:
                    raise SectionmarkError(
                        f"the profile does not follow the recording: call {index} of replay {replay} is {function!r} "
                        f"but its submission {position} is {_names(functions[position])}"
                    )
                calls[position] = replay * len(sequence) + index
                position += 1
    return calls


def _names(functions: frozenset) -> str:
    return " or ".join(repr(name) for name in sorted(functions)) or "no function of the model"


def _unknown_submission(label: frozenset) -> str:
    if not label:
        return "a command buffer of the profile is recorded by no function of the section map (another model?)"
    return f"cannot tell which function submitted a command buffer: {_names(label)} record the same commands"


def operation_calls(profile: Profile, call_of_submission: np.ndarray) -> np.ndarray:
    """The recorded call of each queue operation outside command buffers (`queue_time.assign_calls`)."""
    recorded = call_of_submission >= 0
    operations = profile.queue_ops
    return assign_calls(operations["submission"], operations["type"], profile.submissions["submission"][recorded],
                        call_of_submission[recorded])


def function_profile(profile: Profile, call_of_submission: np.ndarray, call_of_operation: np.ndarray,
                     keep_calls: np.ndarray) -> Profile:
    """The part of ``profile`` made by the calls in ``keep_calls`` (a boolean per recorded call)."""
    submissions = profile.submissions
    kept = (call_of_submission >= 0) & keep_calls[np.maximum(call_of_submission, 0)]
    dispatches = profile.dispatches[np.isin(profile.dispatches["submission"], submissions["submission"][kept])]
    return dataclasses.replace(profile, dispatches=dispatches, submissions=submissions[kept],
                               queue_ops=profile.queue_ops[keep_calls[call_of_operation]])


def split_by_function(profile: Profile, section_map: SectionMap, sequence: Sequence[str],
                      replays: int) -> dict[str, Profile]:
    """Each function's part of a profile of ``replays`` replays of ``sequence`` (`replay_calls`: refused where the
    profile does not follow the recording), the functions in the order first called."""
    call_of_submission = replay_calls(profile, section_map, sequence, replays)
    call_of_operation = operation_calls(profile, call_of_submission)
    return {function: function_profile(profile, call_of_submission, call_of_operation,
                                       np.array([name == function for name in sequence] * replays, bool))
            for function in dict.fromkeys(sequence)}


def map_function(section_map: SectionMap, function: str) -> str:
    """The map's name of a called function (its command buffers' ``function``, ``decode$async`` for ``decode``)."""
    return next((buffer.function for buffer in section_map.command_buffers
                 if public_function(buffer.function) == function), function)


@dataclass
class FunctionProfile:
    """One function of a replay: its calls per replay and its per-section profile (None: it ran no dispatch).

    The profile is written and read as a profile JSON document of its own
    (`sectionmark.renderers.json_out`, `ReplayProfile.from_json`), not as plain fields.
    """

    function: str
    calls_per_replay: int
    profile: Optional[ProfileSession] = json_field(stored=False, default=None)


class PerFunction:
    """What every replay result (``functions``: entries with ``function``, ``calls_per_replay``, ``profile``;
    ``replays``) says of its functions, whatever each function's profile is."""

    @property
    def function_names(self) -> list[str]:
        """The functions of the replay, in the order first called."""
        return [entry.function for entry in self.functions]

    def _function_profile(self, name: str) -> Any:
        """The profile of one function's calls (all its calls in all measured replays)."""
        for entry in self.functions:
            if entry.function == name:
                if entry.profile is None:
                    raise SectionmarkError(f"function {name!r} ran no dispatch in the replay: it has no profile")
                return entry.profile
        raise SectionmarkError(f"the recording never called {name!r} (it called: {', '.join(self.function_names)})")

    def heading(self, entry: Any) -> str:
        """What a function's part of a text output is headed with: its name, then `calls_summary`."""
        return f"{entry.function}: {self.calls_summary(entry)}"

    def calls_summary(self, entry: Any) -> str:
        """A function's calls per replay and the measured replays (a heading's, an HTML tab's subtitle)."""
        calls = f"{entry.calls_per_replay} call{'s' * (entry.calls_per_replay != 1)} per replay"
        return f"{calls}, {self.replays} measured replay{'s' * (self.replays != 1)}"


@dataclass
class ReplayProfile(PerFunction):
    """Per-function profiles of a replayed recording, functions in the order they were first called.

    One result of several profiles: it renders through the renderer registry
    like a `ProfileSession` (`render`, `save`), each format as its
    ``replays`` says (`sectionmark.renderers`): text tables one per function
    under a heading, CSV with a ``function`` column, JSON one document, a
    Perfetto trace or Tracy capture with each function's tracks, PNG pictures
    stacked; the graph shows one function (`function`).
    """

    replays: int  # measured replays (warmup replays excluded)
    warmup: int
    calls_per_replay: int  # calls in the recorded sequence
    functions: list[FunctionProfile]

    @classmethod
    def build(cls, profile: Profile, section_map: SectionMap, sequence: Sequence[str], *, replays: int,
              warmup: int, device: Optional[str] = None) -> "ReplayProfile":
        """Attribute a profile of ``warmup + replays`` replays of ``sequence`` per function; ``device``: the IREE
        device it ran on (named in each function's profile)."""
        functions = []
        for function, part in split_by_function(profile, section_map, sequence, warmup + replays).items():
            calls = sequence.count(function)
            session = None
            if len(part.dispatches):
                attribution = attribute(part, section_map, calls=calls * (warmup + replays), warmup=calls * warmup,
                                        function=map_function(section_map, function))
                session = ProfileSession.build(attribution, section_map, function=function, device=device)
            functions.append(FunctionProfile(function, calls, session))
        return cls(replays=replays, warmup=warmup, calls_per_replay=len(sequence), functions=functions)


    @classmethod
    def combine(cls, runs: Sequence["ReplayProfile"]) -> "ReplayProfile":
        """One replay profile of K fresh runs of the same replay: each function's sessions combined
        (`sectionmark.profiling.runs.combine_runs`); a function without dispatches has none in any run."""
        first = runs[0]
        functions = []
        for index, entry in enumerate(first.functions):
            sessions = [run.functions[index].profile for run in runs]
            profile = combine_runs(sessions) if all(session is not None for session in sessions) else None
            functions.append(FunctionProfile(entry.function, entry.calls_per_replay, profile))
        return dataclasses.replace(first, functions=functions)

    def function(self, name: str) -> ProfileSession:
        """The ProfileSession of one function's calls (all its calls in all measured replays)."""
        return self._function_profile(name)

    # ------------------------------------------------------------------ outputs

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """Every function's profile in an output format by name (`sectionmark.renderers`), as one text or file."""
        from sectionmark import renderers

        return renderers.get(format).render_replay(self, **options)

    def save(self, path: PathLike, format: Optional[str] = None, *, inputs: Iterable[PathLike] = (),
             **options: Any) -> Path:
        """Write every function's profile to ``path`` in ``format`` (default: from the suffix), all at once."""
        from sectionmark import renderers

        return renderers.save(self, path, format, inputs=inputs, **options)

    def table(self) -> str:
        """Each function's section table under a heading with its calls."""
        return self.render("table")

    def save_json(self, path: PathLike) -> Path:
        """Versioned JSON (docs/profile-json.md): each function's profile is a profile JSON document."""
        return self.save(path, "json")

    def to_json(self) -> dict[str, Any]:
        """The replay's data as a JSON-serialisable, versioned dict (docs/record.md), each function's profile its
        session's `ProfileSession.to_json` (the file ``save_json`` writes adds each profile's views);
        `from_json` reads either back."""
        document = {"version": REPLAY_JSON_VERSION, "kind": "replay", **serialization.to_json(self)}
        for written, entry in zip(document["functions"], self.functions):
            written["profile"] = None if entry.profile is None else entry.profile.to_json()
        return document

    @classmethod
    def from_json(cls, data: Any) -> "ReplayProfile":
        """Read what the JSON renderer wrote (``save_json``), checking every value; per-event data is not kept."""
        replay = serialization.from_versioned_json(
            cls, data, version=REPLAY_JSON_VERSION, document="replay profile JSON", root="replay",
            advice="profile the recording again", error=SectionmarkError)
        for entry, written in zip(replay.functions, data["functions"]):
            profile = written.get("profile")
            entry.profile = None if profile is None else ProfileSession.from_json(profile)
        return replay

    # ------------------------------------------------------------------ notebooks (repr: each function's calls and top sections; inline: the HTML report, a tab per function)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html
