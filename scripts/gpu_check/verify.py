"""The acceptance checks of K2 on one framework's outputs (gpu_check.sh; gpu_prepare.sh tests them on a simulation).

    python verify.py profile DIR --map model.vmfb [--calls 23 --warmup 3]
        DIR holds run.tracy (the kept capture), sections.json (profile --json), report.json (report
        --warmup 3 --calls 23 --json), sections.tracy (the same report's --tracy), report-all.json
        (report --warmup 0 --calls 23 --json), stats-gpu.json (tracy-stats --gpu --json),
        csvexport-gpu.csv and csvexport-sections-gpu.csv (Tracy's csvexport -g of run.tracy, sections.tracy).
    python verify.py eager DIR --map model.vmfb --calls N   (eager.tracy, eager.tracy.json)

CUDA modules are compiled without debug groups (IREE 3.13's CUDA runtime crashes on them), so the raw
capture has dispatch zones and no section zones. Checks, each PASS/FAIL with numbers: coverage error
<= 0.01%; every section of the map in the table with dispatches; the raw capture: calls x the map's
dispatches per call, no section zones, no unknown GPU zones, csvexport and sectionmark's reader agree;
the report's own Tracy capture (report --tracy): the measured calls' dispatch zones, each nested in the
section zones of its command's group (sectionmark's reader: enclosing zones; Tracy's csvexport: the
section zones whose time spans contain it); the per-section busy times summed (top-level rows +
unmarked) equal the summed dispatch zones read by `tracy-stats` and by csvexport, over all calls and
over the measured calls.
Writes DIR/verify.json; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

COVERAGE_LIMIT = 1e-4  # 0.01 %
RESULTS: list[dict] = []
LANE_TRACK = "concurrent dispatches"  # sectionmark's replay: overlapping dispatches drawn flat beside the sections


def check(name: str, ok: bool, detail: str) -> bool:
    RESULTS.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    return ok


def load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        check(f"read {path.name}", False, str(error))
        return None


def load_capture(path: Path):
    from sectionmark.tracy import read_capture

    try:
        return read_capture(path)
    except Exception as error:  # noqa: BLE001  (a failed read is a failed check, not a crash)
        check(f"read {path.name}", False, f"{type(error).__name__}: {error}")
        return None


class MapFacts:
    def __init__(self, map_path: str):
        from sectionmark.artifacts import read_section_map

        self.map = read_section_map(map_path)
        self.sections = {tuple(path) for path in self.map.sections}
        self.reached = {tuple(path) for path in self.map.reached}
        self.prefixes = {path[:depth] for path in self.sections for depth in range(1, len(path) + 1)}
        self.groups: dict[str, set] = collections.defaultdict(set)  # dispatch key -> its commands' groups
        for buffer in self.map.command_buffers:
            for command in buffer.commands:
                if command.op == "dispatch":
                    group = tuple(max(command.shares, key=lambda s: s.weight).path) if command.shares else ()
                    self.groups[command.key].add(group)
        self.keys = set(self.groups)
        self.leaf_names = {path[-1] for path in self.prefixes} - self.keys
        # Per call, where the map has one command buffer with dispatches (executed once per call): its keys.
        dispatching = [b for b in self.map.command_buffers if any(c.op == "dispatch" for c in b.commands)]
        self.per_call = (collections.Counter(c.key for c in dispatching[0].commands if c.op == "dispatch")
                         if len(dispatching) == 1 else None)


def gpu_zones(capture, facts: MapFacts) -> dict:
    """What the GPU tracks hold, by sectionmark's reader.

    dispatches: (start, duration, key) of every dispatch zone; nested: those on section tracks (not on a
    replay's lane of concurrent dispatches), with the names of their enclosing section zones (outermost
    first); misplaced: section zones outside their path; sections: the number of section zones;
    unknown: the other zones not named iree_*.
    """
    found = {"dispatches": [], "nested": [], "misplaced": [], "sections": 0, "lane_dispatches": 0,
             "unknown": collections.Counter(), "tracks": len(capture.gpu_contexts)}
    for track in capture.gpu_contexts:
        lane = LANE_TRACK in track.name
        chains: list[tuple] = []
        for zone in track.zones:
            parent_chain = chains[zone.parent] if zone.parent >= 0 else ()
            parent = track.zones[zone.parent].name if zone.parent >= 0 else None
            chain = parent_chain + ((parent,) if parent in facts.leaf_names else ())
            chains.append(chain)
            if zone.name in facts.keys:
                found["dispatches"].append((zone.start_ns, zone.duration_ns, zone.name))
                if lane:
                    found["lane_dispatches"] += 1
                else:
                    found["nested"].append((zone.name, chain))
            elif zone.name in facts.leaf_names:
                found["sections"] += 1
                if chain + (zone.name,) not in facts.prefixes:
                    found["misplaced"].append((zone.name, chain))
            elif not zone.name.startswith("iree_"):
                found["unknown"][zone.name] += 1
    return found


def check_known(found: dict, label: str) -> None:
    unknown = found["unknown"]
    check(f"{label}: no GPU zones the map does not know", not unknown,
          "none" if not unknown else f"{dict(unknown.most_common(5))}")


def check_no_section_zones(found: dict, label: str) -> None:
    check(f"{label}: dispatch zones and no section zones (module compiled without debug groups)",
          found["dispatches"] and not found["sections"],
          f"{len(found['dispatches'])} dispatch zones, {found['sections']} section zones on {found['tracks']} GPU track(s)")


def check_per_call(dispatches: list, facts: MapFacts, calls: int, label: str) -> None:
    """The dispatch zones of `calls` calls: per key, calls x the map's commands of that key (one buffer per call)."""
    got = collections.Counter(key for _s, _d, key in dispatches)
    if facts.per_call is not None:
        want = collections.Counter({key: count * calls for key, count in facts.per_call.items()})
        differ = {key: (got.get(key, 0), want.get(key, 0)) for key in set(got) | set(want) if got.get(key, 0) != want.get(key, 0)}
        check(f"{label}: {calls} calls x the map's dispatches per call", bool(dispatches) and not differ,
              f"{len(dispatches)} dispatch zones = {calls} x {sum(facts.per_call.values())}: "
              + ("every key's count as in the map" if not differ else f"keys (zones, expected) differing: {dict(list(differ.items())[:5])}"))
    else:  # several command buffers dispatch: only the total can be told
        check(f"{label}: whole calls of dispatch zones", bool(dispatches) and len(dispatches) % calls == 0,
              f"{len(dispatches)} dispatch zones for {calls} calls (the map has several dispatching command buffers)")


def check_nesting(found: dict, facts: MapFacts, label: str) -> None:
    bad = [(key, chain, sorted(facts.groups[key])) for key, chain in found["nested"] if chain not in facts.groups[key]]
    bad += [(name, chain, "section zone outside its path") for name, chain in found["misplaced"]]
    check(f"{label}: section zones nest their dispatch zones (sectionmark reader)",
          found["nested"] and found["sections"] and not bad,
          f"{len(found['nested'])} dispatch zones, each inside its command's group, {found['sections']} section zones"
          f" ({found['lane_dispatches']} drawn on lanes of concurrent dispatches)"
          if not bad else f"{len(bad)} misplaced, e.g. {bad[:3]}")


def csvexport_zones(path: Path) -> list[tuple[str, int, int]]:
    """(name, start, duration) of every GPU zone in `csvexport -g` output."""
    zones = []
    for line in path.read_text(errors="replace").splitlines()[1:]:
        parts = line.rsplit(",", 3)
        if len(parts) == 4 and parts[2].strip().lstrip("-").isdigit() and parts[3].strip().lstrip("-").isdigit():
            zones.append((parts[0], int(parts[2]), int(parts[3])))
    return zones


def csv_dispatches(zones, facts: MapFacts) -> list:
    return [(start, duration, name) for name, start, duration in zones if name in facts.keys]


def nesting_by_csvexport(zones, facts: MapFacts, label: str) -> None:
    """Independent of sectionmark's reader: nesting from the zones' time spans alone.

    A dispatch zone's group is the chain of section zones whose spans contain it. Zone ends may coincide
    with the next zone's start, so a section zone that only touches it (ends where it starts, or starts
    where it ends) may be counted or not: it passes when the zones overlapping it are its group or part
    of it, and every name of its group has a zone around it. A dispatch zone that starts before an
    earlier one ended ran concurrently: the replay draws it on a lane, outside the sections (not checked).
    """
    import bisect

    sections = sorted((start, -duration, name) for name, start, duration in zones if name in facts.leaf_names)
    dispatches = sorted(csv_dispatches(zones, facts))
    starts = [start for start, _d, _n in sections]
    longest = max((-d for _s, d, _n in sections), default=0)
    bad, touching, concurrent, examples, main_end = 0, 0, 0, [], None
    for start, duration, key in dispatches:
        end = start + duration
        if main_end is not None and start < main_end:
            concurrent += 1
            continue
        main_end = end
        low, high = bisect.bisect_left(starts, start - longest), bisect.bisect_right(starts, start)
        around = sorted((s, -d, n) for s, d, n in sections[low:high] if s <= start and s - d >= end)
        around.sort(key=lambda z: (z[0], -z[1]))  # outermost first: earlier start, then longer
        chain = tuple(name for _s, _d, name in around)
        inside = tuple(n for s, d, n in around if s < end and s + d > start or (duration == 0 and s < start < s + d))
        groups = facts.groups[key]
        if chain in groups:
            continue
        if any(set(inside) <= set(group) and set(group) <= set(chain) for group in groups):
            touching += 1
            continue
        bad += 1
        if len(examples) < 3:
            examples.append((key, chain, sorted(groups)))
    checked = len(dispatches) - concurrent
    check(f"{label}: section zones nest their dispatch zones (csvexport time spans)",
          checked > 0 and bool(sections) and not bad,
          f"{checked} dispatch zones, each inside its command's group ({touching} with zones that only touch it; "
          f"{len(sections)} section zones; {concurrent} concurrent, not checked)"
          if not bad else f"{bad} of {checked} not inside their group, e.g. {examples}")


def check_same_zones(csv: list, reader: list, label: str) -> None:
    csv_total, reader_total = sum(d for _s, d, _k in csv), sum(d for _s, d, _k in reader)
    same_keys = collections.Counter(k for _s, _d, k in csv) == collections.Counter(k for _s, _d, k in reader)
    check(f"{label}: csvexport and sectionmark's reader see the same dispatch zones",
          bool(reader) and len(csv) == len(reader) and same_keys and csv_total == reader_total,
          f"{len(csv)} vs {len(reader)} zones (per-key counts equal: {same_keys}), {csv_total} vs {reader_total} ns")


def busy_sum(document) -> tuple[int, int, int]:
    """(Σ top-level busy_ns + unmarked_ns, total_ns, number of rows summed)."""
    rows = [row for row in document["sections"] if not row["unmarked"] and len(row["path"]) == 1]
    return sum(row["busy_ns"] for row in rows) + document["unmarked_ns"], document["total_ns"], len(rows) + 1


def profile(args) -> None:
    directory = Path(args.dir)
    facts = MapFacts(args.map)
    print(f"map: {len(facts.sections)} sections ({len(facts.reached)} reached dispatches), "
          f"{len(facts.keys)} dispatch keys, target {facts.map.target}, "
          f"{sum(facts.per_call.values()) if facts.per_call else '?'} dispatches per call")
    check("map: every section reached dispatches", facts.reached == facts.sections,
          f"{len(facts.reached)} of {len(facts.sections)}")
    measured_calls = args.calls - args.warmup

    sections = load_json(directory / "sections.json")
    if sections is not None:
        error = sections["coverage_error"]
        check("profile: coverage error <= 0.01%", error <= COVERAGE_LIMIT, f"{error:.3e} ({error * 100:.6f} %)")
        rows = {tuple(row["path"]): row for row in sections["sections"] if not row["unmarked"]}
        missing = sorted(facts.sections - set(rows))
        idle = sorted(path for path in facts.reached if path in rows and not rows[path]["dispatches"])
        check("profile: every section in the table, with dispatches", not missing and not idle,
              f"{len(rows)} section rows; missing {missing}; without dispatches {idle}")
        check("profile: calls and warmup", (sections["calls"], sections["warmup"]) == (measured_calls, args.warmup)
              and sections["calls_known"], f"calls {sections['calls']}, warmup {sections['warmup']}, known {sections['calls_known']}")

    report = load_json(directory / "report.json")
    if sections is not None and report is not None:
        same = {tuple(r["path"]): r["busy_ns"] for r in report["sections"]} == {tuple(r["path"]): r["busy_ns"] for r in sections["sections"]}
        check("report of the kept capture = profile", same and report["total_ns"] == sections["total_ns"],
              f"total {report['total_ns']} vs {sections['total_ns']} ns; every row's busy_ns equal: {same}")

    # The raw capture (profile --keep-profile): IREE's zones, a dispatch zone per dispatch, no section zones.
    capture = load_capture(directory / "run.tracy")
    reader_dispatches = []
    if capture is not None:
        found = gpu_zones(capture, facts)
        reader_dispatches = found["dispatches"]
        check_no_section_zones(found, "capture")
        check_per_call(reader_dispatches, facts, args.calls, "capture")
        check_known(found, "capture")

    csv_path = directory / "csvexport-gpu.csv"
    run_csv = []
    if csv_path.is_file():
        zones = csvexport_zones(csv_path)
        run_csv = csv_dispatches(zones, facts)
        csv_sections = sum(name in facts.leaf_names for name, _s, _d in zones)
        check("capture: csvexport reads no section zones either", bool(run_csv) and not csv_sections,
              f"{len(run_csv)} dispatch zones, {csv_sections} section zones of {len(zones)} GPU zones")
        check_same_zones(run_csv, reader_dispatches, "capture")
    else:
        check("csvexport -g output of run.tracy", False, f"{csv_path} missing")

    stats = load_json(directory / "stats-gpu.json")
    stats_total = None
    if stats is not None:
        stats_rows = [row for row in stats["zones"] if row["kind"] == "gpu" and row["name"] in facts.keys]
        stats_total = sum(row["total_ns"] for row in stats_rows)
        stats_count = sum(row["count"] for row in stats_rows)
        print(f"tracy-stats --gpu: {stats_count} dispatch zones of {len(stats_rows)} keys, {stats_total} ns")

    everything = load_json(directory / "report-all.json")
    if everything is not None and stats_total is not None:
        summed, total, rows = busy_sum(everything)
        check(f"all {args.calls} calls: per-section busy summed = dispatch zones (tracy-stats)", abs(summed - stats_total) <= rows
              and total == stats_total, f"Σ top-level busy + unmarked {summed} ns, total_ns {total}, tracy-stats {stats_total} "
              f"(rounding allowance {rows} ns)")
        if run_csv:
            csv_total = sum(d for _s, d, _k in run_csv)
            check(f"all {args.calls} calls: per-section busy summed = dispatch zones (csvexport)", abs(summed - csv_total) <= rows,
                  f"{summed} vs {csv_total} ns")

    measured = None  # the raw capture's dispatch zones of the measured calls (after the warmup calls)
    if reader_dispatches:
        ordered = sorted(reader_dispatches)
        per_call, rest = divmod(len(ordered), args.calls)
        measured = ordered[args.warmup * per_call:] if not rest else None
    if sections is not None and reader_dispatches:
        measured_ns = sum(d for _s, d, _k in measured) if measured is not None else None
        summed, total, rows = busy_sum(sections)
        check(f"measured calls: per-section busy summed = dispatch zones after the first {args.warmup} calls",
              measured_ns is not None and abs(summed - measured_ns) <= rows and total == measured_ns,
              f"Σ top-level busy + unmarked {summed} ns, total_ns {total}, zones {measured_ns} "
              f"({len(reader_dispatches) // args.calls} dispatch zones per call, {len(reader_dispatches) % args.calls} left over)")

    # The report's own Tracy capture (report --warmup W --calls N --tracy sections.tracy): the measured
    # calls' dispatch zones at their measured times, inside section zones nested as the sections.
    label = "report's Tracy capture"
    rendered = load_capture(directory / "sections.tracy")
    rendered_dispatches = []
    if rendered is not None:
        found = gpu_zones(rendered, facts)
        rendered_dispatches = found["dispatches"]
        check_nesting(found, facts, label)
        check_known(found, label)
        if measured is not None:
            want = collections.Counter(k for _s, _d, k in measured)
            got = collections.Counter(k for _s, _d, k in rendered_dispatches)
            want_ns, got_ns = sum(d for _s, d, _k in measured), sum(d for _s, d, _k in rendered_dispatches)
            check(f"{label}: the {measured_calls} measured calls' dispatch zones of the raw capture",
                  bool(want) and got == want and got_ns == want_ns,
                  f"{len(rendered_dispatches)} vs {len(measured)} zones (per-key counts equal: {got == want}), "
                  f"{got_ns} vs {want_ns} ns")
        else:
            check(f"{label}: the {measured_calls} measured calls' dispatch zones of the raw capture", False,
                  "the raw capture's dispatch zones do not split into calls")
    csv_path = directory / "csvexport-sections-gpu.csv"
    if csv_path.is_file():
        zones = csvexport_zones(csv_path)
        nesting_by_csvexport(zones, facts, label)
        check_same_zones(csv_dispatches(zones, facts), rendered_dispatches, label)
    else:
        check("csvexport -g output of sections.tracy", False, f"{csv_path} missing")


def eager(args) -> None:
    directory = Path(args.dir)
    facts = MapFacts(args.map)
    result = load_json(directory / "eager.tracy.json")
    if result is not None:
        check("eager: compiled logits = eager model", result.get("logits_match", False),
              f"max |diff| {result.get('max_abs_diff_vs_eager')}; vs reference {result.get('max_abs_diff_vs_reference')}")
    capture = load_capture(directory / "eager.tracy")
    if capture is None:
        return
    counts = collections.Counter(zone.name for track in capture.threads for zone in track.zones)
    want = {"K2 demo": 1, "Load": 1, "Warmup": 1, "Step": args.calls, "Compiled call": args.calls, "Argmax": args.calls,
            "Eager model": 1}
    got = {name: counts.get(name, 0) for name in want}
    check("eager: eager sections as CPU zones", got == want, f"{got}")
    model_sections = {name: counts.get(name, 0) for name in sorted(facts.leaf_names)}
    check("eager: the demo model's own sections as CPU zones (eager run)", all(model_sections.values()),
          f"{model_sections}")
    module_calls = sum(count for name, count in counts.items() if name.endswith(".main"))
    check("eager: sm.load's section around each compiled call", module_calls == args.calls + 1,
          f"{module_calls} zones named *.main for {args.calls + 1} calls")
    if not capture.gpu_contexts:
        check("eager: GPU zones", False, "none in this capture (expected only of a local-task simulation)")
        return
    # The compiled calls (module without debug groups): dispatch zones on the GPU, no section zones there.
    found = gpu_zones(capture, facts)
    dispatches = found["dispatches"]
    check_no_section_zones(found, "eager capture")
    check_per_call(dispatches, facts, args.calls + 1, "eager capture (warmup + calls)")
    check_known(found, "eager capture")
    # Where the GPU clock meets the CPU clock: each call's dispatch zones inside the CPU zone of the eager
    # section it was made in: the first call's in 'Warmup', each measured call's in its 'Compiled call'.
    per_call, rest = divmod(len(dispatches), args.calls + 1)
    ordered = sorted(dispatches)

    def spans(name):
        return sorted((z.start_ns, z.end_ns) for t in capture.threads for z in t.zones if z.name == name)

    outside, checked = collections.Counter(), 0
    if per_call and not rest:
        warmup_spans, call_spans = spans("Warmup"), spans("Compiled call")
        for index, (start, duration, _key) in enumerate(ordered):
            call = index // per_call
            name, found_spans, position = ("Warmup", warmup_spans, 0) if call == 0 else ("Compiled call", call_spans, call - 1)
            checked += 1
            if not (position < len(found_spans) and found_spans[position][0] <= start
                    and start + duration <= found_spans[position][1]):
                outside[name] += 1
    check("eager: the CPU zones of the eager sections enclose the dispatch zones of the calls made in them",
          checked > 0 and not outside,
          f"{checked} dispatch zones ({per_call} per call) checked against 'Warmup' (first call) and their call's "
          f"'Compiled call': {sum(outside.values())} outside {dict(outside)}"
          if per_call and not rest else f"{len(dispatches)} dispatch zones do not split into {args.calls + 1} calls")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["profile", "eager"])
    parser.add_argument("dir")
    parser.add_argument("--map", required=True)
    parser.add_argument("--calls", type=int, default=23, help="profile: all calls in the capture; eager: measured calls")
    parser.add_argument("--warmup", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        (profile if args.mode == "profile" else eager)(args)
    except Exception as error:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        check("verify ran to the end", False, f"{type(error).__name__}: {error}")
    out = Path(args.dir) / f"verify-{args.mode}.json"
    out.write_text(json.dumps(RESULTS, indent=1))
    failed = [r["check"] for r in RESULTS if not r["ok"]]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
