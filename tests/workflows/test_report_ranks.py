"""Several processes' profiles of one module reported together (`sectionmark report rank*.ireeprof`): real
iree-compile and iree-benchmark-module, four rank files recorded here, one rank fed a wider input
(tests/helpers/rank_profiles.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rank_profiles import SLOW_RANK, WARMUP, WIDE, record_rank_files
from tiny_profiles import profile_two_devices

import sectionmark as sm
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.ranks import RankReport
from sectionmark.workflows.ranks import report_ranks

pytest.importorskip("iree.compiler")


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory):
    return record_rank_files(tmp_path_factory.mktemp("ranks"))


def test_each_ranks_rows_are_its_own_report_and_the_widened_rank_is_the_straggler(rank_files):
    vmfb, paths = rank_files
    report = sm.report_ranks(paths, vmfb, warmup=WARMUP)
    assert report.rank_files == [str(path) for path in paths]
    for index, (rank, path) in enumerate(zip(report.ranks, paths)):
        own = sm.report(path, vmfb, warmup=WARMUP)
        assert rank.session.to_json() == own.to_json()
        for row in own.sections:
            assert report.section(row.path).per_rank_ns[index] == row.busy_ns / own.calls
    # Found from the data: Wide did 8x the work on rank 2 only, so rank 2 has its largest busy time per call.
    assert report.section(WIDE).slowest_rank == SLOW_RANK
    assert report.section(WIDE).ranks == 4
    # Read one file at a time in this process, the figures are the same.
    assert report_ranks(paths, vmfb, warmup=WARMUP, processes=1).to_json() == report.to_json()


def test_the_command_writes_each_ranks_own_profile_and_names_the_straggler(rank_files, tmp_path, capsys):
    vmfb, paths = rank_files
    single = tmp_path / "rank1.json"
    assert main(["report", str(paths[1]), "--map", str(vmfb), "--warmup", str(WARMUP), "--json", str(single)]) == 0
    capsys.readouterr()
    ranks_json, ranks_csv = tmp_path / "ranks.json", tmp_path / "ranks.csv"
    assert main(["report", *map(str, paths), "--map", str(vmfb), "--warmup", str(WARMUP), "--json", str(ranks_json),
                 "--csv", str(ranks_csv)]) == 0
    out = capsys.readouterr().out
    document = json.loads(ranks_json.read_text())
    assert document["kind"] == "ranks" and len(document["ranks"]) == 4
    assert document["ranks"][1]["profile"] == json.loads(single.read_text())
    wide = next(row for row in document["sections"] if row["path"] == list(WIDE))
    assert wide["slowest_rank"] == SLOW_RANK
    wide_line = next(line for line in out.splitlines() if line.startswith("│   Wide "))
    assert f"{SLOW_RANK} (rank{SLOW_RANK}.ireeprof)" in wide_line
    assert out.splitlines()[-2:] == [f"wrote {ranks_json}", f"wrote {ranks_csv}"]


def test_a_bad_rank_file_is_one_error_line_naming_it_and_nothing_is_written(rank_files, tmp_path, capsys):
    vmfb, paths = rank_files
    bad = tmp_path / "rank1.ireeprof"
    bad.write_bytes(paths[1].read_bytes()[:3000])
    output = tmp_path / "ranks.json"
    arguments = ["report", str(paths[0]), str(bad), *map(str, paths[2:]), "--map", str(vmfb), "--json", str(output)]
    assert main(arguments) == 1
    captured = capsys.readouterr()
    size = paths[1].stat().st_size
    assert captured.err == f"sectionmark: error: {bad}: not a valid IREE profile (truncated: 3000 of {size} bytes)\n"
    assert captured.out == "" and not output.exists()
    shutil.copy(paths[1], bad)
    assert main([*arguments, "--html", str(tmp_path / "ranks.html")]) == 1  # refused before any file is read
    assert capsys.readouterr().err == ("sectionmark: error: --html shows one profile, not several ranks: report one "
                                       "rank's file for it (several ranks: --table, --json, --csv)\n")
    assert not output.exists()
    missing = tmp_path / "rank9.ireeprof"
    with pytest.raises(SectionmarkError, match=f"^no such profile file: {missing}$"):
        sm.report_ranks([paths[0], missing], vmfb)
    with pytest.raises(SectionmarkError, match=r"^sectionmark.report reads one profile; several ranks' profiles of "
                       r"one module: sectionmark.report_ranks\(paths, map\)$"):
        sm.report(paths, vmfb)


def test_ranks_of_a_run_on_several_devices_are_each_ranks_own_profile_per_device(tmp_path):
    """Rank files of a host-timed .ireeprof of two local-task devices (the same run copied as ranks): each device's
    rows of each rank are that rank's own report's of that device, read here and in processes of their own."""
    compiled, two, _run = profile_two_devices(tmp_path, iterations=2, warmup=0)
    vmfb = compiled.save(tmp_path / "two.vmfb")
    paths = [Path(shutil.copy(two, tmp_path / f"rank{rank}.ireeprof")) for rank in range(2)]
    own = [sm.report(path, vmfb) for path in paths]
    for processes in (1, None):
        report = sm.report_ranks(paths, vmfb, processes=processes)
        assert [device.ordinal for device in report.devices] == [0, 1]
        for index, run in enumerate(own):
            assert report.ranks[index].profile.render("json") == run.render("json")
            for device in run.devices:
                assert report.device(device.ordinal).ranks[index].session.to_json() == device.session.to_json()


def test_ranks_of_one_device_captures_are_ranks_of_one_device(rank_files, tmp_path):
    """A .tracy of one device (the replay of a rank's profile, whose tracks name their queue) is one device's rank."""
    vmfb, paths = rank_files
    captures = []
    for path in paths[:2]:
        with sm.report(path, vmfb, warmup=WARMUP) as run:
            captures.append(run.save(tmp_path / f"{path.stem}.tracy"))
    report = sm.report_ranks(captures, vmfb)
    assert isinstance(report, RankReport)
    for index, capture in enumerate(captures):
        assert report.ranks[index].session.to_json() == sm.report(capture, vmfb).session.to_json()
