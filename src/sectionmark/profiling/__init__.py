"""Exact per-section CPU profiles from IREE's HAL-native profiler.

``profile`` runs a compiled module under ``iree-benchmark-module`` with
profiling on and joins the resulting ``.ireeprof`` with the section map;
``report`` does the join for a profile recorded earlier.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from sectionmark.errors import SectionmarkError
from sectionmark.parameters import Parameters, parameter_specs
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.ireeprof import read_profile
from sectionmark.profiling.runner import run_profile
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_map import SectionMap, SectionMapError

__all__ = ["profile", "report", "ProfileSession"]


def _module_path(compiled_or_vmfb: Any, directory: Path) -> Path:
    """A .vmfb path for the tools: a CompiledModule is written to ``directory``."""
    if hasattr(compiled_or_vmfb, "vmfb"):
        path = directory / "module.vmfb"
        path.write_bytes(compiled_or_vmfb.vmfb)
        return path
    return Path(compiled_or_vmfb)


def _module_and_map(compiled_or_vmfb: Any, directory: Path) -> tuple[Path, SectionMap]:
    """The .vmfb path and its section map (carried by a CompiledModule, else read from the file)."""
    path = _module_path(compiled_or_vmfb, directory)
    if not hasattr(compiled_or_vmfb, "section_map"):
        return path, _read_map(path)
    if compiled_or_vmfb.section_map is None:
        raise SectionmarkError("this module was compiled without markers; it has no section map to report")
    return path, compiled_or_vmfb.section_map


def profile(
    compiled_or_vmfb_path: Union[Any, str, Path],
    args: Sequence[Any] = (),
    function: str = "main",
    device: str = "local-task",
    iterations: int = 20,
    warmup: int = 3,
    *,
    section_map: Optional[SectionMap] = None,
    keep_profile: Optional[Union[str, Path]] = None,
    quiet: bool = False,
    parameters: Parameters = None,
) -> ProfileSession:
    """Call ``function`` ``warmup + iterations`` times under the profiler; per-section times.

    ``compiled_or_vmfb_path``: a ``sectionmark.compiler.CompiledModule`` or a
    saved .vmfb (its map is read from the module or its sidecar unless
    ``section_map`` is given). ``keep_profile``: also copy the raw .ireeprof there.
    ``parameters``: external parameter file(s), ``path`` or ``scope=path`` as
    IREE's ``--parameters`` spells them (see `sectionmark.load`).
    """
    specs = parameter_specs(parameters)
    with tempfile.TemporaryDirectory(prefix="sectionmark-") as scratch:
        directory = Path(scratch)
        if section_map is None:
            vmfb, section_map = _module_and_map(compiled_or_vmfb_path, directory)
        else:
            vmfb = _module_path(compiled_or_vmfb_path, directory)
        run = run_profile(
            vmfb, args, directory, function=function, device=device, iterations=iterations, warmup=warmup, quiet=quiet,
            parameters=specs,
        )
        if keep_profile is not None:
            Path(keep_profile).write_bytes(run.profile_path.read_bytes())
        return report(run.profile_path, section_map, calls=run.calls, warmup=run.warmup, function=function)


def report(
    ireeprof_path: Union[str, Path],
    section_map: Union[SectionMap, str, Path],
    *,
    calls: Optional[int] = None,
    warmup: int = 0,
    function: Optional[str] = None,
) -> ProfileSession:
    """Per-section times of a recorded profile (.ireeprof or exported ireeperf-jsonl).

    ``section_map``: a SectionMap, a .vmfb (embedded map or sidecar) or a
    .sections.json. ``calls``: calls made during the profile (inferred from
    the repeating submissions when None); the first ``warmup`` are dropped.
    """
    if not isinstance(section_map, SectionMap):
        section_map = _read_map(Path(section_map))
    events = read_profile(ireeprof_path)
    attribution = attribute(events, section_map, calls=calls, warmup=warmup, function=function)
    return ProfileSession.build(attribution, section_map, function=function)


def _read_map(path: Path) -> SectionMap:
    """A section map from a .sections.json, or from a .vmfb (embedded or sidecar)."""
    if path.suffix == ".json":
        try:
            return SectionMap.load(path)
        except (SectionMapError, OSError) as error:
            raise SectionmarkError(f"cannot read section map {path}: {error}") from None
    from sectionmark.compiler import read_section_map

    return read_section_map(path)
