"""Simulation for CPU machines (GPU_CHECK_SIMULATE=1, used by gpu_prepare.sh): instead of a CUDA run, the
zones IREE 3.13's CUDA driver records (tests/helpers/gpu_zones.py) for CALLS executions of a module's command
buffer, with random dispatch durations, emitted through the real Tracy client under the real capture.
CUDA modules are compiled without debug groups (sectionmark.compiler.targets.WITHOUT_DEBUG_GROUPS), so
the section zones tests/helpers/gpu_zones.py draws for debug groups are left out: the command buffer zone holds
the dispatch zones directly, as on the GPU.

    python sim_capture.py model.vmfb run.tracy [--calls 23] [--seed 0]
"""

import argparse
import json
import random
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("vmfb")
parser.add_argument("output")
parser.add_argument("--calls", type=int, default=23)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--repo", default=str(Path.cwd()))
args = parser.parse_args()
sys.path.insert(0, str(Path(args.repo) / "tests" / "helpers"))
from gpu_zones import execution, timed_commands  # noqa: E402

from sectionmark.artifacts import read_section_map  # noqa: E402
from sectionmark.tracy import capture_command  # noqa: E402

section_map = read_section_map(args.vmfb)
(buffer,) = [b for b in section_map.command_buffers if any(c.op == "dispatch" for c in b.commands)]
keys = {c.key for c in buffer.commands if c.op == "dispatch"}
section_names = {name for path in section_map.sections for name in path} - keys


def without_groups(spans: list) -> list:
    """The spans with every section (debug group) zone replaced by its children."""
    flat = []
    for name, start, end, children in spans:
        if name in section_names:
            flat.extend(without_groups(children))
        else:
            flat.append([name, start, end, without_groups(children)])
    return flat


def names(spans: list):
    for name, _start, _end, children in spans:
        yield name
        yield from names(children)


rng = random.Random(args.seed)
spans, now = [], 0
for _ in range(args.calls):
    durations = [rng.choice([1, 2, rng.randint(500, 40_000)]) for _ in timed_commands(buffer)]
    span, now = execution(buffer, now + 20_000, durations)
    spans.extend(without_groups([span]))
assert not section_names & set(names(spans)), "section zones left in the simulated capture"
assert sum(name in keys for name in names(spans)) == args.calls * sum(c.op == "dispatch" for c in buffer.commands)
document = Path(args.output).with_suffix(".sim.json")
document.write_text(json.dumps({"origin_ns": 0, "tracks": [["cuda (simulated)", spans]]}))
capture_command([sys.executable, "-m", "sectionmark.renderers.tracy_out", str(document)], args.output, timeout=120)
print(f"wrote {args.output}: {args.calls} simulated executions of {len(timed_commands(buffer))} dispatches "
      f"(no section zones: a module without debug groups)")
