"""Benchmark one section alone against the same section inside the whole model.

`bench_section` slices the section (`sectionmark.compiler.slicing`), runs the
whole program once on the user's inputs (random ones of the right shapes and
types when none are given) to capture the values flowing into and out of the
section — realistic values at the boundary either way — checks that the
slice fed with those inputs gives those outputs, then profiles both with the
same target and flags: the section's busy time, dispatch count and bytes
moved per call in context (the whole model's profile) against the slice's
alone, and how many of the section's dispatches in context were fused with
ops outside it (fusions the slice cannot have).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from sectionmark.arguments import host_array, tensor_type
from sectionmark.compiler import compile
from sectionmark.compiler.slicing import SectionSlice, slice_section
from sectionmark.errors import SectionmarkError
from sectionmark.parameters import Parameters
from sectionmark.section_path import SectionPath, format_path
from sectionmark.runtime import load
from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_map import SectionMap


@dataclass
class SliceBench:
    """A section's time per call alone and in context, and how well the slice reproduced the model's values."""

    path: SectionPath
    in_context_ns: float  # the section's inclusive busy time per call in the whole model
    isolated_ns: float  # the slice's busy time per call
    in_context_dispatches: float  # dispatches touching the section per call in the whole model
    isolated_dispatches: float  # the slice's dispatches per call
    fused_across_boundary: int  # recorded dispatches in context that also hold ops of other sections
    max_abs_error: list[float]  # per output: |slice - whole model| at the boundary, largest element
    in_context_bytes: Optional[float] = None  # bytes read + written per call by dispatches touching the section
    isolated_bytes: Optional[float] = None  # the slice's; None when a size is not static
    random_inputs: bool = False  # the whole model ran on random inputs (none were given)

    def table(self) -> str:
        """The isolated vs in-context comparison as console text."""
        rows = [
            ("", "in context", "isolated"),
            ("time per call (us)", f"{self.in_context_ns / 1e3:.1f}", f"{self.isolated_ns / 1e3:.1f}"),
            ("dispatches per call", f"{self.in_context_dispatches:g}", f"{self.isolated_dispatches:g}"),
            ("bytes read + written per call", _bytes(self.in_context_bytes), _bytes(self.isolated_bytes)),
            ("dispatches fused across the boundary", f"{self.fused_across_boundary}", "0"),
        ]
        widths = [max(len(row[column]) for row in rows) for column in range(3)]
        lines = [f"section {format_path(self.path)}"]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        if self.fused_across_boundary:
            lines.append(f"{self.fused_across_boundary} fusion(s) across the boundary lost: dispatches that in context "
                         "also run ops outside the section run without them alone")
        extra = self.isolated_dispatches - self.in_context_dispatches
        if extra > 0:
            lines.append(f"alone, the section runs {extra:g} more dispatch(es) per call than in context: ops fused "
                         "together in context are split alone, and the values between them go through memory")
        elif extra < 0:
            lines.append(f"alone, the section runs {-extra:g} fewer dispatch(es) per call than in context")
        errors = ", ".join(f"{error:.3g}" for error in self.max_abs_error)
        lines.append(f"slice outputs vs whole model (max abs difference per output): {errors}")
        if self.random_inputs:
            lines.append("inputs: random values of the model's argument shapes (give the model's inputs for "
                         "realistic ones); the slice's inputs are what the model computed from them")
        return "\n".join(lines)


def _bytes(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value / 1e3:,.1f} kB"


def random_arguments(types: Sequence[str], seed: int = 0) -> list[np.ndarray]:
    """Random arrays for a program's arguments (MLIR types): floats ~ N(0, 1), integers 0 or 1 (valid ids)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for index, text in enumerate(types):
        parsed = tensor_type(text)
        if parsed is None or None in parsed[0]:
            raise SectionmarkError(f"cannot make a random value for argument {index} of the model ({text}): "
                                   "give the model's inputs (--input)")
        shape, dtype = parsed
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 2, shape).astype(dtype))
    return arrays


def bytes_per_call(session: ProfileSession, path: Optional[SectionPath] = None) -> Optional[float]:
    """Bytes read + written per call by the dispatches touching ``path`` (all of them without a path).

    None when a site's sizes are not static (the kernel table cannot size it).
    """
    total = 0.0
    for row in kernels(session):
        if path is not None and not any(share[:len(path)] == path for share, _weight in row.sections):
            continue
        if row.bytes is None:
            return None
        total += row.bytes * row.dispatches
    return total / max(session.calls, 1)


def capture_boundary(section_slice: SectionSlice, args: Sequence[Any], target: str = "llvm-cpu",
                     device: str = "local-task", parameters: Parameters = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The values flowing into and out of the section when the whole model runs on ``args``.

    ``parameters``: the model's external parameter files, as `sectionmark.load` takes them.
    """
    compiled = compile(section_slice.capture_program, target, markers=False)
    results = _host(load(compiled, device, parameters).main(*args))
    start = section_slice.original_results
    middle = start + len(section_slice.inputs)
    return results[start:middle], results[middle:]


def run_slice(compiled_slice: Any, inputs: Sequence[np.ndarray], device: str = "local-task",
              parameters: Parameters = None) -> list[np.ndarray]:
    return _host(load(compiled_slice, device, parameters).main(*inputs))


def bench_section(
    source: Any, section: Union[str, SectionPath], args: Sequence[Any], target: str = "llvm-cpu",
    device: str = "local-task", iterations: int = 10, warmup: int = 2, parameters: Parameters = None,
) -> SliceBench:
    """Slice ``section`` of ``source``, check it on ``args``'s captured values, profile it alone and in context.

    ``args``: the whole model's arguments; empty: random ones (`random_arguments`).

    ``parameters``: the model's external parameter files (the slice reads the same ones).
    """
    from sectionmark.workflows.measure import profile

    section_slice = slice_section(source, section)
    random_inputs = not args
    if random_inputs:
        args = random_arguments(section_slice.model_inputs)
    inputs, expected = capture_boundary(section_slice, args, target, device, parameters)
    compiled_slice = compile(section_slice.program, target)
    outputs = run_slice(compiled_slice, inputs, device, parameters)
    errors = [float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
              for got, want in zip(outputs, expected)]
    compiled_whole = compile(source, target)
    with profile(compiled_whole, args, device=device, iterations=iterations, warmup=warmup, quiet=True,
                 parameters=parameters) as run:
        whole = run.session
    with profile(compiled_slice, inputs, device=device, iterations=iterations, warmup=warmup, quiet=True,
                 parameters=parameters) as run:
        alone = run.session
    row = whole.section(section_slice.path)
    return SliceBench(
        path=section_slice.path,
        in_context_ns=row.per_call.mean_ns,
        isolated_ns=alone.total_ns / alone.calls,
        in_context_dispatches=row.dispatches / whole.calls,
        isolated_dispatches=sum(site.dispatches for site in alone.sites) / alone.calls,
        fused_across_boundary=fused_across_boundary(compiled_whole.section_map, section_slice.path),
        max_abs_error=errors,
        in_context_bytes=bytes_per_call(whole, section_slice.path),
        isolated_bytes=bytes_per_call(alone),
        random_inputs=random_inputs,
    )


def fused_across_boundary(section_map: SectionMap, path: SectionPath) -> int:
    """Recorded dispatches holding ops of ``path`` (or nested in it) and ops of other sections or unmarked ops."""
    count = 0
    for buffer in section_map.command_buffers:
        for command in buffer.commands:
            inside = [share.path[:len(path)] == path for share in command.shares]
            if command.op == "dispatch" and any(inside) and not all(inside):
                count += 1
    return count


def _host(results: Any) -> list[np.ndarray]:
    if not isinstance(results, (list, tuple)):
        results = [results]
    return [np.asarray(host_array(result)) for result in results]
