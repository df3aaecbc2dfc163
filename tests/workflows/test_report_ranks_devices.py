"""Ranks of a run on several devices reported together (`sectionmark report rank0.tracy rank1.tracy --map M`):
copies of the CUDA captures recorded on an H200 of a module compiled for two devices
(tests/readers/h200-two-devices, tests/readers/test_tracy_devices.py) as ranks, read in processes of their own and
in this one; each rank's rows on each device are that rank's own report's of that device."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sectionmark as sm
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.ranks import DeviceRankReport
from sectionmark.section_map import SectionMap

DATA = Path(__file__).parents[1] / "readers" / "h200-two-devices"
CALLS, WARMUP = 23, 3


def rank_copies(folder: Path, name: str, ranks: int) -> list[Path]:
    paths = []
    for rank in range(ranks):
        paths.append(Path(shutil.copy(DATA / f"{name}.tracy", folder / f"rank{rank}.tracy")))
    return paths


@pytest.mark.parametrize("name", ["tp", "pp"])
def test_each_ranks_rows_on_each_device_are_its_own_report(name, tmp_path):
    section_map = SectionMap.load(DATA / f"{name}.sections.json")
    paths = rank_copies(tmp_path, name, 3)
    report = sm.report_ranks(paths, section_map, calls=CALLS, warmup=WARMUP)
    assert isinstance(report, DeviceRankReport) and report.rank_files == [str(path) for path in paths]
    assert [device.ordinal for device in report.devices] == [0, 1]
    for index, path in enumerate(paths):
        own = sm.report(path, section_map, calls=CALLS, warmup=WARMUP)
        assert report.ranks[index].profile.render("json") == own.render("json")
        for device in own.devices:
            across = report.device(device.ordinal)
            assert across.ranks[index].session.to_json() == device.session.to_json()
            for row in device.session.sections:
                assert across.section(row.path).per_rank_ns[index] == row.busy_ns / device.session.calls
            assert across.total.per_rank_ns[index] == device.session.total_ns / device.session.calls
    # Read one file at a time in this process, the figures are the same.
    alone = sm.report_ranks(paths, section_map, calls=CALLS, warmup=WARMUP, processes=1)
    assert alone.to_json() == report.to_json()
    with pytest.raises(SectionmarkError, match=r"^the ranks have no device 2 \(they have: 0, 1\)$"):
        report.device(2)


def test_the_command_writes_each_ranks_own_profile_of_every_device(tmp_path, capsys):
    section_map = DATA / "pp.sections.json"
    paths = rank_copies(tmp_path, "pp", 2)
    timing = ["--map", str(section_map), "--calls", str(CALLS), "--warmup", str(WARMUP)]
    single = tmp_path / "rank1.json"
    assert main(["report", str(paths[1]), *timing, "--json", str(single)]) == 0
    capsys.readouterr()
    ranks_json, ranks_csv = tmp_path / "ranks.json", tmp_path / "ranks.csv"
    assert main(["report", *map(str, paths), *timing, "--json", str(ranks_json), "--csv", str(ranks_csv)]) == 0
    out = capsys.readouterr().out
    document = json.loads(ranks_json.read_text())
    assert document["kind"] == "ranks-devices" and document["version"] == 1
    assert [rank["file"] for rank in document["ranks"]] == [str(path) for path in paths]
    assert document["ranks"][1]["profile"] == json.loads(single.read_text())
    own = json.loads(single.read_text())
    for device, written in zip(own["devices"], document["devices"]):
        assert written["ordinal"] == device["ordinal"]
        busy = {tuple(row["path"]): row for row in written["sections"]}
        for row in device["profile"]["sections"]:
            per_call = row["busy_ns"] / device["profile"]["calls"]  # the JSON's busy_ns is rounded: within 1 ns
            assert all(abs(ns - per_call) <= 1 for ns in busy[tuple(row["path"])]["per_rank_ns"]), row["path"]
    assert out.count("── device 0 ──") == 1 and out.count("── device 1 ──") == 1
    lines = ranks_csv.read_text().splitlines()
    assert lines[0].startswith("device,section,") and {line.split(",")[0] for line in lines[1:]} == {"0", "1"}
    assert out.splitlines()[-2:] == [f"wrote {ranks_json}", f"wrote {ranks_csv}"]
