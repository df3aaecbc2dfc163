"""Several ranks' profiles merged per section (sectionmark.profiling.ranks), on hand-built sessions: the figures,
the straggler, and the ranks' table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json

import pytest
from test_compare import per_call_session

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.devices import DeviceProfile, DeviceSession, device_sections
from sectionmark.profiling.ranks import (RANKS_DEVICES_JSON_VERSION, RANKS_JSON_VERSION, DeviceRankReport, RankProfile,
                                         RankReport, merge_profiles, merge_ranks)
from sectionmark.renderers import json_out

A, B, C = ("A",), ("B",), ("C",)


def four_ranks():
    """Per call ns of A and B on four ranks; rank 2's B is 4x the others', rank 0's A is the slowest A."""
    times = [{A: [300, 500], B: [100, 100]},  # A 400/call
             {A: [200, 200], B: [110, 90]},  # A 200
             {A: [100, 300], B: [400, 400]},  # A 200, B 400
             {A: [100, 100], B: [90, 110]}]  # A 100
    return [RankProfile(f"run/rank{index}.ireeprof", per_call_session(figures)) for index, figures in enumerate(times)]


def test_each_section_has_its_spread_across_the_ranks_and_the_slowest_rank():
    report = merge_ranks(four_ranks())
    a, b = report.section(A), report.section(B)
    assert a.per_rank_ns == [400, 200, 200, 100] and (a.min_ns, a.median_ns, a.max_ns) == (100, 200, 400)
    assert a.slowest_rank == 0 and a.slowest_over_median == 2.0 and a.ranks == 4
    assert b.per_rank_ns == [100, 100, 400, 100] and (b.min_ns, b.median_ns, b.max_ns) == (100, 100, 400)
    assert b.slowest_rank == 2 and b.slowest_over_median == 4.0
    assert report.total.per_rank_ns == [500, 300, 600, 200] and report.total.slowest_rank == 2
    assert report.total.median_ns == 400  # an even count: the mean of the middle two
    assert [row.path for row in report.sections] == [A, B, ()]
    assert report.section(()).slowest_rank is None  # no unmarked time on any rank: no straggler named


def test_each_ranks_figures_are_its_own_session():
    ranks = four_ranks()
    report = merge_ranks(ranks)
    assert [rank.session for rank in report.ranks] == [rank.session for rank in ranks]
    for index, rank in enumerate(ranks):
        for row in rank.session.sections:
            assert report.section(row.path).per_rank_ns[index] == row.busy_ns / rank.session.calls


def test_ranks_of_different_call_counts_compare_per_call_and_a_missing_row_is_none():
    ranks = [RankProfile("r0", per_call_session({A: [100] * 4})),
             RankProfile("r1", per_call_session({A: [150, 150], C: [50, 50]}))]
    report = merge_ranks(ranks)
    assert report.section(A).per_rank_ns == [100, 150] and report.section(A).slowest_rank == 1
    c = report.section(C)
    assert c.per_rank_ns == [None, 50] and c.ranks == 1 and (c.min_ns, c.median_ns, c.max_ns) == (50, 50, 50)
    assert [row.path for row in report.sections] == [A, (), C]  # the first rank's order, then the later ones'


def test_a_tie_names_the_first_rank_and_nothing_to_merge_is_refused():
    report = merge_ranks([RankProfile(f"r{index}", per_call_session({A: [100, 100]})) for index in range(3)])
    assert report.section(A).slowest_rank == 0 and report.section(A).slowest_over_median == 1.0
    with pytest.raises(SectionmarkError, match="^no rank profiles to report$"):
        merge_ranks([])


def test_the_json_holds_each_ranks_own_profile_document():
    report = merge_ranks(four_ranks())
    document = json.loads(report.render("json"))
    assert (document["version"], document["kind"]) == (RANKS_JSON_VERSION, "ranks")
    assert [rank["file"] for rank in document["ranks"]] == report.rank_files
    for written, rank in zip(document["ranks"], report.ranks):
        assert written["profile"] == json.loads(json_out.render(rank.session))
    b = next(row for row in document["sections"] if row["path"] == ["B"])
    assert b == {"path": ["B"], "name": "B", "ranks": 4, "per_rank_ns": [100, 100, 400, 100], "min_ns": 100,
                 "median_ns": 100, "max_ns": 400, "slowest_rank": 2, "slowest_over_median": 4.0}
    assert document["total"]["per_rank_ns"] == [500, 300, 600, 200] and "path" not in document["total"]


def test_the_csv_and_the_table_name_the_straggler():
    report = merge_ranks(four_ranks())
    rows = list(csv.DictReader(io.StringIO(report.render("csv"))))
    b = next(row for row in rows if row["section"] == "B")
    assert (b["slowest_rank"], b["slowest_file"], b["slowest_over_median"]) == ("2", "run/rank2.ireeprof", "4.0000")
    assert json.loads(b["per_rank_ns"]) == [100, 100, 400, 100] and b["depth"] == "1"
    unmarked = next(row for row in rows if row["section"] == "(unmarked)")
    assert unmarked["slowest_rank"] == unmarked["slowest_file"] == ""
    table = report.table()
    line_b = next(line for line in table.splitlines() if line.startswith("│ B "))
    assert "2 (rank2.ireeprof)" in line_b and "4.00x" in line_b
    assert "rank 2: run/rank2.ireeprof (2 calls" in table
    assert "(unmarked)" not in table  # no unmarked time on any rank


def test_a_format_showing_one_profile_is_refused_for_ranks(tmp_path):
    report = merge_ranks(four_ranks())
    for format in ("html", "perfetto", "chart", "kernels"):
        with pytest.raises(SectionmarkError, match=rf"^--{format} shows one profile, not several ranks: report one "
                           r"rank's file for it \(several ranks: --table, --json, --csv\)$"):
            report.render(format)
    with pytest.raises(SectionmarkError, match="--html shows one profile"):
        report.save(tmp_path / "ranks.html")
    assert not list(tmp_path.iterdir())
    assert report.save(tmp_path / "ranks.csv").read_bytes().decode() == report.render("csv")


def two_device_rank(device_0: dict, device_1: dict) -> DeviceProfile:
    """A rank's profile of two devices: each device's hand-built session (per call ns by section), device 1 named."""
    sessions = [DeviceSession(0, None, per_call_session(device_0)),
                DeviceSession(1, "cuda", per_call_session(device_1))]
    return DeviceProfile(sessions, device_sections(sessions), calls=2)


def test_ranks_of_several_devices_are_merged_device_by_device():
    """Device d's sections across the ranks are each rank's device-d session: the straggler of a device is found among
    that device's figures only (rank 1's device 1 runs B 3x slower; its device 0 is no slower)."""
    files = ["rank0.tracy", "rank1.tracy"]
    profiles = [two_device_rank({A: [100, 100]}, {B: [200, 200]}),
                two_device_rank({A: [90, 110]}, {B: [600, 600]})]
    report = merge_profiles(files, profiles)
    assert isinstance(report, DeviceRankReport) and report.rank_files == files
    assert [(device.ordinal, device.device) for device in report.devices] == [(0, None), (1, "cuda")]
    assert report.device(0).section(A).per_rank_ns == [100, 100] and report.device(0).section(A).slowest_rank == 0
    assert report.device(1).section(B).per_rank_ns == [200, 600] and report.device(1).section(B).slowest_rank == 1
    for index, profile in enumerate(profiles):
        assert report.ranks[index].profile is profile
        for device in profile.devices:
            assert report.device(device.ordinal).ranks[index].session is device.session
    document = json.loads(report.render("json"))
    assert (document["version"], document["kind"]) == (RANKS_DEVICES_JSON_VERSION, "ranks-devices")
    assert document["devices"][1]["ordinal"] == 1 and document["devices"][1]["device"] == "cuda"
    assert document["ranks"][1]["profile"] == json.loads(profiles[1].render("json"))
    rows = list(csv.DictReader(io.StringIO(report.render("csv"))))
    assert [(row["device"], row["section"], row["per_rank_ns"]) for row in rows if row["section"] != "(unmarked)"] == [
        ("0", "A", "[100, 100]"), ("1", "B", "[200, 600]")]
    table = report.table()
    assert table.index("── device 0 ──") < table.index("── device 1 (cuda) ──")


def test_ranks_that_recorded_different_devices_are_one_error_line_naming_the_file():
    two = two_device_rank({A: [100, 100]}, {B: [200, 200]})
    one = per_call_session({A: [100, 100]})
    with pytest.raises(SectionmarkError) as refused:
        merge_profiles(["rank0.ireeprof", "rank1.tracy"], [one, two])
    assert str(refused.value) == ("rank1.tracy: a profile of 2 devices (0, 1), and rank 0's (rank0.ireeprof) of 1 "
                                  "device: the ranks of one module record the same devices")
    three = DeviceProfile([*two.devices, DeviceSession(2, None, one)], [], calls=2)
    with pytest.raises(SectionmarkError, match=r"^rank2.tracy: a profile of 3 devices \(0, 1, 2\), and rank 0's "):
        merge_profiles(["rank0.tracy", "rank1.tracy", "rank2.tracy"], [two, two, three])
    assert isinstance(merge_profiles(["a", "b"], [one, one]), RankReport)  # one device: the ranks report as before
