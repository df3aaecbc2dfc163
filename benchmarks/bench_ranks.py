"""Reading several ranks' profiles: one process per file against one file after another, in the same run.

Records N rank profiles (``--ranks``, 4 by default) of one two-section module
(each ``--calls`` calls, rank 2 fed 8x the rows of one section, as
tests/helpers/rank_profiles.py records them), then times
``sm.report_ranks(files, map)`` with one process (every file read in this
process, one after another) and with one process per file up to the cores
(the default), alternately, ``--repeat`` rounds. Prints the best time of
each, their ratio, the cores, and checks both give the same figures. On a
machine with a free core per file the ratio approaches the number of files
(each file's read is independent; the merge is of small summaries); on a
busy machine less.

Usage: python benchmarks/bench_ranks.py [--ranks 4] [--calls 4000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import sectionmark as sm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from rank_profiles import WARMUP, record_rank_files  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        vmfb, files = record_rank_files(Path(folder), options.ranks, options.calls)
        megabytes = sum(path.stat().st_size for path in files) / 1e6
        serial, parallel = [], []
        for _round in range(options.repeat):
            for processes, times in ((1, serial), (None, parallel)):
                started = time.perf_counter()
                report = sm.report_ranks(files, vmfb, warmup=WARMUP, processes=processes, quiet=True)
                times.append(time.perf_counter() - started)
                if processes == 1:
                    expected = report.to_json()
                assert report.to_json() == expected, "the figures differ between one and several processes"
        cores = len(os.sched_getaffinity(0))
        print(f"{options.ranks} rank files, {megabytes:.1f} MB in all, {cores} cores, load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"one process: {min(serial):.3f} s; {min(options.ranks, cores)} processes: {min(parallel):.3f} s; "
              f"ratio {min(serial) / min(parallel):.2f}x (best of {options.repeat} each)")
        print(report.table())


if __name__ == "__main__":
    main()
