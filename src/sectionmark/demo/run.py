"""The nanoGPT demo end to end: export -> compile -> profile -> table, report.html, traces and chart.

What ``sectionmark demo`` (and ``python -m sectionmark demo``, scripts/demo.sh,
examples/nanogpt/run.py) runs, from the installed package: the models are
`sectionmark.demo.model_torch` and its JAX twin. Its options are parsed by
`sectionmark.cli` (``sectionmark demo --help``).
"""

from __future__ import annotations

import argparse
import functools
import time
import warnings
from pathlib import Path

import numpy as np

import sectionmark as sm
from sectionmark.compiler.targets import device_driver, target_for_device
from sectionmark.demo.model_torch import CONFIGS, GPT, GPTConfig, example_input
from sectionmark.errors import SectionmarkError
from sectionmark.workflows.runner import TRACED_DRIVERS


def step(message: str):
    """Print a step and, when it is done, how long it took."""

    class Step:
        def __enter__(self):
            print(f"[sectionmark demo] {message} ...", flush=True)
            self.start = time.perf_counter()

        def __exit__(self, *exc):
            if exc[0] is None:
                print(f"[sectionmark demo]   done in {time.perf_counter() - self.start:.1f} s", flush=True)

    return Step()


def export(framework: str, config: GPTConfig):
    tokens = example_input(config)
    if framework == "torch":
        return sm.torch.export(GPT(config), args=(tokens,)), tokens.numpy()
    import jax

    from sectionmark.demo import model_jax

    # Weights are closed over, so they become constants and the function takes only tokens.
    params = jax.tree_util.tree_map(jax.numpy.asarray, model_jax.init_params(config))
    forward = functools.partial(model_jax.gpt, params, n_head=config.n_head)
    tokens32 = tokens.numpy().astype(np.int32)
    return sm.jax.export(forward, tokens32), tokens32


def run(args: argparse.Namespace) -> None:
    if args.config not in CONFIGS:
        raise SectionmarkError(f"no demo config {args.config!r} (there are: {', '.join(sorted(CONFIGS))})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = CONFIGS[args.config]
    target = args.target or target_for_device(args.device)
    with step(f"exporting the {args.config} GPT ({config.n_layer} layers, {config.n_embd} wide) with {args.framework}"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported, tokens = export(args.framework, config)
        exported.save_mlir(out / "model.mlir")
        np.save(out / "tokens.npy", tokens)
        print(f"  {len(exported.sections)} sections, e.g. {' / '.join(exported.sections[-1])}")
    with step(f"compiling for {target} with section markers"):
        compiled = sm.compile(exported, target=target)
        vmfb = compiled.save(out / "model.vmfb")
    # The measurement: IREE's HAL profile, or on CUDA and HIP a Tracy capture (docs/gpu.md).
    measured = out / ("capture.tracy" if device_driver(args.device) in TRACED_DRIVERS else "run.ireeprof")
    with step(f"profiling {args.iterations} calls on {args.device}"):
        session = sm.profile(vmfb, args=(tokens,), device=args.device, iterations=args.iterations,
                             warmup=args.warmup, keep_profile=measured)
    print(session.table())
    print(session.render("components"))  # the same time by component: every block's "Self Attention" summed
    # Every output by the renderer's name (sectionmark.renderers.RENDERERS), written all at once.
    outputs = {"table": "table.txt", "json": "sections.json", "csv": "sections.csv",
               "perfetto": "run.perfetto.json", "chart": "sections.png", "tracy": "run.tracy",
               "components": "components.txt", "components-csv": "components.csv",
               "components-chart": "components.png", "kernels": "kernels.txt", "html": "report.html"}
    options = {"chart": {"title": f"nanoGPT {args.config} ({args.framework}) on {args.device}"}}
    with step(f"writing {', '.join(outputs)}"):
        for name, file_name in outputs.items():
            session.save(out / file_name, name, **options.get(name, {}))
        for graph_file in ("graph.dot", "graph.html"):
            session.save_graph(out / graph_file)
    summary = f"""sectionmark nanoGPT demo ({args.config}, {args.framework}) — files in {out}/

  report.html          open this first: section tree, a call's timeline, components, kernels, graph (offline)
  table.txt            the per-section table printed above
  components.txt       the component view printed under it (sections of one name summed over the blocks)
  components.csv, .png the component view as CSV and as a chart
  kernels.txt          one row per dispatch site: argument shapes, exact bytes, FLOPs, time, GB/s (docs/optimise.md)
  graph.dot, .html     read/write graph of the dispatches (dot -Tsvg graph.dot > graph.svg; the .html opens offline)
  sections.json        per-section statistics (JSON, docs/profile-json.md)
  sections.csv         the same as CSV (spreadsheet)
  sections.png         chart of where the time went
  run.perfetto.json    timeline: open https://ui.perfetto.dev and drop the file in
  run.tracy            timeline in Tracy 0.11.2 (protocol 72): open with that Tracy GUI version
  model.mlir           exported MLIR; ops carry loc("sectionmark:<path>")
  model.vmfb           compiled module (section map embedded)
  model.sections.json  section map (docs/section-map.md)
  {measured.name:<20} the measurement ({"Tracy capture" if measured.suffix == ".tracy" else "IREE HAL profile"}); re-report with:
                         sectionmark report {measured} --map {out}/model.vmfb --warmup {args.warmup}
  tokens.npy           the input; re-profile with:
                         sectionmark profile {out}/model.vmfb --input {out}/tokens.npy --device {args.device}
"""
    (out / "SUMMARY.txt").write_text(summary, encoding="utf-8")
    print(summary)
