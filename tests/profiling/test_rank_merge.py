"""Several ranks' profiles merged per section (sectionmark.profiling.ranks), on hand-built sessions: the figures,
the straggler, and the ranks' table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json

import pytest
from test_compare import per_call_session

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.ranks import RANKS_JSON_VERSION, RankProfile, merge_ranks
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
