"""sectionmark: name parts of a model once, see the names wherever IREE runs it.

The public API (see docs/): ``section`` marks code; ``sm.torch.export`` /
``sm.jax.export`` keep the names in MLIR (a `SectionedExport`; a torch one is
also iree-turbine's ``ExportOutput``); ``compile`` carries them through
IREE (a `CompiledProgram`); ``load`` runs a module; ``profile`` / ``report``
measure per-section times (a `ProfileSession`); ``compare`` tells whether
each section and component got faster or slower between two modules (run alternately) or two profiles; ``record`` notes the calls
a program makes through a loaded module and replays them under the profiler
(a `Recording`, per-function profiles: docs/record.md); ``slice`` cuts one section out
into its own program (docs/slice.md); ``peak`` measures the device's peak bandwidth and FLOP/s
(a `Peak`, whose ``roofline(session)`` and ``component_roofline(session)`` place each section and
component under them); ``tracing`` turns Tracy zones for eager
sections on and off. Every user-facing failure is a `SectionmarkError` with a
one-line message. Heavy modules (frameworks, the compiler) load on first use:
``import sectionmark`` imports none of them.
"""

from sectionmark.errors import SectionmarkError
from sectionmark.lazy import lazy_attributes
from sectionmark.markers import section
from sectionmark.section_path import SectionPath

__all__ = [
    "section", "SectionPath", "SectionmarkError", "SectionedExport", "CompiledProgram", "ProfileSession",
    "Recording", "ReplayProfile", "torch", "jax", "compile", "load", "profile", "report", "compare", "record", "tracing",
    "slice", "peak",
]
__version__ = "0.1.0"

_LAZY = {
    "SectionedExport": ("sectionmark.importers.exported", "SectionedExport"),
    "CompiledProgram": ("sectionmark.compiler.pipeline", "CompiledProgram"),
    "ProfileSession": ("sectionmark.profiling.session", "ProfileSession"),
    "torch": ("sectionmark.importers.torch", None),
    "jax": ("sectionmark.importers.jax", None),
    "compile": ("sectionmark.compiler.pipeline", "compile"),
    "load": ("sectionmark.runtime", "load"),
    "profile": ("sectionmark.profiling", "profile"),
    "report": ("sectionmark.profiling", "report"),
    "compare": ("sectionmark.renderers.compare", "compare"),
    "record": ("sectionmark.workflows.record", "record"),
    "Recording": ("sectionmark.workflows.record", "Recording"),
    "ReplayProfile": ("sectionmark.workflows.replay", "ReplayProfile"),
    "tracing": ("sectionmark.tracy.zones", "tracing"),
    "slice": ("sectionmark.compiler.slicing", "slice_section"),
    "peak": ("sectionmark.profiling.roofline", "peak"),
}
__getattr__ = lazy_attributes(__name__, globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
