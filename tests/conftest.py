"""Session-wide fixtures: one tiny real profile, compiled and recorded once per test session."""

from __future__ import annotations

import numpy as np
import pytest
from invariants import assert_profile_invariants
from tiny_profiles import TWO_MATMULS, compile_plain, hand_map


@pytest.fixture(scope="session")
def inputs():
    rng = np.random.default_rng(0)
    return rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)


@pytest.fixture(scope="session")
def plain_run(tmp_path_factory, inputs):
    """A plain iree-compile module of TWO_MATMULS profiled for 3 warmup + 8 calls (hand-written map)."""
    import sectionmark.profiling as profiling

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
