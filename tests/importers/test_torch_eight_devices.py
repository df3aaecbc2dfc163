"""Issue M's scale: the 4-layer tensor-parallel GPT split over 8 devices, profiled on 8 local-task devices.

The demo GPT with 8 heads (tests/helpers/parallel_gpt.py, ``tensor_parallel_gpt(devices=8)``: every block's
heads and MLP hidden units in 8 parts, one per device, joined on device 0), marked as users mark, placed with
``transfer_to_logical_device`` and ``DeviceAffinity``, exported with ``sm.torch.export`` and compiled once for 8
CPU devices (``sm.compile(..., devices=8)``), then profiled on 8 local-task devices with one worker each
(``sm.profile(devices=[...] * 8, workers=1)``, as benchmarks/bench_devices.py --model gpt records it). The
checks are test_torch_devices.py's for two devices: the eager numerics; each device's busy time per section
equal to its own dispatches' events in ``iree-profile export`` (`section_oracle`, to the ns) with exact
coverage; every section on each device that ran it; each device's time parts adding up to every call's window.
Not checked here: the executables against the plain multi-device pipeline (test_torch_devices.py checks them for
two devices): a second compile for 8 devices doubles the file's time on a loaded machine (58 s to compile, 64 s for
the plain pipeline's). It passed when written (commit 2caad98 of this file).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from parallel_gpt import export_arguments, tensor_parallel_gpt
from test_torch_devices import (ATOL, ITERATIONS, RTOL, WARMUP, assert_each_device_busy_is_its_own_dispatch_events,
                                assert_each_device_time_adds_up, assert_every_section_is_on_the_devices_that_ran_it)
from tiny_profiles import export_rows

import sectionmark as sm

DEVICES = 8
RUNTIME = ["local-task"] * DEVICES
pytestmark = pytest.mark.slow  # compiles the GPT for 8 devices (30-60 s on a loaded 2-core machine)


@pytest.fixture(scope="module")
def placed():
    """The tensor-parallel GPT over 8 devices, exported with ``sm.torch.export`` and compiled for 8 CPU devices."""
    model, reference = tensor_parallel_gpt(devices=DEVICES)
    args, arg_device = export_arguments()
    exported = sm.torch.export(model, args=args, arg_device=arg_device, quiet=True)
    return SimpleNamespace(model=model, reference=reference, args=args, arg_device=arg_device,
                           compiled=sm.compile(exported, devices=DEVICES, quiet=True))


@pytest.fixture(scope="module")
def profiled(placed, tmp_path_factory):
    """(its profile on 8 local-task devices of one worker each, the rows of the kept .ireeprof)."""
    kept = tmp_path_factory.mktemp("eight") / "run.ireeprof"
    result = sm.profile(placed.compiled, [placed.args[0].numpy()], devices=RUNTIME, iterations=ITERATIONS,
                        warmup=WARMUP, keep_profile=kept, workers=1, quiet=True)
    rows = export_rows(kept)
    assert rows is not None
    return result, rows


def test_the_model_is_split_in_eight(placed):
    assert placed.model.config.n_head == DEVICES and placed.model.config.n_layer == 4
    for block in placed.model.blocks:
        assert len(block.attn.qkv_weight) == len(block.mlp.fc_weight) == DEVICES and block.attn.n_head == 1
    assert {buffer.device for buffer in placed.compiled.section_map.command_buffers} == set(range(DEVICES))


def test_runs_on_eight_devices_with_the_eager_numerics(placed):
    expected = placed.reference(*placed.args).detach().numpy()
    np.testing.assert_allclose(placed.model(*placed.args).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    module = sm.load(placed.compiled, devices=RUNTIME)
    np.testing.assert_allclose(module.main(placed.args[0].numpy()).to_host(), expected, rtol=RTOL, atol=ATOL)


def test_each_device_busy_per_section_equals_its_own_dispatch_events(placed, profiled):
    result, rows = profiled
    assert_each_device_busy_is_its_own_dispatch_events(result, rows, placed.compiled.section_map, devices=DEVICES)


def test_every_section_is_present_on_each_device_that_ran_it(placed, profiled):
    result, _rows = profiled
    placed_on = assert_every_section_is_on_the_devices_that_ran_it(result, placed.compiled.section_map)
    every = set(range(DEVICES))  # every part of every block's attention and MLP runs on its own device
    assert all(devices == every for path, devices in placed_on.items() if path[-1] in ("QKV", "MLP"))


def test_each_device_time_adds_up_to_the_window_of_every_call(placed, profiled):
    result, rows = profiled
    copies = assert_each_device_time_adds_up(result, rows, placed.compiled.section_map)
    assert all(copies.values())  # every device's activations move every call
