"""What recording costs the program being recorded: time per decode call with and without `sm.record`.

The model: Hugging Face GPT-2 at the size of examples/nanogpt's ``small``
config (2 layers, 128 wide, 4 heads, vocabulary 512) with a fixed-size KV
cache of 64 positions (tests/helpers/hf_models.py's CachedLM and marked_gpt2: sections on every
layer), exported as ``prefill`` (8 tokens) and ``decode`` (one token) and
compiled for the CPU. The program: prefill, then ``--steps`` greedy decode
steps, the cache passed from call to call as device arrays and each next
token picked on the host, as a user's generation loop does.

Schedule: ``--rounds`` rounds, each running the loop once plain and once
inside ``with sm.record(module):`` (the order swapping every round), timing
every decode call with ``time.perf_counter_ns`` (the call returns when its
results are ready; the host argmax is outside the timed call). Printed: the
median decode call of each, the overhead as the median over rounds of the
per-round ratio of the medians (calls made within the same second, so the
machine's drift cancels), and the per-call cost of recording in µs. Goal:
overhead <= 5% of a decode call. Then one replay under the profiler, to show
what the recording is for.

    .venv/bin/python benchmarks/bench_record.py [--rounds 30] [--steps 48]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
warnings.filterwarnings("ignore")

import sectionmark as sm  # noqa: E402
from hf_models import CachedLM, marked_gpt2  # noqa: E402
from iree.turbine import aot  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

GOAL = 0.05
PROMPT, CACHE, VOCAB = 8, 64, 512


def small_gpt() -> GPT2LMHeadModel:
    return marked_gpt2(GPT2Config(vocab_size=VOCAB, n_positions=CACHE, n_embd=128, n_layer=2, n_head=4,
                                  bos_token_id=0, eos_token_id=0))


def compiled_module():
    model = small_gpt()
    cache = torch.zeros(2, 1, 4, CACHE, 32)
    builder = aot.FxProgramsBuilder(CachedLM(model))
    prompt = torch.randint(0, VOCAB, (1, PROMPT))
    with sm.torch.sections():

        @builder.export_program(name="prefill", args=(prompt, torch.arange(PROMPT), cache, cache))
        def prefill(module, input_ids, positions, keys, values):
            return module(input_ids, positions, keys, values)

        @builder.export_program(name="decode", args=(prompt[:, :1], torch.tensor([PROMPT]), cache, cache))
        def decode(module, input_ids, positions, keys, values):
            return module(input_ids, positions, keys, values)

    return sm.compile(sm.torch.export(builder), target="llvm-cpu"), prompt.numpy()


def generate(module, prompt: np.ndarray, steps: int) -> list[int]:
    """The generation loop; returns the duration of each decode call (ns)."""
    cache = np.zeros((2, 1, 4, CACHE, 32), np.float32)
    logits, keys, values = module.prefill(prompt, np.arange(PROMPT), cache, cache)
    durations = []
    for position in range(PROMPT, PROMPT + steps):
        token = np.argmax(logits.to_host()[:, -1:], axis=-1)
        start = time.perf_counter_ns()
        logits, keys, values = module.decode(token, np.array([position]), keys, values)
        durations.append(time.perf_counter_ns() - start)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=48, help=f"decode steps per loop (at most {CACHE - PROMPT})")
    args = parser.parse_args()
    steps = min(args.steps, CACHE - PROMPT)
    print("exporting and compiling the model ...", flush=True)
    compiled, prompt = compiled_module()
    module = sm.load(compiled)
    generate(module, prompt, steps)  # warm the thread pool and caches
    plain, recorded, ratios = [], [], []
    for round_ in range(args.rounds):
        order = ("plain", "recorded") if round_ % 2 == 0 else ("recorded", "plain")
        medians = {}
        for variant in order:
            if variant == "plain":
                durations = generate(module, prompt, steps)
                plain += durations
            else:
                with sm.record(module) as recording:
                    durations = generate(module, prompt, steps)
                recorded += durations
            medians[variant] = statistics.median(durations)
        ratios.append(medians["recorded"] / medians["plain"])
    overhead = statistics.median(ratios) - 1
    print(f"decode call, median of {len(plain)}: plain {statistics.median(plain) / 1e3:.1f} µs, "
          f"recording {statistics.median(recorded) / 1e3:.1f} µs")
    quartiles = statistics.quantiles(ratios, n=4)
    verdict = "ok" if overhead <= GOAL else f"above the goal {GOAL:.0%}"
    print(f"recording overhead per decode call: {overhead:+.1%} ({verdict}); per-round ratios: "
          f"quartiles {quartiles[0]:.3f} .. {quartiles[2]:.3f} over {args.rounds} rounds; "
          f"{(statistics.median(recorded) - statistics.median(plain)) / 1e3:+.1f} µs per call")
    replay = recording.profile(iterations=3, warmup=1, quiet=True)
    decode = replay.function("decode")
    print(f"replay of the last recording: prefill {replay.function('prefill').calls} calls, decode {decode.calls} "
          f"calls, {decode.total_ns / decode.calls / 1e3:.1f} µs of dispatches per decode call "
          f"(coverage error {decode.coverage_error:.4%})")


if __name__ == "__main__":
    main()
