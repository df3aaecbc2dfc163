"""Command buffers at phase ``hal``: what the runtime will record, and debug groups.

Two jobs on the same walk over every function, initializer and nested region:

* list, per command buffer value, the commands in recording order exactly as
  the runtime counts them (dispatch, barrier, fill, copy, update), with the
  dispatch export name the profiler reports as ``key``, the dispatch site id
  carried in the location (see flow.py) and static sizes;
* wrap each run of consecutive commands of one section in
  ``hal.command_buffer.begin_debug_group`` / ``end_debug_group``, nested as
  the section path: going from (A, C) to (A, B) closes C and opens B, A stays
  open. Barriers join whatever group is open. Every block closes the groups it
  opened before its terminator, before any nested region that records
  commands, and before ``finalize``, so groups are balanced on every path.

A fused dispatch is grouped under its heaviest section (ties: the root op's,
whose location the dispatch carries);
its shares of every section are in the section map.
"""

from __future__ import annotations

import re
from typing import Optional

from iree.compiler import ir

from sectionmark.compiler.bindings import operand_groups
from sectionmark.compiler.flow import function_name, site_id
from sectionmark.locations import section_path
from sectionmark.section_path import SectionPath
from sectionmark.section_map import Command, CommandBuffer, DispatchSite, Share

# IR op -> the op name the runtime's profile uses for the recorded command.
COMMAND_KINDS = {
    "hal.command_buffer.dispatch": "dispatch",
    "hal.command_buffer.dispatch.indirect": "dispatch",
    "hal.command_buffer.execution_barrier": "barrier",
    "hal.command_buffer.fill_buffer": "fill",
    "hal.command_buffer.copy_buffer": "copy",
    "hal.command_buffer.update_buffer": "update",
}
FINALIZE = "hal.command_buffer.finalize"
_MEMOIZE_HELPER = re.compile(r"^__(.+)_memoize_apply(?:_\d+)?$")  # one per memoized buffer: _0, _3, ...
BEGIN_GROUP = "hal.command_buffer.begin_debug_group"
END_GROUP = "hal.command_buffer.end_debug_group"


class CommandRecorder:
    """Walks a hal-phase module once; see the module docstring."""

    def __init__(self, sites: dict[int, DispatchSite], site_ids: dict[ir.Attribute, int], debug_groups: bool,
                 device_ordinals: Optional[dict[str, int]] = None):
        self.sites = sites
        # Each device global's runtime device (`targets.device_ordinals`); its place among the globals otherwise.
        self.device_ordinals = device_ordinals or {}
        self.site_ids = site_ids  # each site's location, as `flow.number_sites` set it, and its id
        self.debug_groups = debug_groups
        self.buffers: list[CommandBuffer] = []
        self._devices: list[str] = []  # the module's device globals, set by `run`
        self._buffer_of: dict[ir.Value, CommandBuffer] = {}

    def run(self, module: ir.Operation) -> list[CommandBuffer]:
        operations = [op.operation for op in module.regions[0].blocks[0].operations]
        # The module's devices in declaration order: the runtime's device ordinals (the order of --device).
        self._devices = [ir.StringAttr(op.attributes["sym_name"]).value for op in operations
                         if op.name == "util.global" and str(ir.TypeAttr(op.attributes["type"]).value) == "!hal.device"]
        for function in operations:
            if function.regions and function.name != "hal.executable":
                self._visit_regions(function, _user_function(function_name(function)))
        return self.buffers

    def _visit_regions(self, op: ir.Operation, function: str) -> bool:
        """Visit every block under ``op``; True if any of them records commands."""
        recorded = False
        for region in op.regions:
            for block in region.blocks:
                recorded = self._visit_block(block, function) or recorded
        return recorded

    def _visit_block(self, block: ir.Block, function: str) -> bool:
        open_groups: dict[ir.Value, SectionPath] = {}
        recorded = False
        operations = [op.operation for op in block.operations]
        for op in operations:
            name = op.name
            if name in COMMAND_KINDS:
                recorded = True
                command = self._command(op, COMMAND_KINDS[name])
                buffer = op.operands[0]
                self._buffer(buffer, function).commands.append(command)
                if command.op != "barrier":
                    self._move_groups(open_groups, buffer, _group_path(command, op), op)
            elif name == FINALIZE:
                self._move_groups(open_groups, op.operands[0], (), op)
            elif op.regions:
                # Recording order is program order: nested commands come here.
                if self._visit_regions(op, function):
                    recorded = True
                    for buffer in list(open_groups):
                        self._move_groups(open_groups, buffer, (), op)
        if open_groups and operations:
            terminator = operations[-1]
            for buffer in list(open_groups):
                self._move_groups(open_groups, buffer, (), terminator)
        return recorded

    def _buffer(self, value: ir.Value, function: str) -> CommandBuffer:
        buffer = self._buffer_of.get(value)
        if buffer is None:
            buffer = CommandBuffer(index=len(self.buffers), function=function, device=self._device_of(value))
            self.buffers.append(buffer)
            self._buffer_of[value] = buffer
        return buffer

    def _device_of(self, buffer: ir.Value) -> Optional[int]:
        """The runtime device a command buffer is created on, in a module of several devices (None in a module of
        one, or where the device is not a global the compiler names: chosen at run time)."""
        if len(self._devices) < 2:
            return None
        create = _defining_op(buffer)
        if create is None or create.name != "hal.command_buffer.create":
            return None
        load = _defining_op(create.operands[0])
        if load is None or load.name != "util.global.load":
            return None
        name = ir.FlatSymbolRefAttr(load.attributes["global"]).value
        if name not in self._devices:
            return None
        return self.device_ordinals.get(name, self._devices.index(name))

    def _command(self, op: ir.Operation, kind: str) -> Command:
        # The profile's key of a non-dispatch command is its op name.
        if kind == "barrier":
            return Command(op=kind, key=kind)
        if kind != "dispatch":
            path = section_path(str(op.location))
            # A copy's last operand is its length: the bytes it moves (a copy between devices), when constant.
            return Command(op=kind, key=kind, shares=[Share(path, 1.0)] if path else [],
                           binding_bytes=_constants([op.operands[-1]]) if kind == "copy" else None)
        location = op.location
        number = self.site_ids.get(location.attr)
        site = self.sites.get(number if number is not None else site_id(location))  # a merged location: read it
        # Operands of hal.command_buffer.dispatch: command buffer, executable, entry point, workgroup x, y, z,
        # constants, binding buffers, offsets, lengths (.indirect: a workgroups buffer and offset for x, y, z).
        operands = operand_groups(op)
        executable, key = _export_symbol(operands[2][0])
        if site is not None:
            site.executable, site.key = executable, key
        workgroups = None
        if op.name == "hal.command_buffer.dispatch":
            workgroups = _constants([group[0] for group in operands[3:6]])
        return Command(
            op=kind,
            key=key,
            site=site.id if site else None,
            shares=list(site.shares) if site else [],
            workgroups=workgroups,
            binding_bytes=_constants(operands[-1]),
        )

    def _move_groups(self, open_groups: dict, buffer: ir.Value, target: SectionPath, before: ir.Operation) -> None:
        """Close and open debug groups so that ``target`` is open right before ``before``."""
        if not self.debug_groups:
            return
        current = open_groups.get(buffer, ())
        keep = 0
        while keep < min(len(current), len(target)) and current[keep] == target[keep]:
            keep += 1
        with ir.InsertionPoint(before), before.location:
            for _ in range(len(current) - keep):
                ir.Operation.create(END_GROUP, operands=[buffer])
            for name in target[keep:]:
                ir.Operation.create(BEGIN_GROUP, operands=[buffer], attributes={"label": ir.StringAttr.get(name)})
        if target:
            open_groups[buffer] = target
        else:
            open_groups.pop(buffer, None)


def _user_function(name: str) -> str:
    """The function whose calls record a buffer: IREE records memoized buffers in ``__<f>_memoize_apply[_N]``."""
    match = _MEMOIZE_HELPER.match(name)
    return match.group(1) if match else name


def _group_path(command: Command, op: ir.Operation) -> SectionPath:
    """The section a command is grouped under: its heaviest share, ties to the root op's."""
    if not command.shares:
        return ()
    heaviest = [share.path for share in command.shares if share.weight == command.shares[0].weight]
    if len(heaviest) == 1:
        return heaviest[0]
    root = section_path(str(op.location))  # printing a hal-phase location is slow: only for ties
    return root if root in heaviest else heaviest[0]


def _defining_op(value: ir.Value) -> Optional[ir.Operation]:
    owner = value.owner
    return owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None


def _export_symbol(entry_point: ir.Value) -> tuple[Optional[str], Optional[str]]:
    """``(executable, export)`` from the ``@exe::@variant::@export`` lookup feeding a dispatch."""
    lookup = _defining_op(entry_point)
    if lookup is None or lookup.name != "hal.executable.lookup.function":
        return None, None
    names = ir.SymbolRefAttr(lookup.attributes["entry_point"]).value
    return names[0], names[-1]


def _constants(values: list[ir.Value]) -> Optional[list[int]]:
    """Integer values of ``arith.constant`` operands, or None if any is dynamic."""
    result = []
    for value in values:
        owner = _defining_op(value)
        if owner is None or owner.name != "arith.constant":
            return None
        result.append(ir.IntegerAttr(owner.attributes["value"]).value)
    return result
