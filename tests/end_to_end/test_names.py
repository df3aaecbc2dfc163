"""Names are data: odd section names survive byte-exactly from the model to every output.

Quotes, backslashes, newlines, carriage returns, NUL, emoji, right-to-left text,
``/`` inside a name, rich-markup brackets and very long names go through a real
export, compile and profile, then into the section map, the profile JSON, the
CSV, the Perfetto trace and the table.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import torch

import sectionmark as sm
from invariants import assert_profile_invariants
from sectionmark.section_map import SectionMap

NAMES = [
    'quote "x"', "back\\slash", "new\nline", "carriage\rreturn", "nul\x00byte", "emoji 🚀", "rtl עברית",
    "a/b", "a / b", "[bold]MLP[/bold]", "[/x]", "tab\tand\x7fdel", "x" * 10_000, "y" * 70_000,
    "ends with \\", "family 👩\u200d👩\u200d👧", "sm:not a jax scope", "sectionmark:not a location", " leading space",
    '=HYPERLINK("http://x","y")', "@SUM(1)", "+1+1", "-2", "cost $5 and $6", "bad math $\\frac{$",
]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class OddNames(torch.nn.Module):
    def forward(self, x):
        for index, name in enumerate(NAMES):
            with sm.section(name):
                with sm.section(name + " inner"):
                    x = torch.matmul(x, x) * 0.5 + index
        return x


@pytest.fixture(scope="module")
def profiled():
    exported = sm.torch.export(OddNames(), args=(torch.ones(8, 8),))
    compiled = sm.compile(exported)
    prof = sm.profile(compiled, args=(np.ones((8, 8), np.float32),), iterations=2, warmup=1, quiet=True)
    return exported, compiled, prof


EXPECTED = [path for name in NAMES for path in ((name,), (name, name + " inner"))]


def test_export_and_map_keep_every_name(profiled, tmp_path):
    exported, compiled, _ = profiled
    assert list(exported.sections) == EXPECTED  # parents, whose ops all sit in their children, included
    assert compiled.section_map.sections == EXPECTED
    compiled.section_map.save(tmp_path / "m.sections.json")
    assert SectionMap.load(tmp_path / "m.sections.json").sections == compiled.section_map.sections


def test_json_csv_perfetto_and_table_keep_every_name(profiled, tmp_path):
    _, _, prof = profiled
    assert_profile_invariants(prof)
    rows = [tuple(row["path"]) for row in json.loads(json.dumps(prof.to_json()))["sections"] if row["path"]]
    assert rows == EXPECTED
    csv.field_size_limit(1 << 24)  # Python's reader stops at 128 KiB per field; the 70k name is there twice
    with io.StringIO(prof.render("csv"), newline="") as text:
        csv_rows = list(csv.DictReader(text))
    assert [tuple(json.loads(row["path"])) for row in csv_rows if row["path"] != "[]"] == EXPECTED
    trace = json.loads(prof.save(tmp_path / "t.json", "perfetto").read_text(encoding="utf-8"))
    traced = {tuple(event["args"]["path"]) for event in trace["traceEvents"] if event.get("cat") == "section"}
    assert traced == set(EXPECTED)
    table = prof.table()
    assert "[bold]MLP[/bold]" in table and "[/x]" in table


def test_csv_cells_never_start_a_formula_and_charts_draw_names_as_text(profiled, tmp_path):
    """A spreadsheet runs a cell starting with = + - @; matplotlib parses $...$ as math (and fails on bad math)."""
    _, _, prof = profiled
    csv.field_size_limit(1 << 24)
    for name in ("csv", "components-csv", "kernels-csv"):
        with io.StringIO(prof.render(name), newline="") as text:
            cells = [cell for row in csv.reader(text) for cell in row]
        formulas = [cell for cell in cells if cell.startswith(FORMULA_STARTS) and not _number(cell)]
        assert not formulas, (name, formulas[:3])
        assert name != "csv" or {"'=HYPERLINK(\"http://x\",\"y\")", "'@SUM(1)", "'+1+1", "-2"} <= set(cells)
    for name in ("chart", "components-chart", "timeline"):
        assert prof.save(tmp_path / f"{name}.png", name).read_bytes().startswith(b"\x89PNG")


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def test_a_chart_label_with_dollars_is_drawn_as_written():
    """ "cost $5 and $6" is not mathtext ("cost 5and6"): it draws exactly as the same words with escaped dollars."""
    import matplotlib
    import matplotlib.pyplot as plt

    from sectionmark.renderers import chart

    arguments = ([1.0], [0.5], ["50%"], ("own", "nested"), "title")
    drawn = chart.bar_chart(["cost $5 and $6"], *arguments)
    with matplotlib.rc_context({"text.parse_math": True}):
        escaped = chart._draw(plt, [r"cost \$5 and \$6"], *arguments)  # mathtext on, dollars escaped: literal
        as_math = chart._draw(plt, ["cost $5 and $6"], *arguments)
    assert drawn == escaped != as_math
