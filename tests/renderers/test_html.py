"""The HTML report: pure parts on hand-built data, the profiler's cost on a real run, and the demo's model's
report loaded in headless Chromium the way a user opens it (names, graph, timeline, folding, console, network)."""

from __future__ import annotations

import json
import re
from collections import Counter

import chromium
import numpy as np
import pytest
from test_graph import MARK, PAYLOAD, parse_dot
from test_kernels import hand_built
from test_session import synthetic

from sectionmark.workflows.runner import COST_ROUNDS
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import RENDERERS, for_path, graph, html


def test_html_paths_are_the_report_and_the_graph_still_writes_html_by_name(tmp_path):
    assert for_path("report.html") is RENDERERS["html"] and for_path("g.dot") is RENDERERS["graph"]
    session = hand_built()
    assert "<nav" not in session.save(tmp_path / "report.html").read_text() and "class=\"tree\"" in (
        tmp_path / "report.html").read_text()
    assert "Dispatches in execution order" in session.save(tmp_path / "g.html", "graph").read_text()
    read_back = ProfileSession.from_json(session.to_json()).render("html")  # statistics only: no timeline to draw
    assert "no per-dispatch events to draw" in read_back and 'class="tree"' in read_back


def test_embedded_json_cannot_end_its_script_element():
    text = html.script_json({"name": "</script><script>alert(1)</script>&<!--"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>&<!--"}


def test_the_chooser_offers_short_runs_whole_and_long_runs_by_what_matters():
    listed, shown = html.shown_calls(np.array([30, 10, 20]))
    assert listed == [(0, ""), (1, ""), (2, "p50")] and listed[shown][0] == 2
    lengths = np.arange(100, 0, -1)  # call 0 is the slowest, call 99 the fastest
    listed, shown = html.shown_calls(lengths)
    marks = dict(listed)
    assert marks[0] == "slowest" and marks[99] == "fastest" and marks[listed[shown][0]] == "p50"
    assert lengths[listed[shown][0]] == np.sort(lengths)[49] and len(listed) == 4


def test_merged_bars_keep_every_dispatch_and_every_nanosecond_of_their_span():
    bars = [[0, 10, 1, 0, 0, 0, 1], [10, 20, 1, 0, 0, 0, 1], [20, 25, 2, 0, 0, 0, 1], [25, 30, 1, 0, 0, 0, 1],
            [0, 30, 1, 1, 0, 0, 1]]
    merged = html.merge_bars(bars)
    assert sum(bar[6] for bar in merged) == len(bars)
    assert [(bar[0], bar[1], bar[2], bar[3]) for bar in merged] == [(0, 20, 1, 0), (20, 25, 2, 0), (25, 30, 1, 0),
                                                                    (0, 30, 1, 1)]


def test_timeline_of_each_shown_call_has_its_dispatches_and_section_spans():
    a, b = (("A",), 1.0), (("A", "B"), 1.0)
    events = [(0, 100, (a,)), (100, 300, (b,)), (1000, 1100, (a,)), (1100, 1500, (b,))]
    attribution, section_map = synthetic(events, calls=2, call_of=[0, 0, 1, 1])
    session = ProfileSession.build(attribution, section_map, function="main")
    data = html.timeline_data(session, attribution)
    assert [call["call"] for call in data["calls"]] == [0, 1] and data["calls"][data["shown"]]["call"] == 0
    second = data["calls"][1]
    assert second["length"] == 500 and second["rows"] == ["queue 0: sections", "", "queue 0: dispatches"]
    assert [bar[:2] for bar in second["bars"]] == [[0, 100], [100, 500]]
    names = [row.name for row in session.sections]
    spans = {(names[column], start, end, row) for start, end, column, row in second["spans"]}
    assert spans == {("A", 0, 500, 0), ("A / B", 100, 500, 1)}


def test_every_view_colours_a_section_alike_the_codes_colour_where_given():
    """The report's tree, timeline and graph, the Perfetto slices and the Tracy zones take one colour per section
    name from one place (`session_colors`): the colour given in code, else the palette's."""
    from sectionmark.profiling.timeline import session_colors
    from sectionmark.section_map import css_color

    a, b, c = (("A",), 1.0), (("A", "B"), 1.0), (("C", "B"), 1.0)
    attribution, section_map = synthetic([(0, 100, (a,)), (100, 300, (b,)), (300, 400, (c,))])
    section_map.colors = {"B": 0x34A853}
    session = ProfileSession.build(attribution, section_map, function="main")
    assert session.colors == {"B": 0x34A853}
    assert ProfileSession.from_json(session.to_json()).colors == {"B": 0x34A853}  # stored in the profile JSON
    colors = session_colors(session)
    report = dict(html._tab_data(session, session.attribution)["sections"])
    assert report["A / B"] == report["C / B"] == "#34A853" and report["A"] != report["C"]
    assert report == {row.name: css_color(colors[row.path]) for row in session.sections}
    slices = [event for event in json.loads(session.render("perfetto"))["traceEvents"] if event["ph"] == "X"]
    assert {(event["name"], event["args"]["color"]) for event in slices if event["cat"] == "section"} == {
        ("A", report["A"]), ("B", "#34A853"), ("C", report["C"])}


def test_the_profiler_cost_is_measured_printed_and_stored(compiled_two_matmuls, inputs, tmp_path, capsys):
    import sectionmark as sm
    from sectionmark.cli import main

    _compiled, vmfb = compiled_two_matmuls
    session = sm.profile(vmfb, args=inputs, iterations=3, warmup=1, quiet=True)
    cost = session.profiler_cost
    assert cost.profiled_ns > 0 and cost.unprofiled_ns > 0 and len(cost.ratios) == COST_ROUNDS
    assert cost.ratio == np.median(cost.ratios) and cost.low <= cost.ratio <= cost.high
    assert (cost.low, cost.high) == (min(cost.ratios), max(cost.ratios)) and cost.confidence == 1 - 2 / 2 ** COST_ROUNDS
    stored = session.to_json()["profiler_cost"]
    assert stored["ratio"] == pytest.approx(cost.ratio) and stored["measurable"] == (cost.low > 1)
    read_back = ProfileSession.from_json(json.loads(json.dumps(session.to_json()))).profiler_cost
    assert read_back.profiled_ns == round(cost.profiled_ns) and read_back.ratios == cost.ratios
    np.save(tmp_path / "a.npy", inputs[0])
    np.save(tmp_path / "b.npy", inputs[1])
    assert main(["profile", str(vmfb), "--input", str(tmp_path / "a.npy"), "--input", str(tmp_path / "b.npy"),
                 "-n", "2", "--json", str(tmp_path / "p.json")]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"profiler cost: (no measurable cost \(profiled / unprofiled|[\d.]+x per call \(interval) "
                     r"[\d.]+–[\d.]+x over 5 paired rounds \(94% confidence\)", printed)
    assert json.loads((tmp_path / "p.json").read_text())["profiler_cost"]["unprofiled_ns"] > 0
    assert (session.module, session.device) == ("m.vmfb", "local-task")


# ---------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """The demo's model (small nanoGPT, torch) profiled from the command line with --html and --graph (.dot)."""
    chromium.require_chromium()
    from nanogpt_builders import torch_gpt

    import sectionmark as sm
    from sectionmark.cli import main

    directory = tmp_path_factory.mktemp("report")
    model, args = torch_gpt(config="small")
    vmfb = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu").save(directory / "gpt.vmfb")
    np.save(directory / "tokens.npy", args[0].numpy())
    page, dot = directory / "report.html", directory / "graph.dot"
    assert main(["profile", str(vmfb), "--input", str(directory / "tokens.npy"), "-n", "3", "--warmup", "1",
                 "--html", str(page), "--graph", str(dot), "--keep-profile", str(directory / "run.ireeprof")]) == 0
    session = sm.report(directory / "run.ireeprof", vmfb, warmup=1, calls=4)
    return page, dot, session


def test_the_report_in_chromium_shows_everything_with_no_error_and_no_request(demo_report):
    page, dot, session = demo_report
    loaded = chromium.load(page)
    assert loaded.console == []  # no error, no CSP violation (a request would be one), no message at all
    found = chromium.elements(loaded.dom)
    root = found[0]
    assert root.tag == "html" and root.attributes["data-resources"] == "0" and "data-problems" not in root.attributes

    rows = [element for element in found if element.tag == "tr" and "data-path" in element.attributes]
    assert {row.attributes["data-path"] for row in rows} == {row.name for row in session.sections if row.busy_ns
                                                             or not row.unmarked}
    shown_text = " ".join(element.text for element in found)
    assert all(row.leaf in shown_text for row in session.sections if not row.unmarked)

    # The graph: an <svg>, one node per dispatch site that ran, and exactly graph.dot's edges.
    assert any(element.tag == "svg" and "rw-graph" in element.attributes.get("class", "") for element in found)
    nodes = [element.attributes["data-node"] for element in found if "data-node" in element.attributes]
    sites = [node for node in nodes if node.startswith("s")]
    assert sorted(sites) == sorted(f"s{site.site}" for site in session.sites) and len(set(sites)) == len(sites)
    dot_nodes, dot_edges = parse_dot(dot.read_text())
    assert set(nodes) == dot_nodes - {"node", "edge"}  # less the default statements parse_dot also sees
    drawn = Counter((e.attributes["data-source"], e.attributes["data-target"]) for e in found
                    if e.tag == "path" and "edge" in e.attributes.get("class", ""))
    assert drawn == Counter((source, target) for source, target, _label in dot_edges)

    # The timeline: the p50 call shown, one bar per dispatch of that call.
    timeline = next(element for element in found if element.tag == "svg" and "data-call" in element.attributes)
    call = int(timeline.attributes["data-call"])
    bars = [element for element in found if element.tag == "rect" and element.attributes.get("class") == "dispatch"]
    assert len(bars) == int((session.events().event_calls == call).sum()) > 10


def test_folding_a_section_hides_its_children_and_only_them(demo_report):
    page, _dot, session = demo_report
    names = [row.name for row in session.sections]
    block = names.index("Block 0")
    loaded = chromium.load(page, f"fold=tab0-row{block}")
    assert loaded.console == []
    rows = [e for e in chromium.elements(loaded.dom) if e.tag == "tr" and "data-path" in e.attributes]
    hidden = {row.attributes["data-path"] for row in rows if "hidden" in row.attributes}
    assert hidden == {name for name in names if name.startswith("Block 0 / ")} and len(hidden) > 3
    assert "folded" in next(row for row in rows if row.attributes["data-path"] == "Block 0").attributes["class"]


@pytest.mark.parametrize("unknown", ["call=%", "fold=sm-data", "fold=no-such-row", "call=%E0%A4%A", "=&&x", "fold"])
def test_an_address_the_page_does_not_understand_is_ignored(demo_report, unknown):
    """A bad %-escape or a fold of an element that is no tree row threw and stopped the script: the parts after it
    (here a fold of Block 0) were never applied."""
    page, _dot, session = demo_report
    block = [row.name for row in session.sections].index("Block 0")
    loaded = chromium.load(page, f"{unknown}&fold=tab0-row{block}")
    assert loaded.console == []
    rows = [e for e in chromium.elements(loaded.dom) if e.tag == "tr" and "data-path" in e.attributes]
    assert "folded" in next(row for row in rows if row.attributes["data-path"] == "Block 0").attributes["class"]
    assert all("hidden" not in row.attributes for row in rows if not row.attributes["data-path"].startswith("Block 0 /"))


def test_hostile_names_stay_text_in_the_report(tmp_path, compiled_two_matmuls, inputs):
    """Every free-text string of a real map made hostile at once: nothing runs, every name is shown as text."""
    chromium.require_chromium()
    import sectionmark as sm

    compiled, vmfb = compiled_two_matmuls
    profile = tmp_path / "run.ireeprof"
    sm.profile(vmfb, args=inputs, iterations=2, warmup=0, keep_profile=profile, quiet=True)
    text = json.dumps(compiled.section_map.to_json())
    for name in ("Block", "Attn", "MLP", "input0"):
        text = text.replace(json.dumps(name), json.dumps(name + PAYLOAD))
    (tmp_path / "hostile.sections.json").write_text(text)
    session = sm.report(profile, tmp_path / "hostile.sections.json", function="main")
    page = session.save(tmp_path / "report.html")
    loaded = chromium.load(page)
    assert MARK not in loaded.dom and loaded.console == []
    shown = " ".join(element.text for element in chromium.elements(loaded.dom))
    assert shown.count("Attn" + PAYLOAD) >= 2  # the tree row and the component view, as text
    assert "</script><script>" not in page.read_text().split('id="sm-data">')[1].split("</script>")[0]
    assert graph.render(session)  # the same names in the DOT text (escaped there by its own quoting)
