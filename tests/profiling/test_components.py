"""The component view: sections of one name summed across repeated blocks (hand-built data and a real GPT)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from test_session import build

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.components import components
from sectionmark.profiling.session import ProfileSession

B0, B1 = ("Block 0",), ("Block 1",)
ATTN0, ATTN1 = B0 + ("Self Attention",), B1 + ("Self Attention",)
QKV0 = ATTN0 + ("QKV",)
MLP0, MLP1 = B0 + ("MLP",), B1 + ("MLP",)
DECLARED = [B0, ATTN0, QKV0, MLP0, B1, ATTN1, MLP1]


def two_blocks(calls: int = 1) -> ProfileSession:
    """Two blocks, attention with a nested QKV in block 0, an MLP fused with unmarked ops, per call."""
    per_call = [
        (0, 100, ((QKV0, 1.0),)),
        (100, 150, ((ATTN0, 1.0),)),
        (150, 250, ((MLP0, 0.75), ((), 0.25))),
        (250, 300, ((B0, 1.0),)),
        (300, 380, ((ATTN1, 1.0),)),
        (380, 500, ((MLP1, 1.0),)),
    ]
    events = [(start + 1000 * call, end + 1000 * call + 10 * call, parts) for call in range(calls)
              for start, end, parts in per_call]
    call_of = [call for call in range(calls) for _ in per_call]
    return build(events, declared=DECLARED, calls=calls, call_of=call_of)


def by_name(session: ProfileSession) -> dict:
    return {component.name: component for component in components(session)}


def test_components_sum_the_blocks_rows_exactly():
    session = two_blocks()
    named = by_name(session)
    for name, rows in (("Self Attention", (ATTN0, ATTN1)), ("MLP", (MLP0, MLP1))):
        assert named[name].busy_ns == sum(session.section(path).busy_ns for path in rows)
        assert named[name].sections == list(rows)
    assert named["Self Attention"].busy_ns == 100 + 50 + 80  # QKV is inside block 0's attention
    assert named["QKV"].busy_ns == 100
    assert named["MLP"].busy_ns == 75 + 120


def test_exclusive_shares_and_unmarked_add_up_to_one():
    view = components(two_blocks())
    assert view[-1].name == "(unmarked)" and view[-1].exclusive_ns == 25
    assert sum(component.exclusive_share for component in view) == pytest.approx(1.0)
    assert [c.exclusive_ns for c in view[:-1]] == sorted((c.exclusive_ns for c in view[:-1]), reverse=True)


def test_a_name_nested_in_itself_counts_each_dispatch_once():
    outer, inner = ("Layer Norm",), ("Layer Norm", "Layer Norm")
    session = build([(0, 100, ((outer, 1.0),)), (100, 300, ((inner, 1.0),))], declared=[outer, inner])
    (norm, unmarked) = components(session)
    assert (norm.busy_ns, norm.exclusive_ns, norm.dispatches) == (300, 300, 2)
    assert norm.share == pytest.approx(1.0)


def test_per_call_statistics_of_a_component():
    session = two_blocks(calls=3)
    attention = by_name(session)["Self Attention"]
    # calls 1 and 2 stretch each event by 10 and 20 ns: three events per call in attention
    assert attention.calls == 3
    assert attention.per_call.min_ns == 230 and attention.per_call.max_ns == 230 + 3 * 20
    assert attention.per_call.mean_ns == pytest.approx(attention.busy_ns / 3)


def test_pattern_gathers_matching_paths():
    session = two_blocks()
    (attention,) = components(session, by="*/Self Attention")
    assert attention.name == "*/Self Attention" and attention.sections == [ATTN0, ATTN1]
    assert attention.busy_ns == by_name(session)["Self Attention"].busy_ns
    (block1,) = components(session, by="Block 1/*")
    assert block1.sections == [ATTN1, MLP1]


def test_pattern_without_match_is_one_line_naming_the_sections():
    with pytest.raises(SectionmarkError, match=r"no section matches '\*/Decoder' \(sections: Block 0, Block 0/Self "):
        components(two_blocks(), by="*/Decoder")


def test_components_in_table_json_and_csv():
    session = two_blocks(calls=2)
    text = session.render("components")
    assert "busy time" in text and "Self Attention" in text and "(unmarked)" in text
    data = json.loads(session.render("json"))
    rows = {row["name"]: row for row in data["components"]}
    assert rows["MLP"]["busy_ns"] == round(by_name(session)["MLP"].busy_ns)
    assert rows["MLP"]["sections"] == [list(MLP0), list(MLP1)]
    assert rows["Self Attention"]["per_call"]["max_ns"] >= rows["Self Attention"]["per_call"]["min_ns"]
    assert components(ProfileSession.from_json(data))[0].per_call is None  # no per-event data in JSON


def csv_rows(text: str) -> list[tuple]:
    """The component CSV's rows as (name, sections, calls, dispatches, busy, exclusive, p50, p95) tuples."""
    return [(row["component"], [tuple(json.loads(path)) for path in row["sections"].split(";") if path],
             int(row["calls"]), int(row["dispatches"]), int(row["busy_ns"]), int(row["exclusive_ns"]),
             row["p50_ns"], row["p95_ns"]) for row in csv.DictReader(io.StringIO(text))]


def component_row(component, calls: int) -> tuple:
    """What `csv_rows` should read back for ``component`` (times rounded to whole ns, as the CSV writes them)."""
    stats = component.per_call
    return (component.name, [tuple(path) for path in component.sections], calls, component.dispatches,
            round(component.busy_ns), round(component.exclusive_ns),
            str(round(stats.p50_ns)) if stats else "", str(round(stats.p95_ns)) if stats else "")


def test_components_csv_rows_are_the_component_view():
    session = two_blocks(calls=2)
    rows = csv_rows(session.render("components-csv"))
    assert rows == [component_row(component, 2) for component in components(session)]
    assert ("Self Attention", [ATTN0, ATTN1]) in [row[:2] for row in rows]
    (attention,) = csv.DictReader(io.StringIO(session.render("components-csv", by="*/Self Attention")))
    assert attention["component"] == "*/Self Attention"


def test_components_chart_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = two_blocks(calls=2).save(tmp_path / "run.components.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_component_view_of_the_nanogpt(tmp_path):
    """A real export, compile and profile: one row per name, equal to the sum of the per-block rows."""
    import sectionmark as sm
    from invariants import assert_profile_invariants
    from nanogpt_builders import torch_gpt

    model, args = torch_gpt()
    compiled = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu")
    session = sm.profile(compiled, args=args, iterations=3, warmup=1, quiet=True)
    assert_profile_invariants(session)
    view = components(session)
    names = [component.name for component in view]
    assert len(names) == len(set(names)) and names[-1] == "(unmarked)"
    leaves = {row.leaf for row in session.section_rows}
    assert set(names[:-1]) == leaves
    for component in view[:-1]:
        rows = [row for row in session.section_rows if row.leaf == component.name]
        outermost = [row for row in rows if not any(o.path == row.path[: len(o.path)] and o is not row for o in rows)]
        assert component.busy_ns == sum(row.busy_ns for row in outermost)
    assert sum(component.exclusive_share for component in view) == pytest.approx(1.0, abs=1e-9)
    attention = next(component for component in view if component.name == "Self Attention")
    assert len(attention.sections) == sum(1 for row in session.section_rows if row.leaf == "Self Attention") > 1
    assert attention.per_call is not None and attention.calls == session.calls
    assert np.isclose(attention.per_call.mean_ns * session.calls, attention.busy_ns)
    csv_path = session.save(tmp_path / "run.components.csv")
    assert csv_rows(csv_path.read_text(encoding="utf-8")) == [component_row(c, session.calls) for c in view]
    pytest.importorskip("matplotlib")
    chart = session.save(tmp_path / "run.components.png", by="*/Self Attention")
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 1000
