"""Two CPU devices in one process, as the tests compile, run and profile them (issue M, docs/multi-device.md).

Until ``sm.compile`` takes ``devices=``, `compile_for_two_devices` compiles an export with exactly the device
flags a plain user passes; `dispatches_per_device` is the oracle of where the work ran: IREE's own export of
an iree-benchmark-module profile of both devices.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sectionmark.artifacts.tools import find_tool
from sectionmark.compiler.pipeline import CompiledProgram, compile_with_flags
from sectionmark.importers.exported import as_sectioned_export
from sectionmark.section_map import SectionMap
from tiny_profiles import export_rows

# What a plain user passes to compile for two CPU devices (turbine names them @__device_0 and @__device_1).
TWO_CPU_DEVICES = ("--iree-hal-target-device=local[0]", "--iree-hal-target-device=local[1]",
                   "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host")
RUNTIME_DEVICES = ["local-task", "local-task"]


def compile_for_two_devices(export: Any) -> CompiledProgram:
    """sectionmark's compile of an export (torch or JAX) with exactly `TWO_CPU_DEVICES`.

    Not ``sm.compile(export, extra_args=TWO_CPU_DEVICES)``: that keeps llvm-cpu's own
    ``--iree-hal-target-device=local`` in front, so @__device_0 is ``local``, @__device_1 is
    ``local[0]`` and ``local[1]`` is never used: both run on the first device.
    """
    input_type = as_sectioned_export(export).input_type
    return compile_with_flags(export, [*TWO_CPU_DEVICES, f"--iree-input-type={input_type}"], "llvm-cpu", quiet=True)


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
