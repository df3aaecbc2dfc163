"""Renderers: every output of a ProfileSession (and of a replay's profiles), by name, behind one small contract.

A renderer is a module with ``render(session, **options) -> str | bytes`` (text
or the bytes of a binary file) and one line in ``RENDERERS`` below: its name
(what ``ProfileSession.render`` / ``save``, the CLI's ``--NAME FILE`` options
and the demo ask for), its file extensions (the first is the usual one; a
path's suffix picks the renderer when no name is given), whether it is
binary, and a one-line summary (the CLI's help text). Adding an output is one
new module and one line here. A renderer whose file depends on its suffix (the
graph: DOT text, SVG through Graphviz, or HTML) is marked ``by_suffix`` and also
defines ``save(session, path, inputs)``, which `save` hands the checked path to.

A result of several profiles (a replay's per-function profiles,
`sectionmark.workflows.replay.ReplayProfile`) renders through the same
registry, as the renderer's ``replays`` says: ``"sections"`` (text tables:
each function's output under a heading), ``"csv"`` (one CSV, each function's
rows with a leading ``function`` column; the module defines ``COLUMNS`` and
``csv_rows(session, **options)``), ``"document"`` (the module defines
``render_replay(replay, **options)``: one JSON document, one trace or
capture), ``"stacked"`` (PNG pictures: each function's, one under the other,
in one PNG), or None (the graph: one function at a time,
``replay.function(name)``).

A report of several ranks' profiles of one module
(`sectionmark.profiling.ranks.RankReport`) renders in the formats marked
``ranks=True`` (the table, JSON and CSV), by `sectionmark.renderers.ranks`;
the others show one profile and refuse it with one line, before any work.

Renderers depend on the session, never the reverse: the session looks this
registry up when it is asked to render, and the modules are imported only
then (the chart needs matplotlib, the Tracy replay IREE's tracing runtime).
Every file is written by `save`, the one path to disk: the target is checked
before rendering (a long render must not fail only at the end), then written
all at once (`sectionmark.outputs`), never onto one of ``inputs``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike, check_output_path, write_atomic
from sectionmark.renderers.csv_format import csv_text
from sectionmark.section_path import printable

if TYPE_CHECKING:
    from sectionmark.profiling.session import ProfileSession
    from sectionmark.profiling.ranks import DeviceRankReport, RankReport
    from sectionmark.workflows.replay import ReplayProfile

REPLAY_FORMS = ("sections", "csv", "document", "stacked")  # how a renderer writes a replay's per-function profiles


@dataclass(frozen=True)
class Renderer:
    """One output format: what it is called, how its files are named, and where ``render`` lives."""

    name: str
    extensions: tuple[str, ...]  # the first is the usual one
    binary: bool  # render returns bytes (else text, written as UTF-8)
    summary: str  # one line, for --help and the docs
    module: str  # the module defining render(session, **options)
    by_suffix: bool = False  # the file's form follows its suffix (save(session, path, inputs)): one of extensions
    replays: Optional[str] = None  # how a replay's per-function profiles render: one of REPLAY_FORMS, None: per function
    # It draws every event of the run: render takes ``events`` (`sectionmark.ProfileRun.render` reads and passes
    # them; a session passes those it holds).
    events: bool = False
    ranks: bool = False  # it has a form for several ranks' profiles (`sectionmark.renderers.ranks`)

    def render(self, session: "ProfileSession", **options: Any) -> Union[str, bytes]:
        return self._checked(importlib.import_module(self.module).render(session, **options))

    def render_replay(self, replay: "ReplayProfile", **options: Any) -> Union[str, bytes]:
        """A replay's per-function profiles in this format, as ``replays`` says (module docstring)."""
        self.check_replays(replay.function_names)
        module = importlib.import_module(self.module)
        if self.replays == "document":
            return self._checked(module.render_replay(replay, **options))
        if self.replays == "stacked":
            from sectionmark.renderers.chart import stacked_png

            return stacked_png([self.render(entry.profile, **options) for entry in replay.functions
                                if entry.profile is not None])
        if self.replays == "csv":
            return csv_text(["function", *module.COLUMNS], ([entry.function, *row] for entry in replay.functions
                                                            if entry.profile is not None
                                                            for row in module.csv_rows(entry.profile, **options)))
        return per_function_text(replay, lambda session: self.render(session, **options))

    def render_ranks(self, report: Union["RankReport", "DeviceRankReport"], **options: Any) -> Union[str, bytes]:
        """Several ranks' profiles of one module in this format (`sectionmark.renderers.ranks`)."""
        self.check_ranks()
        return self._checked(importlib.import_module("sectionmark.renderers.ranks").FORMS[self.name](report, **options))

    def check_ranks(self) -> None:
        """Refuse, before any work, a format that shows one profile (``ranks`` False) for several ranks."""
        if not self.ranks:
            raise one_profile_only(f"--{self.name}")

    def check_replays(self, functions: Iterable[str]) -> None:
        """Refuse, before any work, a format that shows one function at a time (``replays`` None)."""
        if self.replays is None:
            raise per_function_error(f"--{self.name}", functions)

    def _checked(self, output: Any) -> Union[str, bytes]:
        if not isinstance(output, bytes if self.binary else str):
            raise TypeError(f"renderer {self.name!r} returned {type(output).__name__}")
        return output


def per_function_text(replay: "ReplayProfile", text_of: Callable[["ProfileSession"], str]) -> str:
    """Each function's text (``text_of`` its profile) under its heading; "no dispatches" for one that ran none."""
    return "\n".join(f"── {printable(replay.heading(entry))} ──\n"
                     + (text_of(entry.profile) if entry.profile is not None else "no dispatches\n")
                     for entry in replay.functions)


def one_profile_only(option: str) -> SectionmarkError:
    """The error for an output or option that shows one profile, asked for with several ranks' files."""
    known = ", ".join(f"--{renderer.name}" for renderer in RENDERERS.values() if renderer.ranks)
    return SectionmarkError(f"{option} shows one profile, not several ranks: report one rank's file for it "
                            f"(several ranks: {known})")


def per_function_error(option: str, functions: Iterable[str]) -> SectionmarkError:
    """The error for an output of a replay that shows one function at a time, asked for without naming it."""
    return SectionmarkError(f"{option} of a recording is per function: add --function NAME "
                            f"(it called: {', '.join(functions)})")


RENDERERS: dict[str, Renderer] = {
    renderer.name: renderer
    for renderer in (
        Renderer("table", (".txt",), False, "the per-section table as text", "sectionmark.renderers.table",
                 replays="sections", ranks=True),
        Renderer("json", (".json",), False, "per-section statistics as versioned JSON", "sectionmark.renderers.json_out",
                 replays="document", ranks=True),
        Renderer("csv", (".csv",), False, "per-section statistics as CSV", "sectionmark.renderers.csv_out",
                 replays="csv", ranks=True),
        Renderer("perfetto", (".perfetto.json",), False,
                 "Chrome/Perfetto JSON trace (open in ui.perfetto.dev)", "sectionmark.renderers.perfetto",
                 replays="document", events=True),
        Renderer("tracy", (".tracy",), True, "Tracy capture (.tracy) of the profiled timeline",
                 "sectionmark.renderers.tracy_out", replays="document", events=True),
        Renderer("chart", (".png",), True, "PNG chart of the section breakdown", "sectionmark.renderers.chart",
                 replays="stacked"),
        Renderer("timeline", (".timeline.png",), True,
                 "PNG timeline of a call: where each section runs (median start to end, min..max whiskers)",
                 "sectionmark.renderers.timeline", replays="stacked"),
        Renderer("components", (".components.txt",), False,
                 "sections of one name summed across blocks, as a text table", "sectionmark.renderers.components",
                 replays="sections"),
        Renderer("components-csv", (".components.csv",), False, "the component view as CSV",
                 "sectionmark.renderers.components_csv", replays="csv"),
        Renderer("components-chart", (".components.png",), True, "PNG chart of the component view",
                 "sectionmark.renderers.components_chart", replays="stacked"),
        # Before the graph, which also writes .html when asked by name: a bare .html path is the report.
        Renderer("html", (".html",), False,
                 "one self-contained HTML report: section tree, call timeline, components, kernels, graph",
                 "sectionmark.renderers.html", replays="document", events=True),
        Renderer("graph", (".dot", ".svg", ".html"), False,
                 "read/write graph of the dispatches: .dot, .svg (needs Graphviz 'dot') or self-contained .html",
                 "sectionmark.renderers.graph", by_suffix=True),
        Renderer("kernels", (".kernels.txt",), False,
                 "per dispatch site: argument shapes, exact bytes, FLOPs, time, GB/s, GFLOP/s (text table)",
                 "sectionmark.renderers.kernels", replays="sections"),
        Renderer("kernels-csv", (".kernels.csv",), False, "the kernel table as CSV", "sectionmark.renderers.kernels_csv",
                 replays="csv"),
        Renderer("roofline", (".roofline.png",), True,
                 "PNG roofline: each section's GFLOP/s vs FLOPs/byte under the measured peaks (also printed as a table)",
                 "sectionmark.renderers.roofline", replays="stacked"),
    )
}


def get(name: str) -> Renderer:
    """The renderer called ``name``, or one error line listing the known ones."""
    try:
        return RENDERERS[name]
    except KeyError:
        raise SectionmarkError(f"unknown output format {name!r}; use one of: {', '.join(RENDERERS)}") from None


def for_path(path: PathLike) -> Renderer:
    """The renderer whose extension ends ``path`` (the longest match: ``run.perfetto.json`` is perfetto; of
    equally long ones the first registered: ``.html`` is the report)."""
    name = Path(path).name.lower()
    matches = [(len(ext), renderer) for renderer in RENDERERS.values() for ext in renderer.extensions
               if name.endswith(ext)]
    if not matches:
        known = ", ".join(f"{ext} ({renderer.name})" for renderer in RENDERERS.values() for ext in renderer.extensions)
        raise SectionmarkError(f"cannot tell the output format of {path} from its name ({known}); name the format")
    return max(matches, key=lambda match: match[0])[1]


def check_path(renderer: Renderer, path: PathLike, inputs: Iterable[PathLike] = ()) -> Path:
    """``path`` checked before any work: writable without loss (`check_output_path`), and named with one of the
    renderer's extensions when its form follows the suffix (a wrong one must not be found only after a long run)."""
    target = check_output_path(path, inputs)
    if renderer.by_suffix and not target.name.lower().endswith(renderer.extensions):
        *others, last = renderer.extensions
        raise SectionmarkError(f"{renderer.name} file must end in {', '.join(others)} or {last}, not {target.name!r}")
    return target


def save(
    result: Union["ProfileSession", "ReplayProfile", "RankReport", "DeviceRankReport"],
    path: PathLike,
    format: Optional[str] = None,
    *,
    inputs: Iterable[PathLike] = (),
    **options: Any,
) -> Path:
    """Render ``result`` (a profile, a replay's per-function profiles, or several ranks' profiles) with the
    renderer ``format`` (default: from ``path``'s suffix) into ``path``.

    The file is written exactly as rendered (text as UTF-8, line ends
    unchanged), all at once, never onto one of ``inputs``.
    """
    renderer = get(format) if format is not None else for_path(path)
    inputs = list(inputs)
    check_path(renderer, path, inputs)
    functions = getattr(result, "function_names", None)  # a result of several profiles names them
    if functions is not None:
        renderer.check_replays(functions)
    if getattr(result, "rank_files", None) is not None:  # several ranks' profiles
        renderer.check_ranks()
    if renderer.by_suffix:  # a file whose form depends on its suffix (the graph: .dot, .svg or .html)
        return importlib.import_module(renderer.module).save(result, path, inputs=inputs, **options)
    output = result.render(renderer.name, **options)
    return write_atomic(path, output.encode("utf-8") if isinstance(output, str) else output, inputs=inputs)


def render_devices(profile: Any, format: str, **options: Any) -> Union[str, bytes]:
    """A profile of several devices (`sectionmark.profiling.devices.DeviceProfile`) in ``format``: its outputs are
    `sectionmark.renderers.devices`, imported when called like every renderer module (it imports the profile)."""
    get(format)  # an unknown name is the registry's error line
    return importlib.import_module("sectionmark.renderers.devices").render(profile, format, **options)


def render_replay_devices(replay: Any, format: str, **options: Any) -> Union[str, bytes]:
    """A replayed recording on several devices (`sectionmark.workflows.replay_devices.DeviceReplayProfile`) in
    ``format``: its outputs are `sectionmark.renderers.replay_devices`, imported when called."""
    get(format)
    return importlib.import_module("sectionmark.renderers.replay_devices").render(replay, format, **options)


def notebook_view(result: Any, form: str) -> str:
    """What Jupyter shows for a profile, a replay or a comparison: ``form`` "text" (a one-line summary, its
    ``__repr__``) or "html" (the inline report, its ``_repr_html_``): `sectionmark.renderers.notebook`, imported
    when called like every renderer module (the results call this; the module imports them)."""
    notebook = importlib.import_module("sectionmark.renderers.notebook")
    return notebook.summary(result) if form == "text" else notebook.inline_html(result)
