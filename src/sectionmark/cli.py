"""The ``sectionmark`` command: compile, profile, report, tracy, tracy-stats.

Every failure the user can fix prints one line, ``sectionmark: error: ...``,
and exits with status 2 (set SECTIONMARK_DEBUG=1 for a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from sectionmark.errors import SectionmarkError

EXAMPLES = {
    "compile": """examples:
  sectionmark compile model.mlir -o model.vmfb --target llvm-cpu
  sectionmark compile gpt.mlir -o gpt-cuda.vmfb --target cuda --input-type torch
  sectionmark compile model.mlir -o plain.vmfb --no-markers""",
    "profile": """examples:
  sectionmark profile model.vmfb --input x.npy -n 20
  sectionmark profile model.vmfb --input x.npy --perfetto run.json --chart sections.png --tracy run.tracy
  sectionmark profile model.vmfb --input x.npy --json sections.json --csv sections.csv --sites
  sectionmark profile model.vmfb --input x.npy --parameters model=model.irpa""",
    "report": """examples:
  sectionmark report run.ireeprof --map model.sections.json
  sectionmark report run.ireeprof --map model.vmfb --warmup 3 --perfetto run.json""",
    "tracy": """examples:
  sectionmark tracy run.ireeprof --map model.sections.json -o run.tracy""",
    "tracy-stats": """examples:
  sectionmark tracy-stats run.tracy
  sectionmark tracy-stats run.tracy --gpu --top 20
  sectionmark tracy-stats run.tracy --depth 0 --json top-level.json""",
}


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    outputs = parser.add_argument_group("outputs (besides the table on stdout)")
    outputs.add_argument("--json", metavar="FILE", help="per-section statistics as versioned JSON")
    outputs.add_argument("--csv", metavar="FILE", help="per-section statistics as CSV")
    outputs.add_argument("--perfetto", metavar="FILE", help="Chrome/Perfetto JSON trace (open in ui.perfetto.dev)")
    outputs.add_argument("--tracy", metavar="FILE", help="Tracy capture (.tracy) of the profiled timeline")
    outputs.add_argument("--chart", metavar="FILE", help="PNG chart of the section breakdown")
    outputs.add_argument("--sites", action="store_true", help="also print the per-dispatch-site table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sectionmark",
        description="Named sections for IREE programs: compile with section markers, profile per section.",
        formatter_class=_formatter,
        epilog="Run 'sectionmark COMMAND --help' for a command's options and examples.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    compile_ = commands.add_parser("compile", help="compile MLIR with section markers to a .vmfb (+ section map)",
                                   description="Compile MLIR (from sm.torch.export / sm.jax.export) to a .vmfb with "
                                   "section debug groups and an embedded section map; also writes <out>.sections.json.",
                                   epilog=EXAMPLES["compile"], formatter_class=_formatter)
    compile_.add_argument("mlir", help="MLIR file: text (.mlir) or bytecode (.mlirbc)")
    compile_.add_argument("-o", "--output", required=True, help="output .vmfb path")
    compile_.add_argument("--target", default="llvm-cpu", help="llvm-cpu (default), cuda, rocm or vulkan-spirv")
    compile_.add_argument("--input-type", default="auto", help="torch, stablehlo or auto (default: from the MLIR)")
    compile_.add_argument("--no-markers", action="store_true", help="plain IREE compile, no section map")
    compile_.add_argument("--no-debug-groups", action="store_true", help="section map only, no HAL debug groups")
    compile_.add_argument("--iree-arg", action="append", default=[], metavar="FLAG",
                          help="extra iree-compile flag (repeatable), e.g. --iree-arg=--iree-opt-level=O3")

    profile = commands.add_parser("profile", help="run a .vmfb under IREE's profiler and report per-section times",
                                  description="Run a function of a .vmfb with iree-benchmark-module and HAL-native "
                                  "profiling, then attribute every dispatch to its section(s).",
                                  epilog=EXAMPLES["profile"], formatter_class=_formatter)
    profile.add_argument("vmfb", help="module compiled by sectionmark (its section map is embedded)")
    profile.add_argument("--input", action="append", default=[], metavar="NPY", help="argument as a .npy file (repeat, in order)")
    profile.add_argument("--function", default="main", help="function to call (default: main)")
    profile.add_argument("-n", "--iterations", type=int, default=20, help="measured calls (default: 20)")
    profile.add_argument("--warmup", type=int, default=3, help="unmeasured calls first (default: 3)")
    profile.add_argument("--device", default="local-task", help="IREE device (default: local-task)")
    profile.add_argument("--keep-profile", metavar="FILE", help="also keep the raw .ireeprof")
    profile.add_argument("--parameters", action="append", default=[], metavar="[SCOPE=]FILE",
                         help="external parameter file (.irpa, .gguf, .safetensors; repeatable), "
                         "scoped as IREE's --parameters")
    _add_outputs(profile)

    report = commands.add_parser("report", help="per-section times of a profile recorded elsewhere",
                                 description="Join a recorded .ireeprof (or its ireeperf-jsonl export) with a section map.",
                                 epilog=EXAMPLES["report"], formatter_class=_formatter)
    report.add_argument("profile", help=".ireeprof (or .jsonl from iree-profile export)")
    report.add_argument("--map", required=True, help=".sections.json, or the .vmfb that embeds it")
    report.add_argument("--function", help="function that was profiled (default: any)")
    report.add_argument("--calls", type=int, help="number of calls in the profile (default: inferred)")
    report.add_argument("--warmup", type=int, default=0, help="leading calls to drop (default: 0)")
    _add_outputs(report)

    tracy = commands.add_parser("tracy", help="write a Tracy capture of a recorded profile",
                                description="Replay a recorded profile as Tracy GPU-context tracks (sections enclosing "
                                "dispatches at the profiled timestamps) and save a .tracy capture.",
                                epilog=EXAMPLES["tracy"], formatter_class=_formatter)
    tracy.add_argument("profile", help=".ireeprof (or .jsonl)")
    tracy.add_argument("--map", required=True, help=".sections.json, or the .vmfb that embeds it")
    tracy.add_argument("-o", "--output", required=True, help="output .tracy path")
    tracy.add_argument("--warmup", type=int, default=0, help="leading calls to drop (default: 0)")

    stats = commands.add_parser("tracy-stats", help="per-zone statistics of a .tracy capture",
                                description="Count, total, mean, min, max and p95 per zone name of a Tracy capture "
                                "(file version 0.11.2, as written by IREE 3.13's iree-tracy-capture).",
                                epilog=EXAMPLES["tracy-stats"], formatter_class=_formatter)
    stats.add_argument("capture", help=".tracy file")
    stats.add_argument("--gpu", action="store_true", help="only GPU-context zones (device timelines, replays)")
    stats.add_argument("--depth", type=int, metavar="D", help="only zones at nesting depth D (0: outermost sections)")
    stats.add_argument("--top", type=int, metavar="N", help="show only the N zones with the largest total")
    stats.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    return parser


def _positive(value: int, option: str) -> int:
    if value < 0:
        raise SectionmarkError(f"{option} must be >= 0, got {value}")
    return value


def _emit_outputs(session, args: argparse.Namespace) -> None:
    from sectionmark.renderers import chart, csv_out, json_out, perfetto, tracy_out

    print(session.table())
    if args.sites:
        from sectionmark.renderers.table import render_sites_text

        print(render_sites_text(session))
    renderers = [(args.json, json_out), (args.csv, csv_out), (args.perfetto, perfetto), (args.chart, chart),
                 (args.tracy, tracy_out)]
    for path, renderer in renderers:
        if path:
            print(f"wrote {renderer.save(session, path)}")


def _load_inputs(paths: Sequence[str]) -> list:
    import numpy as np

    arrays = []
    for path in paths:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as error:
            raise SectionmarkError(f"cannot read input {path}: {error}") from None
    return arrays


def _run(args: argparse.Namespace) -> None:
    if args.command == "compile":
        from sectionmark.compiler import compile

        source = Path(args.mlir)
        if not source.is_file():
            raise SectionmarkError(f"no such MLIR file: {source}")
        compiled = compile(
            source, target=args.target, extra_args=args.iree_arg, markers=not args.no_markers,
            debug_groups=not args.no_debug_groups,
            input_type=None if args.input_type == "auto" else args.input_type,
        )
        written = compiled.save(args.output)
        print(f"wrote {written}")
        if compiled.section_map is not None:
            dispatches = sum(c.op == "dispatch" for b in compiled.section_map.command_buffers for c in b.commands)
            print(f"section map: {compiled.sections_summary}; {dispatches} recorded dispatches")
    elif args.command == "profile":
        from sectionmark.profiling import profile

        session = profile(
            args.vmfb, _load_inputs(args.input), function=args.function, device=args.device,
            iterations=_positive(args.iterations, "--iterations"), warmup=_positive(args.warmup, "--warmup"),
            keep_profile=args.keep_profile, parameters=args.parameters,
        )
        _emit_outputs(session, args)
    elif args.command == "report":
        from sectionmark.profiling import report

        session = report(args.profile, args.map, calls=args.calls, warmup=_positive(args.warmup, "--warmup"),
                         function=args.function)
        _emit_outputs(session, args)
    elif args.command == "tracy":
        from sectionmark.profiling import report
        from sectionmark.renderers import tracy_out

        session = report(args.profile, args.map, warmup=_positive(args.warmup, "--warmup"))
        print(f"wrote {tracy_out.save(session, args.output)}")
    elif args.command == "tracy-stats":
        import dataclasses
        import json

        from sectionmark.renderers.table import zone_stats_text
        from sectionmark.tracy.stats import zone_stats

        rows = zone_stats(args.capture, depth=args.depth, gpu_only=args.gpu)[: args.top]
        print(zone_stats_text(rows))
        if args.json:
            document = {"version": 1, "zones": [dataclasses.asdict(row) for row in rows]}
            Path(args.json).write_text(json.dumps(document, indent=1, ensure_ascii=False), encoding="utf-8")
            print(f"wrote {args.json}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _run(args)
    except SectionmarkError as error:
        print(f"sectionmark: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sectionmark: interrupted", file=sys.stderr)
        return 130
    except OSError as error:
        if os.environ.get("SECTIONMARK_DEBUG"):
            raise
        print(f"sectionmark: error: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except Exception as error:  # a bug: still one line, traceback on request
        if os.environ.get("SECTIONMARK_DEBUG"):
            raise
        print(f"sectionmark: internal error: {type(error).__name__}: {error} (set SECTIONMARK_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 3
    return 0
