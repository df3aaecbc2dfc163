"""``sectionmark.compile``: an IREE compile with the section hook between phases.

Pipeline (one in-process compilation, see phases.py)::

    parse                               list the declared sections (a live export's: in a thread)
          -> ... -> dispatch-creation   number sites; weigh them on a copy, in a thread (flow.py)
          -> flow                       executables outlined: their locations as without sectionmark
          -> ... -> hal                 record commands, debug groups (hal.py),
                                        embed the section map (embed.py)
          -> ... -> vm bytecode

With ``markers=False`` it is a plain compile with the same flags and no hook.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union, overload

from sectionmark.arguments import element_type
from sectionmark.compiler.embed import embed_section_map, module_fingerprint
from sectionmark.compiler.flow import number_sites, restore_executable_locations, weigh_sites
from sectionmark.compiler.hal import CommandRecorder
from sectionmark.compiler.phases import PhasedCompilation, generic_op_views
from sectionmark.compiler.targets import debug_groups_by_default, device_ordinals, target_flags
from sectionmark.errors import SectionmarkError, wrong_type
from sectionmark.markers.colors import declared_colors
from sectionmark.importers.exported import SectionedExport, as_sectioned_export, declare_section, module_sections
from sectionmark.outputs import check_output_path, write_atomic
from sectionmark.progress import Step, progress
from sectionmark.section_path import SectionPath, format_path
from sectionmark.section_map import CommandBuffer, DispatchSite, FunctionSignature, SectionMap, Share, sidecar_path

if TYPE_CHECKING:  # for type checkers only: iree-turbine is optional, and slicing imports this module
    from iree.turbine.aot import ExportOutput

    from sectionmark.compiler.slicing import SectionSlice

# A SectionedExport, iree-turbine's ExportOutput, a section slice, MLIR text, or a .mlir/.mlirbc path.
Source = Union[SectionedExport, "ExportOutput", "SectionSlice", str, "os.PathLike[str]"]
# What `compile` says it takes when given anything else.
ACCEPTED_SOURCES = ("an export (sm.torch.export, aot.export, sm.jax.export), a slice (sm.slice), MLIR text or "
                    "a .mlir/.mlirbc path")

# Last phase where fused dispatch bodies are inline and not yet deduplicated.
SITES_PHASE = "dispatch-creation"
# Executables are outlined and deduplicated; code generation comes later.
EXECUTABLES_PHASE = "flow"
COMMANDS_PHASE = "hal"


@dataclass
class CompiledProgram:
    """A compiled .vmfb and, when compiled with markers, its section map."""

    vmfb: bytes
    section_map: Optional[SectionMap]
    target: str

    @property
    def sections_summary(self) -> str:
        """``"N of M sections reached dispatches"`` (with the ones that did not), or why there is no map."""
        if self.section_map is None:
            return "compiled without markers: no section map"
        declared, reached = self.section_map.sections, self.section_map.reached
        text = f"{len(reached)} of {len(declared)} sections reached dispatches"
        missing = [format_path(path) for path in declared if path not in reached]
        return text + (f" (not: {'; '.join(missing)})" if missing else "")

    def save(self, path: Union[str, Path], inputs: Sequence[Union[str, Path]] = ()) -> Path:
        """Write ``path`` (.vmfb) and, with a map, ``<stem>.sections.json`` beside it.

        Each file is written whole or not at all; ``inputs`` (e.g. the MLIR it
        was compiled from) are never overwritten.
        """
        path = Path(path)
        check_output_path(path, inputs)
        if self.section_map is not None:
            check_output_path(sidecar_path(path), inputs)
        write_atomic(path, self.vmfb, inputs)
        if self.section_map is not None:
            write_atomic(sidecar_path(path), self.section_map.dumps(), inputs)
        return path


@overload
def compile(source: SectionedExport, target: str = ..., extra_args: Sequence[str] = ..., markers: bool = ...,
            debug_groups: Optional[bool] = ..., input_type: Optional[str] = ..., *, quiet: bool = ...,
            devices: int = ...) -> CompiledProgram: ...
@overload
def compile(source: "ExportOutput", target: str = ..., extra_args: Sequence[str] = ..., markers: bool = ...,
            debug_groups: Optional[bool] = ..., input_type: Optional[str] = ..., *, quiet: bool = ...,
            devices: int = ...) -> CompiledProgram: ...
@overload
def compile(source: "SectionSlice", target: str = ..., extra_args: Sequence[str] = ..., markers: bool = ...,
            debug_groups: Optional[bool] = ..., input_type: Optional[str] = ..., *, quiet: bool = ...,
            devices: int = ...) -> CompiledProgram: ...
@overload
def compile(source: Union[str, "os.PathLike[str]"], target: str = ..., extra_args: Sequence[str] = ...,
            markers: bool = ..., debug_groups: Optional[bool] = ..., input_type: Optional[str] = ..., *,
            quiet: bool = ..., devices: int = ...) -> CompiledProgram: ...


def compile(
    source: Source,
    target: str = "llvm-cpu",
    extra_args: Sequence[str] = (),
    markers: bool = True,
    debug_groups: Optional[bool] = None,
    input_type: Optional[str] = None,
    *,
    quiet: bool = False,
    devices: int = 1,
) -> CompiledProgram:
    """Compile ``source`` for ``target``.

    ``source``: what ``sm.torch.export`` / ``sm.jax.export`` return,
    iree-turbine's ``ExportOutput`` (an ``aot.export`` made inside
    ``sm.torch.sections()``), a section slice (``sm.slice``), MLIR text, or
    a .mlir/.mlirbc path (a ``str`` or ``os.PathLike``); anything else is a
    `SectionmarkTypeError` (a TypeError) naming its type. A live module goes
    to the compiler as MLIR bytecode, never as text.
    ``input_type`` defaults to the export's, else IREE's ``auto``.
    ``debug_groups=False`` records the section map without touching the
    command buffers; the default (None) puts debug groups around sections
    except on CUDA and ROCm, whose IREE 3.13 runtime crashes on them
    (`sectionmark.compiler.targets.WITHOUT_DEBUG_GROUPS`). On a terminal a
    progress line shows the phase and the time elapsed (`sectionmark.progress`);
    ``quiet=True`` hides it. ``devices=N``: a module driving N local devices (``--iree-hal-target-device=local[0]``
    ... ``local[N-1]``: the ``@__device_i`` of ``#hal.device.promise`` affinities and of iree-turbine's
    ``DeviceAffinity``), profiled with ``sm.profile(..., devices=["local-task"] * N)`` (docs/multi-device.md).
    """
    export = as_sectioned_export(source)
    if input_type is None:
        input_type = export.input_type if export is not None else "auto"
    flags = [*target_flags(target, devices), f"--iree-input-type={input_type}", *extra_args]
    return compile_with_flags(export if export is not None else source, flags, target, markers, debug_groups,
                              quiet=quiet)


def compile_with_flags(
    source: Source, flags: Sequence[str], target: str, markers: bool = True, debug_groups: Optional[bool] = None,
    *, quiet: bool = False,
) -> CompiledProgram:
    """`compile` with exactly ``flags`` (all of them: target, input type, options); ``target`` names the map's."""
    with progress(f"compiling {source_name(source)} for {target}", quiet) as step:
        return _compile(source, flags, target, markers, debug_groups, step)


def source_name(source: Source) -> str:
    """What is being compiled, for the progress line: an export (of which framework), the file, or MLIR text."""
    export = as_sectioned_export(source)
    if export is not None:
        return f"the {export.framework} export" if export.framework else "the export"
    if isinstance(source, Path) or (isinstance(source, str) and looks_like_path(source)):
        return Path(source).name
    return "MLIR text" if isinstance(source, str) else type(source).__name__


def _compile(source: Source, flags: Sequence[str], target: str, markers: bool, debug_groups: Optional[bool],
             step: Step) -> CompiledProgram:
    if debug_groups is None:
        debug_groups = debug_groups_by_default(target)
    export = as_sectioned_export(source)
    compilation = PhasedCompilation(flags)
    try:
        step("parsing")
        _parse(compilation, export if export is not None else source)
        if not markers:
            step("compiling (no markers)")
            return CompiledProgram(compilation.finish(), None, target)
        with generic_op_views():
            parsed = compilation.parsed_module()
            functions = function_signatures(parsed)
            # Reading runs in a second thread while the compiler goes on (the compiler runs without
            # Python's lock, so it costs little wall time): the declared sections of a live export (the
            # module that was parsed, in its own context; the parsed one must be read before the
            # compiler changes it), and the sites, weighed on a copy.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sectionmark-sites") as worker:
                live = export.mlir_module if export is not None else None
                declaring = worker.submit(module_sections, live if live is not None else parsed)
                if live is None:
                    declaring.result()
                step("up to dispatch creation")
                copy, site_ids = number_sites(compilation.advance(SITES_PHASE))
                weighing = worker.submit(weigh_sites, copy)  # erases the copy when done
                if not compilation.multithreaded:
                    # Weighing creates attributes (the LinalgOp interface memoizes a named op's maps on
                    # it): beside a running compiler only if the context locks what it uniques.
                    weighing.result()
                step("dispatch sites weighed; executables outlined")
                restore_executable_locations(compilation.advance(EXECUTABLES_PHASE))
                step("HAL: command buffers")
                module = compilation.advance(COMMANDS_PHASE)
                declared, sites = list(declaring.result()), weighing.result()
            if export is not None and export.path_aliases:
                declared = [export.full_path(path) for path in declared]  # parents first again in _sections
                sites = [_with_full_paths(site, export.full_path) for site in sites]
            buffers = CommandRecorder({site.id: site for site in sites}, site_ids, debug_groups,
                                      device_ordinals(flags)).run(module)
            sections = _sections(declared, sites, buffers)
            section_map = SectionMap(
                sections=sections, command_buffers=buffers, sites=sites, target=target,
                fingerprint=module_fingerprint(module), functions=functions,
                framework=export.framework if export is not None else None, colors=section_colors_given(sections),
            )
            embed_section_map(module, section_map)
        step("code generation and VM bytecode")
        return CompiledProgram(compilation.finish(), section_map, target)
    finally:
        compilation.close()


def section_colors_given(sections: list[SectionPath]) -> dict[str, int]:
    """The colours given in code (``section(name, color=...)``, in this process) to the names of ``sections``.

    Op locations carry section names only; a program exported in another process keeps palette colours.
    """
    given = declared_colors()
    return {path[-1]: given[path[-1]] for path in sections if path[-1] in given}


def _parse(compilation: PhasedCompilation, source: Source) -> None:
    export = as_sectioned_export(source)
    if export is not None:
        module = export.mlir_module
        if module is not None:
            compilation.parse_module(module)
        else:
            compilation.parse_text(export.mlir)
    elif isinstance(source, os.PathLike) or (isinstance(source, str) and looks_like_path(source)):
        path = Path(source)
        if not path.is_file():
            raise SectionmarkError(f"MLIR file not found: {path}")
        compilation.parse_file(path)
    elif isinstance(source, str):
        compilation.parse_text(source)
    elif _is_slice(source):  # sm.slice's result: its program's MLIR
        compilation.parse_text(source.mlir)
    else:
        raise wrong_type("sm.compile", source, ACCEPTED_SOURCES)


def _is_slice(source: Any) -> bool:
    from sectionmark.compiler.slicing import SectionSlice  # slicing imports this module

    return isinstance(source, SectionSlice)


def function_signatures(module: Any) -> list[FunctionSignature]:
    """The public functions of the parsed input module and their arguments' element types (see FunctionSignature)."""
    signatures = []
    for operation in module.regions[0].blocks[0].operations:
        if operation.operation.name != "func.func":
            continue
        visibility = operation.attributes["sym_visibility"].value if "sym_visibility" in operation.attributes else "public"
        if visibility != "public":
            continue
        name = operation.attributes["sym_name"].value
        inputs = operation.attributes["function_type"].value.inputs
        signatures.append(FunctionSignature(name, [element_type(str(kind)) for kind in inputs]))
    return signatures


def looks_like_path(text: str) -> bool:
    return "\n" not in text and "{" not in text and len(text) < 4096


def _with_full_paths(site: DispatchSite, full_path: Callable[[SectionPath], SectionPath]) -> DispatchSite:
    """``site`` with each share's path as it ran (`SectionedExport.full_path`); shares that meet are one."""
    merged: dict[SectionPath, Share] = {}
    for share in site.shares:
        path = full_path(share.path)
        if path in merged:
            known = merged[path]
            merged[path] = Share(path, known.weight + share.weight, _sum(known.flops, share.flops),
                                 _sum(known.bytes, share.bytes))
        else:
            merged[path] = Share(path, share.weight, share.flops, share.bytes)
    return dataclasses.replace(site, shares=sorted(merged.values(), key=lambda share: -share.weight))


def _sum(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a + b


def _sections(declared: list[SectionPath], sites: list[DispatchSite], buffers: list[CommandBuffer]) -> list[SectionPath]:
    """The declared sections, then any path (and its parents) that owns part of a site or command without being declared."""
    found: dict[SectionPath, None] = {}
    for path in declared:
        declare_section(found, path)
    for site in sites:
        for share in site.shares:
            if share.path:
                declare_section(found, share.path)
    for buffer in buffers:
        for command in buffer.commands:
            for share in command.shares:
                if share.path:
                    declare_section(found, share.path)
    return list(found)
