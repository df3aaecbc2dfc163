"""The ``sectionmark`` command: compile, profile, report, tracy, tracy-stats, compare, slice, peak, history, demo.

Each command is a parser with ``set_defaults(run=..., planned_io=...)``: the
function that does the work (`sectionmark.commands`), and the one here that
names its input and output files (checked before any work). Output options of profile and report come
from the renderer registry (`sectionmark.renderers`): one ``--NAME FILE`` per
renderer. ``tracy`` is ``report --tracy`` without the table (kept for scripts).

Every failure prints one line, ``sectionmark: error: ...``. Exit status: 0
success, 1 a failure while running (bad file, tool error), 2 a usage error
(bad option or value), 3 an internal error (a bug; set SECTIONMARK_DEBUG=1
for a traceback), 130 interrupted (Ctrl-C), 128 + N ended by signal N (SIGTERM 143, SIGHUP 129: the
tools it started ended and its scratch files removed first), 141 the reader of stdout went away
(``| head``). Every output is checked before any work: never onto an input
of the command, never over a directory or device, never an empty name.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional, Sequence

from sectionmark.commands import (
    compare_command,
    compile_command,
    demo_command,
    history_command,
    peak_command,
    profile_command,
    rendered_outputs,
    report_command,
    slice_command,
    tracy_command,
    tracy_stats_command,
)
from sectionmark.errors import Interrupted, SectionmarkError, signals_raising
from sectionmark.outputs import check_output_path
from sectionmark.section_path import printable

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130
EXIT_SIGNALLED = 128  # + the signal's number (143 for SIGTERM, 129 for SIGHUP), as a shell reports a signalled command
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer cut off by `| head`
# Upper bounds on counts: far beyond any real run, small enough that a typo
# (-n 10000000000000000000000) is refused instead of running for ever.
MAX_CALLS = 1_000_000
MAX_DEPTH = 1_000
MAX_RUNS = 1_000
INPUT_TYPES = ["auto", "none", "torch", "stablehlo"]  # iree-compile --iree-input-type values sectionmark uses

EXAMPLES = {
    "compile": """examples:
  sectionmark compile model.mlir -o model.vmfb --target llvm-cpu
  sectionmark compile gpt.mlir -o gpt-cuda.vmfb --target cuda --input-type torch
  sectionmark compile model.mlir -o plain.vmfb --no-markers
  sectionmark compile split.mlir -o split.vmfb --target cuda --devices 2   # docs/multi-device.md""",
    "profile": """examples:
  sectionmark profile model.vmfb --input x.npy -n 20
  sectionmark profile model.vmfb --input x.npy --html report.html   # one page: tree, timeline, kernels, graph
  sectionmark profile model.vmfb --input x.npy --perfetto run.json --chart sections.png --tracy run.tracy
  sectionmark profile model.vmfb --input x.npy --json sections.json --csv sections.csv --sites
  sectionmark profile model.vmfb --input x.npy --table table.txt
  sectionmark profile model.vmfb --input x.npy -n 40 --runs 5 --json runs.json   # median and interval over 5 runs
  sectionmark profile model.vmfb --input x.npy --runs 5 --workers 1   # a busy 2-core machine: less run-to-run noise
  sectionmark profile model.vmfb --input x.npy --no-cost   # skip the profiler-cost rounds (10 short tool runs)
  sectionmark profile model.vmfb --input x.npy --by name --kernels kernels.txt --graph graph.svg
  sectionmark profile model-cuda.vmfb --input x.npy --device cuda --keep-profile run.tracy
  sectionmark profile split.vmfb --input x.npy --device local-task --device local-task --json devices.json   # sm.compile(devices=2)
  sectionmark profile model.vmfb --input x.npy --parameters model=model.irpa
  sectionmark profile recording/ -n 5 --warmup 1 --json replay.json   # saved by rec.save("recording")
  sectionmark profile recording/ --csv replay.csv --perfetto replay.perfetto.json   # every function in one file
  sectionmark profile recording/ --html replay.html   # one tab per function
  sectionmark profile recording/ --function decode --perfetto decode.json""",
    "report": """examples:
  sectionmark report run.ireeprof --map model.sections.json
  sectionmark report run.ireeprof --map model.vmfb --warmup 3 --html report.html
  sectionmark report run.ireeprof --map model.vmfb --warmup 3 --perfetto run.json
  sectionmark report run.ireeprof --map model.vmfb --by "*/Self Attention"
  sectionmark report run.ireeprof --map model.vmfb --cpu --workers 16   # CPU time, parallelism, utilization
  sectionmark report run.ireeprof --map model.vmfb --memory --span      # bytes, GB/s; start and end in the call
  sectionmark report run.tracy --map model-cuda.vmfb --warmup 3
  sectionmark report capture.tracy --map model.vmfb --warmup 1   # live capture (IREE_PY_RUNTIME=tracy, local-task)
  sectionmark report rank*.ireeprof --map model.vmfb --json ranks.json   # one file per rank: spread, stragglers
  sectionmark report rank0.tracy rank1.tracy --map model-cuda.vmfb --warmup 3   # ranks on several devices: per device""",
    "tracy": """examples:
  sectionmark tracy run.ireeprof --map model.sections.json -o run.tracy
  sectionmark tracy run.ireeprof --map model.vmfb --warmup 3 -o run.tracy
  (the same as: sectionmark report run.ireeprof --map model.vmfb --warmup 3 --tracy run.tracy)""",
    "compare": """examples:
  sectionmark compare before.vmfb after.vmfb --input x.npy   # 10 rounds: A and B once each, in a random order
  sectionmark compare before.vmfb after.vmfb --input x.npy --rounds 10 -n 40 --workers 1 --fail-if-slower 10
  sectionmark profile model.vmfb --input x.npy -n 30 --runs 5 --json before.json
  sectionmark profile model.vmfb --input x.npy -n 30 --runs 5 --json after.json
  sectionmark compare before.json after.json --fail-if-slower 10 --json change.json   # CI: exit 1 on a slowdown
  sectionmark compare a.ireeprof b.ireeprof --map a.vmfb --map b.vmfb --warmup 3 --csv change.csv
  sectionmark compare before.json after.json --min-change 0   # any interval excluding 1
  sectionmark profile recording/ --json replay-a.json   # a recording's replays (rec.save("recording"))
  sectionmark compare replay-a.json replay-b.json --function decode""",
    "slice": """examples:
  sectionmark slice model.mlir --section "Block 0/Self Attention" -o attn.mlir
  sectionmark slice model.mlir --section "Block 0/Self Attention" -o attn.mlir --bench --input tokens.npy
  sectionmark slice model.mlir --section "Block 0/MLP" -o mlp.mlir --bench      # random inputs
  sectionmark slice model.mlir --section "Block 0/MLP" -o mlp.mlir --bench --device vulkan   # compiled for vulkan-spirv""",
    "peak": """examples:
  sectionmark peak                      # cached after the first run
  sectionmark peak --refresh --json peak.json
  sectionmark peak --map model.vmfb     # with the model's own heaviest matmuls and copies
  sectionmark profile model.vmfb --input x.npy --roofline model.roofline.png   # sections against these peaks""",
    "demo": """examples:
  sectionmark demo                                  # small GPT, torch, results in out/
  sectionmark demo --config gpt2-small              # 12 layers, 768 wide
  sectionmark demo --framework jax --out out-jax
  sectionmark demo --device vulkan --out out-vk     # compiled for vulkan-spirv (docs/gpu.md)""",
    "history": """examples:
  pytest --sectionmark-fail '*:10%'          # records each sectionmark_profile into .sectionmark/history.sqlite
  sectionmark history                        # every recorded section across the runs, verdicts marked
  sectionmark history --section "Block 0/MLP" --html mlp.html
  sectionmark history --store ci/history.sqlite --png history.png --threshold 5""",
    "tracy-stats": """examples:
  sectionmark tracy-stats run.tracy
  sectionmark tracy-stats run.tracy --gpu --top 20
  sectionmark tracy-stats run.tracy --cpu
  sectionmark tracy-stats run.tracy --depth 0 --json top-level.json""",
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (it prints the whole usage block otherwise)."""

    commands: Optional[argparse._SubParsersAction] = None

    def error(self, message: str):
        self.exit(EXIT_USAGE, printable(f"sectionmark: error: {message} (see '{self.prog} --help')") + "\n")

    def parse_args(self, args=None, namespace=None):
        """Unknown options are reported by the command they were given to (its --help lists the right ones)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self.commands.choices.get(getattr(parsed, "command", None), self) if self.commands else self
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def whole_number_in(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number in ``[minimum, maximum]``, else a usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be between {minimum} and {maximum:,}, got {text[:40]}")
        return value

    return parse


def percent(text: str) -> float:
    """An argparse type: a percentage from 0 to 1,000,000, else a usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text[:40]!r}") from None
    if not 0 <= value <= 1e6:
        raise argparse.ArgumentTypeError(f"must be a percentage between 0 and 1,000,000, got {text[:40]}")
    return value


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    """One ``--NAME FILE`` option per renderer of `sectionmark.renderers`, plus ``--sites``."""
    from sectionmark.renderers import RENDERERS

    outputs = parser.add_argument_group("outputs (besides the table on stdout)")
    for renderer in RENDERERS.values():
        outputs.add_argument(f"--{renderer.name}", dest=renderer.name, metavar="FILE", help=renderer.summary)
    outputs.add_argument("--sites", action="store_true", help="also print the per-dispatch-site table")
    outputs.add_argument("--cpu", action="store_true",
                         help="CPU columns in the table: tile time across local-task's workers per call, parallelism, "
                         "utilization of the workers, tiles per call ('not recorded' without tile data)")
    outputs.add_argument("--memory", action="store_true",
                         help="memory columns in the table: bytes read + written per call, working set, achieved GB/s "
                         "and GFLOP/s, FLOPs per byte (from the kernel table's exact slices)")
    outputs.add_argument("--span", action="store_true",
                         help="where in the call each section runs: its median start and end offsets from the call's "
                         "start (min and max: --json, --csv, --timeline)")
    outputs.add_argument("--by", metavar="name|PATTERN",
                         help="also print the component view: sections of one name summed across blocks ('name'), "
                         "or the sections whose path matches PATTERN ('*/Self Attention')")


def _rendered_options(args: argparse.Namespace) -> dict[str, str]:
    return {f"--{name}": path for name, path in rendered_outputs(args).items()}


def _add_report_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """The arguments ``report`` and ``tracy`` share; ``several``: the profile may be several files (ranks)."""
    kinds = ".ireeprof, .jsonl (iree-profile export) or .tracy capture (GPU zones, or a live local-task run)"
    if several:
        parser.add_argument("profile", nargs="+", help=f"{kinds}; several files: one per rank (process) of the same "
                            "module, in rank order, reported together (min/median/max per section, slowest rank)")
    else:
        parser.add_argument("profile", help=kinds)
    parser.add_argument("--map", required=True, help=".sections.json, or the .vmfb that embeds it")
    parser.add_argument("--function", help="function that was profiled (default: any)")
    parser.add_argument("--calls", type=whole_number_in(1, MAX_CALLS), help="number of calls in the profile (default: inferred)")
    parser.add_argument("--warmup", type=whole_number_in(0, MAX_CALLS), default=0, help="leading calls to drop (default: 0)")


def build_parser() -> argparse.ArgumentParser:
    from sectionmark.compiler.targets import TARGET_FLAGS
    from sectionmark.profiling.compare_defaults import (DEFAULT_ITERATIONS, DEFAULT_ROUNDS, DEFAULT_WARMUP,
                                                        DRIFT_BOUND, MAX_ROUNDS, MIN_CHANGE, RUNS_MIN_CHANGE)

    parser = _Parser(
        prog="sectionmark",
        description="Named sections for IREE programs: compile with section markers, profile per section.",
        formatter_class=_formatter,
        epilog="Run 'sectionmark COMMAND --help' for a command's options and examples.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = commands

    compile_ = commands.add_parser("compile", help="compile MLIR with section markers to a .vmfb (+ section map)",
                                   description="Compile MLIR (from sm.torch.export / sm.jax.export) to a .vmfb with "
                                   "section debug groups and an embedded section map; also writes <out>.sections.json.",
                                   epilog=EXAMPLES["compile"], formatter_class=_formatter)
    compile_.set_defaults(run=compile_command, planned_io=_compile_io)
    compile_.add_argument("mlir", help="MLIR file: text (.mlir) or bytecode (.mlirbc)")
    compile_.add_argument("-o", "--output", required=True, help="output .vmfb path")
    compile_.add_argument("--target", default="llvm-cpu", choices=list(TARGET_FLAGS),
                          help="target: %(choices)s (default: %(default)s)")
    compile_.add_argument("--devices", type=whole_number_in(1, 64), default=1, metavar="N",
                          help="devices the module drives, placed by its affinities (llvm-cpu, cuda or vulkan-spirv; "
                          "profile it with one --device each: docs/multi-device.md) (default: 1)")
    compile_.add_argument("--input-type", default="auto", choices=INPUT_TYPES,
                          help="MLIR input dialects: %(choices)s (default: auto, from the MLIR)")
    compile_.add_argument("--no-markers", action="store_true", help="plain IREE compile, no section map")
    compile_.add_argument("--no-debug-groups", action="store_true", help="section map only, no HAL debug groups (always so for cuda and rocm, whose IREE 3.13 runtime "
                               "crashes on them)")
    compile_.add_argument("--iree-arg", action="append", default=[], metavar="FLAG",
                          help="extra iree-compile flag (repeatable), e.g. --iree-arg=--iree-opt-level=O3")

    profile = commands.add_parser("profile", help="run a .vmfb under IREE's profiler and report per-section times",
                                  description="Run a function of a .vmfb with iree-benchmark-module and measure it "
                                  "(CPU: HAL-native profiling; CUDA/HIP: a Tracy capture of the GPU zones), then "
                                  "attribute every dispatch to its section(s). Given a directory saved by "
                                  "rec.save() (sm.record), replay the recorded calls instead: one table per function.",
                                  epilog=EXAMPLES["profile"], formatter_class=_formatter)
    profile.set_defaults(run=profile_command, planned_io=_profile_io)
    profile.add_argument("vmfb", help="module compiled by sectionmark (its section map is embedded), "
                         "or a recording directory (rec.save)")
    profile.add_argument("--input", action="append", default=[], metavar="NPY", help="argument as a .npy file (repeat, in order)")
    profile.add_argument("--function", help="function to call (default: main); of a recording: the function whose "
                         "profile the outputs show (default: every function: text tables per function, one JSON, CSV, "
                         "trace, HTML report (a tab per function) or stacked PNG; the graph needs one function)")
    profile.add_argument("-n", "--iterations", type=whole_number_in(1, MAX_CALLS), default=20,
                         help="measured calls, or replays of a recording (default: 20)")
    profile.add_argument("--warmup", type=whole_number_in(0, MAX_CALLS), default=3,
                         help="unmeasured calls (replays) first (default: 3)")
    profile.add_argument("--runs", type=whole_number_in(1, MAX_RUNS), default=1, metavar="K",
                         help="fresh runs of the tool: per section the median busy time per call over the runs and "
                         "its interval (default: 1, run-to-run variation not measured)")
    profile.add_argument("--workers", type=whole_number_in(1, 1 << 16), metavar="N",
                         help="local-task's most worker threads (default: one per physical core); fewer than the "
                         "cores vary less between runs on a busy machine (docs/cli.md)")
    profile.add_argument("--no-cost", action="store_true",
                         help="skip measuring the profiler's own cost (paired unprofiled and profiled rounds before "
                         "the profile: 10 short runs of the tool): 0.23x the wall time on the gpt2-small demo, 0.6x on the small "
                         "one (docs/benchmarks.md)")
    profile.add_argument("--device", action="append", default=None,
                         help="IREE device: local-task (default), cuda, hip (also cuda://1 ...); local-sync is refused (docs/cli.md); "
                         "vulkan: its device-timed dispatch events (docs/gpu.md). Repeat it for a module compiled for "
                         "several devices (--device local-task --device local-task, --device vulkan --device vulkan: "
                         "docs/multi-device.md)")
    profile.add_argument("--timeout", type=whole_number_in(1, 7 * 24 * 3600), default=3600, metavar="S",
                         help="give up when the profiled tool runs longer than S seconds (default: 3600)")
    profile.add_argument("--keep-profile", metavar="FILE",
                         help="also keep the raw measurement (.ireeprof; the .tracy capture on cuda/hip)")
    profile.add_argument("--parameters", action="append", default=[], metavar="[SCOPE=]FILE",
                         help="external parameter file (.irpa, .gguf, .safetensors; repeatable), "
                         "scoped as IREE's --parameters")
    _add_outputs(profile)

    report = commands.add_parser("report", help="per-section times of a profile recorded elsewhere",
                                 description="Join a recorded .ireeprof (or its ireeperf-jsonl export), or the GPU "
                                 "zones of a .tracy capture, with a section map. Several files (one per rank of a "
                                 "data-parallel run of the same module) are read in parallel and reported together: "
                                 "per section its busy time per call across the ranks and the slowest rank (device "
                                 "by device for ranks of a run on several devices: docs/multi-device.md).",
                                 epilog=EXAMPLES["report"], formatter_class=_formatter)
    report.set_defaults(run=report_command, planned_io=_report_io)
    _add_report_arguments(report, several=True)
    report.add_argument("--workers", type=whole_number_in(1, 1 << 16), metavar="N",
                        help="local-task worker count of the recorded run, for the CPU utilization (the profile does "
                        "not record it; default: unknown, utilization not shown)")
    _add_outputs(report)

    tracy = commands.add_parser("tracy", help="write a Tracy capture of a recorded profile (report --tracy, no table)",
                                description="The same as 'sectionmark report PROFILE --map MAP --tracy OUTPUT', without "
                                "the table: replay a recorded profile as Tracy GPU-context tracks (sections enclosing "
                                "dispatches at the profiled timestamps) and save a .tracy capture.",
                                epilog=EXAMPLES["tracy"], formatter_class=_formatter)
    tracy.set_defaults(run=tracy_command, planned_io=_tracy_io, workers=None)  # a Tracy replay shows no utilization
    _add_report_arguments(tracy)
    tracy.add_argument("-o", "--output", required=True, help="output .tracy path")

    stats = commands.add_parser("tracy-stats", help="per-zone statistics of a .tracy capture",
                                description="Count, total, mean, min, max and p95 per zone name of a Tracy capture "
                                "(file version 0.11.2, as written by IREE 3.13's iree-tracy-capture).",
                                epilog=EXAMPLES["tracy-stats"], formatter_class=_formatter)
    stats.set_defaults(run=tracy_stats_command, planned_io=_tracy_stats_io)
    stats.add_argument("capture", help=".tracy file")
    tracks = stats.add_mutually_exclusive_group()
    tracks.add_argument("--gpu", action="store_true", help="only GPU-context zones (device timelines, replays)")
    tracks.add_argument("--cpu", action="store_true", help="only CPU zones (host threads)")
    stats.add_argument("--depth", type=whole_number_in(0, MAX_DEPTH), metavar="D",
                       help="only zones at nesting depth D (0: outermost sections)")
    stats.add_argument("--top", type=whole_number_in(1, MAX_CALLS), metavar="N",
                       help="show only the N zones with the largest total")
    stats.add_argument("--json", metavar="FILE", help="also write the rows as JSON")

    compare = commands.add_parser(
        "compare", help="compare two modules (run alternately) or two profiles per section and component",
        description="Per section, then per component (sections of one name summed across blocks): busy time "
        "per call in A and B, the ratio B/A, its interval and a verdict: slower/faster only when the interval lies "
        "beyond --min-change, else 'no change'. Two modules (.vmfb): run alternately, A and B once a round in a random "
        "order, the interval over the rounds' paired ratios. Two profiles of several runs each (--runs): the interval "
        "over the runs. A profile of one run: over its calls, a verdict only beyond the drift between runs "
        f"({DRIFT_BOUND:g}%), else 'within drift'. Sections in one profile only are listed as such.",
        epilog=EXAMPLES["compare"], formatter_class=_formatter)
    compare.set_defaults(run=compare_command, planned_io=_compare_io)
    compare.add_argument("a", help="the baseline: a module (.vmfb, run with --input), profile JSON (--json of "
                         "profile/report), a recording's replay JSON (--json of profile RECORDING_DIR), or a recorded "
                         ".ireeprof with --map")
    compare.add_argument("b", help="the module or profile compared with it, the same kind")
    compare.add_argument("--function", metavar="NAME",
                         help="the function compared: of the modules (default: main), of a recording's replay JSON "
                         "(profile RECORDING_DIR --json; default: its one function with dispatches) or of a recorded "
                         "profile (default: any)")
    compare.add_argument("--min-change", type=percent, metavar="PCT",
                         help=f"slower/faster only when the interval lies beyond this change (default: {MIN_CHANGE:g} "
                         f"over rounds, {RUNS_MIN_CHANGE:g} over runs, each run's whole-run factor taken out: what is left of "
                         "the drift of profiles taken apart; 0: any interval excluding 1)")
    compare.add_argument("--fail-if-slower", type=percent, metavar="PCT",
                         help="exit 1 when a section or component is judged slower by more than PCT percent "
                         "(B/A > 1 + PCT/100)")
    compare.add_argument("--seed", type=whole_number_in(0, 2**32 - 1), default=0,
                         help="seed of the rounds' order and of the bootstrap (default: 0)")
    compare.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    compare.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV")
    modules = compare.add_argument_group("two modules (run alternately)")
    modules.add_argument("--input", action="append", default=[], metavar="NPY",
                         help="argument as a .npy file (repeat, in order), the same for both")
    modules.add_argument("--rounds", type=whole_number_in(2, MAX_ROUNDS), metavar="K",
                         help=f"rounds, each one profiled run of A and one of B (default: {DEFAULT_ROUNDS})")
    modules.add_argument("-n", "--iterations", type=whole_number_in(1, MAX_CALLS), metavar="N",
                         help=f"measured calls per run (default: {DEFAULT_ITERATIONS})")
    modules.add_argument("--workers", type=whole_number_in(1, 1 << 16), metavar="N",
                         help="local-task's most worker threads (default: one per physical core)")
    modules.add_argument("--device", help="IREE device (default: local-task)")
    modules.add_argument("--timeout", type=whole_number_in(1, 7 * 24 * 3600), metavar="S",
                         help="give up when one run takes longer than S seconds (default: 3600)")
    modules.add_argument("--parameters", action="append", default=[], metavar="[SCOPE=]FILE",
                         help="external parameter file (repeatable), the same for both modules")
    modules.add_argument("--warmup", type=whole_number_in(0, MAX_CALLS), metavar="N",
                         help=f"unmeasured calls first in each run (default: {DEFAULT_WARMUP}); of recorded profiles: leading "
                         "calls to drop (default: 0)")
    recorded = compare.add_argument_group("two recorded profiles")
    recorded.add_argument("--map", action="append", default=[], metavar="MAP",
                          help="section map (.sections.json or .vmfb) of a recorded profile: once for both, or once "
                          "per .ireeprof input in order")

    slice_ = commands.add_parser(
        "slice", help="cut one section out of an exported model into its own MLIR program",
        description="Outline the ops of one section (nested sections included) into a standalone @main whose "
        "arguments are the values flowing in and whose results are the values flowing out; parameters stay "
        "globals. With --bench, also check it against the whole model on --input (random inputs of the model's shapes "
        "without it) and time it alone vs in context.",
        epilog=EXAMPLES["slice"], formatter_class=_formatter)
    slice_.set_defaults(run=slice_command, planned_io=_slice_io)
    slice_.add_argument("mlir", help="exported MLIR with sections: text (.mlir) or bytecode (.mlirbc)")
    slice_.add_argument("--section", required=True, help='section path, names joined by "/" (e.g. "Block 0/MLP")')
    slice_.add_argument("-o", "--output", required=True, help="output .mlir for the slice")
    slice_.add_argument("--bench", action="store_true", help="compile, verify and time the slice against the whole model")
    slice_.add_argument("--input", action="append", default=[], metavar="NPY",
                        help="the whole model's argument as a .npy file (repeat, in order) for --bench; without it: random inputs")
    slice_.add_argument("--device", default="local-task",
                        help="IREE device --bench runs and profiles on: local-task (default), vulkan, cuda, hip")
    slice_.add_argument("--target", choices=list(TARGET_FLAGS),
                        help="compile target for --bench (default: the device's, llvm-cpu for local-task)")
    slice_.add_argument("--parameters", action="append", default=[], metavar="[SCOPE=]FILE",
                        help="with --bench: the model's external parameter file (repeatable), scoped as IREE's --parameters")
    slice_.add_argument("-n", "--iterations", type=whole_number_in(1, MAX_CALLS), default=10,
                        help="measured calls per profile with --bench (default: 10)")

    peak = commands.add_parser(
        "peak", help="measure the device's peak memory bandwidth and FLOP/s (for --roofline)",
        description="Profile benchmark kernels compiled with IREE (f32 x + x over 64 MiB down to 32 KiB; f32 matmuls "
        "of 512x512x512, 256x256x256 and 64x64x256; with --map, the module's own heaviest matmuls and copies) on "
        "local-task, each in rounds of calls until its fastest dispatch stops improving; the roofs are the best "
        "GB/s and GFLOP/s of any kernel. Cached per host, device, worker count and IREE version ($XDG_CACHE_HOME or "
        "~/.cache, sectionmark/peak-HOST-DEVICE-Nw-ireeVERSION.json) with the date and load average of the measure.",
        epilog=EXAMPLES["peak"], formatter_class=_formatter)
    peak.set_defaults(run=peak_command, planned_io=_peak_io)
    peak.add_argument("--device", default="local-task", help="IREE device: local-task (the one sectionmark profiles "
                      "on CPU; the default)")
    peak.add_argument("--workers", type=whole_number_in(1, 1 << 16), metavar="N",
                      help="local-task's most worker threads, as for profile (default: one per physical core)")
    peak.add_argument("--map", metavar="MAP", help="a module (.vmfb) or section map (.sections.json): its heaviest "
                      "matmuls and copies are measured too (always measures)")
    peak.add_argument("--refresh", action="store_true", help="measure again even when a cached result exists")
    peak.add_argument("--json", metavar="FILE", help="also write the peaks as JSON")

    history = commands.add_parser(
        "history", help="each recorded section's time across the runs of the pytest plugin, with intervals",
        description="Per recorded test and section (the sectionmark_profile fixture of the pytest plugin): each run's "
        "median busy time per call over its fresh runs, the interval of that median, and its verdict against the "
        "runs before it (slower only when its interval lies above theirs by more than --threshold); runs whose "
        "verdict changed are marked.", epilog=EXAMPLES["history"], formatter_class=_formatter)
    history.set_defaults(run=history_command, planned_io=_history_io)
    history.add_argument("--store", default=".sectionmark/history.sqlite",
                         help="the history store (default: .sectionmark/history.sqlite)")
    history.add_argument("--section", metavar="PATH", help='only this section, names joined by "/" (e.g. "Block 0/MLP")')
    history.add_argument("--test", metavar="NODEID", help="only this recorded test (its pytest node id)")
    history.add_argument("--threshold", type=percent, default=10.0, metavar="PCT",
                         help="a run is slower when its interval lies above its history's by more than this (default: 10)")
    plots = history.add_mutually_exclusive_group()
    plots.add_argument("--html", metavar="FILE", help="also write the plots as one offline HTML page (SVG)")
    plots.add_argument("--png", metavar="FILE", help="also write the plots as a PNG (needs matplotlib)")

    demo = commands.add_parser(
        "demo", help="the nanoGPT demo: export, compile, profile; table, report.html, traces and chart in --out",
        description="Export a small nanoGPT (random weights, no download) with its sections, compile it with section "
        "markers, profile it and write every output into --out (report.html first: SUMMARY.txt lists them). The "
        "model ships with sectionmark (sectionmark.demo): no source tree needed.",
        epilog=EXAMPLES["demo"], formatter_class=_formatter)
    demo.set_defaults(run=demo_command, planned_io=lambda args: ([], {}))
    demo.add_argument("--config", default="small", help="model size: small (default) or gpt2-small")
    demo.add_argument("--framework", choices=["torch", "jax"], default="torch", help="exporter (default: torch)")
    demo.add_argument("--out", default="out", help="output directory (default: out)")
    demo.add_argument("--device", default="local-task",
                      help="IREE device to profile on: local-task, vulkan, cuda, hip, ... (default: local-task)")
    demo.add_argument("--target", choices=list(TARGET_FLAGS),
                      help="compile target (default: the device's: llvm-cpu, vulkan-spirv, cuda or rocm)")
    demo.add_argument("-n", "--iterations", type=whole_number_in(1, MAX_CALLS), default=20,
                      help="profiled calls (default: 20)")
    demo.add_argument("--warmup", type=whole_number_in(0, MAX_CALLS), default=3,
                      help="unprofiled calls first (default: 3)")
    return parser


# ---------------------------------------------------------------------- inputs and outputs of each command
# Each returns the command's input files and its output files by the option that names them.

PlannedIO = tuple[list[str], dict[str, Optional[str]]]


def _module_inputs(path: str) -> list[str]:
    """A module or map given on the command line, with the sidecar map read beside a .vmfb."""
    from sectionmark.artifacts import sidecar_path

    return [path] if path.endswith(".json") else [path, str(sidecar_path(path))]


def _compile_io(args: argparse.Namespace) -> PlannedIO:
    from sectionmark.artifacts import sidecar_path

    outputs = {"-o": args.output}
    if not args.no_markers:
        outputs["-o (its section map)"] = str(sidecar_path(args.output))
    return [args.mlir], outputs


def _slice_io(args: argparse.Namespace) -> PlannedIO:
    return [args.mlir, *args.input], {"-o": args.output}


def _profile_io(args: argparse.Namespace) -> PlannedIO:
    from sectionmark.workflows.recording_files import is_recording, recording_files

    module_inputs = [args.vmfb, *recording_files(args.vmfb)] if is_recording(args.vmfb) else _module_inputs(args.vmfb)
    return [*module_inputs, *args.input], {**_rendered_options(args), "--keep-profile": args.keep_profile}


def _report_io(args: argparse.Namespace) -> PlannedIO:
    return [*args.profile, *_module_inputs(args.map)], _rendered_options(args)


def _tracy_io(args: argparse.Namespace) -> PlannedIO:
    return [args.profile, *_module_inputs(args.map)], {"-o": args.output}


def _compare_io(args: argparse.Namespace) -> PlannedIO:
    maps = [path for map_path in args.map for path in _module_inputs(map_path)]
    modules = [path for source in (args.a, args.b) if source.lower().endswith(".vmfb")
               for path in _module_inputs(source)]
    return [args.a, args.b, *modules, *maps, *args.input], {"--json": args.json, "--csv": args.csv}


def _peak_io(args: argparse.Namespace) -> PlannedIO:
    return _module_inputs(args.map) if args.map else [], {"--json": args.json}


def _history_io(args: argparse.Namespace) -> PlannedIO:
    return [args.store], {"--html": args.html, "--png": args.png}


def _tracy_stats_io(args: argparse.Namespace) -> PlannedIO:
    return [args.capture], {"--json": args.json}


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output that would destroy something or cannot be written.

    `sectionmark.outputs` refuses empty names, directories, device nodes,
    unwritable directories and the command's own inputs, and the renderers a
    graph not named .dot, .svg or .html; here, in addition, two options
    naming one file.
    """
    from sectionmark.renderers import RENDERERS, check_path

    inputs, outputs = args.planned_io(args)
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        renderer = RENDERERS.get(option.removeprefix("--"))
        target = check_path(renderer, path, inputs) if renderer is not None else check_output_path(path, inputs)
        real = os.path.realpath(target)
        if real in seen:
            raise SectionmarkError(f"{seen[real]} and {option} both name {path}")
        seen[real] = option


def _run(args: argparse.Namespace) -> None:
    check_outputs(args)
    inputs, _outputs = args.planned_io(args)
    args.run(args, inputs)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _error_line(line: str) -> None:
    """One line on stderr, its control characters escaped: a name in a message must not rewrite the terminal."""
    print(printable(line), file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; returns the exit status (usage errors exit 2 from argparse)."""
    try:
        with signals_raising():  # its finally blocks end the tools it started and remove its scratch files
            _run(build_parser().parse_args(argv))
    except SectionmarkError as error:
        _error_line(f"sectionmark: error: {error}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("sectionmark: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Interrupted as interrupted:  # SIGTERM, SIGHUP: child processes ended and scratch files removed on the way
        print(f"sectionmark: {interrupted}", file=sys.stderr)
        return EXIT_SIGNALLED + interrupted.signum
    except BrokenPipeError:  # `sectionmark ... | head`: the reader has all it wanted
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as error:
        if os.environ.get("SECTIONMARK_DEBUG"):
            raise
        _error_line(f"sectionmark: error: {error.strerror or error}: {error.filename or ''}".rstrip(": "))
        return EXIT_FAILURE
    except Exception as error:  # a bug: still one line, traceback on request
        if os.environ.get("SECTIONMARK_DEBUG"):
            raise
        _error_line(f"sectionmark: internal error: {type(error).__name__}: {error} (set SECTIONMARK_DEBUG=1 for a "
                    "traceback)")
        return EXIT_INTERNAL
    return 0
