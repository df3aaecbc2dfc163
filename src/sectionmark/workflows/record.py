"""Record the calls a program makes through a loaded module, then replay them under IREE's profiler.

``with sm.record(module) as rec:`` notes every call made through ``module``
(`sectionmark.runtime.LoadedModule`): the function, each host argument (a copy,
saved as ``.npy`` for the replay) and, for each device array, which earlier
call's result it is. ``rec.profile()`` compiles a replay driver
(`sectionmark.workflows.replay_module`) that makes the same calls passing
results along on the device, runs it under ``iree-benchmark-module`` with
HAL-native profiling and splits the profile per function
(`sectionmark.workflows.replay`). ``rec.save(directory)`` keeps everything
needed to profile it again (``sectionmark profile DIR``) without the program.
A module loaded on several devices (``sm.load(compiled, devices=[...])``) is
replayed on them all, one ``--device`` each, its results (a KV cache split over
the devices) passed along where they live, and profiled per function and per
device (`sectionmark.workflows.replay_devices`).

What a replay cannot reproduce, by design: control flow is frozen (the host
values the program computed between calls, such as the next token, are
replayed as recorded), and host time between calls is not measured; only
device work is. A device array that did not come from a recorded call of this
module is recorded as its host value.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from sectionmark.arguments import host_array
from sectionmark.artifacts.files import read_regular
from sectionmark.artifacts.scratch import scratch_folder
from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import check_output_path, copy_output, remove_stale_temporaries, temporary_name
from sectionmark.parameters import Parameters, parameter_specs, spec_text
from sectionmark.workflows.inputs import load_input_array
from sectionmark.workflows.recording_files import DRIVER_FILE, MODEL_FILE, RECORDING_FILE, recording_files
from sectionmark.workflows.runner import DEFAULT_TIMEOUT_S, TRACED_DRIVERS, device_driver, run_profile
from sectionmark.readers.ireeprof import read_profile
from sectionmark.readers.sources import read_device_events
from sectionmark.runtime import LoadedModule, open_context
from sectionmark.section_map import SectionMap, sidecar_path
from sectionmark.serialization import json_field
from sectionmark.workflows.replay import ReplayProfile
from sectionmark.workflows.replay_devices import DeviceReplayProfile
from sectionmark.workflows.replay_module import Argument, ReplayCall, InputArgument, ResultArgument

RECORDING_VERSION = 1
MAX_DESCRIPTION_BYTES = 1 << 30  # recording.json: a million calls take about 100 MB


@dataclass
class RecordedArgument:
    """recording.json's form of an argument: a host input (``input``), or result ``result`` of call ``call``."""

    input: Optional[int] = json_field(default=None, omit_none=True)
    call: Optional[int] = json_field(default=None, omit_none=True)
    result: Optional[int] = json_field(default=None, omit_none=True)

    @classmethod
    def of(cls, value: Argument) -> "RecordedArgument":
        return cls(input=value.index) if isinstance(value, InputArgument) else cls(call=value.call, result=value.result)

    def argument(self) -> Optional[Argument]:
        """The driver's argument; None for an entry that is neither an input nor a (call, result) pair."""
        if self.input is not None and self.call is None and self.result is None:
            return InputArgument(self.input)
        if self.input is None and self.call is not None and self.result is not None:
            return ResultArgument(self.call, self.result)
        return None


@dataclass
class RecordedCall:
    """recording.json's form of a call: the model's function, its arguments, how many results it gave."""

    function: str
    arguments: list[RecordedArgument]
    results: int


@dataclass(kw_only=True)
class RecordingDescription:
    """recording.json (version RECORDING_VERSION): the calls and what replaying them needs (`sectionmark.serialization`).

    ``sha256`` ties the files of a saved recording together (`_checksums`); None only in a file saved before it.
    """

    kind: str = "recording"
    module: str
    device: str
    devices: Optional[list[str]] = json_field(default=None, omit_none=True)  # a module loaded on several
    parameters: list[str]  # as IREE's --parameters: [SCOPE=]FILE
    inputs: int  # host values, inputs/<index>.npy
    calls: list[RecordedCall]
    sha256: Optional[dict[str, str]] = json_field(default=None, omit_none=True)


class Recording:
    """The calls made through a module while recording: replayable, profilable, savable.

    Made by `record` (attached to a live module) or `Recording.load` (a saved
    recording). The data: ``calls`` (function, arguments as
    `InputArgument` / `ResultArgument`, result count) and ``inputs`` (host
    values, by InputArgument index).
    """

    def __init__(self, name: str, vmfb: bytes, section_map: Optional[SectionMap], device: str,
                 parameters: list, calls: Optional[list[ReplayCall]] = None,
                 inputs: Optional[list[np.ndarray]] = None, module: Optional[LoadedModule] = None,
                 driver: Optional[bytes] = None, directory: Optional[Path] = None,
                 devices: Optional[list[str]] = None):
        self.name, self.vmfb, self.section_map = name, vmfb, section_map
        self.device, self.parameters = device, parameters
        # The devices of a module loaded on several, in the order of its own (``device`` is the first); None: one.
        self.devices = list(devices) if devices is not None and len(devices) > 1 else None
        self._calls: list[ReplayCall] = calls or []
        self._inputs: list[Any] = inputs or []  # host values; while recording, also (bytes, dtype, shape) copies
        self._noted: list[tuple[str, list, int]] = []  # calls noted since `calls` was last read, see `note`
        self._module = module
        # id of a result device array -> (weak reference to it, (call, result index)). An entry is trusted only
        # while its reference still points at the object looked up, so an id reused after the array was freed
        # is never taken for the old result (the newer result overwrites the entry).
        self._origins: dict[int, tuple[weakref.ref, tuple[int, int]]] = {}
        self._device_array: Optional[type] = None
        self._driver = driver  # compiled replay driver, made when first needed
        self.directory = directory  # where a loaded recording was read from: its files are never written over

    # ------------------------------------------------------------------ recording

    def __enter__(self) -> "Recording":
        module = self._module
        if module is None:
            raise SectionmarkError("a loaded recording cannot record more calls; record a module with sm.record(module)")
        if module._state.recording is not None:
            raise SectionmarkError(f"module {module.name!r} is already being recorded")
        from iree.runtime import DeviceArray

        self._device_array = DeviceArray
        module._state.recording = self
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._module is not None and self._module._state.recording is self:
            self._module._state.recording = None

    def note(self, function: str, arrays: Sequence[Any], result: Any) -> None:
        """Note a call just made with the flat ``arrays`` (`flatten_arguments`) that returned ``result``.

        LoadedModule calls this right after each call, while the arguments are
        still alive (so a device array's id still names it). Host values are
        copied now: the call has not changed them, and the program may reuse
        their buffers afterwards. This runs after every call of the program,
        with caches cold from the device's work, so it does the least it can:
        one loop with locals, each host value copied as bytes, arguments kept
        as input indices and (call, result) pairs; `calls` and `inputs` make
        the typed forms when read.
        """
        origins, device_array, inputs = self._origins, self._device_array, self._inputs
        arguments = []
        for value in arrays:
            if isinstance(value, device_array):  # sm.load's results are a subclass (arguments.readable_on_host)
                origin = origins.get(id(value))
                if origin is not None and origin[0]() is value:
                    arguments.append(origin[1])  # an earlier result, passed along in the replay
                    continue
                inputs.append(host_array(value))  # made elsewhere: replayed as its value
            else:
                inputs.append((value.tobytes(), value.dtype, value.shape))
            arguments.append(len(inputs) - 1)
        results = result if type(result) is tuple else (() if result is None else (result,))
        call = len(self._calls) + len(self._noted)
        for index, value in enumerate(results):
            origins[id(value)] = (weakref.ref(value), (call, index))
        self._noted.append((function, arguments, len(results)))
        self._driver = None

    @property
    def calls(self) -> list[ReplayCall]:
        """The calls recorded so far, in order."""
        if self._noted:
            self._calls.extend(
                ReplayCall(function, tuple(ResultArgument(*value) if type(value) is tuple else InputArgument(value)
                                           for value in arguments), results)
                for function, arguments, results in self._noted)
            self._noted.clear()
        return self._calls

    @property
    def inputs(self) -> list[np.ndarray]:
        """The host values of the calls, by InputArgument index."""
        inputs = self._inputs
        for index, value in enumerate(inputs):
            if type(value) is tuple:
                data, dtype, shape = value
                inputs[index] = np.frombuffer(bytearray(data), dtype).reshape(shape)
        return inputs

    # ------------------------------------------------------------------ replaying

    @property
    def sequence(self) -> list[str]:
        """The functions called, in order."""
        return [call.function for call in self.calls]

    @property
    def functions(self) -> list[str]:
        """The functions called, each once, in the order first called."""
        return list(dict.fromkeys(self.sequence))

    def driver(self) -> bytes:
        """The compiled replay driver (.vmfb); a saved recording's own, so that profiling it needs no compiler."""
        if self._driver is None:
            from sectionmark.workflows.replay_module import compile_replay_module

            self._driver = compile_replay_module(self.name, self.calls, len(self.inputs))
        return self._driver

    def replay(self) -> Union[Any, tuple]:
        """Replay once in this process; the last call's results as host arrays (compare with the recorded run)."""
        context, (_model, driver_module), _specs = open_context(self.devices or self.device, self.parameters,
                                                                 [self.vmfb, self.driver()])
        results = context.modules[driver_module.name]["replay"](*self.inputs)
        if isinstance(results, tuple):
            return tuple(host_array(value) for value in results)
        return None if results is None else host_array(results)

    def profile(self, iterations: int = 5, warmup: int = 1, *, quiet: bool = False,
                timeout: Optional[float] = DEFAULT_TIMEOUT_S,
                keep_profile: Optional[Union[str, Path]] = None, runs: int = 1,
                workers: Optional[int] = None, device: Optional[str] = None,
                devices: Optional[Sequence[str]] = None) -> Union[ReplayProfile, DeviceReplayProfile]:
        """Replay the recorded calls ``warmup + iterations`` times under IREE's profiler; per-function profiles.

        Each replay starts again from the recorded host inputs, so every replay
        does the same work; the first ``warmup`` replays are not measured.
        ``runs``, ``workers``: as in `sectionmark.profile` (fresh runs of the
        tool, each function's sections with their spread over the runs;
        local-task's most workers). ``keep_profile``: the first run's profile.
        ``device``: the IREE device to replay on instead of the recorded one
        (``"vulkan"``; the module must be compiled for it). A recording of a module
        loaded on several devices replays on them (or on ``devices``), each function's
        result a several-device profile (`DeviceReplayProfile`; ``runs=1``).
        """
        devices = list(devices) if devices is not None else self.devices
        if devices is not None:
            from sectionmark.workflows.measure import check_devices

            check_devices(devices)
            if runs != 1:
                raise SectionmarkError("runs > 1 of a replay on several devices is not supported yet: profile with "
                                       "runs=1")
        device = devices[0] if devices is not None else device or self.device
        if self.section_map is None:
            raise SectionmarkError("this module was compiled without markers; it has no section map to report")
        if device_driver(device) in TRACED_DRIVERS:
            raise SectionmarkError(
                f"replaying a recording is profiled with IREE's HAL-native profiler, which {device} lacks in "
                "IREE 3.13; profile the recording on local-task, or use sm.profile per function (docs/gpu.md)"
            )
        if runs < 1:
            raise SectionmarkError(f"need runs >= 1 (got {runs})")
        protected = recording_files(self.directory) if self.directory is not None else []
        if keep_profile is not None:
            check_output_path(keep_profile, protected)
        with scratch_folder("sectionmark-replay-") as directory:
            model, replay = directory / MODEL_FILE, directory / DRIVER_FILE
            model.write_bytes(self.vmfb)
            replay.write_bytes(self.driver())
            profiles = []
            for index in range(runs):
                run = run_profile(replay, self.inputs, directory / f"run{index + 1}", function="replay",
                                  device=device, iterations=iterations, warmup=warmup, quiet=quiet,
                                  timeout=timeout, parameters=self.parameters, imported=[model], workers=workers,
                                  progress=f"run {index + 1} of {runs}" if runs > 1 else "",
                                  extra_devices=(devices or [])[1:])
                if keep_profile is not None and index == 0:
                    copy_output(run.profile_path, keep_profile, protected)
                if devices is not None:  # each device's events split per function, each function's read across them
                    return DeviceReplayProfile.build(read_device_events(run.profile_path, self.section_map),
                                                     self.section_map, self.sequence, replays=iterations,
                                                     warmup=warmup, devices=devices)
                profiles.append(ReplayProfile.build(read_profile(run.profile_path), self.section_map, self.sequence,
                                                    replays=iterations, warmup=warmup, device=device))
            return ReplayProfile.combine(profiles)

    # ------------------------------------------------------------------ saving

    def save(self, directory: Union[str, Path]) -> Path:
        """Write the recording to ``directory`` (new or empty): the model, its map, the driver, the inputs.

        ``sectionmark profile DIR`` profiles it; `Recording.load` reads it back.
        The directory is written whole or not at all.
        """
        directory = Path(directory)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise SectionmarkError(f"{directory} already exists and is not an empty directory")
        driver = self.driver()
        directory.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(directory)
        staging = Path(tempfile.mkdtemp(**temporary_name(directory)))
        try:
            (staging / MODEL_FILE).write_bytes(self.vmfb)
            if self.section_map is not None:
                self.section_map.save(sidecar_path(staging / MODEL_FILE))
            (staging / DRIVER_FILE).write_bytes(driver)
            (staging / "inputs").mkdir()
            for index, value in enumerate(self.inputs):
                np.save(staging / "inputs" / f"{index}.npy", value)
            description = self._description()
            description.sha256 = _checksums(self.vmfb, driver, description)
            document = {"version": RECORDING_VERSION, **serialization.to_json(description)}
            (staging / RECORDING_FILE).write_text(json.dumps(document, indent=1) + "\n")
            try:
                if directory.exists():
                    directory.rmdir()
                staging.rename(directory)
            except OSError:  # another save made it in the meantime (or filled it): the loser says so
                raise SectionmarkError(f"{directory} already exists and is not an empty directory") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return directory

    def _description(self) -> RecordingDescription:
        return RecordingDescription(
            module=self.name, device=self.device, devices=self.devices,
            parameters=[spec_text(scope, path) for scope, path in self.parameters], inputs=len(self.inputs),
            calls=[RecordedCall(call.function, [RecordedArgument.of(value) for value in call.arguments], call.results)
                   for call in self.calls])

    @classmethod
    def load(cls, directory: Union[str, Path], *, device: Optional[str] = None,
             parameters: Parameters = None, devices: Optional[Sequence[str]] = None) -> "Recording":
        """A recording saved by `save`; ``device`` (``devices`` for a module of several) / ``parameters`` replace
        the recorded ones when given."""
        from sectionmark.artifacts import read_section_map

        directory = Path(directory)
        description = _read_description(directory)
        vmfb = read_regular(directory / MODEL_FILE, "the recording's module")
        driver_path = directory / DRIVER_FILE
        driver = read_regular(driver_path, "the recording's replay driver") if driver_path.exists() else None
        calls = _calls(description, directory / RECORDING_FILE)
        _check_checksums(directory, description, vmfb, driver)
        inputs = [load_input_array(directory / "inputs" / f"{index}.npy") for index in range(description.inputs)]
        for position, call in enumerate(calls):
            for value in call.arguments:
                bad = (isinstance(value, InputArgument) and not 0 <= value.index < len(inputs)) or (
                    isinstance(value, ResultArgument)
                    and not (0 <= value.call < position and 0 <= value.result < calls[value.call].results))
                if bad:
                    raise SectionmarkError(f"malformed recording {directory / RECORDING_FILE}: call {position} "
                                           f"refers to {value}, which it cannot use")
        specs = parameter_specs(description.parameters if parameters is None else parameters)
        devices = list(devices) if devices is not None else description.devices
        return cls(description.module, vmfb, read_section_map(directory / MODEL_FILE),
                   devices[0] if devices else device or description.device, specs, calls, inputs, driver=driver,
                   directory=directory, devices=devices)


def _checksums(vmfb: bytes, driver: bytes, description: RecordingDescription) -> dict[str, str]:
    """recording.json's ``sha256``: of the model, and of the replay driver together with the calls it makes.

    What ties the three files together: another module with the same name and
    functions, or a call list edited without the driver (the profile would be
    split by calls the driver does not make), is refused.
    """
    calls = json.dumps([description.module, description.inputs, serialization.to_json(description.calls)],
                       sort_keys=True)
    return {"model": hashlib.sha256(vmfb).hexdigest(),
            "replay": hashlib.sha256(driver + calls.encode("utf-8")).hexdigest()}


def _check_checksums(directory: Path, description: RecordingDescription, vmfb: bytes,
                     driver: Optional[bytes]) -> None:
    """Refuse a recording whose model or driver is not the one saved with its calls (`_checksums`).

    Without replay.vmfb the driver is compiled again from the calls, so only the model is checked then.
    """
    recorded = description.sha256
    if recorded is None:
        raise SectionmarkError(f"{directory / RECORDING_FILE} has no checksums (saved by an older sectionmark): "
                               "record the program again")
    found = _checksums(vmfb, driver if driver is not None else b"", description)
    if recorded.get("model") != found["model"]:
        raise SectionmarkError(f"{directory / MODEL_FILE} is not the module this recording was made with "
                               "(its SHA-256 is not the recorded one): record again with the module you want to profile")
    if driver is not None and recorded.get("replay") != found["replay"]:
        raise SectionmarkError(f"{directory / DRIVER_FILE} does not make the calls {RECORDING_FILE} lists (one of them "
                               "was replaced or edited): record the program again")


def _read_description(directory: Path) -> RecordingDescription:
    path = directory / RECORDING_FILE
    try:
        data = json.loads(read_regular(path, "recording", MAX_DESCRIPTION_BYTES))
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, or nested past Python's recursion limit
        raise SectionmarkError(f"malformed recording {path}: {str(error)[:200]}") from None
    try:
        return serialization.from_versioned_json(RecordingDescription, data, version=RECORDING_VERSION,
                                                 document="recording", root="recording",
                                                 advice="record the program again")
    except serialization.SchemaError as error:
        raise SectionmarkError(f"{path}: {error}") from None


def _calls(description: RecordingDescription, path: Path) -> list[ReplayCall]:
    calls = []
    for index, call in enumerate(description.calls):
        arguments = tuple(entry.argument() for entry in call.arguments)
        if None in arguments:
            raise SectionmarkError(f"{path}: malformed sectionmark recording: recording.calls[{index}].arguments"
                                   f"[{arguments.index(None)}]: neither an input nor a call and its result")
        calls.append(ReplayCall(call.function, arguments, call.results))
    return calls


def record(module: LoadedModule) -> Recording:
    """Record the calls made through ``module`` (what `sectionmark.load` returned) inside ``with``.

    ::

        with sm.record(module) as rec:
            logits, *kv = module.prefill(ids)
            for step in range(32):
                logits, *kv = module.decode(next_token(logits), *kv)
        prof = rec.profile(iterations=5)   # per-function profiles (ReplayProfile)

    A module loaded on several devices (``sm.load(compiled, devices=[...])``) is replayed on them:
    ``rec.profile()`` then gives a `DeviceReplayProfile` (docs/multi-device.md "Recording").
    """
    if not isinstance(module, LoadedModule):
        raise SectionmarkError(f"sm.record needs a module from sm.load, got {type(module).__name__}")
    return Recording(module.name, module.vmfb, module.section_map, module.device, module.parameters, module=module,
                     devices=module.devices)
