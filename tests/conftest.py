"""Session-wide fixtures: one tiny real profile, compiled and recorded once per test session; the Vulkan device."""

from __future__ import annotations

import os
from typing import Optional

import numpy as np
import pytest
from invariants import assert_profile_invariants
from tiny_profiles import TWO_MATMULS, compile_plain, hand_map


@pytest.fixture(autouse=True)
def private_run_variation_cache(tmp_path_factory, monkeypatch):
    """Profiles of several runs keep their run-to-run variation in the user's cache, and one-run profiles read it
    (sectionmark.workflows.measure): the suite keeps its own, so that it neither writes the developer's
    cache nor depends on what that holds."""
    from sectionmark.workflows import measure

    path = tmp_path_factory.getbasetemp() / "run-variation-cache" / "run-variation.json"
    monkeypatch.setattr(measure, "cache_path", lambda: path)


@pytest.fixture(scope="session")
def inputs():
    rng = np.random.default_rng(0)
    return rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)


@pytest.fixture(scope="session")
def plain_run(tmp_path_factory, inputs):
    """A plain iree-compile module of TWO_MATMULS profiled for 3 warmup + 8 calls (hand-written map)."""
    import sectionmark.workflows.measure as profiling

    directory = tmp_path_factory.mktemp("plain")
    vmfb = compile_plain(TWO_MATMULS, directory / "m.vmfb")
    profile_path = directory / "run.ireeprof"
    session = profiling.profile(vmfb, inputs, iterations=8, warmup=3, section_map=hand_map(),
                                keep_profile=profile_path, quiet=True)
    assert_profile_invariants(session)
    return vmfb, profile_path, session


@pytest.fixture(scope="session")
def compiled_two_matmuls(tmp_path_factory):
    """TWO_MATMULS compiled by sectionmark (embedded map with fingerprint), saved as a .vmfb without sidecar."""
    from sectionmark.compiler import compile

    compiled = compile(TWO_MATMULS, target="llvm-cpu")
    path = tmp_path_factory.mktemp("compiled") / "m.vmfb"
    path.write_bytes(compiled.vmfb)
    return compiled, path


VULKAN_SETUP = "apt-get install mesa-vulkan-drivers libvulkan1 gives lavapipe, docs/gpu.md"


def find_vulkan_device() -> tuple[Optional[str], str]:
    """The name of IREE's first Vulkan device, or None and why there is none (one line)."""
    import iree.runtime

    if "vulkan" not in iree.runtime.query_available_drivers():
        return None, "no Vulkan device: this iree-base-runtime has no vulkan driver"
    try:
        devices = iree.runtime.get_driver("vulkan").query_available_devices()
    except (RuntimeError, ValueError) as error:  # no loader, no driver (ICD) or no device
        return None, f"no Vulkan device ({str(error).splitlines()[0].rpartition('; ')[2]}); {VULKAN_SETUP}"
    if not devices:
        return None, f"no Vulkan device; {VULKAN_SETUP}"
    return devices[0]["name"], ""


def pytest_report_header(config) -> str:
    """The Vulkan device the Vulkan tests run on, or why they are skipped: the first lines of a CI log say it."""
    name, why = find_vulkan_device()
    return f"vulkan: {name}" if name is not None else f"vulkan: {why} (the Vulkan tests are skipped)"


@pytest.fixture(scope="session")
def vulkan_device(tmp_path_factory) -> str:
    """The name of IREE's first Vulkan device; a test using it is skipped (one line) where there is none.

    Mesa's lavapipe (a Vulkan driver on the CPU) serves where there is no GPU.
    ``XDG_RUNTIME_DIR`` is set (a private folder) when unset, as the Vulkan
    loader and Mesa's layers expect it; the tools run by the tests inherit it.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("xdg-runtime")))
    name, why = find_vulkan_device()
    if name is None:
        pytest.skip(why)
    return name
