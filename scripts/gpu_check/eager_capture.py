"""Eager sections around compiled calls, captured by Tracy (gpu_check.sh; gpu_prepare.sh tests it on local-task).

    python eager_capture.py capture OUT.tracy --vmfb model.vmfb --tokens tokens.npy --framework torch
                                              [--device cuda] [--calls 10] [--reference logits.npy]

runs itself (`program`) under sectionmark's headless capture (IREE_PY_RUNTIME=tracy): sections entered
in plain Python wrap the compiled calls (sm.load adds its own `module.main` section around each), then
the demo model runs eagerly on the CPU (torch, or JAX with JAX_PLATFORMS=cpu), its own sections becoming
CPU zones. Writes OUT.json: the numerics of the compiled calls against the eager model and the carried
reference logits.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
SECTIONS = ("K2 demo", "Load", "Warmup", "Step", "Compiled call", "Argmax", "Eager model")


def eager_logits(framework: str, tokens: np.ndarray) -> np.ndarray:
    from sectionmark.demo.model_torch import CONFIGS

    config = CONFIGS["small"]
    if framework == "torch":
        import torch
        from sectionmark.demo.model_torch import GPT

        with torch.no_grad():
            return GPT(config).eval()(torch.from_numpy(tokens)).numpy()
    import jax
    from sectionmark.demo import model_jax

    params = jax.tree_util.tree_map(jax.numpy.asarray, model_jax.init_params(config))
    return np.asarray(model_jax.gpt(params, jax.numpy.asarray(tokens), n_head=config.n_head))


def program(args) -> None:
    import sectionmark as sm
    import sectionmark.tracy

    sectionmark.tracy.enable()
    tokens = np.load(args.tokens)
    result = {"framework": args.framework, "device": args.device, "calls": args.calls}
    # The framework imported outside the sections: seconds, not the demo's time.
    importlib.import_module("torch" if args.framework == "torch" else "jax")
    with sm.section("K2 demo"):
        with sm.section("Load"):
            module = sm.load(args.vmfb, device=args.device)
        with sm.section("Warmup"):
            module.main(tokens).to_host()
        picks, logits = [], None
        started = time.perf_counter()
        for _ in range(args.calls):
            with sm.section("Step"):
                with sm.section("Compiled call"):
                    logits = np.asarray(module.main(tokens).to_host())
                with sm.section("Argmax"):
                    picks.append(int(np.argmax(logits[0, -1])))
        result["compiled_call_mean_us"] = (time.perf_counter() - started) / args.calls * 1e6
        with sm.section("Eager model"):
            eager = eager_logits(args.framework, tokens)
    result["next_tokens"] = sorted(set(picks))
    result["max_abs_diff_vs_eager"] = float(np.max(np.abs(logits - eager)))
    result["eager_next_token"] = int(np.argmax(eager[0, -1]))
    if args.reference:
        reference = np.load(args.reference)
        result["max_abs_diff_vs_reference"] = float(np.max(np.abs(logits - reference)))
    result["logits_match"] = bool(np.allclose(logits, eager, rtol=1e-3, atol=1e-3))
    Path(args.result).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


def capture(args) -> int:
    from sectionmark.errors import SectionmarkError
    from sectionmark.tracy import capture_command

    result = Path(str(args.output) + ".json")
    command = [sys.executable, __file__, "program", "--vmfb", args.vmfb, "--tokens", args.tokens,
               "--framework", args.framework, "--device", args.device, "--calls", str(args.calls),
               "--repo", args.repo, "--result", str(result)]
    if args.reference:
        command += ["--reference", args.reference]
    try:
        path = capture_command(command, args.output, timeout=args.timeout)
    except SectionmarkError as error:
        print(f"eager capture: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size} bytes) and {result}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["capture", "program"])
    parser.add_argument("output", nargs="?", help="capture: the .tracy to write")
    parser.add_argument("--vmfb", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--framework", choices=["torch", "jax"], required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--reference")
    parser.add_argument("--repo", default=str(ROOT.parent))
    parser.add_argument("--result")
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    if args.mode == "program":
        program(args)
        return 0
    return capture(args)


if __name__ == "__main__":
    sys.exit(main())
