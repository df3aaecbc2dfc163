"""Jupyter: a result evaluated in a cell shows a short summary (text) and the inline report (HTML).

The example notebook (examples/notebooks/quickstart.ipynb) is executed as a user runs it, by nbclient in an
ipykernel; its HTML export (nbconvert, as ``jupyter nbconvert --to html``) is opened in headless Chromium
through the DevTools protocol, which sees inside the report's sandboxed frames: every section name is there,
the report's script ran in each (it marks the page with ``data-resources``, the count of what it fetched),
no console error anywhere and no network request. The export's own page would fetch require.js and MathJax
from a CDN: they are pointed at empty ``data:`` scripts, as for an offline export.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import chromium
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
nbconvert = pytest.importorskip("nbconvert")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebooks" / "quickstart.ipynb"
SECTIONS = ("Up Projection", "Down Projection")
EMPTY_SCRIPT = "data:text/javascript,"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    folder = tmp_path_factory.mktemp("notebook")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(folder)}})
    client.execute(env=env)
    return notebook, folder


def outputs(notebook, mime: str) -> list[str]:
    return [output["data"][mime] for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if mime in output.get("data", {})]


@pytest.mark.slow
def test_each_result_shows_a_short_summary_and_an_inline_view(executed):
    notebook, _folder = executed
    texts = outputs(notebook, "text/plain")
    assert [text.split(" ", 1)[0] for text in texts] == ["<ProfileRun", "<ReplayProfile", "<Comparison"]
    profile_text, replay_text, comparison_text = texts
    assert len(profile_text) < 400 and "main: 5 calls (+1 warmup) on local-task" in profile_text
    assert re.search(r"coverage 100\.00%, 2 sections; top: (Up|Down) Projection", profile_text)
    assert "main (1 call per replay, 3 measured replays): 3 calls (+1 warmup)" in replay_text
    assert "0 sections slower, 0 faster" in comparison_text
    pages = outputs(notebook, "text/html")
    assert [page.startswith("<iframe sandbox=\"allow-scripts\"") for page in pages] == [True, True, False]
    assert all(name in page for page in pages for name in SECTIONS)


@pytest.mark.slow
def test_the_exported_notebook_runs_each_report_offline(executed):
    chromium.require_chromium()
    notebook, folder = executed
    exporter = nbconvert.HTMLExporter(require_js_url=EMPTY_SCRIPT, mathjax_url=EMPTY_SCRIPT)
    body, _resources = exporter.from_notebook_node(notebook)
    page = folder / "quickstart.html"
    page.write_text(body, encoding="utf-8")
    loaded = chromium.load_frames(page)
    reports = [frame for frame in loaded.frames if "data-resources=" in frame]
    assert len(reports) == 2, [frame[:200] for frame in loaded.frames]  # the profile's and the replay's: scripts ran
    for report in reports:
        assert 'data-resources="0"' in report and all(name in report for name in SECTIONS)
        assert "<svg class=\"calls\"" in report and "<rect" in report  # the script drew a call's timeline
    assert loaded.console == [] and loaded.fetched == []
    assert "0 sections slower" in loaded.frames[0]  # the comparison's table, in the notebook's own page
