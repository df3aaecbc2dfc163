"""Torch models placed on two devices, as iree-turbine users place them: sections kept, nothing else changed.

The tensor-parallel and the pipeline-parallel demo GPT (tests/helpers/parallel_gpt.py: ``DeviceAffinity``
on the tokens, ``transfer_to_logical_device`` between the halves or the stages), exported with
``sm.torch.export`` and compiled for two CPU devices: every section declared is in the map (sections that
span both devices too), the module runs in-process on two devices (``sm.load(devices=...)``) with the eager
model's numerics, its work runs on both devices (iree-benchmark-module's profile of each device), and its
executables are those of the plain multi-device pipeline (plain ``aot.export``, ``iree.compiler``, the same
flags), byte for byte.

Issue M's acceptance on both GPTs: profiled on two local-task devices (``sm.profile(devices=[...])``), each
device's busy time per section equals the sum of its own dispatches' ``host_execution_event`` durations in
``iree-profile export`` (`section_oracle` per device, to the ns), coverage is exact on each device, every
section is on the device that ran it, and each device's compute + transfer + gaps + queue + waiting + idle is
the call's window on every call, exactly, its transfer the gaps around its copies (`transfer_oracle`).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from iree.turbine import aot
from parallel_gpt import PIPELINE_STAGES, export_arguments, gpt_sections, pipeline_gpt, tensor_parallel_gpt
from test_byte_identity import assert_same_executables, plain_compile
from invariants import FLOAT_RELATIVE, assert_device_time_adds_up, assert_profile_invariants
from tiny_profiles import export_rows, section_oracle, transfer_oracle
from two_devices import RUNTIME_DEVICES, TWO_CPU_DEVICES, dispatches_of_sections, dispatches_per_device

import sectionmark as sm
from sectionmark.compiler.targets import target_flags
from sectionmark.errors import SectionmarkError
from sectionmark.importers.exported import find_sections
from sectionmark.locations import strip_sectionmark_names

# Compiled float32 against eager torch, as for the one-device nanoGPT (largest seen: 6e-7).
RTOL, ATOL = 1e-4, 1e-5
CALLS = 2  # profiled
ITERATIONS, WARMUP = 2, 1  # sm.profile's measured and warm-up calls
BUILDERS = {"tensor-parallel": tensor_parallel_gpt, "pipeline": pipeline_gpt}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def placed(request):
    """One parallel GPT exported with ``sm.torch.export`` and compiled for two CPU devices."""
    model, reference = BUILDERS[request.param]()
    args, arg_device = export_arguments()
    exported = sm.torch.export(model, args=args, arg_device=arg_device, quiet=True)
    return SimpleNamespace(name=request.param, model=model, reference=reference, args=args, arg_device=arg_device,
                           exported=exported, compiled=sm.compile(exported, devices=2, quiet=True))


@pytest.fixture(scope="module")
def profiled(placed, tmp_path_factory):
    """(the several-device profile of ``placed`` on two local-task devices, the rows of its kept .ireeprof)."""
    kept = tmp_path_factory.mktemp(placed.name) / "run.ireeprof"
    result = sm.profile(placed.compiled, [placed.args[0].numpy()], devices=RUNTIME_DEVICES, iterations=ITERATIONS,
                        warmup=WARMUP, keep_profile=kept, quiet=True)
    rows = export_rows(kept)
    assert rows is not None
    return result, rows


def test_sm_compile_of_two_devices_is_what_a_plain_user_passes():
    assert target_flags("llvm-cpu", devices=2) == TWO_CPU_DEVICES


def test_every_section_is_in_the_map(placed):
    assert list(placed.exported.sections) == gpt_sections()
    assert placed.compiled.section_map.sections == placed.compiled.section_map.reached == gpt_sections()


def test_runs_on_two_devices_with_the_eager_numerics(placed):
    module = sm.load(placed.compiled, devices=RUNTIME_DEVICES)
    assert module.devices == RUNTIME_DEVICES and module.device == "local-task"
    expected = placed.reference(*placed.args).detach().numpy()
    np.testing.assert_allclose(placed.model(*placed.args).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(module.main(placed.args[0].numpy()).to_host(), expected, rtol=RTOL, atol=ATOL)


def test_the_work_runs_where_it_is_placed(placed, tmp_path):
    """Per device, the dispatches its sections place there (iree-benchmark-module's profile of both devices).

    Pipeline: each device runs each dispatch exactly as often as its stage's sites make it, per call.
    Tensor-parallel: every section runs work on both devices (a tensor both halves read, the causal mask,
    pulls the second half's attention to the first device unless it is moved too).
    """
    vmfb = placed.compiled.save(tmp_path / "model.vmfb")
    ran = dispatches_per_device(vmfb, [placed.args[0].numpy()], tmp_path, calls=CALLS)
    assert sorted(ran) == [0, 1]
    sites = placed.compiled.section_map.sites
    if placed.name == "pipeline":
        stages = {0: {"Embedding", *(f"Block {i}" for i in PIPELINE_STAGES[0])},
                  1: {"Layer Norm", "LM Head", *(f"Block {i}" for i in PIPELINE_STAGES[1])}}
        for device, tops in stages.items():
            placed_there = dispatches_of_sections(placed.compiled.section_map, tops, CALLS)
            assert placed_there and ran[device] == placed_there, device
    else:
        for name in ("QKV", "Attention Softmax", "Projection", "MLP"):
            inside = {site.key for site in sites if any(share.path[-1] == name for share in site.shares)}
            own = inside - {site.key for site in sites if all(share.path[-1] != name for share in site.shares)}
            assert own & set(ran[0]) and own & set(ran[1]), name


def test_executables_equal_the_plain_multi_device_pipeline(placed, tmp_path):
    """Plain ``aot.export`` in a ``sections`` scope keeps every section; without its names, compiled by
    ``iree.compiler`` with the same device flags, it gives sectionmark's executables."""
    with sm.torch.sections():
        output = aot.export(placed.model, args=placed.args, arg_device=placed.arg_device)
    text = output.mlir_module.get_asm(enable_debug_info=True)
    assert list(find_sections(text)) == gpt_sections()
    plain_text = strip_sectionmark_names(text)
    plain = plain_compile(plain_text, "torch", device_flags=TWO_CPU_DEVICES)
    assert_same_executables(placed.compiled.vmfb, plain, tmp_path)


# What a plain user passes for two GPU devices of each target (by hand, not sectionmark's flags), and the
# compile options both compiles are given. The GPTs move the causal mask (bool: 8-bit storage) to device 1, which
# the portable Vulkan baseline cannot store ("failed to legalize operation 'vector.bitcast'"): compiled for a
# Vulkan GPU with 8-bit storage (``ampere``), as the one-device check does (tests/compiler/test_byte_identity.py).
PLAIN_GPU_DEVICE_FLAGS = {
    "cuda": (("--iree-hal-target-device=cuda[0]", "--iree-hal-target-device=cuda[1]", "--iree-cuda-target=sm_80"),
             ()),
    "vulkan-spirv": (("--iree-hal-target-device=vulkan[0]", "--iree-hal-target-device=vulkan[1]"),
                     ("--iree-vulkan-target=ampere",)),
}


@pytest.mark.parametrize("target", sorted(PLAIN_GPU_DEVICE_FLAGS))
def test_gpu_executables_equal_the_plain_multi_device_pipeline(placed, tmp_path, target):
    """The same for two CUDA devices (``target="cuda", devices=2``: what ran on the H200,
    tests/readers/test_tracy_devices.py) and two Vulkan devices (``target="vulkan-spirv", devices=2``, what runs
    on lavapipe: tests/gpu/test_vulkan_devices.py): the flags a plain user passes, the same executables."""
    device_flags, options = PLAIN_GPU_DEVICE_FLAGS[target]
    compiled = sm.compile(placed.exported, target=target, devices=2, extra_args=list(options), quiet=True)
    with sm.torch.sections():
        output = aot.export(placed.model, args=placed.args, arg_device=placed.arg_device)
    plain_text = strip_sectionmark_names(output.mlir_module.get_asm(enable_debug_info=True))
    plain = plain_compile(plain_text, "torch", device_flags=device_flags, extra_args=options)
    assert_same_executables(compiled.vmfb, plain, tmp_path)


def test_load_on_several_devices_refuses_what_it_cannot_open(placed):
    with pytest.raises(SectionmarkError, match="cannot open IREE device 'nothing'"):
        sm.load(placed.compiled, devices=["local-task", "nothing"])
    with pytest.raises(SectionmarkError, match="pass device= or devices=, not both"):
        sm.load(placed.compiled, device="local-sync", devices=RUNTIME_DEVICES)
    with pytest.raises(SectionmarkError, match="devices= takes a list"):
        sm.load(placed.compiled, devices="local-task")


def test_each_device_busy_per_section_equals_its_own_dispatch_events(placed, profiled):
    result, rows = profiled
    assert_each_device_busy_is_its_own_dispatch_events(result, rows, placed.compiled.section_map, devices=2)


def assert_each_device_busy_is_its_own_dispatch_events(result, rows: list[dict], section_map, devices: int) -> None:
    """Each device's profile (exact coverage, the invariants) against `section_oracle` of its own dispatches'
    events in iree-profile export's rows, to the ns; ``result`` profiled with `WARMUP` and `ITERATIONS`."""
    assert [device.ordinal for device in result.devices] == list(range(devices))
    for device in result.devices:
        session = device.session
        assert_profile_invariants(session)
        assert session.coverage_error <= FLOAT_RELATIVE, device.ordinal
        calls, oracle = section_oracle(rows, section_map, WARMUP, device=device.ordinal, calls=ITERATIONS + WARMUP)
        assert calls == session.calls == ITERATIONS
        exclusive = {row.path: row.exclusive_ns for row in session.sections}
        assert {path for path, ns in exclusive.items() if ns} == {path for path, ns in oracle.items() if ns}
        for path, ns in oracle.items():
            assert abs(exclusive[path] - ns) < 1, (device.ordinal, path)  # to the ns


def test_every_section_is_present_on_the_device_that_ran_it(placed, profiled):
    result, _rows = profiled
    placed_on = assert_every_section_is_on_the_devices_that_ran_it(result, placed.compiled.section_map)
    if placed.name == "pipeline":  # the stages: each block on its own device, the hand-over in "Block 2" on both
        for device, blocks in PIPELINE_STAGES.items():
            for index in blocks:
                assert placed_on[(f"Block {index}", "MLP")] == {device}
    else:  # every half of every block runs on both devices
        assert all(devices == {0, 1} for path, devices in placed_on.items() if path[-1] in ("QKV", "MLP"))


def assert_every_section_is_on_the_devices_that_ran_it(result, section_map) -> dict[tuple, set[int]]:
    """Every GPT section (and each parent) is in ``result``'s rows of each device whose buffers dispatch its work,
    with dispatches and busy time there, and its row across devices says it ran on exactly those; returns the
    devices of each section's dispatches, from the map."""
    placed_on: dict[tuple, set[int]] = {}
    for buffer in section_map.command_buffers:
        for command in buffer.commands:
            for share in command.shares if command.op == "dispatch" else []:
                for depth in range(1, len(share.path) + 1):
                    placed_on.setdefault(share.path[:depth], set()).add(buffer.device)
    assert set(placed_on) == set(gpt_sections())
    across = {row.path: row for row in result.sections}
    for path, devices in placed_on.items():
        assert set(across[path].ran_on) == devices, path
        for ordinal in devices:
            row = next(row for row in result.devices[ordinal].session.sections if row.path == path)
            assert row.dispatches > 0 and row.busy_ns > 0, (ordinal, path)
    return placed_on


def test_each_device_time_adds_up_to_the_window_of_every_call(placed, profiled):
    """The parts add up to every call's window; each device's transfer is its executions' gaps around their
    copies (`transfer_oracle`'s sum, from iree-profile export's rows; its split by section picks the first buffer
    recording the same commands, which the blocks' alike buffers make ambiguous here), the rest of their time
    with no dispatch running (barriers) is gaps."""
    result, rows = profiled
    copies = assert_each_device_time_adds_up(result, rows, placed.compiled.section_map)
    # Activations move to the other device every call: every device's buffers record copies (the pipeline's
    # device 1 only receives: device 0's buffers copy both ways).
    assert all(copies.values()) or placed.name == "pipeline"


def assert_each_device_time_adds_up(result, rows: list[dict], section_map) -> dict[int, bool]:
    """Each device's parts add up to every call's window (`assert_device_time_adds_up`); its transfer is
    `transfer_oracle`'s (where its buffers record copies, and only there). Returns whether each device's buffers
    record copies."""
    assert_device_time_adds_up(result, ITERATIONS)
    copies = {}
    for device in result.devices:
        time = device.time
        copies[device.ordinal] = any(command.op == "copy" for buffer in section_map.command_buffers
                                     if buffer.device == device.ordinal for command in buffer.commands)
        assert (time.transfer_ns > 0) == copies[device.ordinal], device.ordinal
        oracle = transfer_oracle(rows, section_map, WARMUP, device.ordinal, ITERATIONS + WARMUP)
        assert abs(sum(oracle.values()) - (time.transfer_ns - time.queue_transfer_ns)) < 1e-6, device.ordinal
    return copies
