"""GPU path: section debug groups become Tracy GPU zones around the dispatch zones.

Needs an NVIDIA GPU and IREE's CUDA driver; skips cleanly elsewhere (CI has no GPU).
Expectation (DESIGN.md): with the tracing runtime, IREE's CUDA driver turns
hal.command_buffer.begin/end_debug_group into GPU zones named after the
section, enclosing the dispatch zones of that section.
"""

import shutil
import subprocess
import sys

import pytest

from sectionmark.tracy.capture import capture_command
from sectionmark.tracy.reader import read_capture


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    probe = "import iree.runtime as rt; rt.get_driver('cuda').query_available_devices()[0]"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_cuda(), reason="needs an NVIDIA GPU with IREE's CUDA driver")]

MLIR = """
func.func @main(%x: tensor<4096xf32>) -> tensor<4096xf32> {
  %s = math.sin %x : tensor<4096xf32> loc("sectionmark:Block/Attention"("t.py":1:0))
  %r = arith.addf %s, %s : tensor<4096xf32> loc("sectionmark:Block/Attention"("t.py":1:0))
  %c = math.cos %r : tensor<4096xf32> loc("sectionmark:Block/MLP"("t.py":2:0))
  return %c : tensor<4096xf32>
}
"""

RUN = """
import sys, numpy as np, sectionmark as sm
module = sm.load(sys.argv[1], device="cuda")
for _ in range(3):
    module.main(np.ones(4096, np.float32)).to_host()
"""


def test_cuda_sections_are_gpu_zones(tmp_path):
    vmfb = sm_compile(tmp_path)
    script = tmp_path / "run.py"
    script.write_text(RUN)
    capture = read_capture(capture_command([sys.executable, str(script), str(vmfb)], tmp_path / "gpu.tracy"))
    gpu_zones = [zone for track in capture.gpu_contexts for zone in track.zones]
    names = {zone.name for zone in gpu_zones}
    assert {"Block", "Attention", "MLP"} <= names
    sections = [z for z in gpu_zones if z.name in ("Attention", "MLP")]
    assert all(z.depth >= 1 for z in sections)
    assert any(z.depth >= 2 for z in gpu_zones), "dispatch zones nested inside section zones"


def sm_compile(tmp_path):
    import sectionmark as sm

    return sm.compile(MLIR, target="cuda").save(tmp_path / "gpu.vmfb")
