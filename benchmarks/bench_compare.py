"""False alarms and detections of `sectionmark compare`, measured: the same module against itself, and one section
made 2x more expensive, 20 comparisons each, the second half beside a CPU hog on every core.

The model: two blocks, each an "Attn" (a 64x128 @ 128x128 matmul, tanh) and
an "MLP" (128 -> W -> 128, relu); W = 128, and in the "wide" copy Block 1's
MLP has W = 256: twice its FLOPs, every name the same. Compiled here into a
temporary directory. Each experiment is repeated ``--comparisons`` times (20):

* ``modules``: `sm.compare` of the two .vmfb files, run alternately
  (default rounds and calls: 10 rounds of one 20-call run of each, random order);
* ``runs 3``: two saved profiles of 3 runs each (``sm.profile(runs=3)``,
  20 calls, profiled one after the other: A's runs, then B's), compared
  (each run's whole-run factor taken out, `sectionmark.profiling.run_scale`);
* ``one run``: two saved profiles of one run each (the verdict only beyond the
  drift bound); for the same module, the largest |B/A - 1| of a row whose
  interval (over its calls) excludes 1 is the drift the bound is checked
  against: what the calls alone would have called a change.

* ``gate``: the pytest plugin's gate (`sectionmark.pytest_plugin.SectionProfiler`,
  the fixture's own code, ``--sectionmark-fail '*:10%'``): a fresh store, one
  session of the base module recorded (3 runs, its module kept), then one
  session of the same or the wider module gated against it, paired (the kept
  module and the new one run alternately, 10 rounds of 20 calls); and
  ``gate-runs``: the same with the kept module deleted, so the gate judges 3
  fresh runs against the 3 recorded (the fallback). Beside the hog, in the
  second half, only the gated session runs: the load changes between the
  recorded session and the judged one, the drift a history sees.

Printed per experiment and pair (same / 2x wider): how many comparisons had
any section or component "slower" or "faster" where none should, how many
would fail ``--fail-if-slower 10``, and for the 2x pair how often each row
expected to be slower was (Block 1 / MLP, its parent Block 1, the components
MLP and Block 1). Then the compare of two hand-made 1,000,000-call profiles
(a subprocess of the CLI: seconds and peak RSS).

Usage: python benchmarks/bench_compare.py [--comparisons 20] [--no-hog] [--only modules,runs3,onerun,gate,gate-runs,long]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import re
import shutil

import numpy as np
import pytest

import sectionmark as sm
from sectionmark.profiling.compare import FASTER, SLOWER, Comparison
from sectionmark.profiling.regression import parse_gate
from sectionmark.pytest_plugin import FIRST_RUN, SectionProfiler, Settings

from load import Hog  # benchmarks/load.py

EXPECTED_SLOWER = {("section", "Block 1 / MLP"), ("section", "Block 1"), ("component", "MLP"),
                   ("component", "Block 1")}
ITERATIONS = 20


def build(directory: Path) -> tuple[Path, Path, Path]:
    """base.vmfb, wide.vmfb (Block 1's MLP 2x wider) and x.npy."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self, wide: int) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            widths = [128, wide]
            self.attn = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(128, 128, generator=generator) / 11) for _ in range(2)])
            self.up = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(128, w, generator=generator) / 11) for w in widths])
            self.down = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(w, 128, generator=generator) / 11) for w in widths])

        def forward(self, x):
            for block in range(2):
                with sm.section(f"Block {block}"):
                    with sm.section("Attn"):
                        x = torch.tanh(x @ self.attn[block])
                    with sm.section("MLP"):
                        x = torch.relu(x @ self.up[block]) @ self.down[block]
            return x

    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(1))
    paths = directory / "base.vmfb", directory / "wide.vmfb"
    for path, wide in zip(paths, (128, 256)):
        sm.compile(sm.torch.export(Net(wide), args=(x,))).save(path)
    np.save(directory / "x.npy", x.numpy())
    return *paths, directory / "x.npy"


def flagged(comparison: Comparison) -> set[tuple[str, str, str]]:
    return {(kind, row.name, row.verdict) for kind, rows in (("section", comparison.sections),
                                                             ("component", comparison.components))
            for row in rows if row.verdict in (SLOWER, FASTER)}


def largest_change(comparison: Comparison, excluding_one: bool = False) -> float:
    """The largest |B/A - 1| of the rows (``excluding_one``: of those whose interval lies beyond 1: the largest
    change the interval alone would call one)."""
    return max([abs(row.ratio - 1) for row in [*comparison.sections, *comparison.components]
                if row.ratio is not None and (not excluding_one or row.low > 1 or row.high < 1)], default=0.0)


def experiment(name: str, compare_once, comparisons: int, hog: bool) -> None:
    """``compare_once(expected_change)`` -> Comparison, ``comparisons`` times per pair; counts printed."""
    for pair in ("same", "2x"):
        false_alarms, fails, hits, drift, started = 0, 0, Counter(), [0.0, 0.0], time.time()
        wrong: Counter = Counter()
        for index in range(comparisons):
            loaded = hog and index >= comparisons // 2
            if loaded:
                with Hog():
                    comparison = compare_once(pair)
            else:
                comparison = compare_once(pair)
            rows = flagged(comparison)
            expected = EXPECTED_SLOWER if pair == "2x" else set()
            unexpected = {row for row in rows if (row[0], row[1]) not in expected or row[2] != SLOWER}
            false_alarms += bool(unexpected)
            wrong.update(f"{kind} {row} {verdict}" for kind, row, verdict in unexpected)
            fails += bool(comparison.slower_than(10))
            hits.update(f"{kind} {row}" for kind, row, verdict in rows if verdict == SLOWER)
            if pair == "same":
                drift = [max(drift[0], largest_change(comparison)), max(drift[1], largest_change(comparison, True))]
            print(f"  {name} {pair} #{index + 1}{' (hog)' if loaded else ''}: flagged {sorted(rows) or 'none'}",
                  file=sys.stderr, flush=True)
        line = (f"{name:8s} {pair:4s}: {comparisons} comparisons ({comparisons // 2 if hog else 0} beside a CPU hog), "
                f"with a row flagged that should not be: {false_alarms}; --fail-if-slower 10 would fail: {fails}")
        if pair == "2x":
            line += "; slower: " + ", ".join(f"{kind} {row} {hits[f'{kind} {row}']}/{comparisons}"
                                            for kind, row in sorted(EXPECTED_SLOWER))
        else:
            line += f"; largest |B/A - 1| {drift[0]:.1%}, of an interval excluding 1 {drift[1]:.1%}"
        if wrong:
            line += f"; wrongly flagged: {dict(wrong)}"
        print(line + f" [{time.time() - started:.0f} s]", flush=True)


EXPECTED_GATED = {"Block 1 / MLP", "Block 1"}  # the gate judges sections (components are not gated)


def gate_once(directory: Path, base: Path, module: Path, args, paired: bool, hog: bool) -> set[str]:
    """One recorded session of ``base``, then one of ``module`` gated at 10% against it (beside a hog when ``hog``):
    the sections the gate failed on (an empty set: it passed)."""
    store = directory / "store" / "history.sqlite"
    shutil.rmtree(store.parent, ignore_errors=True)
    gates = [parse_gate("*:10%")]
    SectionProfiler(Settings(store, directory, "recorded", FIRST_RUN, gates), "bench")(
        base, args, iterations=ITERATIONS, warmup=3)
    if not paired:
        shutil.rmtree(store.parent / "modules")
    settings = Settings(store, directory, "gated", FIRST_RUN, gates)
    gated = SectionProfiler(settings, "bench")
    try:
        if hog:
            with Hog():
                gated(module, args, iterations=ITERATIONS, warmup=3)
        else:
            gated(module, args, iterations=ITERATIONS, warmup=3)
    except pytest.fail.Exception as failure:
        if "slower than its history" not in str(failure):
            print(f"  gate: not a verdict: {failure}", file=sys.stderr, flush=True)
        return set(re.findall(r"(?:: |; )([^;:]+?) \d+\.\d+x slower", str(failure)))
    for line in settings.lines:  # what the gate judged changed without failing on it
        print(f"  gate passed, judged: {line}", file=sys.stderr, flush=True)
    return set()


def gate_experiment(name: str, directory: Path, base: Path, modules: dict, args, paired: bool, comparisons: int,
                    hog: bool) -> None:
    """`gate_once` ``comparisons`` times per pair; false alarms and detections printed."""
    for pair in ("same", "2x"):
        false_alarms, hits, started = 0, Counter(), time.time()
        wrong: Counter = Counter()
        for index in range(comparisons):
            loaded = hog and index >= comparisons // 2
            failed = gate_once(directory, base, modules[pair], args, paired, loaded)
            expected = EXPECTED_GATED if pair == "2x" else set()
            false_alarms += bool(failed - expected)
            wrong.update(failed - expected)
            hits.update(failed & expected)
            print(f"  {name} {pair} #{index + 1}{' (hog)' if loaded else ''}: failed on {sorted(failed) or 'none'}",
                  file=sys.stderr, flush=True)
        line = (f"{name:9s} {pair:4s}: {comparisons} gated sessions ({comparisons // 2 if hog else 0} beside a CPU "
                f"hog), failing on a section that should not fail: {false_alarms}")
        if pair == "2x":
            line += "; failed on: " + ", ".join(f"{row} {hits[row]}/{comparisons}" for row in sorted(EXPECTED_GATED))
        if wrong:
            line += f"; wrongly: {dict(wrong)}"
        print(line + f" [{time.time() - started:.0f} s]", flush=True)


def long_profiles(directory: Path, x: Path, base: Path) -> None:
    """Two profiles of 1,000,000 calls (a real profile's JSON with 10^6 per-call samples a section), compared by
    the CLI in a subprocess: its seconds and peak RSS."""
    session = sm.profile(base, args=(np.load(x),), iterations=ITERATIONS, quiet=True)
    from sectionmark.renderers import json_out

    document = json.loads(json_out.render(session))
    rng = np.random.default_rng(0)
    files = []
    for side in ("a", "b"):
        document["calls"] = 1_000_000
        for row in document["sections"]:
            mean = max(row["busy_ns"] / session.calls, 0)
            row["samples"] = np.round(rng.normal(mean, mean * 0.05 + 1e-9, 1_000_000).clip(0)).tolist()
        path = directory / f"long-{side}.json"
        path.write_text(json.dumps(document))
        files.append(path)
    started = time.time()
    # The peak of the child alone: its maxrss would include this process's pages it was forked from, so the
    # high-water mark is reset first (clear_refs 5) and read back as VmHWM.
    measure = ("import os, re, sys; open('/proc/self/clear_refs', 'w').write('5'); from sectionmark.cli import main; "
               "code = main(sys.argv[1:]); status = open('/proc/self/status').read(); "
               "print(re.search(r'VmHWM:\\s+(\\d+)', status).group(1), sum(os.times()[:2]), file=sys.stderr); "
               "sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", measure, "compare", *map(str, files)], capture_output=True,
                            text=True)
    seconds = time.time() - started
    peak_kib, cpu_seconds = result.stderr.split()[-2:]
    print(f"long     : compare of two 1,000,000-call profiles ({files[0].stat().st_size / 2**20:.0f} MiB each): "
          f"{seconds:.1f} s ({float(cpu_seconds):.1f} s of CPU), peak RSS {int(peak_kib) / 1024:.0f} MiB (exit "
          f"{result.returncode}; goal < 10 s, < 1024 MiB; load average {os.getloadavg()[0]:.1f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--no-hog", action="store_true", help="no CPU hog in the second half")
    parser.add_argument("--only", default="long,modules,runs3,onerun,gate,gate-runs")
    options = parser.parse_args()
    only = options.only.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as scratch:
        directory = Path(scratch)
        base, wide, x = build(directory)
        args = (np.load(x),)
        modules = {"same": base, "2x": wide}
        print(f"cores: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.1f}", flush=True)
        if "long" in only:
            long_profiles(directory, x, base)
        if "modules" in only:
            experiment("modules", lambda pair: sm.compare(base, modules[pair], args, quiet=True),
                       options.comparisons, not options.no_hog)
        for name, runs in (("runs3", 3), ("onerun", 1)):
            if name in only:
                experiment(name, lambda pair: sm.compare(
                    sm.profile(base, args=args, iterations=ITERATIONS, runs=runs, quiet=True),
                    sm.profile(modules[pair], args=args, iterations=ITERATIONS, runs=runs, quiet=True)),
                    options.comparisons, not options.no_hog)
        for name, paired in (("gate", True), ("gate-runs", False)):
            if name in only:
                gate_experiment(name, directory, base, modules, args, paired, options.comparisons,
                                not options.no_hog)


if __name__ == "__main__":
    main()
