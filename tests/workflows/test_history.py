"""The history store: runs and per-section run values in SQLite, concurrent writers, refused files left alone."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_compare import blocks

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.runs import combine_runs
from sectionmark.workflows.history import (HISTORY_RUNS, SCHEMA_VERSION, HistoryStore, Run, history_values,
                                           section_values)

SRC = Path(__file__).resolve().parents[2] / "src"


def run(number: int, machine: str = "box (x86_64)") -> Run:
    return Run(f"run-{number}", "abc123", machine, f"2026-01-0{number}T00:00:00+00:00")


def three_runs(seed: int = 0):
    return combine_runs([blocks(seed=seed + index) for index in range(3)])


def test_a_run_of_three_profiles_is_recorded_and_read_back(tmp_path):
    session = three_runs()
    with HistoryStore(tmp_path / "h" / "history.sqlite") as store:
        store.record(run(1), "tests/test_model.py::test_speed", session)
        store.record(run(2), "tests/test_model.py::test_speed", three_runs(seed=10))
        runs = store.runs()
        assert [(r.run_id, r.number, r.commit) for r in runs] == [("run-1", 1, "abc123"), ("run-2", 2, "abc123")]
        mlp = store.results("tests/test_model.py::test_speed", "Block 0/MLP")
        assert [result.run.run_id for result in mlp] == ["run-1", "run-2"]
        assert mlp[0].values_ns == pytest.approx(session.section(("Block 0", "MLP")).runs.values_ns)
        assert len(mlp[0].values_ns) == 3 and mlp[0].calls == 10  # test_compare.blocks: 10 calls a run
        assert {result.section for result in store.results() if result.run.number == 1} == set(section_values(session))
        assert store.find_run("last").run_id == "run-2" and store.find_run("1").run_id == "run-1"
        with pytest.raises(SectionmarkError, match="no recorded run 'run-9'"):
            store.find_run("run-9")


def test_the_history_is_the_last_runs_on_the_same_machine(tmp_path):
    results = []
    with HistoryStore(tmp_path / "history.sqlite") as store:
        for number in range(1, HISTORY_RUNS + 3):
            store.record(run(number), "t", three_runs(seed=number))
        store.record(run(9, machine="other (arm64)"), "t", three_runs(seed=99))
        results = store.results("t", "Block 0/MLP")
        current = store.find_run(f"run-{HISTORY_RUNS + 2}")
        expected = [value for result in results[1:HISTORY_RUNS + 1] for value in result.values_ns]
        assert history_values(results, current) == expected  # not run 1 (too old), not itself, not the other machine
        assert history_values(results, current, only=results[0].run) == results[0].values_ns


WRITER = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from test_compare import blocks
    from sectionmark.workflows.history import HistoryStore, Run
    session = blocks()
    store = HistoryStore(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()  # both writers start together
    for number in range(40):
        store.record(Run(f"{sys.argv[4]}-{number}", None, "box", "2026-01-01T00:00:00+00:00"), "t", session)
    store.close()
""")


def test_two_processes_writing_at_once_lose_no_row(tmp_path):
    store = tmp_path / "history.sqlite"
    tests = Path(__file__).resolve().parents[1]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(SRC), str(tests / "profiling"), str(store), name],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests / "helpers"),
                                                                                  str(tests / "foundation")])})
               for name in ("a", "b")]
    for writer in writers:
        assert writer.stdout.readline() == "ready\n"
    for writer in writers:
        writer.stdin.write("go\n")
        writer.stdin.flush()
    for writer in writers:
        writer.stdin.close()
        assert writer.wait(timeout=300) == 0
    with HistoryStore(store) as reopened:
        sections = len(section_values(blocks()))
        assert len(reopened.runs()) == 80
        assert len(reopened.results()) == 80 * sections
    assert sqlite3.connect(store).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_file_that_is_not_a_store_is_one_error_and_left_alone(tmp_path):
    garbage = tmp_path / "history.sqlite"
    garbage.write_bytes(b"not a database at all" * 100)
    before = garbage.read_bytes()
    with pytest.raises(SectionmarkError, match="not a sectionmark history store .*left as it is"):
        HistoryStore(garbage)
    assert garbage.read_bytes() == before
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE people (name TEXT)").connection.commit()
    with pytest.raises(SectionmarkError, match="without sectionmark's schema_version table .*people"):
        HistoryStore(other)


def test_a_newer_schema_is_refused_and_its_data_kept(tmp_path):
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        store.record(run(1), "t", three_runs())
    connection = sqlite3.connect(path)
    connection.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    connection.commit()
    rows = connection.execute("SELECT count(*) FROM results").fetchone()[0]
    connection.close()
    with pytest.raises(SectionmarkError, match=f"newer sectionmark \\(history schema {SCHEMA_VERSION + 1}; this one "
                                               f"reads up to {SCHEMA_VERSION}\\)"):
        HistoryStore(path)
    assert sqlite3.connect(path).execute("SELECT count(*) FROM results").fetchone()[0] == rows > 0


def test_a_missing_store_is_not_created_when_only_read(tmp_path):
    with pytest.raises(SectionmarkError, match="no history store there"):
        HistoryStore(tmp_path / "none.sqlite", create=False)
    assert not (tmp_path / "none.sqlite").exists()


def test_history_command_prints_plots_and_marks_the_changed_verdict(tmp_path, capsys):
    from sectionmark.cli import main

    store = tmp_path / "history.sqlite"
    with HistoryStore(store) as opened:
        for number in range(1, 4):
            opened.record(run(number), "t", three_runs(seed=number * 3))
        opened.record(run(4), "t", combine_runs([blocks({("Block 0", "MLP"): 5.0}, seed=40 + i) for i in range(3)]))
    assert main(["history", "--store", str(store), "--section", "Block 0/MLP", "--html", str(tmp_path / "h.html")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "run-" in line]
    assert [line.split("│")[2].strip() for line in rows] == ["run-1", "run-2", "run-3", "run-4"]
    assert "no history" in rows[0] and "no change" in rows[1] and "no change" in rows[2]
    assert "slower" in rows[3] and "◆ changed" in rows[3] and "changed" not in "".join(rows[:3])
    page = (tmp_path / "h.html").read_text(encoding="utf-8")
    assert page.count("class=\"run\"") == 4 and page.count("class=\"changed\"") == 1 and "<script" not in page
    assert main(["history", "--store", str(store), "--png", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.count("t: Block 0 / MLP") == 1  # every section printed, each once


def test_history_command_errors_are_one_line(tmp_path, capsys):
    from sectionmark.cli import main

    assert main(["history", "--store", str(tmp_path / "none.sqlite")]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    with HistoryStore(tmp_path / "history.sqlite") as opened:
        opened.record(run(1), "t", three_runs())
    assert main(["history", "--store", str(tmp_path / "history.sqlite"), "--section", "Nope"]) == 1
    assert "no recorded results for --section 'Nope'" in capsys.readouterr().err


def test_a_run_names_the_git_commit_and_the_machine(tmp_path, monkeypatch):
    from sectionmark.workflows.history import RUN_ID_VARIABLE, git_commit, new_run_id, this_run

    assert git_commit(tmp_path) is None  # not a git checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "model.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "model.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "model.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == head + "-dirty"
    monkeypatch.setenv(RUN_ID_VARIABLE, "ci-1234")
    run_now = this_run(tmp_path, new_run_id())
    assert run_now.run_id == "ci-1234" and run_now.commit == head + "-dirty" and "(" in run_now.machine


def test_modules_are_kept_by_content_and_the_baseline_is_the_last_run_on_this_machine(tmp_path):
    """The module a profile ran is kept once per content beside the store; a test's baseline is the module of the
    last run before on the same machine (or of the run asked for); a deleted copy is none."""
    vmfb = tmp_path / "model.vmfb"
    vmfb.write_bytes(b"module one")
    (tmp_path / "model.sections.json").write_text("{}", encoding="utf-8")  # a sidecar map travels with it
    with HistoryStore(tmp_path / "store" / "history.sqlite") as store:
        first = store.keep_module(vmfb)
        assert store.keep_module(str(vmfb)) == first and store.keep_module(object()) is None
        assert store.module_copy(first).read_bytes() == b"module one"
        assert (store.modules / f"{first}.sections.json").read_text(encoding="utf-8") == "{}"
        store.record(run(1), "t", three_runs(), first)
        vmfb.write_bytes(b"module two")
        second = store.keep_module(vmfb)
        assert second != first and sorted(path.name for path in store.modules.glob("*.vmfb")) == sorted(
            [f"{first}.vmfb", f"{second}.vmfb"])
        store.record(run(2), "t", three_runs(seed=5), second)
        store.record(run(3, machine="other (arm64)"), "t", three_runs(seed=7), first)
        store.record(run(4), "t", three_runs(seed=9))  # recorded without a module
        current = run(5)
        assert store.baseline("t", current) == (store.find_run("run-2"), second)
        assert store.baseline("t", current, only=store.find_run("run-1")) == (store.find_run("run-1"), first)
        assert store.baseline("t", current, only=store.find_run("run-4")) is None
        assert store.baseline("other test", current) is None
        store.module_copy(second).unlink()
        assert store.module_copy(second) is None


def test_a_store_of_schema_1_is_migrated_and_keeps_its_runs(tmp_path):
    from sectionmark.workflows.history import MIGRATIONS

    path = tmp_path / "history.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in MIGRATIONS[1]:
        connection.execute(statement)
    connection.execute("INSERT INTO schema_version (version) VALUES (1)")
    connection.execute("INSERT INTO runs (run_id, git_commit, machine, date) VALUES ('old', NULL, 'box', '2026')")
    connection.commit()
    connection.close()
    with HistoryStore(path) as store:
        assert [run.run_id for run in store.runs()] == ["old"] and store.baseline("t", run(1)) is None
        assert store.connection.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 2
