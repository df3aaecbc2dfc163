"""Compiler flags for the targets sectionmark knows by a short name, and the target of each device.

Each target names an IREE HAL device and a conservative default architecture,
so ``compile(..., target="cuda")`` works without the user knowing IREE's flag
spelling. ``extra_args`` come after these flags, so users can override them
(e.g. ``--iree-cuda-target=sm_90``).
"""

from __future__ import annotations

import re
from typing import Sequence

from sectionmark.errors import SectionmarkError

TARGET_FLAGS: dict[str, tuple[str, ...]] = {
    "llvm-cpu": (
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    ),
    "cuda": ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"),
    "rocm": ("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"),
    # The portable Vulkan baseline: no subgroup size or extension assumed, so it computes correctly on any
    # Vulkan device. A GPU's own target (``ampere``, ``rdna3``) assumes that GPU's subgroups: on Mesa's lavapipe
    # the nanoGPT compiled for ``ampere`` returned NaN (softmax) and layer norms 3.5 off, for the baseline it
    # equals the CPU's to 7e-7 (docs/gpu.md).
    "vulkan-spirv": ("--iree-hal-target-device=vulkan", "--iree-vulkan-target=vp_android_baseline_2022"),
}


# Targets whose runtime cannot take debug groups: IREE 3.13's CUDA and HIP drivers record
# command buffers (in their default stream mode) through ``iree_hal_deferred_command_buffer``,
# whose vtable has no ``begin_debug_group`` / ``end_debug_group``: a module with debug groups
# dies calling a null entry (SIGSEGV, seen on an NVIDIA H200; docs/gpu.md). Their sections are
# attributed from the section map alone (sectionmark.readers.tracy_dispatch_zones).
WITHOUT_DEBUG_GROUPS = frozenset({"cuda", "rocm", "hip"})  # "hip": the target a turbine session names


# The target whose executables each IREE HAL driver runs (``--device`` -> ``--target``).
DRIVER_TARGETS = {"local-task": "llvm-cpu", "local-sync": "llvm-cpu", "cuda": "cuda", "hip": "rocm",
                  "vulkan": "vulkan-spirv"}


def device_driver(device: str) -> str:
    """The HAL driver of an IREE device: ``cuda://0`` -> ``cuda``."""
    return device.partition("://")[0]


def target_for_device(device: str) -> str:
    """The compile target for an IREE device URI (``vulkan``, ``cuda://1``), so one ``--device`` picks both."""
    try:
        return DRIVER_TARGETS[device_driver(device)]
    except KeyError:
        known = ", ".join(DRIVER_TARGETS)
        raise SectionmarkError(f"no compile target known for device {device!r}; use one of: {known}") from None


def debug_groups_by_default(target: str) -> bool:
    """Whether sectionmark puts debug groups around sections for ``target`` unless told otherwise."""
    return target not in WITHOUT_DEBUG_GROUPS


def target_flags(target: str, devices: int = 1) -> tuple[str, ...]:
    """The device flags for ``target``, or a one-line error naming the known ones.

    ``devices``: how many devices the module drives (`multi_device_flags`); one gives the flags above unchanged.
    """
    try:
        flags = TARGET_FLAGS[target]
    except KeyError:
        known = ", ".join(TARGET_FLAGS)
        raise SectionmarkError(f"unknown target {target!r}; use one of: {known}") from None
    return flags if devices == 1 else multi_device_flags(target, devices)


def multi_device_flags(target: str, devices: int) -> tuple[str, ...]:
    """The flags of a module driving ``devices`` devices of ``target``: ``--iree-hal-target-device=local[0]`` ...
    (the devices ``@__device_0`` ... that iree-turbine's ``DeviceAffinity(i)`` and ``transfer_to_logical_device``
    place work on), each running ``target``'s executables; run with one ``--device`` per device (``local-task``,
    ``cuda``, ``vulkan``). Several devices of another target (or a mix) are not known to run in IREE 3.13
    (docs/multi-device.md)."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise SectionmarkError(f"devices must be a whole number >= 1, got {devices!r}")
    if target not in MULTI_DEVICE_TARGETS:
        raise SectionmarkError(f"devices={devices} compiles for several devices of "
                               f"{' or '.join(sorted(MULTI_DEVICE_TARGETS))} (got target {target!r}); "
                               "give other targets' device flags in extra_args")
    single, *rest = TARGET_FLAGS[target]
    return (*(f"{single}[{index}]" for index in range(devices)), *rest)


# The targets whose devices sectionmark compiles several of (``local[0]``, ``cuda[1]``, ``vulkan[1]``): llvm-cpu
# run on local-task devices, cuda on CUDA devices, vulkan-spirv on Vulkan devices (docs/multi-device.md).
MULTI_DEVICE_TARGETS = frozenset({"llvm-cpu", "cuda", "vulkan-spirv"})

_TARGET_DEVICE_FLAG = "--iree-hal-target-device="
_DEVICE_SPEC = re.compile(r"^(?:(?P<name>[A-Za-z_][\w.$-]*)=)?(?P<kind>[^=\[]+)(?:\[(?P<ordinal>\d+)\])?$")


def device_ordinals(flags: Sequence[str]) -> dict[str, int]:
    """The runtime device of each device of a module, from its ``--iree-hal-target-device`` flags (in order):
    ``{global name: ordinal}``. The compiler names the devices ``__device_0`` ... in flag order (or by the
    flag's ``name=``), and ``local[k]`` is the k-th local device the run is given (``local`` alone, the first),
    so a module compiled with ``local`` then ``local[0]`` has two device globals on one runtime device."""
    ordinals = {}
    specs = [flag[len(_TARGET_DEVICE_FLAG):] for flag in flags if flag.startswith(_TARGET_DEVICE_FLAG)]
    for index, spec in enumerate(specs):
        match = _DEVICE_SPEC.match(spec)
        if match is None:
            continue
        name = match.group("name") or f"__device_{index}"
        ordinals[name] = int(match.group("ordinal") or 0)
    return ordinals
