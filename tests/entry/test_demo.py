"""The README's demo (`sectionmark demo`, from the package), end to end on the small config, every output checked with our own readers."""

import csv
import json
import subprocess
import sys

import chromium
import pytest
from invariants import assert_profile_invariants
from test_graph import parse_dot

from sectionmark.workflows.measure import report
from sectionmark.profiling.components import components
from sectionmark.readers.tracy_capture import read_capture
from sectionmark.renderers import json_out
from sectionmark.section_map import SectionMap


def check_chrome_trace(document):
    """Schema check of the Chrome trace-event JSON, and strict nesting per thread."""
    assert isinstance(document["traceEvents"], list) and document["traceEvents"]
    slices_by_thread = {}
    for event in document["traceEvents"]:
        assert event["ph"] in ("X", "M")
        assert isinstance(event["pid"], int) and isinstance(event["name"], str)
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0
            slices_by_thread.setdefault(event["tid"], []).append(event)
    for slices in slices_by_thread.values():
        open_ends = []
        for event in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= event["ts"] + 1e-6:
                open_ends.pop()
            end = event["ts"] + event["dur"]
            assert not open_ends or end <= open_ends[-1] + 1e-6, f"{event['name']} crosses its parent"
            open_ends.append(end)
    return slices_by_thread


@pytest.mark.slow
def test_demo_small_config_end_to_end(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "sectionmark", "demo", "--out", str(out), "-n", "5", "--warmup", "2"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "coverage:" in result.stdout and "Self Attention" in result.stdout
    assert "[data movement]" in (out / "kernels.txt").read_text(encoding="utf-8")
    parse_dot((out / "graph.dot").read_text(encoding="utf-8"))
    assert (out / "graph.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    report_page = out / "report.html"  # opened as a user does (tests/renderers/test_html.py checks it in detail)
    if chromium.available():
        loaded = chromium.load(report_page)
        assert loaded.console == [] and 'data-resources="0"' in loaded.dom and "Attention Softmax" in loaded.dom
    else:
        assert report_page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")

    section_map = SectionMap.load(out / "model.sections.json")
    assert ("Block 1", "Self Attention", "Attention Softmax") in section_map.sections

    session = json_out.load(out / "sections.json")
    assert_profile_invariants(session)
    names = {row.path for row in session.sections}
    assert set(section_map.sections) <= names | {()}

    again = report(out / "run.ireeprof", out / "model.vmfb", warmup=2)
    assert_profile_invariants(again)
    assert again.total_ns == session.total_ns

    # The component view under the tree: one row per name, the blocks' attention rows summed.
    components_text = (out / "components.txt").read_text(encoding="utf-8")
    assert "components by name: busy time" in result.stdout and components_text in result.stdout
    attention = next(c for c in components(again) if c.name == "Self Attention")
    blocks = [row for row in again.section_rows if row.leaf == "Self Attention"]
    assert len(blocks) == 2 and attention.busy_ns == sum(row.busy_ns for row in blocks)

    with open(out / "sections.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(session.sections)

    slices = check_chrome_trace(json.loads((out / "run.perfetto.json").read_text()))
    slice_names = {e["name"] for events in slices.values() for e in events}
    assert {"Embedding", "QKV", "LM Head"} <= slice_names

    capture = read_capture(out / "run.tracy")
    zone_names = {zone.name for track in capture.gpu_contexts for zone in track.zones}
    assert {"Embedding", "Attention Softmax", "MLP"} <= zone_names

    png = (out / "sections.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert "ui.perfetto.dev" in (out / "SUMMARY.txt").read_text()
