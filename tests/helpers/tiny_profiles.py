"""Tiny real profiles shared by the profiling tests: modules, a hand-written map, an independent oracle.

The oracle computes per-section times straight from `iree-profile export`
rows in plain Python (one submission per call, as these modules make), so the
readers and the attribution are checked against IREE's own decoder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable, Optional

from sectionmark.section_path import SectionPath
from sectionmark.artifacts import tools
from sectionmark.section_map import COMMAND_OPS, Command, CommandBuffer, SectionMap, Share

CPU_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host"]

# A matmul split in halves over two devices (`sm.compile(..., devices=2)`): "Half 1"'s operands are copied to
# device 1 (@__device_1), which multiplies them; its product comes back to device 0 for the "Join". Three command
# buffers: device 0's slice copy, device 1's copies and matmul, device 0's matmul fused with the join's add.
TWO_DEVICES = """
module @two {
func.func @main(%a: tensor<64x128xf32> {iree.abi.affinity = #hal.device.promise<@__device_0>},
                %b: tensor<128x64xf32> {iree.abi.affinity = #hal.device.promise<@__device_0>})
    -> (tensor<64x64xf32> {iree.abi.affinity = #hal.device.promise<@__device_0>}) {
  %a0 = tensor.extract_slice %a[0, 0] [64, 64] [1, 1] : tensor<64x128xf32> to tensor<64x64xf32> loc(#h0)
  %a1 = tensor.extract_slice %a[0, 64] [64, 64] [1, 1] : tensor<64x128xf32> to tensor<64x64xf32> loc(#h1)
  %b0 = tensor.extract_slice %b[0, 0] [64, 64] [1, 1] : tensor<128x64xf32> to tensor<64x64xf32> loc(#h0)
  %b1 = tensor.extract_slice %b[64, 0] [64, 64] [1, 1] : tensor<128x64xf32> to tensor<64x64xf32> loc(#h1)
  %a1t = flow.tensor.transfer %a1 : tensor<64x64xf32> to #hal.device.promise<@__device_1> loc(#h1)
  %b1t = flow.tensor.transfer %b1 : tensor<64x64xf32> to #hal.device.promise<@__device_1> loc(#h1)
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64x64xf32>
  %f0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<64x64xf32>) -> tensor<64x64xf32> loc(#h0)
  %m0 = linalg.matmul ins(%a0, %b0 : tensor<64x64xf32>, tensor<64x64xf32>) outs(%f0 : tensor<64x64xf32>) -> tensor<64x64xf32> loc(#h0)
  %e1 = tensor.empty() : tensor<64x64xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<64x64xf32>) -> tensor<64x64xf32> loc(#h1)
  %m1 = linalg.matmul ins(%a1t, %b1t : tensor<64x64xf32>, tensor<64x64xf32>) outs(%f1 : tensor<64x64xf32>) -> tensor<64x64xf32> loc(#h1)
  %m1b = flow.tensor.transfer %m1 : tensor<64x64xf32> to #hal.device.promise<@__device_0> loc(#j)
  %s = arith.addf %m0, %m1b : tensor<64x64xf32> loc(#j)
  return %s : tensor<64x64xf32>
}
}
#h0 = loc("sectionmark:Half 0")
#h1 = loc("sectionmark:Half 1")
#j = loc("sectionmark:Join")
"""

# Two dispatches on IREE 3.13: matmul (the fill fuses in) and exp+matmul fused.
TWO_MATMULS = """
func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %c0 = arith.constant 0.0 : f32 loc("sectionmark:Block/Attn"("t.py":1:1))
  %e = tensor.empty() : tensor<64x64xf32> loc("sectionmark:Block/Attn"("t.py":1:1))
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:Block/Attn"("t.py":1:1))
  %m = linalg.matmul ins(%x, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:Block/Attn"("t.py":2:1))
  %t = tensor.empty() : tensor<64x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0,d1)->(d1,d0)>, affine_map<(d0,d1)->(d0,d1)>],
                       iterator_types = ["parallel","parallel"]} ins(%m : tensor<64x64xf32>) outs(%t : tensor<64x64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = math.exp %a : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32> loc("sectionmark:Block/MLP"("t.py":3:1))
  %m2 = linalg.matmul ins(%r, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:Block/MLP"("t.py":4:1))
  return %m2 : tensor<64x64xf32>
}
"""

DYNAMIC = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<64x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %i0 = arith.constant 0 : index
  %n = tensor.dim %x, %i0 : tensor<?x64xf32>
  %e = tensor.empty(%n) : tensor<?x64xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %m = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%z : tensor<?x64xf32>) -> tensor<?x64xf32>
  return %m : tensor<?x64xf32>
}
"""

# A model that shares nothing with the others: for "a capture / profile of another model" errors.
OTHER_MODEL = """
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %s = math.sin %x : tensor<8xf32> loc("sectionmark:Other"("t.py":1:0))
  return %s : tensor<8xf32>
}
"""

KEY_0 = "main_dispatch_0_matmul_64x64x64_f32"
KEY_1 = "main_dispatch_1_matmul_64x64x64_f32"


def profile_two_devices(folder: Path, iterations: int, warmup: int):
    """`TWO_DEVICES` compiled for two devices (`sm.compile(devices=2)`) and profiled on two local-task devices,
    its profile kept in ``folder``: (compiled module, kept .ireeprof, the run)."""
    import numpy as np

    import sectionmark as sm

    compiled = sm.compile(TWO_DEVICES, devices=2, quiet=True)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 64), np.float32)]
    kept = folder / "two.ireeprof"
    run = sm.profile(compiled, args, devices=["local-task", "local-task"], iterations=iterations, warmup=warmup,
                     keep_profile=kept, quiet=True)
    return compiled, kept, run


def compile_plain(text: str, path: Path) -> Path:
    import iree.compiler

    path.write_bytes(iree.compiler.compile_str(text, extra_args=CPU_FLAGS))
    return path


def hand_map(weights: tuple[float, float] = (0.25, 0.75)) -> SectionMap:
    """The command sequence IREE 3.13 records for TWO_MATMULS, with a fused second dispatch."""
    return SectionMap(
        sections=[("Block",), ("Block", "Attn"), ("Block", "MLP")],
        sites=[],
        command_buffers=[
            CommandBuffer(
                index=0,
                function="main",
                commands=[
                    Command("dispatch", KEY_0, site=0, shares=[Share(("Block", "Attn"), 1.0)], workgroups=[8, 1, 1]),
                    Command("barrier"),
                    Command("dispatch", KEY_1, site=1,
                            shares=[Share(("Block", "Attn"), weights[0]), Share(("Block", "MLP"), weights[1])]),
                    Command("barrier"),
                ],
            )
        ],
    )


def export_rows(profile_path: Path) -> Optional[list[dict]]:
    """`iree-profile export --format=ireeperf-jsonl` of a bundle as parsed rows; None if IREE refuses the file."""
    result = subprocess.run([str(tools.find_tool("iree-profile")), "export", "--format=ireeperf-jsonl", "--output=-",
                             str(profile_path)], capture_output=True, timeout=60)
    if result.returncode != 0:
        return None
    return [json.loads(line) for line in result.stdout.decode("utf-8", "replace").splitlines() if line.strip()]


class Inconsistent(Exception):
    """Rows that no correct reader may turn into a table."""


def section_oracle(rows: list[dict], section_map: SectionMap, warmup_calls: int, device: Optional[int] = None,
                   calls: Optional[int] = None, function: Optional[str] = None) -> tuple[int, dict[SectionPath, float]]:
    """(measured calls, exclusive busy ns per path) from ireeperf-jsonl rows, in plain Python.

    One submission per call (these modules submit one command buffer per call),
    one static command buffer in the map; raises Inconsistent where an event
    contradicts the map or its own row. ``device``: only that device's events (its
    ``physical_device_ordinal``), each runtime command buffer placed in the map's
    command buffer of that device recording the same commands; ``calls``: the calls
    made (warmup included), for a device that submits several command buffers per call; ``function``: only the
    events of that function's command buffers (the map's ``function`` of the buffer each event's runtime command
    buffer is placed in; with ``device``), its calls counted alone (a replay's calls of several functions).
    """
    buffers = _device_buffers(rows, section_map, device)
    events = [r for r in rows
              if r.get("record_type") == "host_execution_event" and r.get("op") in ("execute", "dispatch")
              and (device is None or r.get("physical_device_ordinal") == device)
              and (function is None or buffers(r["command_buffer_id"]).function == function)]
    executes = sorted(r["submission_id"] for r in events if r.get("op") == "execute")
    per_call = len(executes) // calls if calls else 1
    measured = set(executes[warmup_calls * per_call:])
    totals: dict[SectionPath, float] = {}
    for r in events:
        if r.get("op") != "dispatch" or r["submission_id"] not in measured:
            continue
        commands = buffers(r["command_buffer_id"]).commands
        if not 0 <= r["command_index"] < len(commands) or commands[r["command_index"]].key != r["key"]:
            raise Inconsistent(f"event {r.get('event_id')} is not the map's command {r['command_index']}")
        for share in commands[r["command_index"]].shares or [Share((), 1.0)]:
            totals[share.path] = totals.get(share.path, 0.0) + share.weight * r["duration_ns"]
    return len(executes) // per_call - warmup_calls, totals


def device_timed_oracle(rows: list[dict], section_map: SectionMap, warmup_calls: int, device: int,
                        calls: int) -> tuple[int, dict[SectionPath, float]]:
    """`section_oracle` of a device-timed profile (Vulkan's): (measured calls, exclusive busy ns per path) of
    ``device``'s ``dispatch_event`` rows (their device-clock ``duration_ns``, as ``iree-profile`` fits it), its
    calls counted by its queue ``execute`` events (``calls``: the calls made, warmup included). Each event's
    command is its runtime buffer's recorded operation of ``command_index``, placed among the operations of the
    map's kinds (Vulkan records the debug groups' profile markers between them)."""
    buffers = _device_buffers(rows, section_map, device)
    recorded: dict[int, list[int]] = {}
    for r in rows:
        if r.get("record_type") == "command_operation" and r.get("op") in COMMAND_OPS:
            recorded.setdefault(r["command_buffer_id"], []).append(r["command_index"])
    position = {(buffer, index): rank for buffer, indices in recorded.items()
                for rank, index in enumerate(sorted(indices))}
    executes = sorted(r["submission_id"] for r in rows if r.get("record_type") == "queue_event"
                      and r.get("op") == "execute" and r.get("physical_device_ordinal") == device)
    per_call = len(executes) // calls
    measured = set(executes[warmup_calls * per_call:])
    totals: dict[SectionPath, float] = {}
    for r in rows:
        if (r.get("record_type") != "dispatch_event" or r.get("physical_device_ordinal") != device
                or r["submission_id"] not in measured):
            continue
        command = buffers(r["command_buffer_id"]).commands[position[r["command_buffer_id"], r["command_index"]]]
        if command.key != r["key"]:
            raise Inconsistent(f"event {r.get('event_id')} is not the map's command {command}")
        for share in command.shares or [Share((), 1.0)]:
            totals[share.path] = totals.get(share.path, 0.0) + share.weight * r["duration_ns"]
    return len(executes) // per_call - warmup_calls, totals


def _device_buffers(rows: list[dict], section_map: SectionMap, device: Optional[int]) -> Callable[[int], CommandBuffer]:
    """The map's command buffer of each runtime command buffer: the map's only one, or for ``device`` the map's
    command buffer of that device whose (op, key) sequence the runtime buffer's recorded operations have."""
    if device is None:
        return lambda _buffer: section_map.command_buffers[0]
    recorded: dict[int, list[tuple[int, str, Optional[str]]]] = {}
    for r in rows:
        if r.get("record_type") == "command_operation" and r.get("op") in COMMAND_OPS:
            recorded.setdefault(r["command_buffer_id"], []).append(
                (r["command_index"], r["op"], r.get("key") if r["op"] == "dispatch" else None))
    static = {tuple((c.op, c.key if c.op == "dispatch" else None) for c in buffer.commands): buffer
              for buffer in section_map.command_buffers if buffer.device == device}

    def commands(buffer: int) -> CommandBuffer:
        signature = tuple((op, key) for _index, op, key in sorted(recorded.get(buffer, [])))
        if signature not in static:
            raise Inconsistent(f"command buffer {buffer} is no command buffer of device {device} in the map")
        return static[signature]

    return commands


def copy_gaps(start: int, end: int, dispatches: list[tuple[int, int, int]], transfers: list[int]) -> int:
    """The transfer ns of one execution ``[start, end)``, in plain Python: its time with no dispatch running
    (``dispatches``: (start, end, command index)) in the gaps that have a transfer command (``transfers``: the
    buffer's copy/fill/update command indices) between the command indices of the dispatches on either side of
    them (before the first, after the last); all of it when it ran no dispatch but records transfers."""
    if not dispatches:
        return end - start if transfers else 0
    blocks: list[list[int]] = []  # [start, end, least index, greatest index] of the dispatches' union
    for d_start, d_end, index in sorted(dispatches):
        if blocks and d_start <= blocks[-1][1]:
            block = blocks[-1]
            block[1], block[2], block[3] = max(block[1], d_end), min(block[2], index), max(block[3], index)
        else:
            blocks.append([d_start, d_end, index, index])
    edges = [(start, blocks[0][0], -1, blocks[0][2])]
    edges += [(before[1], after[0], before[3], after[2]) for before, after in zip(blocks, blocks[1:])]
    edges.append((blocks[-1][1], end, blocks[-1][3], 1 << 32))
    return sum(max(gap_end - gap_start, 0) for gap_start, gap_end, after_index, before_index in edges
               if any(after_index < index < before_index for index in transfers))


def transfer_oracle(rows: list[dict], section_map: SectionMap, warmup_calls: int, device: int,
                    calls: int) -> dict[SectionPath, float]:
    """Transfer ns per section on ``device`` from ireeperf-jsonl rows, in plain Python: each measured execution's
    gaps around its transfer commands (`copy_gaps`), given to its map buffer's copy sections by the bytes each
    copy moves (the export's own ``length`` of the buffer's copy operations; "(unmarked)", path (), where it
    copies nothing). Executions of a device must not overlap."""
    events = [r for r in rows if r.get("record_type") == "host_execution_event"
              and r.get("physical_device_ordinal") == device]
    executes = sorted((r for r in events if r.get("op") == "execute"), key=lambda r: r["submission_id"])
    measured = executes[warmup_calls * (len(executes) // calls):]
    spans = sorted((r["start_host_time_ns"], r["end_host_time_ns"]) for r in measured)
    if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
        raise Inconsistent(f"executions of device {device} overlap")
    recorded: dict[int, list[str]] = {}
    for r in rows:
        if r.get("record_type") == "command_operation" and r.get("op") in COMMAND_OPS:
            recorded.setdefault(r["command_buffer_id"], []).append((r["command_index"], r["op"], r.get("length")))
    totals: dict[SectionPath, float] = {}
    for execution in measured:
        dispatches = [(r["start_host_time_ns"], r["end_host_time_ns"], r["command_index"]) for r in events
                      if r.get("op") == "dispatch" and r["submission_id"] == execution["submission_id"]]
        operations = sorted(recorded[execution["command_buffer_id"]])
        transfer = copy_gaps(execution["start_host_time_ns"], execution["end_host_time_ns"], dispatches,
                             [index for index, op, _length in operations if op in ("copy", "fill", "update")])
        buffer = next(b for b in section_map.command_buffers if b.device == device
                      and [c.op for c in b.commands] == [op for _index, op, _length in operations])
        copies = [c for c in buffer.commands if c.op == "copy"]
        lengths = [length for _index, op, length in operations if op == "copy"]
        for copy, length in zip(copies, lengths):
            for share in copy.shares:
                totals[share.path] = totals.get(share.path, 0.0) + transfer * share.weight * length / sum(lengths)
        if not copies:
            totals[()] = totals.get((), 0.0) + transfer
    return totals
