"""How true the Tracy replay's CPU side is: Tracy's "delay to execution" of each zone against the run's.

    .venv/bin/python benchmarks/bench_tracy_replay.py OUT [--warmup N]

OUT is a folder of the demo (``examples/nanogpt/run.py --out OUT``): its ``run.ireeprof``, ``model.vmfb`` and
the ``run.tracy`` the demo replayed from them. Prints, for the one replay in that capture:

  * per QKV section zone (the acceptance case), Tracy's delay to execution (the zone's start minus the moment
    the replay sent it) beside the run's (its start minus its command buffer's submission), and their ratio;
  * over all zones of the main track: the median and the largest of Tracy's delay minus the run's (never above
    0 up to the GPU contexts' anchoring: the replay never sends a zone early);
  * how much later than in the run the replay's last call sits (the replay falls behind on a busy machine and
    then moves the rest later: 0 on an idle one);
  * what the GUI opens on (`Capture.opening_view`): the capture's start to its end, where the first call and the
    first zone start in it and where the last zone ends.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import sectionmark as sm
from sectionmark.profiling.timeline import session_timelines
from sectionmark.tracy import read_capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the demo's output folder")
    parser.add_argument("--warmup", type=int, default=3, help="the demo's --warmup (default 3)")
    args = parser.parse_args()
    run = sm.report(args.out / "run.ireeprof", args.out / "model.vmfb", warmup=args.warmup)
    capture = read_capture(args.out / "run.tracy")
    timeline = session_timelines(run.session, run.events())[0]
    spans = [span for top in timeline.main for _depth, span in top.walk()]
    track = next(track for track in capture.gpu_contexts if track.name.endswith(f"queue {timeline.queue}: sections"))
    assert [zone.name for zone in track.zones] == [span.name for span in spans], "not the replay of this profile"
    tracy = np.array([zone.start_ns - cpu_begin for zone, (cpu_begin, _end) in zip(track.zones, track.cpu_side)])
    run = np.array([span.start_ns - span.submitted_ns for span in spans])
    print("QKV zones: Tracy's delay to execution, the run's submission-to-start (µs), ratio")
    for index in [index for index, span in enumerate(spans) if span.name == "QKV"]:
        print(f"  {tracy[index] / 1e3:8.2f} {run[index] / 1e3:8.2f}  {tracy[index] / run[index]:.3f}")
    difference = tracy - run
    print(f"all {len(spans)} zones: Tracy's delay minus the run's: median {np.median(difference) / 1e3:.2f} µs, "
          f"largest {difference.max() / 1e3:.2f} µs")
    later = (track.zones[-1].start_ns - track.zones[0].start_ns) - (spans[-1].start_ns - spans[0].start_ns)
    print(f"the last call sits {later / 1e6:.3f} ms later than in the run (the replay fell behind by that much)")
    start, end = capture.opening_view()
    zones = [zone for track in capture.gpu_contexts for zone in track.zones]
    print(f"the GUI opens on {start / 1e6:.2f} to {end / 1e6:.2f} ms: the first call's frame at "
          f"{capture.frames[2] / 1e6:.2f} ms, the first zone at {min(zone.start_ns for zone in zones) / 1e6:.2f} ms, "
          f"the last zone ends at {max(zone.end_ns for zone in zones) / 1e6:.2f} ms")


if __name__ == "__main__":
    main()
