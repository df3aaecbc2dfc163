"""What a notebook shows for each result, on hand-built profiles: a short summary line and the inline HTML.

The real notebook (executed by nbclient, exported, opened in Chromium) is tests/entry/test_notebook.py.
"""

from __future__ import annotations

import html
import re

from test_compare import blocks

from sectionmark.profiling.compare import compare_sessions
from sectionmark.profiling.roofline import Peak
from sectionmark.workflows.replay import FunctionProfile, ReplayProfile


class Printer:
    """IPython's pretty printer, as far as ``_repr_pretty_`` uses it."""

    def __init__(self):
        self.written = ""

    def text(self, text: str) -> None:
        self.written += text


def test_a_profile_says_what_it_is_in_one_short_line():
    session = blocks({("Block 1", "MLP"): 3.0})
    session.device, session.warmup = "local-task", 2
    text = repr(session)
    assert len(text) < 300 and "\n" not in text
    assert text.startswith("<ProfileSession main: 10 calls (+2 warmup) on local-task, 10 runs, ")  # test_compare.blocks
    assert re.search(r"coverage 100\.00%, 6 sections; top: Block 1 / MLP \d+\.\d%, ", text)
    printer = Printer()
    session._repr_pretty_(printer, False)
    assert printer.written == text == str(session)


def test_a_profile_inline_is_its_report_in_a_sandboxed_frame():
    session = blocks()
    inline = session._repr_html_()
    frame = re.fullmatch(r'<iframe sandbox="allow-scripts" title="[^"]*" style="[^"]*" srcdoc="([^"]*)"></iframe>',
                         inline)
    assert frame, inline[:300]
    page = html.unescape(frame.group(1))
    assert page == session.render("html")  # the report itself: its CSP and script hash unchanged


def test_a_replay_names_each_function():
    replay = ReplayProfile(replays=2, warmup=1, calls_per_replay=3,
                           functions=[FunctionProfile("prefill", 1, blocks()), FunctionProfile("decode", 2, None)])
    text = repr(replay)
    assert text.startswith("<ReplayProfile prefill (1 call per replay, 2 measured replays): 10 calls, 10 runs")
    assert text.endswith("; decode (2 calls per replay, 2 measured replays): ran no dispatch>")
    assert "sectionmark profile of a recording: prefill, decode" in html.unescape(replay._repr_html_())


def test_a_comparison_names_the_slower_sections_and_shows_its_tables():
    comparison = compare_sessions(blocks(), blocks({("Block 0", "MLP"): 2.0}, seed=5))
    text = repr(comparison)
    assert text.startswith("<Comparison B: B vs A: A: 2 sections slower, 0 faster, 5 other; slower: Block 0 +")
    assert "Block 0 / MLP +" in text
    inline = comparison._repr_html_()
    assert inline.count("<table") == 2 and "<script" not in inline and "slower" in inline


def test_a_peak_in_one_line_and_its_figures_inline():
    peak = Peak(device="local-task", bandwidth_gb_per_s=20.0, dram_gb_per_s=15.0, gflop_per_s=100.0, workers=2,
                host="box", cpu_model="a <cpu>", iree_version="3.13.0", date="2026-01-01T00:00:00+00:00",
                load=[0.5, 0.4, 0.3], kernels=[])
    assert repr(peak) == ("<Peak local-task: 20.0 GB/s, 100.0 GFLOP/s, ridge 5.00 FLOPs/byte (2 workers, box, "
                          "2026-01-01T00:00:00+00:00)>")
    assert peak._repr_html_() == f"<pre>{html.escape(peak.text())}</pre>"
