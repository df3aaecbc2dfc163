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
