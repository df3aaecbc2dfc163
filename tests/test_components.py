"""Component view: sections with the same name summed across blocks (hand-built sessions)."""

from __future__ import annotations

import csv
import io
import math

from test_session import build

from sectionmark.renderers import components as components_renderer

B0, B1 = ("Block 0",), ("Block 1",)
ATTN0, ATTN1 = ("Block 0", "Self Attention"), ("Block 1", "Self Attention")
MLP0, MLP1 = ("Block 0", "MLP"), ("Block 1", "MLP")
EMBED = ("Embedding",)


def two_blocks():
    """Two blocks of attention + MLP, an embedding, an unmarked dispatch and a fused attention/MLP dispatch."""
    return build([
        (0, 100, ((EMBED, 1.0),)),
        (100, 400, ((ATTN0, 1.0),)),
        (400, 600, ((MLP0, 1.0),)),
        (600, 850, ((ATTN1, 1.0),)),
        (850, 1000, ((ATTN1, 0.5), (MLP1, 0.5))),
        (1000, 1070, ((B1, 1.0),)),
        (1070, 1100, (((), 1.0),)),
    ])


def test_one_row_per_name_and_totals_are_exact_sums_of_the_block_rows():
    session = two_blocks()
    view = session.components()
    rows = {row.name: row for row in view.rows}
    assert list(rows) == ["Self Attention", "MLP", "Embedding", "Block 1", "(unmarked)"]  # "Block 0" has no time of its own
    assert rows["Self Attention"].busy_ns == session.section(ATTN0).exclusive_ns + session.section(ATTN1).exclusive_ns
    assert rows["Self Attention"].busy_ns == 300 + 250 + 75
    assert rows["MLP"].sections == [MLP0, MLP1] and rows["MLP"].busy_ns == 275
    assert rows["(unmarked)"].busy_ns == 30
    assert math.isclose(sum(row.share for row in view.rows), 1.0)
    assert math.isclose(sum(row.busy_ns for row in view.rows), session.total_ns)
    assert rows["Self Attention"].dispatches == 3 and rows["Self Attention"].mean_per_section_ns == 625 / 2


def test_path_pattern_sums_inclusive_time_of_outermost_matches_and_keeps_the_rest():
    session = two_blocks()
    view = session.components("Block *")
    rows = {row.name: row for row in view.rows}
    assert rows["Block 0"].busy_ns == 500 and rows["Block 1"].busy_ns == 470
    assert rows["(other)"].busy_ns == 130
    assert "inclusive" in view.time
    attention = {row.name: row for row in session.components("*/Self Attention").rows}
    assert attention["Self Attention"].busy_ns == 625 and attention["(other)"].busy_ns == 475


def test_renderers_state_which_time_they_show(tmp_path):
    session = two_blocks()
    text = components_renderer.render(session)
    assert "exclusive busy time" in text and "Self Attention" in text and "100.0%" in text
    document = components_renderer.to_json(session)
    assert document["time"].startswith("exclusive busy time") and document["rows"][0]["name"] == "Self Attention"
    rows = list(csv.DictReader(io.StringIO(components_renderer.render_csv(session))))
    assert [row["component"] for row in rows][0] == "Self Attention" and rows[0]["busy_ns"] == "625"
    chart = components_renderer.save_chart(session, tmp_path / "components.png")
    assert chart.read_bytes()[:4] == b"\x89PNG"
