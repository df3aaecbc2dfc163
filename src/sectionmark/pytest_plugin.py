"""The ``sectionmark`` pytest plugin: profile a compiled program in a test, keep its sections' times over runs,
and fail a test whose section got slower than its history (docs/history.md).

Loaded by pytest through the ``pytest11`` entry point once sectionmark is
installed; it does nothing until a test uses the ``sectionmark_profile``
fixture::

    def test_model_speed(sectionmark_profile):
        prof = sectionmark_profile(compiled, args=(x,))   # 3 fresh runs of the profiler, recorded

Each call records every section's time per call of each fresh run of the
profiler in the history store under this session's run (id, git commit,
machine, date; `sectionmark.workflows.history`), and keeps a copy of the
module. With ``--sectionmark-compare [RUN]`` or a ``--sectionmark-fail
SECTION:PCT%`` gate, the verdict is paired when it can be: the module the
compared run profiled (the last run on this machine, or run RUN) still kept,
it and the module under test run alternately, ``rounds`` rounds
(`sectionmark.workflows.interleave`), and each section is judged over the
rounds' paired ratios, so that load, however it changes, hits both alike.
Without that copy (or for options the rounds do not take, or when the kept
module cannot run: other inputs, another function; a note says so), ``runs`` fresh
runs are judged against the recorded runs (`regression_verdicts`, each
run's whole-run factor taken out). A gated section judged slower by more
than PCT fails the test with one line naming it. The workers
of one session (pytest-xdist) record under its run id, handed to each when it
starts; ``SECTIONMARK_RUN_ID`` names the run instead (several CI jobs of one
pipeline recording as one run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.compare import NO_CHANGE, NO_DISPATCHES, SLOWER, Comparison, compare_sessions
from sectionmark.profiling.compare_defaults import DEFAULT_ROUNDS
from sectionmark.profiling.regression import Gate, RegressionVerdict, parse_gate, regression_verdicts
from sectionmark.renderers.table import format_ns
from sectionmark.section_path import decode_path, encode_path, format_path
from sectionmark.workflows.history import DEFAULT_STORE, HistoryStore, Run, new_run_id, section_values, this_run

DEFAULT_RUNS = 3  # fresh runs of the profiler per recorded profile: the figures a between-run verdict needs
FIRST_RUN = "history"  # --sectionmark-compare without RUN: the last runs recorded on this machine
WORKER_RUN_ID = "sectionmark_run_id"  # the key of the session's run id in an xdist worker's input
PAIRED_OPTIONS = frozenset({"function", "device", "workers", "parameters", "timeout"})  # what the rounds take


@dataclass
class Settings:
    """What the command line and the ini file asked for, and the session's run."""

    store: Path
    root: Path
    run_id: str
    compare: Optional[str]  # None: no comparison; FIRST_RUN: the history; else a run id or number
    gates: list[Gate]
    lines: list[str] = field(default_factory=list)  # comparison lines for the terminal summary
    _run: Optional[Run] = None

    @property
    def run(self) -> Run:
        """The session's run, made when a test first records (a session that records nothing never asks git)."""
        if self._run is None:
            self._run = this_run(self.root, self.run_id)
        return self._run


SETTINGS = pytest.StashKey[Settings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sectionmark", "per-section times over runs (sectionmark_profile fixture)")
    group.addoption("--sectionmark-history", metavar="PATH",
                    help=f"the history store (SQLite; default: ini sectionmark_history, else {DEFAULT_STORE} under "
                         "the rootdir)")
    group.addoption("--sectionmark-compare", nargs="?", const=FIRST_RUN, metavar="RUN",
                    help="judge each recorded section against the last run recorded on this machine (its module "
                         "run alternately with the new one when kept; else the last runs' values), or against run "
                         "RUN (its id, its number in `sectionmark history`, or 'last')")
    group.addoption("--sectionmark-fail", action="append", default=[], metavar="SECTION:PCT%",
                    help="fail a test whose SECTION ('Block 0/MLP'; '*': any) is slower than its history by more "
                         "than PCT percent (repeatable; implies --sectionmark-compare)")
    parser.addini("sectionmark_history", f"the sectionmark history store (default: {DEFAULT_STORE})",
                  default=str(DEFAULT_STORE))


def pytest_configure(config: pytest.Config) -> None:
    try:
        gates = [parse_gate(text) for text in config.getoption("sectionmark_fail")]
    except SectionmarkError as error:
        raise pytest.UsageError(str(error)) from None
    store = Path(config.getoption("sectionmark_history") or config.getini("sectionmark_history"))
    worker_input = getattr(config, "workerinput", {})  # an xdist worker: the session's run id
    run_id = worker_input.get(WORKER_RUN_ID) or new_run_id()
    compare = config.getoption("sectionmark_compare") or (FIRST_RUN if gates else None)
    config.stash[SETTINGS] = Settings(store if store.is_absolute() else config.rootpath / store, config.rootpath,
                                      run_id, compare, gates)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(WorkerRun(run_id), "sectionmark-xdist")


class WorkerRun:
    """Hands the session's run id to each pytest-xdist worker as it starts (a hook only xdist defines)."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_RUN_ID] = self.run_id


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS, None)
    if settings is not None and settings.lines:
        terminalreporter.write_sep("-", f"sectionmark: run {settings.run_id} against its history")
        for line in settings.lines:
            terminalreporter.write_line(line)


class SectionProfiler:
    """The ``sectionmark_profile`` fixture's value: call it to profile, record and judge a program."""

    def __init__(self, settings: Settings, test: str):
        self.settings = settings
        self.test = test

    def __call__(self, program: Any, args: Any = (), *, name: Optional[str] = None, runs: int = DEFAULT_RUNS,
                 rounds: int = DEFAULT_ROUNDS, iterations: int = 10, warmup: int = 2, **options: Any) -> Any:
        """Profile ``program`` (a `CompiledProgram` or .vmfb path), record each section under this test (``name``:
        one of several profiles of a test), and judge it: beside the compared run's module, ``rounds`` rounds run
        alternately, when that module is kept; else ``runs`` fresh runs against the recorded runs. Returns the
        `ProfileSession` (of the rounds or the runs). ``options`` go to `sectionmark.profile` (function, device,
        ...)."""
        from sectionmark.workflows.interleave import interleaved_sessions
        from sectionmark.workflows.measure import profile

        if runs < 2:
            pytest.fail("sectionmark_profile: runs must be at least 2 (the verdict is between runs)", pytrace=False)
        test = self.test + (f"[{name}]" if name else "")
        settings = self.settings
        paired: Optional[Comparison] = None
        try:
            with HistoryStore(settings.store) as store:  # opened first: a bad store fails before minutes of profiling
                only = None if settings.compare in (None, FIRST_RUN) else store.find_run(settings.compare)
                baseline = store.baseline(test, settings.run, only) if settings.compare is not None else None
                copy = store.module_copy(baseline[1]) if baseline is not None and set(options) <= PAIRED_OPTIONS \
                    else None
                module = store.keep_module(program)
                if copy is not None:
                    try:
                        sessions = interleaved_sessions(copy, program, args, rounds=rounds, iterations=iterations,
                                                        warmup=warmup, quiet=True, **options)
                    except SectionmarkError as error:  # e.g. the kept module takes other inputs: this run is
                        settings.lines.append(  # recorded all the same, and the next session's baseline
                            f"{test}: no rounds beside the module of run {baseline[0].number} ({error}); judged "
                            "between runs instead")
                    else:
                        paired = compare_sessions(*sessions, labels=(f"run {baseline[0].number}", "this run"),
                                                  paired=True)
                        session = sessions[1]
                if paired is None:
                    with profile(program, args, iterations=iterations, warmup=warmup, runs=runs, quiet=True,
                                 **options) as run:
                        session = run.session
                store.record(settings.run, test, session, module)
                if settings.compare is None:
                    return session
                new = {section: values for section, (values, _calls) in section_values(session).items()}
                thresholds = {section: min((gate.threshold_percent for gate in settings.gates
                                            if gate.applies_to(_path(section))), default=0.0) for section in new}
                verdicts = None if paired is not None else regression_verdicts(
                    {section: store.history(test, section, settings.run, only) for section in new}, new, thresholds)
        except SectionmarkError as error:
            pytest.fail(f"sectionmark: {error}", pytrace=False)
        if paired is not None:
            judged = {encode_path(row.path): _describe_paired(row, paired.a) for row in paired.sections
                      if row.verdict not in (NO_CHANGE, NO_DISPATCHES)}
            slower = [encode_path(row.path) for row in paired.sections if row.verdict == SLOWER
                      and row.ratio > 1 + thresholds.get(encode_path(row.path), 0.0) / 100]
        else:
            assert verdicts is not None
            judged = {section: _describe(section, verdict) for section, verdict in verdicts.items()
                      if verdict.verdict != NO_CHANGE}
            slower = [section for section, verdict in verdicts.items() if verdict.verdict == SLOWER]
        settings.lines += [f"{test}: {line}" for line in judged.values()]
        failed = [judged[section] for section in slower if any(gate.applies_to(_path(section))
                                                               for gate in settings.gates)]
        if failed:
            pytest.fail("sectionmark: slower than its history: " + "; ".join(failed), pytrace=False)
        return session


@pytest.fixture
def sectionmark_profile(request: pytest.FixtureRequest) -> SectionProfiler:
    """Profile a compiled program, record its sections in the history store, judge them (docs/history.md)."""
    return SectionProfiler(request.config.stash[SETTINGS], request.node.nodeid)


def _path(section: str):
    return decode_path(section) if section else ()


def _describe_paired(row: Any, baseline: str) -> str:
    """One section judged over rounds run alternately with the module of run ``baseline``."""
    return (f"{row.name} {row.ratio:.2f}x {row.verdict} ({row.a_runs} rounds run alternately with the module of "
            f"{baseline}: {row.low:.2f}x-{row.high:.2f}x)" if row.ratio is not None else f"{row.name}: {row.verdict}")


def _describe(section: str, verdict: RegressionVerdict) -> str:
    name = format_path(_path(section)) or "(unmarked)"
    if verdict.history is None:
        return f"{name}: no history"
    change = f" {verdict.ratio:.2f}x" if verdict.ratio is not None else ""
    how = ("at the history's whole-run speed" if verdict.scaled
           else f"no whole-run scale: judged beyond {verdict.bound:g}%")
    return (f"{name}{change} {verdict.verdict} (runs {format_ns(verdict.new[0])}-{format_ns(verdict.new[1])} vs "
            f"history {format_ns(verdict.history[0])}-{format_ns(verdict.history[1])} per call, {how})")
