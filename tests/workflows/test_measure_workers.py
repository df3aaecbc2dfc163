"""The worker count a profile made here records (`workers_of_run`): local-task's, at most ``workers``, on one
device and on several; None on a driver that has no worker threads of IREE's topology."""

from __future__ import annotations

import pytest
from tiny_profiles import profile_two_devices

from sectionmark.workflows.measure import workers_of_run
from sectionmark.workflows.runner import local_task_workers


def test_local_task_has_its_worker_count_and_other_drivers_none():
    assert workers_of_run("local-task", None) == local_task_workers() >= 1
    assert workers_of_run("local-task", 1) == 1
    assert workers_of_run("local-task://", 1) == 1
    for device in ("local-sync", "vulkan", "cuda://0", "hip"):
        assert workers_of_run(device, 1) is None, device


def test_each_device_of_a_run_on_several_local_task_devices_records_the_worker_count(tmp_path):
    pytest.importorskip("iree.compiler")
    _compiled, _kept, run = profile_two_devices(tmp_path, iterations=2, warmup=0)
    assert [device.session.workers for device in run.devices] == [local_task_workers()] * 2
