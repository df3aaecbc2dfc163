"""sectionmark: name parts of a model once, see the names wherever IREE runs it.

The public API (see docs/): ``section`` marks code; ``sm.torch.export`` /
``sm.jax.export`` keep the names in MLIR (a `SectionedExport`; a torch one is
also iree-turbine's ``ExportOutput``); ``compile`` carries them through
IREE (a `CompiledProgram`); ``load`` runs a module; ``profile`` / ``report``
measure per-section times (a `ProfileRun`: its `ProfileSession` of figures, and the run's events for
the views that draw them); ``report_ranks`` reports several processes' profiles of one module together
(per section min / median / max across the ranks and the slowest rank); ``compare`` tells whether
each section and component got faster or slower between two modules (run alternately) or two profiles; ``record`` notes the calls
a program makes through a loaded module and replays them under the profiler
(a `Recording`, per-function profiles: docs/record.md); ``slice`` cuts one section out
into its own program and ``bench_section`` times it alone and in the whole model (docs/slice.md);
``peak`` measures the device's peak bandwidth and FLOP/s (a `Peak`; ``prof.roofline(peak)``
places each section under it, ``prof.roofline(peak, by="name")`` each component); the session
has its views as methods (``prof.components()``, ``prof.kernels()``, ``prof.traffic()``);
``tracing`` turns Tracy zones for eager
sections on and off. Every user-facing failure is a `SectionmarkError` with a
one-line message. Every name but the error and `SectionPath` loads its module on first use:
``import sectionmark`` imports no framework, compiler, marker or numpy, so the command line (a submodule,
which imports the package first) pays only for the command it runs.
"""

from sectionmark.errors import SectionmarkError
from sectionmark.lazy import lazy_attributes
from sectionmark.section_path import SectionPath

__all__ = [
    "section", "SectionPath", "SectionmarkError", "SectionedExport", "CompiledProgram", "ProfileSession", "ProfileRun",
    "Recording", "ReplayProfile", "torch", "jax", "compile", "load", "profile", "report", "compare", "record", "tracing",
    "slice", "bench_section", "peak", "report_ranks",
]
__version__ = "0.1.0"

_LAZY = {
    "section": ("sectionmark.markers", "section"),  # model code imports it; the command line never needs it
    "SectionedExport": ("sectionmark.importers.exported", "SectionedExport"),
    "CompiledProgram": ("sectionmark.compiler.pipeline", "CompiledProgram"),
    "ProfileSession": ("sectionmark.profiling.session", "ProfileSession"),
    "ProfileRun": ("sectionmark.profiling.read", "ProfileRun"),
    "torch": ("sectionmark.importers.torch", None),
    "jax": ("sectionmark.importers.jax", None),
    "compile": ("sectionmark.compiler.pipeline", "compile"),
    "load": ("sectionmark.runtime", "load"),
    "profile": ("sectionmark.workflows.measure", "profile"),
    "report": ("sectionmark.workflows.measure", "report"),
    "report_ranks": ("sectionmark.workflows.ranks", "report_ranks"),
    "compare": ("sectionmark.workflows.compare", "compare"),
    "record": ("sectionmark.workflows.record", "record"),
    "Recording": ("sectionmark.workflows.record", "Recording"),
    "ReplayProfile": ("sectionmark.workflows.replay", "ReplayProfile"),
    "tracing": ("sectionmark.tracy.zones", "tracing"),
    "slice": ("sectionmark.compiler.slicing", "slice_section"),
    "bench_section": ("sectionmark.workflows.slice_bench", "bench_section"),
    "peak": ("sectionmark.workflows.peak", "peak"),
}
# Documented names that were renamed: they still work, with a DeprecationWarning naming the new one.
_RENAMED = {"CompiledExport": "CompiledProgram"}
__getattr__ = lazy_attributes(__name__, globals(), _LAZY, _RENAMED)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
