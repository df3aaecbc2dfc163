"""The history store: per-section results of profiled tests over many runs, in one SQLite file.

A run is one test session (``pytest`` with the sectionmark plugin): its id,
the commit of the project (git, when there is one), the machine and the date.
Under a run, each recorded profile (a test, and a name when a test records
several) keeps, per section, its busy time per call in each fresh run of the
profiled tool (`sectionmark.profiling.runs`): the figures a verdict on
between-run variation needs (`sectionmark.profiling.regression`), and which
module it profiled: a copy of each module, by its content's digest, lies in
``modules/`` beside the store, so that a later session can run the module of
an earlier one beside its own, alternately (the pytest gate's paired
verdict; a copy deleted only takes that verdict away).

Safe with concurrent writers (pytest-xdist workers, parallel CI jobs on one
checkout): write-ahead logging, a busy timeout, and every write in one
``BEGIN IMMEDIATE`` transaction, so a run's results land whole or not at
all. The schema is versioned (``schema_version``) and changed only by the
numbered ``MIGRATIONS``, each applied once, in its own transaction. A file
that is not such a store, or one written by a newer sectionmark, is refused
with one error line and left exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sqlite3
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike, write_atomic
from sectionmark.profiling.regression import NO_HISTORY, RegressionVerdict, regression_verdicts
from sectionmark.profiling.runs import median_interval
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_map import sidecar_path
from sectionmark.section_path import encode_path

DEFAULT_STORE = Path(".sectionmark") / "history.sqlite"
RUN_ID_VARIABLE = "SECTIONMARK_RUN_ID"  # a run id shared by the processes of one session (xdist workers, CI jobs)
BUSY_TIMEOUT_S = 60.0
HISTORY_RUNS = 5  # a verdict's history: the last runs recorded before on the same machine
MODULES_FOLDER = "modules"  # beside the store: one copy of each profiled module, named by its content's digest
# Schema changes, by the version they bring the store to: each list runs once, in one transaction.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, git_commit TEXT, machine TEXT NOT NULL,"
        " date TEXT NOT NULL)",
        "CREATE TABLE results (run INTEGER NOT NULL REFERENCES runs(id), test TEXT NOT NULL, section TEXT NOT NULL,"
        " values_ns TEXT NOT NULL, calls INTEGER NOT NULL, device TEXT, PRIMARY KEY (run, test, section))",
    ],
    2: [  # the module each recorded profile ran (its copy: MODULES_FOLDER/<digest>.vmfb)
        "CREATE TABLE modules (run INTEGER NOT NULL REFERENCES runs(id), test TEXT NOT NULL, digest TEXT NOT NULL,"
        " PRIMARY KEY (run, test))",
    ],
}
SCHEMA_VERSION = max(MIGRATIONS)


@dataclass(frozen=True)
class Run:
    """One recorded test session."""

    run_id: str
    commit: Optional[str]  # the project's git commit (with "-dirty" when it had changes); None: not a git checkout
    machine: str
    date: str  # UTC, ISO 8601
    number: int = 0  # its order in the store (1: the first recorded)


@dataclass(frozen=True)
class SectionResult:
    """One section of one recorded profile in one run: busy ns per call in each fresh run of the tool."""

    run: Run
    test: str
    section: str  # the path as `encode_path` writes it ("Block 0/MLP"); "" for the unmarked time
    values_ns: list[float]
    calls: int
    device: Optional[str]


def new_run_id() -> str:
    """$SECTIONMARK_RUN_ID, else the time now (UTC) and a random suffix."""
    now = datetime.now(timezone.utc)
    return os.environ.get(RUN_ID_VARIABLE) or f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def this_run(root: PathLike, run_id: str) -> Run:
    """The run ``run_id`` of this session: the git commit of ``root`` (when git knows it), this machine and the
    time now."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return Run(run_id, git_commit(root), f"{socket.gethostname()} ({platform.machine()})", now.isoformat())


def git_commit(root: PathLike) -> Optional[str]:
    """The commit checked out at ``root`` (short hash, "-dirty" with uncommitted changes); None without git."""
    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short=12", "HEAD")
    if commit is None:
        return None
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def section_values(session: ProfileSession) -> dict[str, tuple[list[float], int]]:
    """Each section's (and the unmarked time's) busy ns per call in each run of ``session``, with its calls."""
    calls = max(session.calls, 1)
    return {encode_path(row.path): (list(row.runs.values_ns) if row.runs is not None else [row.busy_ns / calls], session.calls)
            for row in session.sections}


class HistoryStore:
    """One history file, opened (created, migrated) and checked; `close` or use as a context manager."""

    def __init__(self, path: PathLike, create: bool = True):
        self.path = Path(path)
        if not self.path.exists() and not create:
            raise SectionmarkError(f"{self.path}: no history store there (record one with the pytest plugin: "
                                   "docs/history.md)")
        if self.path.exists() and not self.path.is_file():
            raise SectionmarkError(f"{self.path}: not a file (the history store is one SQLite file)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            self._prepare()
        except sqlite3.DatabaseError as error:
            self.connection.close()
            raise SectionmarkError(f"{self.path}: not a sectionmark history store ({error}); left as it is") from None
        except SectionmarkError:
            self.connection.close()
            raise

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.connection.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (``IMMEDIATE``): concurrent writers queue, none is lost."""
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield self.connection
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def _prepare(self) -> None:
        self.connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if self.connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self.connection.execute("PRAGMA journal_mode = WAL")
        version = self._version()
        if version > SCHEMA_VERSION:
            raise SectionmarkError(f"{self.path}: written by a newer sectionmark (history schema {version}; this one "
                                   f"reads up to {SCHEMA_VERSION}); left as it is")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction() as connection:
                if self._version() >= target:  # another process migrated it meanwhile
                    continue
                for statement in MIGRATIONS[target]:
                    connection.execute(statement)
                connection.execute("DELETE FROM schema_version")
                connection.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))

    def _version(self) -> int:
        tables = {row[0] for row in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_version" not in tables:
            if tables:
                raise SectionmarkError(f"{self.path}: an SQLite file without sectionmark's schema_version table "
                                       f"(tables: {', '.join(sorted(tables))}); left as it is")
            with self._transaction() as connection:
                connection.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            return 0
        row = self.connection.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # ------------------------------------------------------------------ writing

    @property
    def modules(self) -> Path:
        return self.path.parent / MODULES_FOLDER

    def keep_module(self, program: Any) -> Optional[str]:
        """Copy the module ``program`` (a compiled program or a .vmfb path) into `modules` unless a copy of the same
        content is there; its digest, or None for anything else. The copy is written whole or not at all (its
        sidecar map first), so concurrent sessions keeping one module both succeed."""
        if hasattr(program, "vmfb"):
            data, sidecar = bytes(program.vmfb), None
        elif isinstance(program, (str, os.PathLike)) and Path(program).is_file():
            data, sidecar = Path(program).read_bytes(), sidecar_path(Path(program))
        else:
            return None
        digest = hashlib.sha256(data).hexdigest()[:32]
        copy = self.modules / f"{digest}.vmfb"
        if not copy.exists():
            self.modules.mkdir(parents=True, exist_ok=True)
            if sidecar is not None and sidecar.is_file():
                write_atomic(sidecar_path(copy), sidecar.read_bytes())
            write_atomic(copy, data)
        return digest

    def module_copy(self, digest: str) -> Optional[Path]:
        """The kept copy of module ``digest``; None when it is gone."""
        copy = self.modules / f"{digest}.vmfb"
        return copy if copy.is_file() else None

    def baseline(self, test: str, current: Run, only: Optional[Run] = None) -> Optional[tuple[Run, str]]:
        """The run and module digest ``test`` is compared with: run ``only``'s, else that of the last run recorded
        before ``current`` on its machine with a module; None when there is none."""
        rows = self.connection.execute(
            "SELECT runs.id, run_id, git_commit, machine, date, digest FROM modules JOIN runs ON runs.id = modules.run"
            " WHERE modules.test = ? ORDER BY runs.id DESC", (test,)).fetchall()
        for number, run_id, commit, machine, date, digest in rows:
            run = Run(run_id, commit, machine, date, number)
            if only is not None:
                if run_id == only.run_id:
                    return run, digest
            elif machine == current.machine and run_id != current.run_id:
                return run, digest
        return None

    def record(self, run: Run, test: str, session: ProfileSession, module: Optional[str] = None) -> None:
        """Every section of ``session`` under ``run`` and ``test``, and the digest of the module it ran (`keep_module`)
        when given, in one transaction (a run id met again adds to that run: the xdist workers of one session
        share it)."""
        rows = section_values(session)
        with self._transaction() as connection:
            connection.execute("INSERT OR IGNORE INTO runs (run_id, git_commit, machine, date) VALUES (?, ?, ?, ?)",
                               (run.run_id, run.commit, run.machine, run.date))
            (number,) = connection.execute("SELECT id FROM runs WHERE run_id = ?", (run.run_id,)).fetchone()
            connection.executemany(
                "INSERT OR REPLACE INTO results (run, test, section, values_ns, calls, device) VALUES (?, ?, ?, ?, ?, ?)",
                [(number, test, section, json.dumps(values), calls, session.device)
                 for section, (values, calls) in rows.items()])
            if module is not None:
                connection.execute("INSERT OR REPLACE INTO modules (run, test, digest) VALUES (?, ?, ?)",
                                   (number, test, module))

    # ------------------------------------------------------------------ reading

    def runs(self) -> list[Run]:
        """Every recorded run, oldest first."""
        return [Run(run_id, commit, machine, date, number) for number, run_id, commit, machine, date in
                self.connection.execute("SELECT id, run_id, git_commit, machine, date FROM runs ORDER BY id")]

    def find_run(self, text: str) -> Run:
        """A run by its id, its number in the store, or "last"; an error lists what there is."""
        runs = self.runs()
        for run in reversed(runs):
            if text in (run.run_id, str(run.number)) or (text == "last" and run is runs[-1]):
                return run
        known = ", ".join(f"{run.number} {run.run_id}" for run in runs[-5:]) or "none recorded"
        raise SectionmarkError(f"no recorded run {text!r} in {self.path} (last runs: {known})")

    def results(self, test: Optional[str] = None, section: Optional[str] = None) -> list[SectionResult]:
        """Recorded results, oldest run first: of one ``test`` and one ``section`` when given."""
        where, parameters = [], []
        for column, value in (("results.test", test), ("results.section", section)):
            if value is not None:
                where.append(f"{column} = ?")
                parameters.append(value)
        query = ("SELECT runs.id, run_id, git_commit, machine, date, test, section, values_ns, calls, device FROM "
                 "results JOIN runs ON runs.id = results.run" + (" WHERE " + " AND ".join(where) if where else "")
                 + " ORDER BY runs.id, results.test, results.rowid")
        return [SectionResult(Run(run_id, commit, machine, date, number), test_name, section_name,
                              [float(value) for value in json.loads(values)], calls, device)
                for number, run_id, commit, machine, date, test_name, section_name, values, calls, device
                in self.connection.execute(query, parameters)]

    def history(self, test: str, section: str, current: Run, only: Optional[Run] = None) -> list[float]:
        """The run values of ``section`` of ``test`` that ``current`` is judged against: those of run ``only``, else
        of the last `HISTORY_RUNS` runs recorded before it on its machine."""
        return history_values(self.results(test, section), current, only)


def history_values(results: Sequence[SectionResult], current: Run, only: Optional[Run] = None) -> list[float]:
    """The run values among ``results`` (one section's, oldest first) that ``current`` is judged against: run
    ``only``'s, else those of the last `HISTORY_RUNS` runs before ``current`` on its machine."""
    if only is not None:
        return [value for result in results if result.run.run_id == only.run_id for value in result.values_ns]
    earlier = [result for result in results if result.run.machine == current.machine
               and result.run.run_id != current.run_id and (not current.number or result.run.number < current.number)]
    return [value for result in earlier[-HISTORY_RUNS:] for value in result.values_ns]


def sections_of(results: Sequence[SectionResult]) -> list[tuple[str, str]]:
    """The (test, section) pairs of ``results`` in the order first met."""
    return list(dict.fromkeys((result.test, result.section) for result in results))


@dataclass(frozen=True)
class HistoryPoint:
    """One run of one section: its median over the runs of the tool, the median's interval, and its verdict
    against the runs before it (as the gate would have judged it)."""

    result: SectionResult
    median_ns: float
    low_ns: float
    high_ns: float
    verdict: RegressionVerdict
    changed: bool  # the verdict differs from the previous run's (the first run with a history never counts)


def test_series(results: Sequence[SectionResult], threshold_percent: float) -> dict[str, list[HistoryPoint]]:
    """The points of each section of one test's ``results`` (oldest first): each run's sections judged together
    against the runs before it, as the gate judged them (`regression_verdicts`)."""
    by_section: dict[str, list[SectionResult]] = {}
    for result in results:
        by_section.setdefault(result.section, []).append(result)
    points: dict[str, list[HistoryPoint]] = {section: [] for section in by_section}
    for run in dict.fromkeys(result.run for result in results):
        present = {section: result for section, rows in by_section.items() for result in rows if result.run == run}
        verdicts = regression_verdicts({section: history_values(by_section[section], run) for section in present},
                                       {section: result.values_ns for section, result in present.items()},
                                       dict.fromkeys(present, threshold_percent))
        for section, result in present.items():
            low, high, _coverage = median_interval(result.values_ns)
            previous = points[section][-1].verdict.verdict if points[section] else NO_HISTORY
            changed = previous != NO_HISTORY and verdicts[section].verdict != previous
            points[section].append(HistoryPoint(result, float(np.median(result.values_ns)), low, high,
                                                verdicts[section], changed))
    return points
