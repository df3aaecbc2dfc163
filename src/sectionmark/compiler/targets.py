"""Compiler flags for the targets sectionmark knows by a short name.

Each target names an IREE HAL device and a conservative default architecture,
so ``compile(..., target="cuda")`` works without the user knowing IREE's flag
spelling. ``extra_args`` come after these flags, so users can override them
(e.g. ``--iree-cuda-target=sm_90``).
"""

from __future__ import annotations

from sectionmark.errors import SectionmarkError

TARGET_FLAGS: dict[str, tuple[str, ...]] = {
    "llvm-cpu": (
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    ),
    "cuda": ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"),
    "rocm": ("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"),
    "vulkan-spirv": ("--iree-hal-target-device=vulkan", "--iree-vulkan-target=ampere"),
}


def target_flags(target: str) -> tuple[str, ...]:
    """The device flags for ``target``, or a one-line error naming the known ones."""
    try:
        return TARGET_FLAGS[target]
    except KeyError:
        known = ", ".join(TARGET_FLAGS)
        raise SectionmarkError(f"unknown target {target!r}; use one of: {known}") from None
