"""What IREE's CUDA/HIP drivers record in Tracy for command buffer executions, rebuilt from a section map.

A test oracle for captures of GPU runs (no GPU here). Per execution, as in
IREE 3.13's stream command buffers (runtime/src/iree/hal/drivers/cuda/
stream_command_buffer.c): one COARSE zone for the command buffer, the debug
groups the compiler put around each run of commands of one section (named by
the section's leaf name, nested as its path; a command is grouped under its
heaviest share, barriers join the open group), FINE dispatch zones named by
the export, and (HIP, CUDA graphs) fill zones named after the driver function.
Commands run back to back in recording order, as on one stream.

Spans are ``[name, start_ns, end_ns, children]`` (the replay document format
of `sectionmark.renderers.tracy_out`).
"""

from __future__ import annotations

from sectionmark.section_path import SectionPath
from sectionmark.section_map import Command, CommandBuffer, Share

COMMAND_BUFFER_ZONE = "iree_hal_cuda_stream_command_buffer"
FILL_ZONE = "iree_hal_hip_stream_command_buffer_fill_buffer"
GAP_NS = 150  # between consecutive commands on the stream


def group_path(command: Command) -> SectionPath:
    """The debug group a command is recorded in: its heaviest share (the first one on ties)."""
    if not command.shares:
        return ()
    return tuple(max(command.shares, key=lambda share: share.weight).path)


def execution(buffer: CommandBuffer, start_ns: int, durations: list[int]) -> tuple[list, int]:
    """One execution of ``buffer`` from ``start_ns``; ``durations`` per dispatch and fill, in order.

    Returns the command buffer span and the time its zone ends.
    """
    root = [COMMAND_BUFFER_ZONE, start_ns, None, []]
    stack: list[tuple[list, SectionPath]] = [(root, ())]
    now = start_ns + GAP_NS
    timed = iter(durations)
    for command in buffer.commands:
        if command.op not in ("dispatch", "fill"):
            continue
        path = group_path(command)
        keep = 0
        while keep < min(len(stack) - 1, len(path)) and stack[keep + 1][1] == path[: keep + 1]:
            keep += 1
        while len(stack) - 1 > keep:
            stack.pop()[0][2] = now
        for depth in range(keep, len(path)):
            group = [path[depth], now, None, []]
            stack[-1][0][3].append(group)
            stack.append((group, path[: depth + 1]))
        duration = next(timed)
        name = command.key if command.op == "dispatch" else FILL_ZONE
        stack[-1][0][3].append([name, now, now + duration, []])
        now += duration + GAP_NS
    while stack:
        stack.pop()[0][2] = now
    return root, now


def timed_commands(buffer: CommandBuffer) -> list[Command]:
    """The commands that get a duration in `execution`, in order."""
    return [command for command in buffer.commands if command.op in ("dispatch", "fill")]


def expected_busy(timed: list[tuple[Command, int]]) -> dict[SectionPath, float]:
    """Inclusive busy time per section path (``()``: unmarked) from dispatch durations and their shares."""
    busy: dict[SectionPath, float] = {}
    for command, duration in timed:
        if command.op != "dispatch":
            continue
        for share in command.shares or [Share((), 1.0)]:
            path = tuple(share.path)
            for prefix in [path[:depth] for depth in range(1, len(path) + 1)] if path else [()]:
                busy[prefix] = busy.get(prefix, 0.0) + duration * share.weight
    return busy
