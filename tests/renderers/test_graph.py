"""Read/write graph: DOT structure on hand-built data, the Griffin conv's readers, the nanoGPT graph rendered."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace

import chromium
import pytest
from test_kernels import binding, hand_built
from test_session import synthetic

from sectionmark.artifacts import graphviz
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import graph

_ID = r"[A-Za-z_][A-Za-z0-9_]*"
_STRING = r'"(?:[^"\\]|\\.)*"'
_VALUE = rf"(?:{_STRING}|[^,\]\s]+)"
_ATTRS = rf"\[\s*{_ID}={_VALUE}(?:\s*,\s*{_ID}={_VALUE})*\s*\]"
_STATEMENTS = {
    "node": re.compile(rf"({_ID}) {_ATTRS};"),
    "edge": re.compile(rf"({_ID}) -> ({_ID}) {_ATTRS};"),
    "cluster": re.compile(rf"subgraph cluster_\d+ {{ label={_STRING}; style=rounded; color=grey60;"),
    "defaults": re.compile(rf"(?:{_ID}=[^;]+; )*(?:node|edge) {_ATTRS};|{_ID}=[^;]+;( {_ID} {_ATTRS};)*"),
}


def parse_dot(text: str) -> tuple[set[str], list[tuple[str, str, str]]]:
    """Validate the DOT this renderer writes, statement by statement; return its nodes and (source, target, label)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    assert lines[0] == "digraph sectionmark {" and lines[-1] == "}"
    nodes, edges, depth = set(), [], 1
    for line in lines[1:-1]:
        if line == "}":
            depth -= 1
            assert depth >= 1, "unbalanced braces"
            continue
        kinds = [kind for kind, pattern in _STATEMENTS.items() if pattern.fullmatch(line)]
        assert kinds, f"not a DOT statement: {line}"
        match = _STATEMENTS[kinds[0]].fullmatch(line)
        if kinds[0] == "node":
            nodes.add(match.group(1))
        elif kinds[0] == "edge":
            edges.append((match.group(1), match.group(2), re.search(rf"label=({_STRING})", line).group(1)))
        elif kinds[0] == "cluster":
            depth += 1
    assert depth == 1, "unbalanced braces"
    assert all(source in nodes and target in nodes for source, target, _label in edges), "edge to an undeclared node"
    return nodes, edges


def test_dispatches_program_values_and_shared_reads():
    attribution, section_map = synthetic([(0, 100, ((("A",), 1.0),)), (100, 200, ((("B",), 1.0),)),
                                          (200, 300, ((("B", 'odd "name" \\'), 1.0),))])
    first, second, third = section_map.sites
    first.bindings = [binding("input0", "read", [4], read=16), binding("site 0 #0", "write", [4], written=16)]
    second.bindings = [binding("site 0 #0", "read", [4], read=16), binding("site 1 #0", "write", [4], written=16)]
    third.bindings = [binding("site 0 #0", "read", [2], read=8, tensor_shape=[4]),
                      replace(binding("site 2 #0", "write", [2], written=8), outputs=["output0"])]
    text = graph.render(ProfileSession.build(attribution, section_map, function="main"))
    nodes, edges = parse_dot(text)
    assert {"s0", "s1", "s2"} <= nodes
    readers_of_first = [(target, label) for source, target, label in edges if source == "s0"]
    assert sorted(target for target, _ in readers_of_first) == ["s1", "s2"]
    assert all("read by 2" in label for _, label in readers_of_first)
    assert any("f32[2] 8 B" in label for _, label in readers_of_first)
    assert [source for source, target, _ in edges if target == "s0"] == ["t0"] and '"input0"' in text
    output_node = re.search(r'(t\d+) \[label="output0"', text).group(1)
    assert ("s2", output_node, '"f32[2] 8 B"') in edges
    assert '\\"name\\" \\\\' in text  # quotes and backslashes of section names escaped


def test_save_by_suffix(tmp_path):
    session = hand_built()
    assert graph.save(session, tmp_path / "g.dot").read_text().startswith("digraph")
    page = graph.save(session, tmp_path / "g.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'href="#site0"' in page and "http" not in page.split("<svg")[0]
    with pytest.raises(SectionmarkError, match="must end in .dot, .svg or .html"):
        session.save(tmp_path / "g.png", "graph")


def test_svg_without_graphviz_writes_the_dot_and_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(graphviz.shutil, "which", lambda name: None)
    with pytest.raises(SectionmarkError, match="apt-get install graphviz"):
        graph.save(hand_built(), tmp_path / "g.svg")
    assert (tmp_path / "g.dot").read_text().startswith("digraph") and not (tmp_path / "g.svg").exists()
    assert "No Graphviz here" in graph.save(hand_built(), tmp_path / "g.html").read_text()


def odd_named(long_name: str, nul_name: str, outputs: int = 1) -> ProfileSession:
    """Two sites in sections named ``long_name`` and ``nul_name``; the second's result is ``outputs`` outputs."""
    attribution, section_map = synthetic([(0, 1000, (((long_name,), 1.0),)), (1000, 1400, (((nul_name,), 1.0),))],
                                         declared=[(long_name,), (nul_name,)])
    first, second = section_map.sites
    first.bindings = [binding("input0", "read", [4], read=16), binding("site 0 #0", "write", [4], written=16)]
    second.bindings = [binding("site 0 #0", "read", [4], read=16),
                       replace(binding("site 1 #0", "write", [4], written=16),
                               outputs=[f"output{index}" for index in range(outputs)])]
    return ProfileSession.build(attribution, section_map, function="main")


def needs_dot() -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz 'dot' is not installed (apt-get install graphviz)")


def test_names_graphviz_cannot_read_are_drawn_with_the_own_layout(tmp_path):
    """A 70,000-character name and a NUL made `dot` fail (it reads strings up to 16,384 characters, to a NUL), and
    .svg and .html failed with it; --html drew the same graph fine: both fall back to that layout, saying why."""
    needs_dot()
    for session in (odd_named("y" * 70_000, "MLP"), odd_named("Attn", "nul\x00byte")):
        svg = graph.save(session, tmp_path / "g.svg").read_text(encoding="utf-8")
        assert svg.startswith("<?xml") and "Graphviz cannot read a name" in svg.split("-->")[0]
        assert 'class="rw-graph"' in svg and svg.count('data-node="s') == 2 and svg.count('class="edge"') == 3
        page = graph.save(session, tmp_path / "g.html").read_text(encoding="utf-8")
        assert "Graphviz cannot read a name with a NUL or longer than 16,384 characters: drawn with sectionmark" in page
        assert 'class="rw-graph"' in page
    plain = graph.save(odd_named("Attn", "MLP"), tmp_path / "plain.svg").read_text(encoding="utf-8")
    assert "rw-graph" not in plain and "<svg" in plain  # names dot reads: Graphviz draws them


def test_graphviz_is_not_given_a_graph_it_would_take_minutes_on(tmp_path, monkeypatch):
    """A sidecar map with 10,000 outputs of one binding made `dot` run its whole 300 s timeout."""
    ran = []
    monkeypatch.setattr(graphviz.subprocess, "run", lambda *args, **kwargs: ran.append(args))
    session = odd_named("Attn", "MLP", outputs=10_000)
    svg = graph.save(session, tmp_path / "g.svg").read_text(encoding="utf-8")
    assert "Graphviz is not used for a graph this big (20,013 lines of DOT, over 2,000)" in svg and ran == []
    assert svg.count('class="node output"') == 10_000 and svg.count('class="edge"') == 10_002
    assert "Graphviz is not used for" in graph.save(session, tmp_path / "g.html").read_text(encoding="utf-8")


def test_a_graphviz_that_fails_or_runs_too_long_gives_the_own_layout(tmp_path, monkeypatch):
    needs_dot()
    monkeypatch.setattr(graphviz, "GRAPHVIZ_TIMEOUT_S", 1e-6)
    assert "'dot' did not finish within 1e-06 s" in graph.save(hand_built(), tmp_path / "g.svg").read_text()
    monkeypatch.setattr(graphviz, "GRAPHVIZ_TIMEOUT_S", 60.0)
    monkeypatch.setattr(graph, "render", lambda session: "digraph { a -> ; }\n")
    page = graph.save(hand_built(), tmp_path / "g.html").read_text()
    assert "Graphviz &#x27;dot&#x27; failed (exit 1): " in page and 'class="rw-graph"' in page


def test_outputs_after_a_failing_graph_are_still_written(tmp_path, monkeypatch, compiled_two_matmuls, inputs, capsys):
    """--graph g.svg without Graphviz stopped the outputs listed after it: now each is written, the table printed,
    then the one error line."""
    from sectionmark.cli import main
    from sectionmark.workflows.measure import profile

    _compiled, vmfb = compiled_two_matmuls
    profile(vmfb, inputs, iterations=1, warmup=0, keep_profile=tmp_path / "run.ireeprof", quiet=True)
    monkeypatch.setattr(graphviz.shutil, "which", lambda name: None)
    assert main(["report", str(tmp_path / "run.ireeprof"), "--map", str(vmfb), "--graph", str(tmp_path / "g.svg"),
                 "--json", str(tmp_path / "s.json"), "--csv", str(tmp_path / "s.csv")]) == 1
    out, err = capsys.readouterr()
    assert (tmp_path / "s.json").stat().st_size and (tmp_path / "s.csv").stat().st_size and "coverage:" in out
    assert f"wrote {tmp_path / 's.csv'}" in out and (tmp_path / "g.dot").exists()
    assert err.startswith("sectionmark: error: no Graphviz 'dot' program for g.svg") and err.count("\n") == 1


# ---------------------------------------------------------------------------- real stack
# ---------------------------------------------------------------------------- real stack


def render_svg(dot_text: str, tmp_path) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz 'dot' is not installed (apt-get install graphviz); the .dot was validated")
    path = tmp_path / "graph.dot"
    path.write_text(dot_text)
    done = subprocess.run(["dot", "-Tsvg", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "<svg" in done.stdout, done.stderr


def test_griffin_graph_shows_the_readers_of_the_conv_output(tmp_path):
    pytest.importorskip("jax")
    import griffin_block

    import sectionmark as sm

    exported, args = griffin_block.export()
    vmfb = sm.compile(exported, target="llvm-cpu").save(tmp_path / "g.vmfb")
    session = sm.profile(vmfb, args=args, iterations=2, warmup=1, keep_profile=tmp_path / "run.ireeprof")
    (conv,) = [site for site in session.sites if "_conv_" in site.key and site.sections[0][0] == ("Conv",)]
    conv_output = next(b.tensor for b in conv.bindings if b.access != "read")
    readers = {site.site for site in session.sites
               if any(b.tensor == conv_output and b.access != "write" for b in site.bindings)}
    assert readers  # the gates' matmuls and the backward pass read it
    nodes, edges = parse_dot(graph.render(session))
    assert {target for source, target, _label in edges if source == f"s{conv.site}"} == {f"s{r}" for r in readers}
    render_svg(graph.render(session), tmp_path)


def test_cli_prints_components_and_kernels_and_writes_the_graph(tmp_path, capsys):
    pytest.importorskip("jax")
    import griffin_block

    import sectionmark as sm
    from sectionmark.cli import main

    exported, args = griffin_block.export()
    vmfb = sm.compile(exported, target="llvm-cpu").save(tmp_path / "g.vmfb")
    sm.profile(vmfb, args=args, iterations=2, warmup=1, keep_profile=tmp_path / "run.ireeprof", quiet=True)
    capsys.readouterr()
    code = main(["report", str(tmp_path / "run.ireeprof"), "--map", str(vmfb), "--warmup", "1",
                 "--by", "Conv*", "--kernels", str(tmp_path / "k.txt"), "--graph", str(tmp_path / "g.html")])
    printed = capsys.readouterr().out
    assert code == 0 and "components matching 'Conv*'" in printed and "Conv*" in printed
    kernel_table = (tmp_path / "k.txt").read_text(encoding="utf-8")
    assert "[data movement]" in kernel_table and "transpose" in kernel_table
    assert (tmp_path / "g.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(tmp_path / "run.ireeprof"), "--map", str(vmfb), "--graph", str(tmp_path / "g.png")]) == 1


def test_nanogpt_graph_renders(tmp_path):
    from nanogpt_builders import torch_gpt

    import sectionmark as sm

    model, args = torch_gpt(config="small")
    compiled = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu")
    session = sm.profile(compiled.save(tmp_path / "gpt.vmfb"), args=[a.numpy() for a in args], iterations=2, warmup=1)
    text = graph.render(session)
    nodes, edges = parse_dot(text)
    assert len(nodes) > len(session.sites) and "Self Attention" in text
    assert any("read by" in label for _s, _t, label in edges)
    render_svg(text, tmp_path)


# ---------------------------------------------------------------------------- hostile strings in a browser

MARK = "PWNED"  # the payloads spell it only in pieces: the word appears in a page only if a payload ran
PAYLOAD = ("\"'><img src=x onerror=\"document.title='PW'+'NED'\"><script>document.title='PW'+'NED'</script>"
           "<svg onload=\"document.title='PW'+'NED'\"></svg><!-- --> ]]> \\")


def scripts_ran(pages: list) -> list:
    """The pages (HTML or SVG files) in which headless Chromium saw a payload change ``document.title``."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        return [page for page, loaded in zip(pages, pool.map(chromium.load, pages)) if MARK in loaded.dom]


def _string_values(node, found: set) -> set:
    if isinstance(node, str):
        found.add(node)
    for child in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        _string_values(child, found)
    return found


def _replaced(node, old: str, new: str):
    if isinstance(node, dict):
        return {key: _replaced(value, old, new) for key, value in node.items()}
    if isinstance(node, list):
        return [_replaced(value, old, new) for value in node]
    return new if node == old else node


def test_hostile_map_strings_never_run_in_the_html_or_svg_graph(tmp_path, compiled_two_matmuls, inputs, capsys):
    """Each string value of a real map, in turn, made hostile everywhere it occurs: the report refuses the map
    in one line or writes a graph (.html, .svg) in which Chromium runs nothing; names and tensors reach the pages."""
    if not chromium.available() or shutil.which("dot") is None:
        pytest.skip(f"{chromium.MISSING} and Graphviz (apt-get install graphviz)")
    import sectionmark as sm
    from sectionmark.cli import main

    compiled, vmfb = compiled_two_matmuls
    profile = tmp_path / "run.ireeprof"
    sm.profile(vmfb, args=inputs, iterations=1, warmup=0, keep_profile=profile, quiet=True)
    original = compiled.section_map.to_json()
    pages_of, refused = {}, []
    for number, value in enumerate(sorted(_string_values(original, set()))):
        map_path = tmp_path / f"{number}.sections.json"
        map_path.write_text(json.dumps(_replaced(original, value, value + PAYLOAD)))
        for suffix in (".html", ".svg"):
            page = tmp_path / f"{number}{suffix}"
            code = main(["report", str(profile), "--map", str(map_path), "--graph", str(page)])
            printed = capsys.readouterr()
            assert code in (0, 1), printed.err
            if code == 1:
                assert printed.err.count("\n") == 1 and printed.err.startswith("sectionmark: error: "), printed.err
                refused.append(value)
                break
            pages_of.setdefault(value, []).append(page)
    pages = [page for value_pages in pages_of.values() for page in value_pages]
    control = tmp_path / "unescaped.html"  # the check itself: a page with the payload as markup does run it
    control.write_text(f"<!DOCTYPE html><html><head><title>t</title></head><body>{PAYLOAD}</body></html>")
    assert scripts_ran([*pages, control]) == [control]
    assert {"read", "write", "cost"} <= set(refused)  # enumerated fields: refused by the map's validation
    for value in ("Block", "Attn", "input0", "f32"):  # free text: reaches both pages, as text
        assert len(pages_of[value]) == 2 and all("&lt;img src=x" in page.read_text() for page in pages_of[value]), value
