"""The HTML report of a big profile: file size and render time in headless Chromium.

A synthetic profile of 2,000 dispatch sites (100 blocks of 20: attention QKV
and softmax, projection, MLP; every 7th site fused with the next section; a
chain of reads with a residual read every 20 sites) run for 500 calls: 1M
dispatch events, built into a ProfileSession as a real profile is. Printed:
the time to build the session and to render the report, the file's size
(goal: under 20 MB) and the time headless Chromium takes to parse, run and
lay out the page (goal: under 3 s), read from the page's own clock
(``performance.now()`` after its script and a forced layout, the
``data-render-ms`` attribute), plus the whole browser run for reference.

Usage: python benchmarks/bench_html.py [--sites 2000] [--calls 500] [--keep report.html]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from sectionmark.profiling.attribute import Attribution, Slot
from sectionmark.readers.event_model import DISPATCH_DTYPE
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import html
from sectionmark.section_map import Binding, Command, CommandBuffer, DispatchSite, SectionMap, Share

CHROMIUM = "/usr/bin/chromium"
GOAL_MB, GOAL_S = 20.0, 3.0
SITES_PER_BLOCK = 20


def section_of(site: int) -> tuple[str, ...]:
    block, part = divmod(site, SITES_PER_BLOCK)
    name = f"Block {block}"
    if part < 8:
        return (name, "Attention", "QKV" if part < 4 else "Softmax")
    return (name, "Attention", "Projection") if part < 12 else (name, "MLP")


def big_profile(sites: int, calls: int) -> tuple[Attribution, SectionMap]:
    """``sites`` dispatch sites with bindings, each run once per call, ``calls`` calls back to back."""
    commands, map_sites = [], []
    for site in range(sites):
        shares = [Share(section_of(site), 1.0)]
        if site % 7 == 0 and site + 1 < sites and section_of(site + 1) != section_of(site):
            shares = [Share(section_of(site), 0.7), Share(section_of(site + 1), 0.3)]
        reads = ["input0"] if site == 0 else [f"site {site - 1} #0"]
        reads += [f"site {site - SITES_PER_BLOCK} #0"] if site % SITES_PER_BLOCK == 0 and site else []
        bindings = [Binding(tensor, [64, 64], [64, 64], "f32", "read", 16384, 0) for tensor in reads]
        bindings.append(Binding(f"site {site} #0", [64, 64], [64, 64], "f32", "write", 0, 16384,
                                ["output0"] if site == sites - 1 else []))
        bindings.append(Binding(f"@weight{site}", [64, 64], [64, 64], "f32", "read", 16384, 0))
        commands.append(Command("dispatch", f"main$async_dispatch_{site}_matmul_64x64", site=site, shares=shares))
        map_sites.append(DispatchSite(id=site, function="main", shares=shares, op_count=1, bindings=bindings,
                                      flops=2 * 64 ** 3))
    declared = sorted({share.path for command in commands for share in command.shares})
    section_map = SectionMap(sections=declared, sites=map_sites,
                             command_buffers=[CommandBuffer(index=0, function="main", commands=commands)])
    compositions = [tuple((share.path, share.weight) for share in command.shares) for command in commands]
    slots = [Slot(buffer=0, position=site, command=command, composition=site) for site, command in enumerate(commands)]
    rng = np.random.default_rng(0)
    durations = rng.integers(200, 600, size=(calls, sites))
    gaps = rng.integers(20, 60, size=(calls, sites))
    ends = np.cumsum(durations + gaps, axis=None).reshape(calls, sites)
    events = np.zeros(calls * sites, DISPATCH_DTYPE)
    events["end_ns"] = ends.ravel()
    events["start_ns"] = (ends - durations).ravel()
    attribution = Attribution(events=events, event_slots=np.tile(np.arange(sites, dtype=np.int32), calls),
                              event_calls=np.repeat(np.arange(calls, dtype=np.int32), sites), slots=slots, compositions=compositions, calls=calls, warmup=0,
                              calls_known=True, keys=[command.key for command in commands], buffer_matches={0: 0})
    return attribution, section_map


def timed(function):
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sites", type=int, default=2000, help="dispatch sites (default: 2000)")
    parser.add_argument("--calls", type=int, default=500, help="calls, each running every site once (default: 500)")
    parser.add_argument("--keep", help="also write the report here")
    options = parser.parse_args()

    attribution, section_map = big_profile(options.sites, options.calls)
    build_s, session = timed(lambda: ProfileSession.build(attribution, section_map, function="main"))
    render_s, page = timed(lambda: html.render(session))
    size_mb = len(page.encode("utf-8")) / 1e6
    print(f"profile: {len(attribution.events):,} dispatch events, {options.sites:,} sites, {options.calls} calls, "
          f"{len(session.sections)} section rows; session built in {build_s:.2f} s")
    print(f"report: rendered in {render_s:.2f} s, {size_mb:.2f} MB (goal < {GOAL_MB:g} MB)")
    with tempfile.TemporaryDirectory(prefix="sectionmark-html-") as scratch:
        path = Path(options.keep or Path(scratch) / "report.html")
        path.write_text(page, encoding="utf-8")
        browser_s, done = timed(lambda: subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={scratch}/profile",
             "--dump-dom", path.resolve().as_uri()], capture_output=True, text=True, timeout=300))
    found = re.search(r'data-render-ms="([\d.]+)"', done.stdout[:5000])
    if done.returncode != 0 or found is None:
        raise SystemExit(f"chromium did not render the page: {done.stderr[-1000:]}")
    page_s = float(found.group(1)) / 1e3
    bars = done.stdout.count('class="dispatch"')
    print(f"headless Chromium: page parsed, script run and laid out in {page_s:.2f} s (goal < {GOAL_S:g} s); "
          f"whole browser run {browser_s:.2f} s; {bars:,} dispatch bars drawn for the shown call")
    met = size_mb < GOAL_MB and page_s < GOAL_S
    print(f"goal (< {GOAL_MB:g} MB, < {GOAL_S:g} s): {'met' if met else 'not met'}")


if __name__ == "__main__":
    main()
