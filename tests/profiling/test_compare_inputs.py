"""`sectionmark compare` on special, damaged and hostile inputs: one error line each, never a hang, a traceback or a
figure made of nonsense.

Every input here is a profile JSON built by hand (a real session of
hand-built dispatches, saved, then edited) or a special file; no IREE.
"""

from __future__ import annotations

import copy
import json
import os
import signal
from pathlib import Path
from typing import Callable

import pytest
from test_compare import noisy, per_call_session

from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.compare import compare_sessions
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import json_out

A, B = ("A",), ("A", "B")


@pytest.fixture()
def good(tmp_path) -> tuple[Path, dict]:
    """A valid profile JSON of 30 calls (sections A, A / B, unmarked) and its document."""
    document = json.loads(json_out.render(per_call_session({A: noisy(10_000), B: noisy(5_000, seed=1)})))
    path = tmp_path / "good.json"
    path.write_text(json.dumps(document))
    return path, document


def edited(tmp_path: Path, document: dict, edit: Callable[[dict], None], name: str = "edited.json") -> Path:
    changed = copy.deepcopy(document)
    edit(changed)
    path = tmp_path / name
    path.write_text(json.dumps(changed))
    return path


def one_line(capsys, argv: list, fragment: str) -> str:
    """Run the CLI (failing the test, not hanging it, after 20 s); it must exit 1 with one line naming
    ``fragment``."""
    def hung(_signum, _frame):
        raise AssertionError(f"compare hung on {argv}")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        status = main(["compare", *map(str, argv)])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert status == 1 and err.count("\n") == 0 and err.startswith("sectionmark: error: ") and fragment in err, (
        status, err)
    assert captured.out == ""  # nothing printed before the error: no half-written output
    return err


def test_special_files_are_refused_without_blocking(good, tmp_path, capsys):
    path, _document = good
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    one_line(capsys, [path, fifo], f"cannot read profile JSON {fifo}: not a regular file")
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")  # endless
    one_line(capsys, [zero, path], f"cannot read profile JSON {zero}: not a regular file")
    directory = tmp_path / "directory.json"
    directory.mkdir()
    one_line(capsys, [path, directory], "not a regular file")


def test_deeply_nested_json_is_one_line(good, tmp_path, capsys):
    path, _document = good
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    one_line(capsys, [path, nested], f"{nested} is not a profile JSON: nested too deeply")
    inside = tmp_path / "inside.json"
    inside.write_text('{"version": 3, "sections": ' + "[" * 5_000 + "]" * 5_000 + "}")
    one_line(capsys, [inside, path], "nested too deeply")


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d["sections"][0]["samples"].__setitem__(0, 1e308),
     "section 'A' has a per-call sample of 1e+308 ns: not a measured time (0 to 1e+15 ns)"),
    (lambda d: d["sections"][0]["samples"].__setitem__(0, 10**400),
     "sections[0].samples[0]: expected a finite number, got an integer of 1329 bits"),
    (lambda d: d["sections"][1].__setitem__("busy_ns", 10**400),
     "sections[1].busy_ns: expected a finite number, got an integer of 1329 bits"),
    (lambda d: d.__setitem__("calls", 10**400), "claims more than 1e+12 measured calls"),
    (lambda d: d["sections"][1].__setitem__("samples", [-44_000.0] * 30),
     "section 'A / B' has a per-call sample of -44000 ns"),
    (lambda d: [row.__setitem__("samples", []) for row in d["sections"]],
     "section 'A' has 0 per-call samples for 30 calls"),
    (lambda d: [row.__setitem__("samples", row["samples"][:1]) for row in d["sections"]],
     "section 'A' has 1 per-call sample for 30 calls"),
    (lambda d: d["sections"].insert(1, copy.deepcopy(d["sections"][1])), "section 'A / B' is listed twice"),
    (lambda d: d["sections"][0].__setitem__("samples", [[1.0, 2.0]] * 30), "samples[0]: expected a number"),
], ids=["1e308", "400-digit sample", "400-digit busy", "400-digit calls", "negative", "empty", "one sample",
        "duplicate path", "nested samples"])
def test_damaged_profiles_are_one_line(good, tmp_path, capsys, edit, fragment):
    path, document = good
    damaged = edited(tmp_path, document, edit)
    one_line(capsys, [path, damaged], fragment)
    out = tmp_path / "change.json"
    one_line(capsys, [damaged, path, "--json", out], fragment)  # --json too: nothing written
    assert not out.exists()


def test_samples_of_different_calls_are_refused(good):
    """A file's samples beyond 1,000 are thinned as a profile keeps them; a session built in Python is taken as is,
    and its sections must hold samples of the same calls."""
    _path, document = good
    changed = copy.deepcopy(document)
    changed["calls"] = 2_000  # each section may keep 1,000 or all 2,000 samples, but all the same
    changed["sections"][0]["samples"] = [10_000.0] * 1_000
    for row in changed["sections"][1:]:
        row["samples"] = [5_000.0] * 2_000
    session = ProfileSession.from_json(changed)
    with pytest.raises(SectionmarkError, match="^A: its sections hold samples of different calls"):
        compare_sessions(session, session)


def test_options_that_do_not_apply_are_refused_not_ignored(good, capsys):
    path, _document = good
    one_line(capsys, [path, path, "--map", "model.vmfb"],
             "--map does not apply to two profile JSON files (only to recorded profiles")
    one_line(capsys, [path, path, "--warmup", "3"], "--warmup does not apply to two profile JSON files")
    one_line(capsys, [path, path, "--workers", "1", "--device", "local-task"],
             "--workers, --device do not apply to two profiles")
