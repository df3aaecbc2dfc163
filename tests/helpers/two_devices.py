"""Two CPU devices in one process, as the tests compile, run and profile them (issue M, docs/multi-device.md).

The tests compile with ``sm.compile(export, devices=2)``, whose flags are `TWO_CPU_DEVICES` (what a plain
user passes, and what the plain pipeline of the byte-identity checks compiles with);
`dispatches_per_device` is the oracle of where the work ran: IREE's own export of an iree-benchmark-module
profile of both devices.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from sectionmark.artifacts.tools import find_tool
from sectionmark.section_map import SectionMap
from tiny_profiles import export_rows

# What a plain user passes to compile for two CPU devices (turbine names them @__device_0 and @__device_1).
TWO_CPU_DEVICES = ("--iree-hal-target-device=local[0]", "--iree-hal-target-device=local[1]",
                   "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host")
RUNTIME_DEVICES = ["local-task", "local-task"]


def dispatches_per_device(vmfb: Path, inputs: Sequence[np.ndarray], directory: Path,
                          calls: int = 2) -> dict[int, Counter]:
    """Profile ``vmfb`` on two local-task devices with iree-benchmark-module (which records every device, where
    iree-run-module records only the first): per physical device ordinal, how many times each dispatch key ran."""
    paths = [directory / f"input{index}.npy" for index in range(len(inputs))]
    for path, array in zip(paths, inputs):
        np.save(path, array)
    profile = directory / "devices.ireeprof"
    subprocess.run([str(find_tool("iree-benchmark-module")), *(f"--device={device}" for device in RUNTIME_DEVICES),
                    f"--module={vmfb}", "--function=main", *(f"--input=@{path}" for path in paths),
                    "--benchmark_min_time=1x", f"--benchmark_repetitions={calls}",
                    "--device_profiling_mode=host-execution,executable-metadata",
                    f"--device_profiling_output={profile}"], check=True, capture_output=True, timeout=120)
    counts: dict[int, Counter] = {}
    for row in export_rows(profile) or []:
        if row.get("record_type") == "host_execution_event" and row.get("op") == "dispatch":
            counts.setdefault(row["physical_device_ordinal"], Counter())[row["key"]] += 1
    return counts


def dispatches_of_sections(section_map: SectionMap, top_level: set[str], calls: int = 2) -> Counter:
    """How many times each dispatch key runs in ``calls`` calls at the sites of the top-level sections
    ``top_level`` (sites with sections elsewhere too, or with none, are left out): what one device runs when
    exactly those sections are placed on it."""
    return Counter(site.key for site in section_map.sites for _ in range(calls)
                   if site.shares and {share.path[0] for share in site.shares} <= top_level)
