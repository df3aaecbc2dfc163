#!/usr/bin/env bash
# K2: the CUDA path on one NVIDIA GPU (H100/H200), in one run of about 5 minutes, with no network.
#
#   bash scripts/gpu_check.sh                      # on the GPU machine, in the repo root; results in $OUT
#   bash scripts/gpu_check.sh --write-helpers DIR  # only write its Python helpers to DIR (gpu_prepare.sh tests them)
#
# Needs what scripts/gpu_prepare.sh built on a CPU machine beforehand (ignored folders, sent along):
#   .whl/  iree-base-runtime 3.13.0 (cp312; the tracing runtime, iree-tracy-capture), ml_dtypes, zstandard, setuptools
#   .gpu/  the nanoGPT demo (torch and JAX) compiled for `cuda` with its inputs and eager reference logits,
#          the modules tests/gpu/test_gpu.py compiles (iree-base-compiler is too big to send), Tracy's csvexport,
#          and the torch demo compiled with debug groups forced (nanogpt-torch-groups/, for the experiment)
#
# CUDA modules are compiled without debug groups (IREE 3.13's CUDA runtime crashes on them: SIGSEGV in
# iree_hal_module_command_buffer_begin_debug_group), so the raw capture has dispatch zones only; the section
# zones around them are checked in the report's own Tracy capture (report --tracy sections.tracy).
#
# Steps (each runs whatever happened before; its exit status is in the summary at the end):
#   env, install (runtime wheel + this project with its C extensions, no network), cuda probe;
#   per framework (torch, jax): sectionmark profile --device cuda -n 20 --warmup 3 --keep-profile run.tracy
#   --json sections.json; sectionmark report run.tracy --map ... (one with --tracy sections.tracy);
#   sectionmark tracy-stats run.tracy; Tracy's csvexport -g of run.tracy and sections.tracy; the acceptance
#   checks (verify); pytest -m gpu (tests/gpu/test_gpu.py);
#   per framework: a Tracy capture of eager sections around compiled calls (and the demo model run
#   eagerly: its own sections as CPU zones), its stats, report and checks; `pytest -m gpu` over the whole suite
#   (informational: the other test modules need packages this machine lacks); experiment (informational,
#   not in the acceptance checks: the torch demo WITH debug groups, plain tool in graph mode, tracing tool
#   under a capture, plain tool with default flags; experiment/experiment.json, summarized in summary.txt).
# Outputs ($OUT, 7 files): gpu_check.log (this transcript), summary.txt, verify.json, results.tar.gz
# (every output and every step's full log), sections-torch.json, sections-jax.json, nvidia-smi.txt.
set -o pipefail
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# ----------------------------------------------------------------------------------------------- helpers
write_helpers() {
  local dir=$1
  mkdir -p "$dir"

  cat > "$dir/sm_prebuilt_compile.py" <<'PY'
"""pytest plugin (-p sm_prebuilt_compile): `sm.compile` served from modules compiled beforehand.

iree-base-compiler (83 MB) cannot be sent to the GPU machine, so scripts/gpu_prepare.sh compiles,
on a CPU machine with the same IREE 3.13 compiler, exactly the `sm.compile(...)` calls tests/gpu/test_gpu.py
makes (the cuda target compiles without a GPU) and stores each .vmfb (section map embedded) under
$SM_PREBUILT_DIR as <key>.vmfb, key = sha256 of the call's arguments. Where iree.compiler imports,
this plugin does nothing. A call that was not compiled beforehand fails with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def compile_key(source, target="llvm-cpu", extra_args=(), markers=True, debug_groups=None, input_type=None) -> str:
    if not isinstance(source, str):
        raise TypeError(f"only MLIR text can be compiled beforehand, not {type(source).__name__}")
    call = [source, target, list(extra_args), bool(markers), None if debug_groups is None else bool(debug_groups), input_type]
    return hashlib.sha256(json.dumps(call).encode()).hexdigest()


class PrebuiltExport:
    """What `sm.compile` returns (`CompiledProgram`): .vmfb bytes, section map, target; `save`."""

    def __init__(self, vmfb: bytes, section_map, target: str):
        self.vmfb, self.section_map, self.target = vmfb, section_map, target

    def save(self, path, inputs=()):
        from sectionmark.outputs import check_output_path, write_atomic
        from sectionmark.section_map import sidecar_path

        path = Path(path)
        check_output_path(path, inputs)
        write_atomic(path, self.vmfb, inputs)
        if self.section_map is not None:
            write_atomic(sidecar_path(path), self.section_map.dumps(), inputs)
        return path


def prebuilt_compile(source, target="llvm-cpu", extra_args=(), markers=True, debug_groups=None, input_type=None):
    from sectionmark.artifacts import read_section_map
    from sectionmark.errors import SectionmarkError

    key = compile_key(source, target, extra_args, markers, debug_groups, input_type)
    path = Path(os.environ.get("SM_PREBUILT_DIR", ".gpu/prebuilt-compile")) / f"{key}.vmfb"
    if not path.is_file():
        raise SectionmarkError(f"no module compiled beforehand for this sm.compile call (target {target}, key "
                               f"{key[:12]}): iree-base-compiler is not installed here; run scripts/gpu_prepare.sh again")
    return PrebuiltExport(path.read_bytes(), read_section_map(path) if markers else None, target)


def _has_compiler() -> bool:
    try:
        import iree.compiler  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_configure(config):
    import sectionmark

    if not _has_compiler():
        sectionmark.compile = prebuilt_compile  # sm.compile (a lazy attribute until set)


def pytest_report_header(config):
    if _has_compiler():
        return "sm_prebuilt_compile: iree.compiler is installed, sm.compile compiles"
    return f"sm_prebuilt_compile: sm.compile served from {os.environ.get('SM_PREBUILT_DIR')} (no iree-base-compiler here)"
PY

  cat > "$dir/eager_capture.py" <<'PY'
"""Eager sections around compiled calls, captured by Tracy (gpu_check.sh; gpu_prepare.sh tests it on local-task).

    python eager_capture.py capture OUT.tracy --vmfb model.vmfb --tokens tokens.npy --framework torch
                                              [--device cuda] [--calls 10] [--reference logits.npy]

runs itself (`program`) under sectionmark's headless capture (IREE_PY_RUNTIME=tracy): sections entered
in plain Python wrap the compiled calls (sm.load adds its own `module.main` section around each), then
the demo model runs eagerly on the CPU (torch, or JAX with JAX_PLATFORMS=cpu), its own sections becoming
CPU zones. Writes OUT.json: the numerics of the compiled calls against the eager model and the carried
reference logits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
SECTIONS = ("K2 demo", "Load", "Warmup", "Step", "Compiled call", "Argmax", "Eager model")


def eager_logits(framework: str, tokens: np.ndarray) -> np.ndarray:
    from sectionmark.demo.model_torch import CONFIGS

    config = CONFIGS["small"]
    if framework == "torch":
        import torch
        from sectionmark.demo.model_torch import GPT

        with torch.no_grad():
            return GPT(config).eval()(torch.from_numpy(tokens)).numpy()
    import jax
    from sectionmark.demo import model_jax

    params = jax.tree_util.tree_map(jax.numpy.asarray, model_jax.init_params(config))
    return np.asarray(model_jax.gpt(params, jax.numpy.asarray(tokens), n_head=config.n_head))


def program(args) -> None:
    import sectionmark as sm
    import sectionmark.tracy

    sectionmark.tracy.enable()
    tokens = np.load(args.tokens)
    result = {"framework": args.framework, "device": args.device, "calls": args.calls}
    if args.framework == "torch":
        import torch  # noqa: F401  (imported outside the sections: seconds, not the demo's time)
    else:
        import jax  # noqa: F401
    with sm.section("K2 demo"):
        with sm.section("Load"):
            module = sm.load(args.vmfb, device=args.device)
        with sm.section("Warmup"):
            module.main(tokens).to_host()
        picks, logits = [], None
        started = time.perf_counter()
        for _ in range(args.calls):
            with sm.section("Step"):
                with sm.section("Compiled call"):
                    logits = np.asarray(module.main(tokens).to_host())
                with sm.section("Argmax"):
                    picks.append(int(np.argmax(logits[0, -1])))
        result["compiled_call_mean_us"] = (time.perf_counter() - started) / args.calls * 1e6
        with sm.section("Eager model"):
            eager = eager_logits(args.framework, tokens)
    result["next_tokens"] = sorted(set(picks))
    result["max_abs_diff_vs_eager"] = float(np.max(np.abs(logits - eager)))
    result["eager_next_token"] = int(np.argmax(eager[0, -1]))
    if args.reference:
        reference = np.load(args.reference)
        result["max_abs_diff_vs_reference"] = float(np.max(np.abs(logits - reference)))
    result["logits_match"] = bool(np.allclose(logits, eager, rtol=1e-3, atol=1e-3))
    Path(args.result).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


def capture(args) -> int:
    from sectionmark.errors import SectionmarkError
    from sectionmark.tracy import capture_command

    result = Path(str(args.output) + ".json")
    command = [sys.executable, __file__, "program", "--vmfb", args.vmfb, "--tokens", args.tokens,
               "--framework", args.framework, "--device", args.device, "--calls", str(args.calls),
               "--repo", args.repo, "--result", str(result)]
    if args.reference:
        command += ["--reference", args.reference]
    try:
        path = capture_command(command, args.output, timeout=args.timeout)
    except SectionmarkError as error:
        print(f"eager capture: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size} bytes) and {result}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["capture", "program"])
    parser.add_argument("output", nargs="?", help="capture: the .tracy to write")
    parser.add_argument("--vmfb", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--framework", choices=["torch", "jax"], required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--reference")
    parser.add_argument("--repo", default=str(ROOT.parent))
    parser.add_argument("--result")
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    if args.mode == "program":
        program(args)
        return 0
    return capture(args)


if __name__ == "__main__":
    sys.exit(main())
PY

  cat > "$dir/sim_capture.py" <<'PY'
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
sys.path.insert(0, str(Path(args.repo) / "tests"))
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
PY

  cat > "$dir/experiment.py" <<'PY'
"""Informational (gpu_check.sh's `experiment` step, not an acceptance check): a module WITH debug groups on CUDA.

    python experiment.py MODEL.vmfb TOKENS.npy OUT_DIR [--budget 55]

IREE 3.13's CUDA driver records command buffers, in its default stream mode, through a deferred command
buffer that has no debug-group entries (SIGSEGV); sectionmark therefore compiles CUDA modules without
them. MODEL.vmfb is the nanoGPT torch demo compiled with debug groups forced (gpu_prepare.sh:
sm.compile(..., target="cuda", debug_groups=True)). Runs, each bounded by `timeout`, all within --budget s:
  1. the plain iree-benchmark-module, --cuda_use_streams=false (CUDA graphs): does it run?
  2. the tracing iree-benchmark-module, --cuda_use_streams=false --cuda_tracing=2, under a Tracy capture
     (sectionmark.tracy.capture.capture_command): do section zones (named by the sections' leaf names)
     appear, and do they nest the dispatch zones as the map's groups?
  3. the plain iree-benchmark-module with default flags: does it still crash?
Writes OUT_DIR/experiment.json (rc, stderr tail, zone counts per run) and OUT_DIR/*.log; exit status 0
when every run was tried (whatever its outcome), 1 when the experiment itself could not be set up.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path


def no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGSEGV dumps no core


def describe(rc) -> str:
    if rc is None:
        return "timed out"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def tail(path: Path, chars: int = 1200) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("vmfb")
    parser.add_argument("tokens")
    parser.add_argument("out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=float, default=55.0)
    args = parser.parse_args()
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from verify import MapFacts, gpu_zones

    from sectionmark.artifacts.tools import find_tool
    from sectionmark.tracy.capture import CapturedProgramFailed, capture_command
    from sectionmark.readers.tracy_capture import read_capture

    facts = MapFacts(args.vmfb)
    vmfb_bytes = Path(args.vmfb).read_bytes()
    record = {"module": args.vmfb, "module_has_debug_groups": b"begin_debug_group" in vmfb_bytes,
              "dispatches_per_call": sum(facts.per_call.values()) if facts.per_call else None, "runs": []}
    common = [f"--device={args.device}", f"--module={args.vmfb}", "--function=main", f"--input=@{args.tokens}",
              "--benchmark_min_time=3x"]
    plain, tracing = find_tool("iree-benchmark-module", tracing=False), find_tool("iree-benchmark-module", tracing=True)

    def left(share: float) -> float:
        return max(3.0, min(share, args.budget - (time.monotonic() - started) - 2))

    def run_plain(name: str, flags: list, limit: float) -> None:
        log = out / f"{name}.log"
        command = [str(plain), *flags, *common]
        t0 = time.monotonic()
        with open(log, "w") as stream:
            try:
                rc = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.STDOUT,
                                    timeout=limit, preexec_fn=no_core).returncode
            except subprocess.TimeoutExpired:
                rc = None
        entry = {"run": name, "command": " ".join(command), "rc": rc, "outcome": describe(rc),
                 "seconds": round(time.monotonic() - t0, 1), "output_tail": tail(log)}
        record["runs"].append(entry)
        print(f"{name}: {entry['outcome']} ({entry['seconds']} s)", flush=True)

    run_plain("plain-graphs", ["--cuda_use_streams=false"], left(12))

    # The tracing runtime under a capture, graph mode, dispatch-level zones.
    name, capture_path, log = "tracing-graphs-capture", out / "groups.tracy", out / "tracing-graphs-capture.log"
    command = [str(tracing), "--cuda_use_streams=false", "--cuda_tracing=2", *common]
    entry = {"run": name, "command": " ".join(command)}
    t0 = time.monotonic()
    with open(log, "w") as stream:
        try:
            capture_command(command, capture_path, timeout=left(22), save_timeout=8, stdout=stream, stderr=stream)
            entry["rc"], entry["outcome"] = 0, describe(0)
        except CapturedProgramFailed as error:
            entry["rc"], entry["outcome"] = error.returncode, f"{describe(error.returncode)}: {error}"
        except Exception as error:  # noqa: BLE001  (timed out, never connected, ...: recorded)
            entry["rc"], entry["outcome"] = None, f"{type(error).__name__}: {error}"
    entry["seconds"] = round(time.monotonic() - t0, 1)
    entry["output_tail"] = tail(log)
    if capture_path.is_file():
        try:
            found = gpu_zones(read_capture(capture_path), facts)
        except Exception as error:  # noqa: BLE001
            entry["capture"] = f"unreadable: {type(error).__name__}: {error}"
        else:
            misgrouped = [(key, chain) for key, chain in found["nested"] if chain not in facts.groups[key]]
            entry["capture"] = {
                "gpu_tracks": found["tracks"], "dispatch_zones": len(found["dispatches"]),
                "section_zones": found["sections"], "section_zones_appear": found["sections"] > 0,
                "dispatch_zones_outside_their_group": len(misgrouped), "examples_outside": misgrouped[:3],
                "section_zones_outside_their_path": len(found["misplaced"]),
                "other_zones": dict(found["unknown"].most_common(8)),
            }
    record["runs"].append(entry)
    print(f"{name}: {entry['outcome']} ({entry['seconds']} s); capture: {entry.get('capture', 'none')}", flush=True)

    run_plain("plain-default-flags", [], left(12))
    crashed = record["runs"][-1]["rc"]
    record["default_flags_crash"] = crashed is not None and (crashed < 0 or crashed >= 128)
    record["seconds"] = round(time.monotonic() - started, 1)
    (out / "experiment.json").write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY

  cat > "$dir/verify.py" <<'PY'
"""The acceptance checks of K2 on one framework's outputs (gpu_check.sh; gpu_prepare.sh tests them on a simulation).

    python verify.py profile DIR --map model.vmfb [--calls 23 --warmup 3]
        DIR holds run.tracy (the kept capture), sections.json (profile --json), report.json (report
        --warmup 3 --calls 23 --json), sections.tracy (the same report's --tracy), report-all.json
        (report --warmup 0 --calls 23 --json), stats-gpu.json (tracy-stats --gpu --json),
        csvexport-gpu.csv and csvexport-sections-gpu.csv (Tracy's csvexport -g of run.tracy, sections.tracy).
    python verify.py eager DIR --map model.vmfb --calls N   (eager.tracy, eager.tracy.json)

CUDA modules are compiled without debug groups (IREE 3.13's CUDA runtime crashes on them), so the raw
capture has dispatch zones and no section zones. Checks, each PASS/FAIL with numbers: coverage error
<= 0.01%; every section of the map in the table with dispatches; the raw capture: calls x the map's
dispatches per call, no section zones, no unknown GPU zones, csvexport and sectionmark's reader agree;
the report's own Tracy capture (report --tracy): the measured calls' dispatch zones, each nested in the
section zones of its command's group (sectionmark's reader: enclosing zones; Tracy's csvexport: the
section zones whose time spans contain it); the per-section busy times summed (top-level rows +
unmarked) equal the summed dispatch zones read by `tracy-stats` and by csvexport, over all calls and
over the measured calls.
Writes DIR/verify.json; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

COVERAGE_LIMIT = 1e-4  # 0.01 %
RESULTS: list[dict] = []
LANE_TRACK = "concurrent dispatches"  # sectionmark's replay: overlapping dispatches drawn flat beside the sections


def check(name: str, ok: bool, detail: str) -> bool:
    RESULTS.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    return ok


def load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        check(f"read {path.name}", False, str(error))
        return None


def load_capture(path: Path):
    from sectionmark.tracy import read_capture

    try:
        return read_capture(path)
    except Exception as error:  # noqa: BLE001  (a failed read is a failed check, not a crash)
        check(f"read {path.name}", False, f"{type(error).__name__}: {error}")
        return None


class MapFacts:
    def __init__(self, map_path: str):
        from sectionmark.artifacts import read_section_map

        self.map = read_section_map(map_path)
        self.sections = {tuple(path) for path in self.map.sections}
        self.reached = {tuple(path) for path in self.map.reached}
        self.prefixes = {path[:depth] for path in self.sections for depth in range(1, len(path) + 1)}
        self.groups: dict[str, set] = collections.defaultdict(set)  # dispatch key -> its commands' groups
        for buffer in self.map.command_buffers:
            for command in buffer.commands:
                if command.op == "dispatch":
                    group = tuple(max(command.shares, key=lambda s: s.weight).path) if command.shares else ()
                    self.groups[command.key].add(group)
        self.keys = set(self.groups)
        self.leaf_names = {path[-1] for path in self.prefixes} - self.keys
        # Per call, where the map has one command buffer with dispatches (executed once per call): its keys.
        dispatching = [b for b in self.map.command_buffers if any(c.op == "dispatch" for c in b.commands)]
        self.per_call = (collections.Counter(c.key for c in dispatching[0].commands if c.op == "dispatch")
                         if len(dispatching) == 1 else None)


def gpu_zones(capture, facts: MapFacts) -> dict:
    """What the GPU tracks hold, by sectionmark's reader.

    dispatches: (start, duration, key) of every dispatch zone; nested: those on section tracks (not on a
    replay's lane of concurrent dispatches), with the names of their enclosing section zones (outermost
    first); misplaced: section zones outside their path; sections: the number of section zones;
    unknown: the other zones not named iree_*.
    """
    found = {"dispatches": [], "nested": [], "misplaced": [], "sections": 0, "lane_dispatches": 0,
             "unknown": collections.Counter(), "tracks": len(capture.gpu_contexts)}
    for track in capture.gpu_contexts:
        lane = LANE_TRACK in track.name
        chains: list[tuple] = []
        for zone in track.zones:
            parent_chain = chains[zone.parent] if zone.parent >= 0 else ()
            parent = track.zones[zone.parent].name if zone.parent >= 0 else None
            chain = parent_chain + ((parent,) if parent in facts.leaf_names else ())
            chains.append(chain)
            if zone.name in facts.keys:
                found["dispatches"].append((zone.start_ns, zone.duration_ns, zone.name))
                if lane:
                    found["lane_dispatches"] += 1
                else:
                    found["nested"].append((zone.name, chain))
            elif zone.name in facts.leaf_names:
                found["sections"] += 1
                if chain + (zone.name,) not in facts.prefixes:
                    found["misplaced"].append((zone.name, chain))
            elif not zone.name.startswith("iree_"):
                found["unknown"][zone.name] += 1
    return found


def check_known(found: dict, label: str) -> None:
    unknown = found["unknown"]
    check(f"{label}: no GPU zones the map does not know", not unknown,
          "none" if not unknown else f"{dict(unknown.most_common(5))}")


def check_no_section_zones(found: dict, label: str) -> None:
    check(f"{label}: dispatch zones and no section zones (module compiled without debug groups)",
          found["dispatches"] and not found["sections"],
          f"{len(found['dispatches'])} dispatch zones, {found['sections']} section zones on {found['tracks']} GPU track(s)")


def check_per_call(dispatches: list, facts: MapFacts, calls: int, label: str) -> None:
    """The dispatch zones of `calls` calls: per key, calls x the map's commands of that key (one buffer per call)."""
    got = collections.Counter(key for _s, _d, key in dispatches)
    if facts.per_call is not None:
        want = collections.Counter({key: count * calls for key, count in facts.per_call.items()})
        differ = {key: (got.get(key, 0), want.get(key, 0)) for key in set(got) | set(want) if got.get(key, 0) != want.get(key, 0)}
        check(f"{label}: {calls} calls x the map's dispatches per call", bool(dispatches) and not differ,
              f"{len(dispatches)} dispatch zones = {calls} x {sum(facts.per_call.values())}: "
              + ("every key's count as in the map" if not differ else f"keys (zones, expected) differing: {dict(list(differ.items())[:5])}"))
    else:  # several command buffers dispatch: only the total can be told
        check(f"{label}: whole calls of dispatch zones", bool(dispatches) and len(dispatches) % calls == 0,
              f"{len(dispatches)} dispatch zones for {calls} calls (the map has several dispatching command buffers)")


def check_nesting(found: dict, facts: MapFacts, label: str) -> None:
    bad = [(key, chain, sorted(facts.groups[key])) for key, chain in found["nested"] if chain not in facts.groups[key]]
    bad += [(name, chain, "section zone outside its path") for name, chain in found["misplaced"]]
    check(f"{label}: section zones nest their dispatch zones (sectionmark reader)",
          found["nested"] and found["sections"] and not bad,
          f"{len(found['nested'])} dispatch zones, each inside its command's group, {found['sections']} section zones"
          f" ({found['lane_dispatches']} drawn on lanes of concurrent dispatches)"
          if not bad else f"{len(bad)} misplaced, e.g. {bad[:3]}")


def csvexport_zones(path: Path) -> list[tuple[str, int, int]]:
    """(name, start, duration) of every GPU zone in `csvexport -g` output."""
    zones = []
    for line in path.read_text(errors="replace").splitlines()[1:]:
        parts = line.rsplit(",", 3)
        if len(parts) == 4 and parts[2].strip().lstrip("-").isdigit() and parts[3].strip().lstrip("-").isdigit():
            zones.append((parts[0], int(parts[2]), int(parts[3])))
    return zones


def csv_dispatches(zones, facts: MapFacts) -> list:
    return [(start, duration, name) for name, start, duration in zones if name in facts.keys]


def nesting_by_csvexport(zones, facts: MapFacts, label: str) -> None:
    """Independent of sectionmark's reader: nesting from the zones' time spans alone.

    A dispatch zone's group is the chain of section zones whose spans contain it. Zone ends may coincide
    with the next zone's start, so a section zone that only touches it (ends where it starts, or starts
    where it ends) may be counted or not: it passes when the zones overlapping it are its group or part
    of it, and every name of its group has a zone around it. A dispatch zone that starts before an
    earlier one ended ran concurrently: the replay draws it on a lane, outside the sections (not checked).
    """
    import bisect

    sections = sorted((start, -duration, name) for name, start, duration in zones if name in facts.leaf_names)
    dispatches = sorted(csv_dispatches(zones, facts))
    starts = [start for start, _d, _n in sections]
    longest = max((-d for _s, d, _n in sections), default=0)
    bad, touching, concurrent, examples, main_end = 0, 0, 0, [], None
    for start, duration, key in dispatches:
        end = start + duration
        if main_end is not None and start < main_end:
            concurrent += 1
            continue
        main_end = end
        low, high = bisect.bisect_left(starts, start - longest), bisect.bisect_right(starts, start)
        around = sorted((s, -d, n) for s, d, n in sections[low:high] if s <= start and s - d >= end)
        around.sort(key=lambda z: (z[0], -z[1]))  # outermost first: earlier start, then longer
        chain = tuple(name for _s, _d, name in around)
        inside = tuple(n for s, d, n in around if s < end and s + d > start or (duration == 0 and s < start < s + d))
        groups = facts.groups[key]
        if chain in groups:
            continue
        if any(set(inside) <= set(group) and set(group) <= set(chain) for group in groups):
            touching += 1
            continue
        bad += 1
        if len(examples) < 3:
            examples.append((key, chain, sorted(groups)))
    checked = len(dispatches) - concurrent
    check(f"{label}: section zones nest their dispatch zones (csvexport time spans)",
          checked > 0 and bool(sections) and not bad,
          f"{checked} dispatch zones, each inside its command's group ({touching} with zones that only touch it; "
          f"{len(sections)} section zones; {concurrent} concurrent, not checked)"
          if not bad else f"{bad} of {checked} not inside their group, e.g. {examples}")


def check_same_zones(csv: list, reader: list, label: str) -> None:
    csv_total, reader_total = sum(d for _s, d, _k in csv), sum(d for _s, d, _k in reader)
    same_keys = collections.Counter(k for _s, _d, k in csv) == collections.Counter(k for _s, _d, k in reader)
    check(f"{label}: csvexport and sectionmark's reader see the same dispatch zones",
          bool(reader) and len(csv) == len(reader) and same_keys and csv_total == reader_total,
          f"{len(csv)} vs {len(reader)} zones (per-key counts equal: {same_keys}), {csv_total} vs {reader_total} ns")


def busy_sum(document) -> tuple[int, int, int]:
    """(Σ top-level busy_ns + unmarked_ns, total_ns, number of rows summed)."""
    rows = [row for row in document["sections"] if not row["unmarked"] and len(row["path"]) == 1]
    return sum(row["busy_ns"] for row in rows) + document["unmarked_ns"], document["total_ns"], len(rows) + 1


def profile(args) -> None:
    directory = Path(args.dir)
    facts = MapFacts(args.map)
    print(f"map: {len(facts.sections)} sections ({len(facts.reached)} reached dispatches), "
          f"{len(facts.keys)} dispatch keys, target {facts.map.target}, "
          f"{sum(facts.per_call.values()) if facts.per_call else '?'} dispatches per call")
    check("map: every section reached dispatches", facts.reached == facts.sections,
          f"{len(facts.reached)} of {len(facts.sections)}")
    measured_calls = args.calls - args.warmup

    sections = load_json(directory / "sections.json")
    if sections is not None:
        error = sections["coverage_error"]
        check("profile: coverage error <= 0.01%", error <= COVERAGE_LIMIT, f"{error:.3e} ({error * 100:.6f} %)")
        rows = {tuple(row["path"]): row for row in sections["sections"] if not row["unmarked"]}
        missing = sorted(facts.sections - set(rows))
        idle = sorted(path for path in facts.reached if path in rows and not rows[path]["dispatches"])
        check("profile: every section in the table, with dispatches", not missing and not idle,
              f"{len(rows)} section rows; missing {missing}; without dispatches {idle}")
        check("profile: calls and warmup", (sections["calls"], sections["warmup"]) == (measured_calls, args.warmup)
              and sections["calls_known"], f"calls {sections['calls']}, warmup {sections['warmup']}, known {sections['calls_known']}")

    report = load_json(directory / "report.json")
    if sections is not None and report is not None:
        same = {tuple(r["path"]): r["busy_ns"] for r in report["sections"]} == {tuple(r["path"]): r["busy_ns"] for r in sections["sections"]}
        check("report of the kept capture = profile", same and report["total_ns"] == sections["total_ns"],
              f"total {report['total_ns']} vs {sections['total_ns']} ns; every row's busy_ns equal: {same}")

    # The raw capture (profile --keep-profile): IREE's zones, a dispatch zone per dispatch, no section zones.
    capture = load_capture(directory / "run.tracy")
    reader_dispatches = []
    if capture is not None:
        found = gpu_zones(capture, facts)
        reader_dispatches = found["dispatches"]
        check_no_section_zones(found, "capture")
        check_per_call(reader_dispatches, facts, args.calls, "capture")
        check_known(found, "capture")

    csv_path = directory / "csvexport-gpu.csv"
    run_csv = []
    if csv_path.is_file():
        zones = csvexport_zones(csv_path)
        run_csv = csv_dispatches(zones, facts)
        csv_sections = sum(name in facts.leaf_names for name, _s, _d in zones)
        check("capture: csvexport reads no section zones either", bool(run_csv) and not csv_sections,
              f"{len(run_csv)} dispatch zones, {csv_sections} section zones of {len(zones)} GPU zones")
        check_same_zones(run_csv, reader_dispatches, "capture")
    else:
        check("csvexport -g output of run.tracy", False, f"{csv_path} missing")

    stats = load_json(directory / "stats-gpu.json")
    stats_total = None
    if stats is not None:
        stats_rows = [row for row in stats["zones"] if row["kind"] == "gpu" and row["name"] in facts.keys]
        stats_total = sum(row["total_ns"] for row in stats_rows)
        stats_count = sum(row["count"] for row in stats_rows)
        print(f"tracy-stats --gpu: {stats_count} dispatch zones of {len(stats_rows)} keys, {stats_total} ns")

    everything = load_json(directory / "report-all.json")
    if everything is not None and stats_total is not None:
        summed, total, rows = busy_sum(everything)
        check(f"all {args.calls} calls: per-section busy summed = dispatch zones (tracy-stats)", abs(summed - stats_total) <= rows
              and total == stats_total, f"Σ top-level busy + unmarked {summed} ns, total_ns {total}, tracy-stats {stats_total} "
              f"(rounding allowance {rows} ns)")
        if run_csv:
            csv_total = sum(d for _s, d, _k in run_csv)
            check(f"all {args.calls} calls: per-section busy summed = dispatch zones (csvexport)", abs(summed - csv_total) <= rows,
                  f"{summed} vs {csv_total} ns")

    measured = None  # the raw capture's dispatch zones of the measured calls (after the warmup calls)
    if reader_dispatches:
        ordered = sorted(reader_dispatches)
        per_call, rest = divmod(len(ordered), args.calls)
        measured = ordered[args.warmup * per_call:] if not rest else None
    if sections is not None and reader_dispatches:
        measured_ns = sum(d for _s, d, _k in measured) if measured is not None else None
        summed, total, rows = busy_sum(sections)
        check(f"measured calls: per-section busy summed = dispatch zones after the first {args.warmup} calls",
              measured_ns is not None and abs(summed - measured_ns) <= rows and total == measured_ns,
              f"Σ top-level busy + unmarked {summed} ns, total_ns {total}, zones {measured_ns} "
              f"({len(reader_dispatches) // args.calls} dispatch zones per call, {len(reader_dispatches) % args.calls} left over)")

    # The report's own Tracy capture (report --warmup W --calls N --tracy sections.tracy): the measured
    # calls' dispatch zones at their measured times, inside section zones nested as the sections.
    label = "report's Tracy capture"
    rendered = load_capture(directory / "sections.tracy")
    rendered_dispatches = []
    if rendered is not None:
        found = gpu_zones(rendered, facts)
        rendered_dispatches = found["dispatches"]
        check_nesting(found, facts, label)
        check_known(found, label)
        if measured is not None:
            want = collections.Counter(k for _s, _d, k in measured)
            got = collections.Counter(k for _s, _d, k in rendered_dispatches)
            want_ns, got_ns = sum(d for _s, d, _k in measured), sum(d for _s, d, _k in rendered_dispatches)
            check(f"{label}: the {measured_calls} measured calls' dispatch zones of the raw capture",
                  bool(want) and got == want and got_ns == want_ns,
                  f"{len(rendered_dispatches)} vs {len(measured)} zones (per-key counts equal: {got == want}), "
                  f"{got_ns} vs {want_ns} ns")
        else:
            check(f"{label}: the {measured_calls} measured calls' dispatch zones of the raw capture", False,
                  "the raw capture's dispatch zones do not split into calls")
    csv_path = directory / "csvexport-sections-gpu.csv"
    if csv_path.is_file():
        zones = csvexport_zones(csv_path)
        nesting_by_csvexport(zones, facts, label)
        check_same_zones(csv_dispatches(zones, facts), rendered_dispatches, label)
    else:
        check("csvexport -g output of sections.tracy", False, f"{csv_path} missing")


def eager(args) -> None:
    directory = Path(args.dir)
    facts = MapFacts(args.map)
    result = load_json(directory / "eager.tracy.json")
    if result is not None:
        check("eager: compiled logits = eager model", result.get("logits_match", False),
              f"max |diff| {result.get('max_abs_diff_vs_eager')}; vs reference {result.get('max_abs_diff_vs_reference')}")
    capture = load_capture(directory / "eager.tracy")
    if capture is None:
        return
    counts = collections.Counter(zone.name for track in capture.threads for zone in track.zones)
    want = {"K2 demo": 1, "Load": 1, "Warmup": 1, "Step": args.calls, "Compiled call": args.calls, "Argmax": args.calls,
            "Eager model": 1}
    got = {name: counts.get(name, 0) for name in want}
    check("eager: eager sections as CPU zones", got == want, f"{got}")
    model_sections = {name: counts.get(name, 0) for name in sorted(facts.leaf_names)}
    check("eager: the demo model's own sections as CPU zones (eager run)", all(model_sections.values()),
          f"{model_sections}")
    module_calls = sum(count for name, count in counts.items() if name.endswith(".main"))
    check("eager: sm.load's section around each compiled call", module_calls == args.calls + 1,
          f"{module_calls} zones named *.main for {args.calls + 1} calls")
    if not capture.gpu_contexts:
        check("eager: GPU zones", False, "none in this capture (expected only of a local-task simulation)")
        return
    # The compiled calls (module without debug groups): dispatch zones on the GPU, no section zones there.
    found = gpu_zones(capture, facts)
    dispatches = found["dispatches"]
    check_no_section_zones(found, "eager capture")
    check_per_call(dispatches, facts, args.calls + 1, "eager capture (warmup + calls)")
    check_known(found, "eager capture")
    # Where the GPU clock meets the CPU clock: each call's dispatch zones inside the CPU zone of the eager
    # section it was made in: the first call's in 'Warmup', each measured call's in its 'Compiled call'.
    per_call, rest = divmod(len(dispatches), args.calls + 1)
    ordered = sorted(dispatches)

    def spans(name):
        return sorted((z.start_ns, z.end_ns) for t in capture.threads for z in t.zones if z.name == name)

    outside, checked = collections.Counter(), 0
    if per_call and not rest:
        warmup_spans, call_spans = spans("Warmup"), spans("Compiled call")
        for index, (start, duration, _key) in enumerate(ordered):
            call = index // per_call
            name, found_spans, position = ("Warmup", warmup_spans, 0) if call == 0 else ("Compiled call", call_spans, call - 1)
            checked += 1
            if not (position < len(found_spans) and found_spans[position][0] <= start
                    and start + duration <= found_spans[position][1]):
                outside[name] += 1
    check("eager: the CPU zones of the eager sections enclose the dispatch zones of the calls made in them",
          checked > 0 and not outside,
          f"{checked} dispatch zones ({per_call} per call) checked against 'Warmup' (first call) and their call's "
          f"'Compiled call': {sum(outside.values())} outside {dict(outside)}"
          if per_call and not rest else f"{len(dispatches)} dispatch zones do not split into {args.calls + 1} calls")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["profile", "eager"])
    parser.add_argument("dir")
    parser.add_argument("--map", required=True)
    parser.add_argument("--calls", type=int, default=23, help="profile: all calls in the capture; eager: measured calls")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    try:
        (profile if args.mode == "profile" else eager)(args)
    except Exception as error:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        check("verify ran to the end", False, f"{type(error).__name__}: {error}")
    out = Path(args.dir) / f"verify-{args.mode}.json"
    out.write_text(json.dumps(RESULTS, indent=1))
    failed = [r["check"] for r in RESULTS if not r["ok"]]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
PY
}

if [ "${1:-}" = "--write-helpers" ]; then
  write_helpers "${2:?usage: gpu_check.sh --write-helpers DIR}"
  exit 0
fi

# ----------------------------------------------------------------------------------------------- setup
START=$(date +%s)
BUDGET_S=${GPU_CHECK_BUDGET_S:-300}           # the whole run, packaging included (goal: 5 minutes)
DEADLINE=$((START + BUDGET_S))
PY=${PYTHON:-python3}   # the machine's Python 3.12 with torch, JAX, numpy, pytest (its venv if python3 is another)
if [ -z "${PYTHON:-}" ] && ! python3 -c 'import numpy, pytest' 2>/dev/null && [ -x /opt/torch/.venv/bin/python3 ]; then
  PY=/opt/torch/.venv/bin/python3
fi
OUT=${OUT:-$ROOT/.gpu-out}
WORK=${GPU_CHECK_WORK:-/tmp/sm-gpu-check}
SITE=$WORK/site                               # iree-base-runtime, zstandard (pip --target)
SMSITE=$WORK/sm-site                          # sectionmark itself, with its C extensions
BUILDTOOLS=$WORK/buildtools                   # setuptools >= 77 for the build (pyproject's license field)
HELPERS=$WORK/helpers
G=$ROOT/.gpu
DEVICE=${GPU_CHECK_DEVICE:-cuda}
# Only for trying this script on a CPU machine (gpu_prepare.sh): SIMULATE=1 replaces the CUDA run of
# `profile` by a simulated capture (after running the real command, which must fail for want of a GPU);
# SKIP_INSTALL=1 uses the current environment; EAGER_DEVICE / EAGER_MODULES: device and folder of the
# modules (nanogpt-FRAMEWORK/model.vmfb) for the eager capture (local-task and llvm-cpu modules).
SIMULATE=${GPU_CHECK_SIMULATE:-0}
SKIP_INSTALL=${GPU_CHECK_SKIP_INSTALL:-0}
EAGER_DEVICE=${GPU_CHECK_EAGER_DEVICE:-$DEVICE}
EAGER_MODULES=${GPU_CHECK_EAGER_MODULES:-$G}
CALLS=20 WARMUP=3
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK/logs" "$WORK/torch" "$WORK/jax" "$WORK/pytest"
exec > >(tee "$OUT/gpu_check.log") 2>&1
TEE_PID=$!
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
export PATH="$SMSITE/bin:$SITE/bin:$PATH"
export PYTHONPATH="$SMSITE:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export SM_PREBUILT_DIR="$G/prebuilt-compile"
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cpu   # JAX only runs the eager reference, on the CPU
export ROOT PY WORK SITE SMSITE BUILDTOOLS HELPERS G DEVICE SIMULATE EAGER_DEVICE EAGER_MODULES CALLS WARMUP
write_helpers "$HELPERS"

ts() { date +%H:%M:%S; }
elapsed() { echo $(( $(date +%s) - START )); }
SUMMARY=()
NSTEP=0

# step NAME LIMIT_S FUNCTION [ARGS...]: run under `timeout` (the deadline shortens it), full output in
# $WORK/logs/NN-NAME.log, its tail here; skipped when less than 15 s are left.
step() {
  local name=$1 limit=$2 left rc t0 t1 log
  shift 2
  NSTEP=$((NSTEP + 1))
  log=$WORK/logs/$(printf %02d "$NSTEP")-$name.log
  left=$((DEADLINE - $(date +%s) - 20))
  if [ "$left" -lt 15 ]; then
    echo "[$(ts) +$(elapsed)s] --- $name SKIPPED (time budget spent)"
    SUMMARY+=("$(printf '%-26s %-8s %5s' "$name" skipped -)")
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "[$(ts) +$(elapsed)s] >>> $name (limit ${limit}s)"
  t0=$(date +%s)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" > "$log" 2>&1 < /dev/null
  rc=$?
  t1=$(date +%s)
  tail -n "${TAIL_LINES:-40}" "$log" | cut -c1-400 | sed 's/^/    /'
  [ "$rc" = 124 ] && echo "    (timed out after ${limit}s)"
  echo "[$(ts) +$(elapsed)s] <<< $name rc=$rc ($((t1 - t0))s)"
  SUMMARY+=("$(printf '%-26s rc=%-5s %4ss' "$name" "$rc" $((t1 - t0)))")
  return "$rc"
}

# ----------------------------------------------------------------------------------------------- steps
s_env() {
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -srm)"
  echo "repo: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo '?') ($(git -C "$ROOT" status --short 2>/dev/null | wc -l) changed files)"
  echo "python: $(command -v "$PY") $("$PY" -VV)"
  nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1; echo "nvidia-smi rc=$?"
  cat "$WORK/nvidia-smi.txt"
  nvidia-smi -q > "$WORK/nvidia-smi-q.txt" 2>&1
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader > "$WORK/gpu-name.txt" 2>&1
  (nvcc --version 2>&1 | tail -n 2; gcc --version 2>&1 | head -n 1) | sed 's/^/toolchain: /'
  "$PY" -m pip list 2>/dev/null > "$WORK/pip-list.txt"
  grep -i -E '^(torch|jax|jaxlib|numpy|pytest|setuptools|rich|zstandard|matplotlib|iree|hypothesis) ' "$WORK/pip-list.txt"
  echo "carried:"; du -sh "$ROOT/.whl" "$ROOT/.gpu" 2>&1; ls -la "$ROOT/.whl" 2>&1
  cat "$G/MANIFEST.txt" 2>&1
  (cd "$G" && sha256sum -c --quiet SHA256SUMS) && echo "carried files: checksums OK"
  local digest
  digest=$(cd "$ROOT" && "$PY" -c 'import hashlib, pathlib; h = hashlib.sha256(); [h.update(str(p).encode() + p.read_bytes()) for p in sorted(pathlib.Path("src").rglob("*")) if p.suffix in (".py", ".c")]; print(h.hexdigest())')
  if grep -qx "src digest: $digest" "$G/MANIFEST.txt"; then
    echo "src/ is the one the modules were compiled with"
  else
    echo "WARNING: src/ changed since gpu_prepare.sh compiled the modules (digest $digest): run it again if the section map changed"
  fi
}

s_install() {
  local rc=0 setuptools_ok
  # 1. IREE's runtime (with the tracing runtime, its tools and iree-tracy-capture), from the carried wheel.
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$ROOT"/.whl/iree_base_runtime-*.whl || rc=1
  # 2. What the machine lacks of: ml_dtypes (iree.runtime imports it; JAX brings it), zstandard (the Tracy reader).
  for module in ml_dtypes zstandard; do
    if ! "$PY" -c "import $module" 2>/dev/null; then
      echo "$module missing: installing the carried wheel"
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$ROOT"/.whl/"$module"-*.whl || rc=1
    fi
  done
  # 3. sectionmark with its C extensions (setup.py), no network: setuptools >= 77 from the carried wheel if needed.
  setuptools_ok=$("$PY" -c 'import setuptools; print(int(setuptools.__version__.split(".")[0]) >= 77)' 2>/dev/null)
  echo "machine's setuptools >= 77: ${setuptools_ok:-missing}"
  if [ "$setuptools_ok" != True ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$BUILDTOOLS" "$ROOT"/.whl/setuptools-*.whl || rc=1
  fi
  (cd "$ROOT" && PYTHONPATH="$BUILDTOOLS:$PYTHONPATH" "$PY" -m pip install --no-index --no-deps --no-build-isolation \
      --no-cache-dir --target "$SMSITE" .) || {
    echo "pip install of the project failed: building the C extensions in place instead"
    rc=1
    (cd "$ROOT" && PYTHONPATH="$BUILDTOOLS:$PYTHONPATH" "$PY" setup.py build_ext --inplace) &&
      rm -rf "$SMSITE/sectionmark" && mkdir -p "$SMSITE" && ln -sfn "$ROOT/src/sectionmark" "$SMSITE/sectionmark"
  }
  "$PY" - <<'EOF' || rc=1
import importlib, os, sys
import sectionmark, iree.runtime, iree.runtime.version as v, zstandard, numpy, ml_dtypes
print("sectionmark", sectionmark.__version__, "from", os.path.dirname(sectionmark.__file__))
print("IREE runtime", v.VERSION, v.REVISIONS, "from", os.path.dirname(iree.runtime.__file__))
print("zstandard", zstandard.__version__, "ml_dtypes", ml_dtypes.__version__, "numpy", numpy.__version__, "python", sys.version.split()[0])
for name in ("sectionmark.markers._zonestack", "sectionmark.readers._ireeprof"):
    module = importlib.import_module(name)
    print("C extension", name, "OK:", os.path.basename(module.__file__))
from sectionmark.artifacts.tools import find_tool, tracing_tools_dir
for tool, tracing in (("iree-benchmark-module", True), ("iree-tracy-capture", True), ("iree-benchmark-module", False)):
    print("tool", find_tool(tool, tracing=tracing))
try:
    import iree.compiler
    print("iree.compiler importable (unexpected here):", iree.compiler.__file__)
except ImportError:
    print("iree.compiler: not installed (expected: modules were compiled beforehand)")
EOF
  echo "sectionmark entry point: $(command -v sectionmark || echo 'missing (python -m sectionmark is used)')"
  "$PY" -m sectionmark --help > /dev/null || rc=1
  "$PY" -c 'import iree.runtime.version as v; print(v.VERSION, v.REVISIONS["IREE"])' > "$WORK/iree-version.txt"
  return $rc
}

s_cuda_probe() {
  "$PY" -c 'import iree.runtime as rt; print("cuda devices:", rt.get_driver("cuda").query_available_devices())'
  local rc=$?
  IREE_PY_RUNTIME=tracy "$PY" -c 'import iree.runtime as rt; print("tracing runtime, cuda devices:", rt.get_driver("cuda").query_available_devices())' || rc=1
  "$("$PY" -c 'from sectionmark.artifacts.tools import find_tool; print(find_tool("iree-benchmark-module", tracing=True))')" \
    --help 2>&1 | grep -E 'cuda_tracing|cuda_use_streams' | head -n 4
  return $rc
}

sm() { "$PY" -m sectionmark "$@"; }

s_profile() {  # FRAMEWORK: the acceptance command, as written in the issue
  cd "$WORK/$1" && sm profile "$G/nanogpt-$1/model.vmfb" --input "$G/nanogpt-$1/tokens.npy" --device "$DEVICE" \
    -n "$CALLS" --warmup "$WARMUP" --keep-profile run.tracy --json sections.json
  local rc=$?
  [ "$SIMULATE" = 1 ] || return $rc
  echo "SIMULATION: profile exited $rc (1 expected without a GPU); a simulated CUDA capture instead"
  [ "$rc" = 1 ] || return 1
  "$PY" "$HELPERS/sim_capture.py" "$G/nanogpt-$1/model.vmfb" run.tracy --calls $((CALLS + WARMUP)) --repo "$ROOT" &&
    sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls $((CALLS + WARMUP)) --json sections.json
}

s_report() {
  cd "$WORK/$1" || return 1
  local rc=0 all=$((CALLS + WARMUP))
  # --tracy: the report's own capture, section zones around the measured calls' dispatch zones (the raw
  # capture has none: CUDA modules are compiled without debug groups).
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls "$all" --json report.json \
    --table report-table.txt --tracy sections.tracy || rc=1
  ls -la sections.tracy
  echo "=== every call (--warmup 0), for the sum check"
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup 0 --calls "$all" --json report-all.json > report-all.txt || rc=1
  tail -n 3 report-all.txt
  echo "=== the other outputs"
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls "$all" --csv sections.csv \
    --perfetto run.perfetto.json --kernels kernels.txt --components components.txt --sites --by name > report-more.txt || rc=1
  tail -n 6 report-more.txt
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls "$all" --chart sections.png \
    --components-chart components.png > /dev/null || echo "(charts failed: $?)"
  return $rc
}

s_stats() {
  cd "$WORK/$1" || return 1
  local rc=0
  sm tracy-stats run.tracy > stats.txt || rc=1
  cat stats.txt
  sm tracy-stats run.tracy --gpu --json stats-gpu.json > stats-gpu.txt || rc=1
  sm tracy-stats run.tracy --gpu --depth 0 > stats-gpu-depth0.txt || rc=1
  return $rc
}

csvexport_tool() {
  local tool=$WORK/tracy-csvexport
  [ -x "$tool" ] || { gzip -dc "$G/tracy-csvexport-0.11.2.gz" > "$tool" && chmod +x "$tool"; } || return 1
  echo "$tool"
}

s_csvexport() {  # FRAMEWORK CAPTURE: csvexport-STEM-gpu.csv (every GPU zone), csvexport-STEM-cpu-summary.csv
  cd "$WORK/$1" || return 1
  local tool rc=0 stem=${2%.tracy}
  tool=$(csvexport_tool) || return 1
  "$tool" -g "$2" > "csvexport-$stem-gpu.csv" || rc=1
  "$tool" "$2" > "csvexport-$stem-cpu-summary.csv" || rc=1
  [ "$stem" = run ] && cp csvexport-run-gpu.csv csvexport-gpu.csv
  echo "$(($(wc -l < "csvexport-$stem-gpu.csv") - 1)) GPU zones; per name (count, summed ns):"
  awk -F, 'NR > 1 { n[$1]++; t[$1] += $NF } END { for (k in n) printf "%8d %14d  %s\n", n[k], t[k], k }' \
    "csvexport-$stem-gpu.csv" | sort -k2,2nr | head -n 30
  return $rc
}

s_csvexports() {  # FRAMEWORK: the raw capture and the report's own
  local rc=0
  echo "=== run.tracy (profile --keep-profile)"
  s_csvexport "$1" run.tracy || rc=1
  echo "=== sections.tracy (report --tracy)"
  s_csvexport "$1" sections.tracy || rc=1
  return $rc
}

s_experiment() {  # informational: the torch demo compiled WITH debug groups on CUDA (experiment.py)
  ulimit -c 0
  cd "$WORK" && mkdir -p experiment &&
    "$PY" "$HELPERS/experiment.py" "$G/nanogpt-torch-groups/model.vmfb" "$G/nanogpt-torch/tokens.npy" experiment \
      --device "$DEVICE" --budget 50
}

s_verify() {
  cd "$WORK/$1" && "$PY" "$HELPERS/verify.py" profile . --map "$G/nanogpt-$1/model.vmfb" --calls $((CALLS + WARMUP)) \
    --warmup "$WARMUP"
}

s_pytest_gpu() {
  cd "$ROOT" && PYTHONPATH="$HELPERS:$PYTHONPATH" "$PY" -m pytest -m gpu tests/gpu/test_gpu.py -p sm_prebuilt_compile \
    -p no:cacheprovider -v -rA --junitxml="$WORK/pytest/pytest-gpu.xml" --basetemp="$WORK/pytest/tmp"
  local rc=$?
  # Skipped tests would pass quietly: the check is that both ran and passed.
  "$PY" - "$WORK/pytest/pytest-gpu.xml" <<'EOF' || rc=1
import sys, xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
print("pytest -m gpu:", counts)
sys.exit(0 if counts["tests"] >= 2 and counts["failures"] == counts["errors"] == counts["skipped"] == 0 else 1)
EOF
  return $rc
}

s_eager() {
  cd "$WORK/$1" || return 1
  local rc=0
  "$PY" "$HELPERS/eager_capture.py" capture eager.tracy --vmfb "$EAGER_MODULES/nanogpt-$1/model.vmfb" \
    --tokens "$G/nanogpt-$1/tokens.npy" --framework "$1" --device "$EAGER_DEVICE" --calls 10 \
    --reference "$G/nanogpt-$1/reference_logits.npy" --repo "$ROOT" || return 1
  sm tracy-stats eager.tracy > eager-stats.txt || rc=1
  cat eager-stats.txt
  sm tracy-stats eager.tracy --cpu --depth 0 || rc=1
  echo "=== report of the eager capture (its GPU zones; first call dropped)"
  sm report eager.tracy --map "$EAGER_MODULES/nanogpt-$1/model.vmfb" --warmup 1 --json eager-report.json > eager-report.txt || rc=1
  cat eager-report.txt
  s_csvexport "$1" eager.tracy > /dev/null || rc=1
  "$PY" "$HELPERS/verify.py" eager . --map "$EAGER_MODULES/nanogpt-$1/model.vmfb" --calls 10 || rc=1
  return $rc
}

s_pytest_gpu_suite() {  # informational: `pytest -m gpu` as written, over the whole suite
  cd "$ROOT" && PYTHONPATH="$HELPERS:$PYTHONPATH" "$PY" -m pytest -m gpu -p sm_prebuilt_compile -p no:cacheprovider \
    --continue-on-collection-errors -q -rfEs --basetemp="$WORK/pytest/tmp-suite"
}

# ----------------------------------------------------------------------------------------------- run
echo "[$(ts)] K2 GPU check: repo $ROOT, python $PY, device $DEVICE, out $OUT, budget ${BUDGET_S}s"
export -f sm csvexport_tool s_env s_install s_cuda_probe s_profile s_report s_stats s_csvexport s_csvexports s_verify \
  s_pytest_gpu s_eager s_pytest_gpu_suite s_experiment

step env 60 s_env
if [ "$SKIP_INSTALL" = 1 ]; then
  echo "SKIP_INSTALL: using the current environment"
else
  TAIL_LINES=25 step install 120 s_install
fi
step cuda-probe 60 s_cuda_probe
for fw in torch jax; do
  step "profile-$fw" 120 s_profile "$fw"
  TAIL_LINES=12 step "report-$fw" 90 s_report "$fw"
  TAIL_LINES=12 step "tracy-stats-$fw" 45 s_stats "$fw"
  TAIL_LINES=12 step "csvexport-$fw" 45 s_csvexports "$fw"
  step "verify-$fw" 60 s_verify "$fw"
done
step pytest-gpu 180 s_pytest_gpu
for fw in torch jax; do
  TAIL_LINES=30 step "eager-$fw" 150 s_eager "$fw"
done
# (the suite leaves the experiment its minute)
suite_limit=$((DEADLINE - $(date +%s) - 20 - 65)); [ "$suite_limit" -gt 120 ] && suite_limit=120
[ "$suite_limit" -lt 15 ] && suite_limit=15
TAIL_LINES=15 step pytest-gpu-suite "$suite_limit" s_pytest_gpu_suite
# Informational, not acceptance: a module with debug groups in graph mode, and with default flags (crash).
TAIL_LINES=12 step experiment 60 s_experiment

# ----------------------------------------------------------------------------------------------- outputs
{
  echo "K2 GPU check, $(date -u +%FT%TZ), $(elapsed)s"
  echo "GPU: $(cat "$WORK/gpu-name.txt" 2>/dev/null)"
  echo "IREE runtime: $(cat "$WORK/iree-version.txt" 2>/dev/null)"
  echo "repo: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null)"
  echo
  printf '%s\n' "${SUMMARY[@]}"
  echo
  for f in "$WORK"/torch/verify-*.json "$WORK"/jax/verify-*.json; do
    [ -f "$f" ] || continue
    "$PY" -c 'import json, sys; [print(("PASS " if r["ok"] else "FAIL ") + sys.argv[2] + ": " + r["check"]) for r in json.load(open(sys.argv[1]))]' \
      "$f" "$(basename "$(dirname "$f")")/$(basename "$f" .json)"
  done
  echo
  echo "experiment (informational, not an acceptance check: the torch demo compiled WITH debug groups):"
  "$PY" - "$WORK/experiment/experiment.json" <<'EOF' 2>&1 | sed 's/^/  /'
import json, sys
record = json.load(open(sys.argv[1]))
print(f"module has debug groups: {record['module_has_debug_groups']}; default flags crash: {record['default_flags_crash']}")
for run in record["runs"]:
    capture = run.get("capture")
    if isinstance(capture, dict):
        capture = (f"{capture['dispatch_zones']} dispatch zones, {capture['section_zones']} section zones, "
                   f"{capture['dispatch_zones_outside_their_group']} dispatch zones outside their group")
    print(f"{run['run']}: rc={run['rc']} ({run['outcome'][:160]})" + (f"; capture: {capture}" if capture else ""))
EOF
} > "$WORK/summary.txt"
"$PY" - "$WORK" > "$OUT/verify.json" <<'EOF'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
print(json.dumps({f"{p.parent.name}/{p.stem}": json.loads(p.read_text()) for p in sorted(work.glob("*/verify-*.json"))}, indent=1))
EOF
cp "$WORK/summary.txt" "$OUT/summary.txt"
cp "$WORK/nvidia-smi.txt" "$OUT/nvidia-smi.txt" 2>/dev/null
for fw in torch jax; do cp "$WORK/$fw/sections.json" "$OUT/sections-$fw.json" 2>/dev/null; done
cp "$OUT/gpu_check.log" "$WORK/logs/00-transcript-so-far.log" 2>/dev/null
tar -C "$(dirname "$WORK")" --exclude="$(basename "$WORK")/site" --exclude="$(basename "$WORK")/sm-site" \
  --exclude="$(basename "$WORK")/buildtools" --exclude="$(basename "$WORK")/tracy-csvexport" \
  -czf "$OUT/results.tar.gz" "$(basename "$WORK")"
if [ "$(stat -c %s "$OUT/results.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  echo "results.tar.gz over 15 MiB: leaving the captures and CSVs out"
  tar -C "$(dirname "$WORK")" --exclude='*.tracy' --exclude='*.csv' --exclude="$(basename "$WORK")/site" \
    --exclude="$(basename "$WORK")/sm-site" --exclude="$(basename "$WORK")/buildtools" \
    --exclude="$(basename "$WORK")/tracy-csvexport" -czf "$OUT/results.tar.gz" "$(basename "$WORK")"
fi
echo
echo "==================== summary ($(elapsed)s) ===================="
cat "$WORK/summary.txt"
echo "outputs in $OUT:"
ls -la "$OUT"
exec >&- 2>&-
wait "$TEE_PID"   # the transcript is complete before the run ends
