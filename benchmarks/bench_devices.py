"""Attribution on several devices: speed per event and peak RSS against one device, in one run
(``python benchmarks/bench_attribution.py --devices 8``, or this file directly).

Two real profiles with the same dispatches per call, recorded here: a chain of 16x16 matmuls on one
local-task device, and the same chain split over N local-task devices (each device's part of the chain
moved there with ``flow.tensor.transfer``, its result moved back to device 0 and summed), run with one
worker per device (``--task_topology_max_group_count=1``). Each is read by ``sm.report`` (the N devices'
profile split by one pass into a one-device file per device, each read by the one read path,
`sectionmark.readers.devices`, `sectionmark.profiling.devices`) in a fresh process: a cold first run with its
peak RSS, then the best of R. Printed: events per second of each and their ratio per dispatch event, per host
event and per byte of profile (goal: the N devices' speed per event as one device's; their profile holds
more host events and bytes per dispatch: each device's executions, allocations and transfers), peak RSS of
each, and the peak RSS of the larger size as a multiple of the smaller's, for N devices and for one (goal:
bounded memory, at most 1.5x, and growing as one device's does).

``--model gpt``: issue M's named workload instead of the chain: the 4-layer tensor-parallel GPT of
tests/helpers/parallel_gpt.py split over the N devices (``tensor_parallel_gpt(devices=N)``: every block's heads
and MLP hidden units in N parts, marked with ``with section``, placed with ``transfer_to_logical_device``) against
the same GPT unsplit (the demo GPT with the same config and weights) on one device, both run for the same calls:
the sizes' dispatch events divided by the split GPT's dispatches per call (the unsplit GPT dispatches fewer per
call, so its profile holds fewer events; the speeds are per event).

Usage: python benchmarks/bench_devices.py [--devices 8] [--events 100000,400000] [--dispatches 48] [--repeat 3]
       python benchmarks/bench_devices.py --model gpt [--devices 8] [--events 100000,400000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

import sectionmark as sm
from sectionmark.artifacts import read_section_map
from sectionmark.artifacts.tools import find_tool
from sectionmark.readers.bundle_events import open_bundle
from sectionmark.workflows.measure import report
from sectionmark.workflows.runner import benchmark_command, write_inputs

SIZE = 16
TENSOR = f"tensor<{SIZE}x{SIZE}xf32>"
RECORDINGS = 3  # tries at a valid profile (see `recorded`)
HELPERS = Path(__file__).resolve().parents[1] / "tests" / "helpers"  # parallel_gpt.py, the GPT of --model gpt


class Program(NamedTuple):
    """A compiled module, its saved inputs, and how many dispatches it makes per call (on all its devices)."""

    module: Path
    inputs: list[Path]
    dispatches: int


def split_chain(devices: int, dispatches: int) -> str:
    """``dispatches`` 16x16 matmuls per call, ``dispatches // devices`` on each device; each device's chain
    starts from the inputs moved to it and its result is moved back to device 0 and summed there."""
    promise = "#hal.device.promise<@__device_{}>"
    on_0 = f"{{iree.abi.affinity = {promise.format(0)}}}"
    lines = ["module @chain {",
             f"func.func @main(%x: {TENSOR} {on_0}, %w: {TENSOR} {on_0}) -> ({TENSOR} {on_0}) {{",
             "  %c0 = arith.constant 0.0 : f32"]
    results = []
    for device in range(devices):
        x, w = f"%x{device}_0", f"%w{device}"
        if device:
            lines += [f"  {x} = flow.tensor.transfer %x : {TENSOR} to {promise.format(device)}",
                      f"  {w} = flow.tensor.transfer %w : {TENSOR} to {promise.format(device)}"]
        else:
            x, w = "%x", "%w"
        lines += [f"  %e{device} = tensor.empty() : {TENSOR}",
                  f"  %z{device} = linalg.fill ins(%c0 : f32) outs(%e{device} : {TENSOR}) -> {TENSOR}"]
        for step in range(dispatches // devices):
            location = f'loc("sectionmark:Device {device}/Layer {step % 4}")'
            out = f"%x{device}_{step + 1}"
            lines.append(f"  {out} = linalg.matmul ins({x}, {w} : {TENSOR}, {TENSOR}) outs(%z{device} : {TENSOR}) "
                         f"-> {TENSOR} {location}")
            x = out
        if device:
            lines.append(f"  %r{device} = flow.tensor.transfer {x} : {TENSOR} to {promise.format(0)}")
            x = f"%r{device}"
        results.append(x)
    total = results[0]
    for index, result in enumerate(results[1:]):
        lines.append(f"  %s{index} = arith.addf {total}, {result} : {TENSOR}")
        total = f"%s{index}"
    lines += [f"  return {total} : {TENSOR}", "}", "}"]
    return "\n".join(lines)


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM of /proc/self/status), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("/proc/self/status has no VmHWM (Linux only)")


def measure(profile_path: Path, module: Path, calls: int, repeat: int) -> None:
    """In this (fresh) process: the first report, then the best of ``repeat`` more; one JSON line."""
    section_map = read_section_map(module)
    before = peak_rss_mb()

    def end_to_end():
        return report(profile_path, section_map, calls=calls)

    start = time.perf_counter()
    result = end_to_end()
    first = time.perf_counter() - start
    peak = peak_rss_mb()
    sessions = [device.session for device in result.devices] if hasattr(result, "devices") else [result.session]
    events = sum(site.dispatches for session in sessions for site in session.sites)
    best = first
    for _ in range(repeat):
        start = time.perf_counter()
        end_to_end()
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"first_s": first, "best_s": best, "events": events, "before_mb": before, "peak_mb": peak,
                      "devices": len(sessions)}))


def fresh_process(profile_path: Path, module: Path, calls: int, repeat: int) -> dict:
    result = subprocess.run([sys.executable, __file__, "--measure", str(profile_path), "--module", str(module),
                             "--calls", str(calls), "--repeat", str(repeat)], capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"the measuring process failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def chain_program(directory: Path, devices: int, options: argparse.Namespace) -> Program:
    """The chain of ``--dispatches`` matmuls per call split over ``devices`` (`split_chain`), compiled."""
    module = directory / f"chain{devices}.vmfb"
    sm.compile(split_chain(devices, options.dispatches), devices=devices, quiet=True).save(module)
    rng = np.random.default_rng(0)
    inputs = write_inputs([rng.random((SIZE, SIZE), np.float32) * 0.1 for _ in range(2)], directory)
    return Program(module, inputs, options.dispatches)


def gpt_program(directory: Path, devices: int, options: argparse.Namespace) -> Program:
    """The tensor-parallel GPT over ``--devices`` devices, compiled for them; for one device the demo GPT it was cut
    from (the same config and weights), unsplit. Its dispatches per call: its map's dispatch commands (every
    command buffer runs once per call)."""
    if str(HELPERS) not in sys.path:
        sys.path.insert(0, str(HELPERS))
    from parallel_gpt import export_arguments, tensor_parallel_gpt

    split, unsplit = tensor_parallel_gpt(devices=options.devices)
    args, arg_device = export_arguments()
    if devices == 1:
        exported = sm.torch.export(unsplit, args=args, quiet=True)
    else:
        exported = sm.torch.export(split, args=args, arg_device=arg_device, quiet=True)
    compiled = sm.compile(exported, devices=devices, quiet=True)
    module = directory / f"gpt{devices}.vmfb"
    compiled.save(module)
    dispatches = sum(command.op == "dispatch" for buffer in compiled.section_map.command_buffers
                     for command in buffer.commands)
    return Program(module, write_inputs([args[0].numpy()], directory), dispatches)


PROGRAMS = {"chain": chain_program, "gpt": gpt_program}


def recorded(directory: Path, devices: int, program: Program, calls: int, options: argparse.Namespace) -> dict:
    """``program`` profiled for ``calls`` calls on ``devices`` local-task devices; its figures read in a fresh
    process."""
    profile_path = directory / f"{program.module.stem}.ireeprof"
    command = benchmark_command(program.module, "main", program.inputs, device="local-task",
                                extra_devices=["local-task"] * (devices - 1), calls=calls, profile_path=profile_path,
                                workers=1)
    for _attempt in range(RECORDINGS):
        subprocess.run(command, capture_output=True, check=True)
        rejected = subprocess.run([str(find_tool("iree-profile")), "summary", str(profile_path)], capture_output=True,
                                  text=True)
        if not rejected.returncode:
            break
        # iree-benchmark-module of IREE 3.13 now and then writes a profile of several devices that its own reader
        # rejects (a record header written twice: "profile record extends past file end"); recorded again.
        print(f"  (the recording on {devices} devices was not a valid profile for iree-profile: "
              f"{(rejected.stderr.strip() or f'exit status {rejected.returncode}').splitlines()[-1]}; recorded again)")
    else:
        raise SystemExit(f"{RECORDINGS} recordings on {devices} devices were not valid profiles")
    figures = fresh_process(profile_path, program.module, calls, options.repeat)
    with profile_path.open("rb") as file:
        bundle = open_bundle(profile_path, file, profile_path.stat().st_size)
        figures["records"] = len(bundle.host_event_positions())  # every host event: dispatches, executions, ...
        bundle.close()
    figures["bytes"] = profile_path.stat().st_size
    profile_path.unlink()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=8, help="local-task devices of the split chain or GPT")
    parser.add_argument("--model", choices=sorted(PROGRAMS), default="chain",
                        help="the split program: the matmul chain, or the 4-layer tensor-parallel GPT")
    parser.add_argument("--events", default="100000,400000", help="dispatch events of each profile (about), comma-separated")
    parser.add_argument("--dispatches", type=int, default=48,
                        help="the chain's dispatches per call (a multiple of --devices)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N after the cold run")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process of fresh_process
    parser.add_argument("--module", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.measure is not None:
        measure(options.measure, options.module, options.calls, options.repeat)
        return
    if options.devices < 2 or (options.model == "chain" and options.dispatches % options.devices):
        raise SystemExit("need --devices >= 2 and --dispatches a multiple of it")
    sizes = [int(text) for text in options.events.split(",")]
    peaks = []
    with tempfile.TemporaryDirectory(prefix="sectionmark-bench-devices-") as scratch:
        programs = {devices: PROGRAMS[options.model](Path(scratch), devices, options) for devices in (1, options.devices)}
        for events in sizes:
            figures = {}
            calls = -(-events // programs[options.devices].dispatches)  # the same calls on one device and on N
            for devices in (1, options.devices):
                ours = recorded(Path(scratch), devices, programs[devices], calls, options)
                size = ours["bytes"]
                figures[devices] = ours
                print(f"{devices} device{'s' * (devices > 1)}: {ours['events']:,} dispatch events of "
                      f"{ours['records']:,} host events ({size / 1e6:.0f} MB .ireeprof, {ours['devices']} "
                      f"session{'s' * (ours['devices'] > 1)}): cold {ours['first_s']:.3f} s = "
                      f"{ours['events'] / ours['first_s'] / 1e6:.2f} M events/s, best of {options.repeat} "
                      f"{ours['best_s']:.3f} s = {ours['events'] / ours['best_s'] / 1e6:.2f} M events/s; peak RSS "
                      f"{ours['peak_mb']:.0f} MB ({ours['before_mb']:.0f} MB before reading)")
            one, many = figures[1], figures[options.devices]
            peaks.append((one["peak_mb"], many["peak_mb"]))
            speed = (many["events"] / many["best_s"]) / (one["events"] / one["best_s"])
            per_record = (many["records"] / many["best_s"]) / (one["records"] / one["best_s"])
            per_byte = (many["bytes"] / many["best_s"]) / (one["bytes"] / one["best_s"])
            print(f"  {options.devices} devices vs one (best of {options.repeat}): speed per dispatch event "
                  f"{speed:.2f}x, per host event {per_record:.2f}x, per byte {per_byte:.2f}x (goal: 1x; a profile of "
                  f"several devices records more events and bytes per dispatch: each device's executions, "
                  f"allocations and the transfers); peak RSS {many['peak_mb'] / one['peak_mb']:.2f}x one device's, "
                  f"{many['peak_mb'] / peaks[0][1]:.2f}x the first size's of {options.devices} devices (one device: "
                  f"{one['peak_mb'] / peaks[0][0]:.2f}x; goal: bounded, at most 1.5x)")


if __name__ == "__main__":
    main()
