"""The ``sectionmark`` pytest plugin: profile a compiled program in a test, keep its sections' times over runs,
and fail a test whose section got slower than its history (docs/history.md).

Loaded by pytest through the ``pytest11`` entry point once sectionmark is
installed; it does nothing until a test uses the ``sectionmark_profile``
fixture::

    def test_model_speed(sectionmark_profile):
        prof = sectionmark_profile(compiled, args=(x,))   # 3 fresh runs of the profiler, recorded

Each call profiles the program ``runs`` times (fresh processes: the
between-run variation, `sectionmark.profiling.runs`) and records every
section's time per call of each run in the history store under this
session's run (id, git commit, machine, date; `sectionmark.workflows.history`).
With ``--sectionmark-compare [RUN]`` or a ``--sectionmark-fail SECTION:PCT%``
gate, each section is judged against the history (the last runs on this
machine, or run RUN alone) by `regression_verdicts`, each run's whole-run
factor taken out (what load does to a run); a gated section judged
slower by more than PCT fails the test with one line naming it. The workers
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
from sectionmark.profiling.regression import SLOWER, Gate, RegressionVerdict, parse_gate, regression_verdicts
from sectionmark.renderers.table import format_ns
from sectionmark.section_path import decode_path, format_path
from sectionmark.workflows.history import DEFAULT_STORE, HistoryStore, Run, new_run_id, section_values, this_run

DEFAULT_RUNS = 3  # fresh runs of the profiler per recorded profile: the figures a between-run verdict needs
FIRST_RUN = "history"  # --sectionmark-compare without RUN: the last runs recorded on this machine
WORKER_RUN_ID = "sectionmark_run_id"  # the key of the session's run id in an xdist worker's input


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
                    help="judge each recorded section against the last runs recorded on this machine, or against run "
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
                 iterations: int = 10, warmup: int = 2, **options: Any) -> Any:
        """Profile ``program`` (a `CompiledProgram` or .vmfb path) with `sectionmark.profile` ``runs`` times, record
        each section under this test (``name``: one of several profiles of a test), and judge it against the
        history; returns the `ProfileSession`. ``options`` go to `sectionmark.profile` (function, device, ...)."""
        from sectionmark.workflows.measure import profile

        if runs < 2:
            pytest.fail("sectionmark_profile: runs must be at least 2 (the verdict is between runs)", pytrace=False)
        test = self.test + (f"[{name}]" if name else "")
        settings = self.settings
        try:
            with HistoryStore(settings.store) as store:  # opened first: a bad store fails before minutes of profiling
                only = None if settings.compare in (None, FIRST_RUN) else store.find_run(settings.compare)
                with profile(program, args, iterations=iterations, warmup=warmup, runs=runs, quiet=True,
                             **options) as run:
                    session = run.session
                store.record(settings.run, test, session)
                if settings.compare is None:
                    return session
                new = {section: values for section, (values, _calls) in section_values(session).items()}
                verdicts = regression_verdicts(
                    {section: store.history(test, section, settings.run, only) for section in new}, new,
                    {section: min((gate.threshold_percent for gate in settings.gates
                                   if gate.applies_to(_path(section))), default=0.0) for section in new})
        except SectionmarkError as error:
            pytest.fail(f"sectionmark: {error}", pytrace=False)
        settings.lines += [f"{test}: {_describe(section, verdict)}" for section, verdict in verdicts.items()
                           if verdict.verdict != "no change"]
        failed = [_describe(section, verdict) for section, verdict in verdicts.items()
                  if verdict.verdict == SLOWER and any(gate.applies_to(_path(section)) for gate in settings.gates)]
        if failed:
            pytest.fail("sectionmark: slower than its history: " + "; ".join(failed), pytrace=False)
        return session


@pytest.fixture
def sectionmark_profile(request: pytest.FixtureRequest) -> SectionProfiler:
    """Profile a compiled program, record its sections in the history store, judge them (docs/history.md)."""
    return SectionProfiler(request.config.stash[SETTINGS], request.node.nodeid)


def _path(section: str):
    return decode_path(section) if section else ()


def _describe(section: str, verdict: RegressionVerdict) -> str:
    name = format_path(_path(section)) or "(unmarked)"
    if verdict.history is None:
        return f"{name}: no history"
    change = f" {verdict.ratio:.2f}x" if verdict.ratio is not None else ""
    how = ("at the history's whole-run speed" if verdict.scaled
           else f"no whole-run scale: judged beyond {verdict.bound:g}%")
    return (f"{name}{change} {verdict.verdict} (runs {format_ns(verdict.new[0])}-{format_ns(verdict.new[1])} vs "
            f"history {format_ns(verdict.history[0])}-{format_ns(verdict.history[1])} per call, {how})")
