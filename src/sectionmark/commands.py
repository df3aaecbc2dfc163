"""What each command of ``sectionmark`` does, once `sectionmark.cli` has parsed and checked its arguments.

Each ``NAME_command(args, inputs)`` gets the parsed arguments and the
command's input files (no output may replace them), does the work and prints
its results; a failure is a `SectionmarkError` (one line, `sectionmark.cli`).
Everything heavy is imported inside the command that needs it, so ``--help``
and a usage error stay fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import write_atomic
from sectionmark.section_path import printable

if TYPE_CHECKING:
    from sectionmark.profiling.roofline import Peak
    from sectionmark.profiling.session import ProfileSession
    from sectionmark.workflows.replay import ReplayProfile


def _print(text: str, end: str = "\n") -> None:
    """Print on stdout with control characters escaped (`printable`), line breaks kept: every line a command prints
    (tables, notes, paths) may hold a name from a map or a profile, which must not rewrite the terminal."""
    print(printable(text, keep_lines=True), end=end)


def rendered_outputs(args: argparse.Namespace) -> dict[str, str]:
    """The renderer outputs asked for (``--NAME FILE``): renderer name -> path."""
    from sectionmark.renderers import RENDERERS

    return {name: getattr(args, name) for name in RENDERERS if getattr(args, name) is not None}


def _write_outputs(result: Union["ProfileSession", "ReplayProfile"], args: argparse.Namespace,
                   inputs: Sequence[str]) -> None:
    """Every renderer output asked for, then on stdout the table (and the sites table, components) and the files.

    ``result`` is one profile, or a replay's per-function profiles (each renderer writes them as its
    ``replays`` says). Files first: a reader that stops reading early (``| head -1``) must not cost them. An
    output that fails (an .svg graph without Graphviz) costs no other: the first failure is raised at the end.
    """
    written = []
    failed = None
    outputs = rendered_outputs(args)
    peak = _roofline_peak(result, args) if "roofline" in outputs else None  # the chart's and the table's
    for name, path in outputs.items():
        options = {"by": args.by} if args.by and name.startswith("components") else {}
        options.update(_table_columns(args) if name == "table" else {})
        options.update({"peak": peak} if name == "roofline" else {})
        try:
            written.append(result.save(path, name, inputs=inputs, **options))
        except SectionmarkError as error:
            failed = failed or error
    _print(result.render("table", **_table_columns(args)))
    if peak is not None:
        from sectionmark.profiling.roofline import roofline_text

        def placed(session: "ProfileSession") -> str:
            bounded = peak.bounding(session, args.by or "name")  # raised (one line) where a kernel beat it
            return roofline_text(bounded.roofline(session), bounded,
                                 bounded.component_roofline(session, args.by or "name"))

        _print(_each_profile(result, placed))
    if args.sites:
        from sectionmark.renderers.table import render_sites_text

        _print(_each_profile(result, render_sites_text))
    if args.by:
        _print(result.render("components", by=args.by))
    for path in written:
        _print(f"wrote {path}")
    if failed is not None:
        raise failed


def _roofline_peak(result: Union["ProfileSession", "ReplayProfile"], args: argparse.Namespace) -> "Peak":
    """The peaks ``--roofline`` places the sections under: of the device and worker count the profile ran with,
    cached, or measured now with the profiled module's heaviest kernels among the benchmarks (here: a renderer
    never measures)."""
    from sectionmark.workflows.peak import peak_for_chart
    from sectionmark.workflows.replay import ReplayProfile

    sessions = ([entry.profile for entry in result.functions if entry.profile is not None]
                if isinstance(result, ReplayProfile) else [result])
    device = next((session.device for session in sessions if session.device), None) or "local-task"
    return peak_for_chart(device, args.workers, [site for session in sessions for site in session.sites])


def _table_columns(args: argparse.Namespace) -> dict[str, bool]:
    """The optional column groups of the section table asked for (--cpu, --memory, --span)."""
    return {"cpu": args.cpu, "memory": args.memory, "span": args.span}


def _each_profile(result: Union["ProfileSession", "ReplayProfile"],
                  text_of: Callable[["ProfileSession"], str]) -> str:
    """``text_of`` one profile; of a replay, each function's under its heading."""
    from sectionmark.renderers import per_function_text
    from sectionmark.workflows.replay import ReplayProfile

    return per_function_text(result, text_of) if isinstance(result, ReplayProfile) else text_of(result)


def _load_inputs(paths: Sequence[str]) -> list:
    from sectionmark.workflows.inputs import load_input_array

    return [load_input_array(path) for path in paths]


def compile_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    from sectionmark.compiler import compile

    source = Path(args.mlir)
    if not source.is_file():
        raise SectionmarkError(f"no such MLIR file: {source}")
    compiled = compile(
        source, target=args.target, devices=args.devices, extra_args=args.iree_arg, markers=not args.no_markers,
        debug_groups=False if args.no_debug_groups else None,
        input_type=None if args.input_type == "auto" else args.input_type,
    )
    _print(f"wrote {compiled.save(args.output, inputs=inputs)}")
    if compiled.section_map is not None:
        dispatches = sum(c.op == "dispatch" for b in compiled.section_map.command_buffers for c in b.commands)
        _print(f"section map: {compiled.sections_summary}; {dispatches} recorded dispatches")


def profile_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    """Profile a module, or replay a saved recording (per-function profiles): one output path for both."""
    from sectionmark.workflows.measure import profile
    from sectionmark.workflows.recording_files import is_recording

    devices = args.device or ["local-task"]
    args.device = devices[0]
    if len(devices) > 1 and is_recording(args.vmfb):
        _write_outputs(_replayed(args, devices), args, inputs)
        return
    if len(devices) > 1:
        _check_device_outputs(args)
        result = profile(args.vmfb, _load_inputs(args.input), function=args.function or "main", devices=devices,
                         iterations=args.iterations, warmup=args.warmup, keep_profile=args.keep_profile,
                         keep_profile_inputs=inputs, timeout=args.timeout, parameters=args.parameters,
                         runs=args.runs, workers=args.workers)
        _write_outputs(result, args, inputs)
        return
    if args.roofline is not None:  # refused before the run, not after it
        from sectionmark.workflows.peak import check_device

        check_device(args.device)
    if is_recording(args.vmfb):
        result = _replayed(args)
    else:
        result = profile(
            args.vmfb, _load_inputs(args.input), function=args.function or "main", device=args.device,
            iterations=args.iterations, warmup=args.warmup, keep_profile=args.keep_profile,
            keep_profile_inputs=inputs, timeout=args.timeout, parameters=args.parameters, runs=args.runs,
            workers=args.workers, cost=not args.no_cost,
        )
    _write_outputs(result, args, inputs)


def _replayed(args: argparse.Namespace, devices: Optional[list[str]] = None) -> Any:
    """Replay a saved recording: every function's profile, or with --function that function's.

    The outputs that show one function at a time (the graph) are refused without --function before the
    replay runs. A recording of a module on several devices replays on them (or on ``devices``, the --device
    given): each function's several-device profile, whose table, --json and --csv are drawn.
    """
    from sectionmark.renderers import get
    from sectionmark.workflows.record import Recording

    if args.input:
        raise SectionmarkError("a recording replays its own inputs: drop --input")
    recording = Recording.load(args.vmfb, device=args.device, parameters=args.parameters or None, devices=devices)
    if recording.devices is not None:
        from sectionmark.renderers.replay_devices import FORMATS

        _check_device_outputs(args, FORMATS, "a replay on several devices")
    if args.function is not None and args.function not in recording.sequence:
        raise SectionmarkError(f"the recording never called {args.function!r} (it called: "
                               f"{', '.join(recording.functions)})")
    if args.function is None:
        for name in rendered_outputs(args):
            get(name).check_replays(recording.functions)
    replay = recording.profile(iterations=args.iterations, warmup=args.warmup, timeout=args.timeout,
                               keep_profile=args.keep_profile, runs=args.runs, workers=args.workers)
    return replay if args.function is None else replay.function(args.function)


def _recorded_session(args: argparse.Namespace, profile: str) -> "ProfileSession":
    """The profile of ``report`` and ``tracy``: a recorded profile joined with its map."""
    from sectionmark.workflows.measure import report

    return report(profile, args.map, calls=args.calls, warmup=args.warmup, function=args.function,
                  workers=args.workers)


def _check_device_outputs(args: argparse.Namespace, formats: Optional[Sequence[str]] = None,
                          what: str = "a profile of several devices") -> None:
    """Refuse, before any work, what ``what`` does not draw yet: the outputs not in ``formats`` (by default a
    profile of several devices' FORMATS: `sectionmark.renderers.devices`)."""
    if formats is None:
        from sectionmark.renderers.devices import FORMATS as formats

    asked = [f"--{name}" for name in rendered_outputs(args) if name not in formats]
    asked += [option for option, given in (("--sites", args.sites), ("--by", args.by)) if given]
    if asked:
        drawn = ["its table", *(f"--{name}" for name in formats if name != "table")]
        raise SectionmarkError(f"{', '.join(asked)} of {what} is not drawn yet "
                               f"({', '.join(drawn[:-1])} and {drawn[-1]} are)")


def report_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    from sectionmark.readers.tracy_live import APPROXIMATION_NOTE, is_live_capture_file
    from sectionmark.profiling.devices import DeviceProfile

    if len(args.profile) > 1:
        _report_ranks(args, inputs)
        return
    profile = args.profile[0]
    result = _recorded_session(args, profile)
    if isinstance(result, DeviceProfile):
        _check_device_outputs(args)
    _write_outputs(result, args, inputs)
    if is_live_capture_file(profile):
        _print(APPROXIMATION_NOTE)


def _report_ranks(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    """``report`` of several files (one per rank): the ranks table, and the outputs that have a ranks form;
    an option or output showing one profile is refused before any file is read."""
    from sectionmark.renderers import get, one_profile_only
    from sectionmark.workflows.ranks import report_ranks

    refused = [f"--{name}" for name in ("sites", "cpu", "memory", "span", "by") if getattr(args, name)]
    if refused:
        raise one_profile_only(refused[0])
    outputs = rendered_outputs(args)
    for name in outputs:
        get(name).check_ranks()
    ranks = report_ranks(args.profile, args.map, calls=args.calls, warmup=args.warmup, function=args.function,
                         workers=args.workers)
    written = [ranks.save(path, name, inputs=inputs) for name, path in outputs.items()]
    _print(ranks.table())
    for path in written:
        _print(f"wrote {path}")


def tracy_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    _print(f"wrote {_recorded_session(args, args.profile).save(args.output, 'tracy', inputs=inputs)}")


def tracy_stats_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    import dataclasses
    import json

    from sectionmark.renderers.table import zone_stats_text
    from sectionmark.tracy.stats import zone_stats

    rows = zone_stats(args.capture, depth=args.depth, gpu_only=args.gpu)
    rows = [row for row in rows if not args.cpu or row.kind != "gpu"][: args.top]
    written = None
    if args.json is not None:  # before stdout, as in _write_outputs
        document = {"version": 1, "zones": [dataclasses.asdict(row) for row in rows]}
        written = write_atomic(args.json, json.dumps(document, indent=1, ensure_ascii=False), inputs=inputs)
    _print(zone_stats_text(rows))
    if written is not None:
        _print(f"wrote {written}")


def peak_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    import dataclasses
    import json

    from sectionmark.workflows.peak import cache_path, peak

    measured = peak(args.device, refresh=args.refresh, workers=args.workers, section_map=args.map)
    written = None
    if args.json is not None:  # before stdout, as in _write_outputs
        written = write_atomic(args.json, json.dumps(dataclasses.asdict(measured), indent=1), inputs=inputs)
    _print(measured.text())
    _print(f"cache: {cache_path(args.device, args.workers)} (--refresh measures again)")
    if written is not None:
        _print(f"wrote {written}")


MODULE_OPTIONS = {"input": "--input", "rounds": "--rounds", "iterations": "-n", "workers": "--workers",
                  "device": "--device", "timeout": "--timeout", "parameters": "--parameters"}


def compare_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    from sectionmark.profiling.compare import SectionChange
    from sectionmark.profiling.device_compare import DeviceComparison
    from sectionmark.renderers import compare as compare_outputs, device_compare
    from sectionmark.workflows.compare import compare
    from sectionmark.workflows.interleave import is_module

    modules = [is_module(path) for path in (args.a, args.b)]
    if any(modules) and not all(modules):
        raise SectionmarkError(f"{(args.a, args.b)[modules.index(False)]} is a profile and "
                               f"{(args.a, args.b)[modules.index(True)]} a module: compare two modules (run "
                               "alternately) or two profiles")
    options = {"seed": args.seed, "min_change": args.min_change}
    if all(modules):
        _refuse_options(args, {"map": "--map"}, "two modules (they carry their section maps)")
        run_options = {name: getattr(args, name) for name in [*MODULE_OPTIONS, "warmup"]
                       if name != "input" and getattr(args, name) not in (None, [])}
        comparison = compare(args.a, args.b, _load_inputs(args.input), function=args.function, **run_options,
                             **options)
    else:
        _refuse_options(args, MODULE_OPTIONS, "two profiles (they are for two modules, run alternately)")
        comparison = compare(*_compared_profiles(args), function=args.function, **options)
    comparison.a, comparison.b = args.a, args.b
    # Two runs on several devices: device by device.
    outputs = device_compare if isinstance(comparison, DeviceComparison) else compare_outputs
    written = []
    for path, text in ((args.json, outputs.render_json), (args.csv, outputs.render_csv)):
        if path is not None:
            written.append(write_atomic(path, text(comparison).encode("utf-8"), inputs=inputs))
    _print(outputs.render_table(comparison), end="")
    for path in written:
        _print(f"wrote {path}")
    if args.fail_if_slower is not None:
        found = comparison.slower_than(args.fail_if_slower)
        slower = ([(f"device {ordinal}: ", row) for ordinal, row in found] if isinstance(comparison, DeviceComparison)
                  else [("", row) for row in found])
        if slower:
            sections = [(where, row) for where, row in slower if isinstance(row, SectionChange)]
            components = [(where, row) for where, row in slower if not isinstance(row, SectionChange)]
            counts = " and ".join(f"{len(rows)} {kind}{'s' * (len(rows) != 1)}"
                                  for rows, kind in ((sections, "section"), (components, "component")) if rows)
            listed = "; ".join(prefix + ", ".join(f"{where}{row.name} ({row.change_percent:+.1f}%)"
                                                  for where, row in rows)
                               for rows, prefix in ((sections, ""), (components, "components: ")) if rows)
            raise SectionmarkError(f"{counts} slower by more than {args.fail_if_slower:g}%: {listed}")


def _refuse_options(args: argparse.Namespace, options: dict[str, str], compared: str) -> None:
    """An option given that does not apply to what is compared is one error line, not silently ignored."""
    given = [flag for name, flag in options.items() if getattr(args, name) not in (None, [])]
    if given:
        raise SectionmarkError(f"{', '.join(given)} do{'es' * (len(given) == 1)} not apply to {compared}")


def _compared_profiles(args: argparse.Namespace) -> list:
    """The two profiles: a JSON path as is, a recorded profile (.ireeprof, .jsonl, .tracy) joined with its map."""
    from sectionmark.workflows.measure import report

    recorded = [path for path in (args.a, args.b) if not path.lower().endswith(".json")]
    if not recorded:
        _refuse_options(args, {"map": "--map", "warmup": "--warmup"},
                        "two profile JSON files (only to recorded profiles: .ireeprof, .jsonl, .tracy)")
    if args.map and len(args.map) not in (1, len(recorded)):
        raise SectionmarkError(f"give --map once, or once per recorded profile ({len(recorded)}), not {len(args.map)} "
                               "times")
    if recorded and not args.map:
        raise SectionmarkError(f"{recorded[0]} is not a profile JSON (.json): give its section map with --map")
    maps = iter(args.map * len(recorded) if len(args.map) == 1 else args.map)
    return [path if path.lower().endswith(".json")
            else report(path, next(maps), warmup=args.warmup or 0, function=args.function)
            for path in (args.a, args.b)]  # a recorded profile: calls inferred


def slice_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    from sectionmark.compiler.slicing import slice_section

    if not Path(args.mlir).is_file():
        raise SectionmarkError(f"no such MLIR file: {args.mlir}")
    section_slice = slice_section(Path(args.mlir), args.section)
    written = write_atomic(args.output, section_slice.mlir, inputs=inputs)
    _print(f"wrote {written}: {len(section_slice.inputs)} value(s) in, {len(section_slice.outputs)} out")
    if args.bench:
        from sectionmark.compiler.targets import target_for_device
        from sectionmark.workflows.slice_bench import bench_section

        target = args.target or target_for_device(args.device)
        _print(bench_section(Path(args.mlir), args.section, _load_inputs(args.input), target=target,
                            device=args.device, iterations=args.iterations, parameters=args.parameters).table())




def history_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    from sectionmark.renderers.history import render_html, render_png, render_text
    from sectionmark.section_path import decode_path, encode_path
    from sectionmark.workflows.history import HistoryStore, sections_of, test_series

    section = encode_path(decode_path(args.section)) if args.section is not None else None
    with HistoryStore(args.store, create=False) as store:
        results = store.results(args.test)  # every section: a run's sections are judged together
    if not any(section in (None, result.section) for result in results):
        wanted = " and ".join(f"{option} {value!r}" for option, value in (("--test", args.test),
                                                                         ("--section", args.section)) if value)
        raise SectionmarkError(f"{args.store}: no recorded results" + (f" for {wanted}" if wanted else ""))
    judged = {test: test_series([r for r in results if r.test == test], args.threshold)
              for test in dict.fromkeys(r.test for r in results)}
    series = [(test, name, judged[test][name]) for test, name in sections_of(results) if section in (None, name)]
    written = None
    if args.html is not None:
        written = write_atomic(args.html, render_html(series), inputs=inputs)
    elif args.png is not None:
        written = write_atomic(args.png, render_png(series), inputs=inputs)
    print(render_text(series), end="")
    if written is not None:
        print(f"wrote {written}")


def demo_command(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    from sectionmark.demo.run import run

    run(args)
