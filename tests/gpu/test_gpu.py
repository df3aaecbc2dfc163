"""GPU path on a real NVIDIA GPU: a sectionmark-compiled module runs, and its dispatch zones are the report.

Needs an NVIDIA GPU and IREE's CUDA driver; skips cleanly elsewhere (run with
``pytest -m gpu``). IREE 3.13's CUDA driver crashes on debug groups (its
default stream mode records through a deferred command buffer without them:
docs/gpu.md), so CUDA modules are compiled without; the tracing runtime
records a GPU zone per dispatch, named by its executable export, and
`sectionmark profile --device cuda` splits exactly those zones between the
sections by the map. Section zones around them come from sectionmark's own
rendering of the report (``prof.save_tracy``).

The module is compiled for IREE's default CUDA target (sm_80 PTX, which the
driver compiles for newer GPUs): IREE 3.13 refuses ``--iree-cuda-target=sm_90``.
"""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from sectionmark.readers.tracy_capture import Capture, Track, read_capture
from sectionmark.tracy.capture import capture_command


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    probe = "import iree.runtime as rt; rt.get_driver('cuda').query_available_devices()[0]"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_cuda(), reason="needs an NVIDIA GPU with IREE's CUDA driver")]

from tiny_profiles import TWO_MATMULS as MLIR  # noqa: E402  (two dispatches, one shared by Attn and MLP)
ARGS = (np.full((64, 64), 0.01, np.float32), np.eye(64, dtype=np.float32))
SECTIONS = {("Block",), ("Block", "Attn"), ("Block", "MLP")}

RUN = """
import sys, numpy as np, sectionmark as sm
module = sm.load(sys.argv[1], device="cuda")
for _ in range(3):
    module.main(np.full((64, 64), 0.01, np.float32), np.eye(64, dtype=np.float32)).to_host()
"""


@pytest.fixture(scope="module")
def compiled():
    import sectionmark as sm

    return sm.compile(MLIR, target="cuda")


def zone_paths(track: Track, names: set[str]) -> list[tuple]:
    """Per zone, the names of its enclosing zones that are section names (outermost first)."""
    paths: list[tuple] = []
    for zone in track.zones:
        parent = paths[zone.parent] if zone.parent >= 0 else ()
        parent_name = track.zones[zone.parent].name if zone.parent >= 0 else None
        paths.append(parent + ((parent_name,) if parent_name in names else ()))
    return paths


def dispatch_zones(capture: Capture, keys: set[str], names: set[str]) -> list[tuple[str, tuple, int]]:
    """(export, enclosing section zones, duration) of every dispatch zone on the GPU tracks."""
    found = []
    for track in capture.gpu_contexts:
        for zone, path in zip(track.zones, zone_paths(track, names)):
            if zone.name in keys:
                found.append((zone.name, path, zone.duration_ns))
    return found


def test_in_process_run_has_a_zone_per_dispatch(compiled, tmp_path):
    vmfb = compiled.save(tmp_path / "gpu.vmfb")
    script = tmp_path / "run.py"
    script.write_text(RUN)
    capture = read_capture(capture_command([sys.executable, str(script), str(vmfb)], tmp_path / "gpu.tracy"))
    keys = {c.key for b in compiled.section_map.command_buffers for c in b.commands if c.op == "dispatch"}
    found = dispatch_zones(capture, keys, set())
    assert len(found) == 3 * len(keys)


def test_profile_on_cuda_reports_the_dispatch_zones(compiled, tmp_path):
    import sectionmark as sm

    kept = tmp_path / "run.tracy"
    session = sm.profile(compiled, args=ARGS, device="cuda", iterations=5, warmup=0, quiet=True, keep_profile=kept)
    capture = read_capture(kept)
    commands = {c.key: c for b in compiled.section_map.command_buffers for c in b.commands if c.op == "dispatch"}
    found = dispatch_zones(capture, set(commands), set())

    # The report is the zones: per-section busy = the dispatch zones' durations split by the map's shares.
    assert session.calls == 5 and len(found) == 5 * len(commands)
    assert session.total_ns == sum(duration for _key, _path, duration in found)
    want: dict[tuple, float] = {}
    for key, _path, duration in found:
        for share in commands[key].shares:
            for depth in range(1, len(share.path) + 1):
                want[tuple(share.path[:depth])] = want.get(tuple(share.path[:depth]), 0.0) + duration * share.weight
    assert {row.path: row.busy_ns for row in session.section_rows} == pytest.approx(want, rel=1e-9)
    assert set(want) == SECTIONS

    # The report's own Tracy capture: section zones nested as the sections, each dispatch inside its section.
    rendered = read_capture(session.save_tracy(tmp_path / "sections.tracy"))
    nested = dispatch_zones(rendered, set(commands), {"Block", "Attn", "MLP"})
    assert len(nested) == len(found)
    for key, path, _duration in nested:  # one stream: no dispatch overlaps another, so none is on a lane
        assert path == tuple(max(commands[key].shares, key=lambda share: share.weight).path), (key, path)
