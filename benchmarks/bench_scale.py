"""Models of real size: sectionmark's export and compile vs plain iree-turbine + iree.compiler.

Two GPT-shaped models with random weights (no downloads), each exported and
compiled for llvm-cpu by both pipelines, every measurement in a fresh
subprocess (with Python's bytecode cache, as an installed package has it, and
glibc's mmap threshold fixed, see MALLOC_SETTINGS), pipelines alternating:

* ``gpt2-small``: sectionmark.demo ``gpt2-small`` (12 layers, width 768,
  vocabulary 50257, 163M float32 parameters), weights in the module, as
  ``aot.export`` puts them by default;
* ``gpt-1b``: 16 layers, width 2048 (1.0B float16 parameters, 2 GB), weights
  external (``aot.externalize_module_parameters``), written once to an .irpa
  with ``aot.save_module_parameters``; the sectionmark run then loads the
  module with that .irpa and calls it once.

Plain: ``aot.export(model)`` of the model without sections, then
``ExportOutput.compile`` with sectionmark's llvm-cpu flags set on its
session. Sectionmark: ``sm.torch.export`` of the marked model, then
``sm.compile``. Printed per model: median export time, compile time (wall
and CPU time of the process, all threads: on a shared machine CPU time is
the steadier one) and peak RSS (max resident set of the process after
export, and at the end) of each, their ratios (goal: each <= 1.05; the
median of the ratios of the two runs of each round, which cancels slow
changes in the machine's load; the pipeline that runs first swaps every
round), and the section map's size.

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--repeats 3] [--models gpt2-small,gpt-1b]

``--quick``: one run per pipeline and model, and no call of gpt-1b.
``--work DIR`` keeps the generated .irpa there for later runs (default: a
temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sectionmark.demo.model_torch import CONFIGS, GPTConfig

PIPELINES = ("plain", "sectionmark")
RATIO_GOAL = 1.05


@dataclass(frozen=True)
class ModelSpec:
    config: GPTConfig
    dtype: str  # a torch dtype name
    external: bool  # weights in an .irpa instead of the module


MODELS = {
    "gpt2-small": ModelSpec(CONFIGS["gpt2-small"], "float32", external=False),
    "gpt-1b": ModelSpec(
        GPTConfig(vocab_size=50257, block_size=1024, n_layer=16, n_head=16, n_embd=2048, seq_len=16),
        "float16", external=True,
    ),
}


def _build(spec: ModelSpec, marked: bool):
    """The model with seeded random weights in ``spec.dtype``, and its example tokens."""
    import torch
    from sectionmark.demo.model_torch import GPT, example_input

    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, spec.dtype))  # weights made in their dtype: no float32 copy
    try:
        model = GPT(spec.config, marked=marked).eval()
    finally:
        torch.set_default_dtype(default)
    if spec.external:
        from iree.turbine import aot

        aot.externalize_module_parameters(model)
    return model, example_input(spec.config)


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(model_name: str, pipeline: str, work: Path, call: bool) -> dict:
    """One export and compile (in this fresh process): seconds, peak RSS, sizes; ``call``: also run it once."""
    import time
    import warnings

    import torch

    spec = MODELS[model_name]
    with torch.no_grad():
        model, tokens = _build(spec, marked=pipeline == "sectionmark")
    result = {"parameters": sum(p.numel() for p in model.parameters()), "rss_model_mib": _peak_rss_mib()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start, start_cpu = time.perf_counter(), time.process_time()
        if pipeline == "sectionmark":
            import sectionmark as sm

            exported = sm.torch.export(model, args=(tokens,))
        else:
            from iree.turbine import aot

            exported = aot.export(model, args=(tokens,))
        result["export_s"], result["export_cpu_s"] = time.perf_counter() - start, time.process_time() - start_cpu
        result["rss_export_mib"] = _peak_rss_mib()
        start, start_cpu = time.perf_counter(), time.process_time()
        if pipeline == "sectionmark":
            compiled = sm.compile(exported, target="llvm-cpu")
            vmfb = compiled.vmfb
        else:
            from sectionmark.compiler.targets import target_flags

            exported.session.set_flags(*target_flags("llvm-cpu"))
            vmfb = bytes(exported.compile(save_to=None, target_backends=None).map_memory())
        result["compile_s"], result["compile_cpu_s"] = time.perf_counter() - start, time.process_time() - start_cpu
    result["rss_end_mib"] = _peak_rss_mib()
    result["vmfb_bytes"] = len(vmfb)
    if pipeline == "sectionmark":
        section_map = compiled.section_map
        result["map_json_bytes"] = len(section_map.dumps().encode("utf-8"))
        result["sections"], result["sites"] = len(section_map.sections), len(section_map.sites)
        result["reached"] = len(section_map.reached)
        if call and spec.external:
            result["call_s"] = _call_once(compiled, tokens, work / f"{model_name}.irpa", spec.config.vocab_size)
    return result


def _call_once(compiled, tokens, irpa: Path, vocab_size: int) -> float:
    """Load the module with its .irpa and call it once (wall seconds): the parameters really serve it."""
    import time

    import sectionmark as sm

    module = sm.load(compiled, parameters=f"model={irpa}")  # "model": turbine's scope when none is given
    start = time.perf_counter()
    logits = module.main(tokens.numpy()).to_host()
    seconds = time.perf_counter() - start
    if logits.shape[-1] != vocab_size or not (logits == logits).all():
        raise SystemExit(f"the call gave logits of shape {logits.shape}, or NaNs")
    return seconds


def write_parameters(model_name: str, work: Path) -> dict:
    """Generate the model's random weights into ``<work>/<model>.irpa`` with turbine's API."""
    import time

    import torch
    from iree.turbine import aot

    with torch.no_grad():
        model, _ = _build(MODELS[model_name], marked=True)
    start = time.perf_counter()
    aot.save_module_parameters(work / f"{model_name}.irpa", model)
    return {"irpa_bytes": (work / f"{model_name}.irpa").stat().st_size, "write_s": time.perf_counter() - start}


# glibc's malloc raises its mmap threshold each time a large mmapped block is freed, so whether the
# export's large temporaries are returned to the system depends on the order of frees: the 1B export
# ran in two modes in both pipelines (peak RSS 4968 or ~5680 MiB, export 6.0 or ~8.3 s), which made its
# ratios 0.8 or 1.3 by chance. A fixed threshold (glibc's default, 128 KiB) gives one mode (4728 MiB).
MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _subprocess(*arguments: str) -> dict:
    # Python's bytecode cache on, as an installed package has it: with PYTHONDONTWRITEBYTECODE set (as on
    # some CI machines) sectionmark's own modules would be compiled from source in every run, while
    # iree-turbine's and torch's come precompiled from site-packages.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    environment.update(MALLOC_SETTINGS)
    result = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True, env=environment)
    if result.returncode != 0:
        raise SystemExit(f"bench_scale child {' '.join(arguments)} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def report(model_name: str, runs: dict[str, list[dict]], parameters: dict | None) -> None:
    plain, ours = runs["plain"], runs["sectionmark"]
    spec = MODELS[model_name]
    config = spec.config
    weights = "external (.irpa)" if spec.external else "in the module"
    print(f"\n{model_name}: {config.n_layer} layers, width {config.n_embd}, {ours[0]['parameters'] / 1e6:.0f}M "
          f"{spec.dtype} parameters, weights {weights}; {config.seq_len} tokens; median of {len(ours)} run(s) each, "
          "ratio: median over the rounds' (plain, sectionmark) pairs, order swapping every round")
    if parameters is not None:
        made = f"written in {parameters['write_s']:.1f} s" if "write_s" in parameters else "reused from --work"
        print(f"  .irpa: {parameters['irpa_bytes'] / 2**30:.2f} GiB, {made}")
    rows = [("export time", "export_s", "s"), ("export CPU time", "export_cpu_s", "s"),
            ("compile time", "compile_s", "s"), ("compile CPU time", "compile_cpu_s", "s"),
            ("peak RSS after export", "rss_export_mib", "MiB"), ("peak RSS at the end", "rss_end_mib", "MiB")]
    for label, key, unit in rows:
        plain_value, our_value = _median(plain, key), _median(ours, key)
        ratios = [mine[key] / theirs[key] for mine, theirs in zip(ours, plain)]
        ratio = statistics.median(ratios)
        verdict = "ok" if ratio <= RATIO_GOAL else f"above the goal {RATIO_GOAL}"
        print(f"  {label:<22} plain {plain_value:7.1f} {unit:<3}  sectionmark {our_value:7.1f} {unit:<3}  "
              f"ratio {ratio:.3f} ({verdict}; pairs: {' '.join(f'{value:.3f}' for value in ratios)})")
    first = ours[0]
    print(f"  section map: {first['map_json_bytes'] / 1024:.0f} KiB of JSON, {first['sections']} sections "
          f"({first['reached']} reached dispatches), {first['sites']} dispatch sites; .vmfb "
          f"{first['vmfb_bytes'] / 1024:.0f} KiB vs plain {plain[0]['vmfb_bytes'] / 1024:.0f} KiB")
    calls = [run["call_s"] for run in ours if "call_s" in run]
    if calls:
        print(f"  one call with the .irpa: {statistics.median(calls):.1f} s")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # --child MODEL irpa|plain|sectionmark WORK [--call]
        model_name, what, work = sys.argv[2], sys.argv[3], Path(sys.argv[4])
        if what == "irpa":
            result = write_parameters(model_name, work)
        else:
            result = measure(model_name, what, work, call="--call" in sys.argv[5:])
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per pipeline and model; no call of gpt-1b")
    parser.add_argument("--repeats", type=int, default=3, help="runs per pipeline and model (default: 3)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--work", type=Path, help="directory for the .irpa files (default: a temporary one)")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    models = args.models.split(",")
    unknown = [name for name in models if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        call = [] if args.quick else ["--call"]
        for model_name in models:
            parameters = None
            if MODELS[model_name].external:
                irpa = work / f"{model_name}.irpa"
                if irpa.exists():
                    parameters = {"irpa_bytes": irpa.stat().st_size}
                else:
                    parameters = _subprocess("--child", model_name, "irpa", str(work))
            runs: dict[str, list[dict]] = {pipeline: [] for pipeline in PIPELINES}
            for round_ in range(repeats):
                # Which pipeline runs first swaps every round (ABBA): a machine that is slower, or faster, for
                # the second process of a pair does not favour either pipeline.
                for pipeline in PIPELINES if round_ % 2 == 0 else reversed(PIPELINES):
                    runs[pipeline].append(_subprocess("--child", model_name, pipeline, str(work), *call))
                    print(f"  {model_name} round {round_ + 1}/{repeats}: {pipeline} done", file=sys.stderr, flush=True)
            report(model_name, runs, parameters)


if __name__ == "__main__":
    main()
