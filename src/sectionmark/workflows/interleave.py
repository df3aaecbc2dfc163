"""Two modules compared by running them alternately: drift between runs hits both.

A profile of A now and one of B later differ by whatever changed on the
machine in between (another process, CPU frequency, caches), and nothing in
either profile can tell that drift from a change of the module. Here each
round profiles A once and B once (`sectionmark.profiling.profile`, one fresh
run of the tool each), in an order drawn per round from a seeded generator so
that neither module always runs first; the K runs of each module become one
session with per-round values (`combine_runs`), and the comparison judges the
paired per-round ratios (`compare_sessions(..., paired=True)`: basis "rounds").
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.parameters import Parameters
from sectionmark.workflows.measure import profile
from sectionmark.profiling.compare import CONFIDENCE, RESAMPLES, SEED, Comparison, compare_sessions
from sectionmark.profiling.compare_defaults import DEFAULT_ITERATIONS, DEFAULT_ROUNDS, DEFAULT_WARMUP, MAX_ROUNDS
from sectionmark.workflows.runner import DEFAULT_TIMEOUT_S
from sectionmark.profiling.runs import combine_runs
from sectionmark.profiling.session import ProfileSession


def is_module(source: Any) -> bool:
    """A compiled program (``sm.compile``'s result) or a path to a .vmfb: something `compare_modules` can run."""
    return hasattr(source, "vmfb") or (isinstance(source, (str, Path)) and str(source).lower().endswith(".vmfb"))


def compare_modules(
    a: Union[Any, str, Path],
    b: Union[Any, str, Path],
    args: Sequence[Any] = (),
    *,
    function: str = "main",
    device: str = "local-task",
    rounds: int = DEFAULT_ROUNDS,
    iterations: int = DEFAULT_ITERATIONS,
    warmup: int = DEFAULT_WARMUP,
    workers: Optional[int] = None,
    parameters: Parameters = None,
    timeout: Optional[float] = DEFAULT_TIMEOUT_S,
    labels: Sequence[str] = ("A", "B"),
    quiet: bool = False,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    min_change: Optional[float] = None,
) -> Comparison:
    """Profile ``a`` and ``b`` (compiled programs or .vmfb paths) alternately for ``rounds`` rounds of one run of
    ``iterations`` calls each (after ``warmup``), with the same ``args``, and compare them round by round.

    ``seed`` draws each round's order (and seeds the rest of the comparison);
    one line per round on stderr unless ``quiet``. The other options are
    `sectionmark.profiling.profile`'s, the same for both modules.
    """
    sessions = interleaved_sessions(a, b, args, function=function, device=device, rounds=rounds,
                                    iterations=iterations, warmup=warmup, workers=workers, parameters=parameters,
                                    timeout=timeout, quiet=quiet, seed=seed)
    comparison = compare_sessions(*sessions, labels=labels, resamples=resamples, confidence=confidence, seed=seed,
                                  min_change=min_change, paired=True)
    comparison.rounds, comparison.calls_per_round = rounds, iterations
    return comparison


def interleaved_sessions(a: Union[Any, str, Path], b: Union[Any, str, Path], args: Sequence[Any] = (), *,
                         function: str = "main", device: str = "local-task", rounds: int = DEFAULT_ROUNDS,
                         iterations: int = DEFAULT_ITERATIONS, warmup: int = DEFAULT_WARMUP,
                         workers: Optional[int] = None, parameters: Parameters = None,
                         timeout: Optional[float] = DEFAULT_TIMEOUT_S, quiet: bool = False,
                         seed: int = SEED) -> tuple[ProfileSession, ProfileSession]:
    """The rounds of `compare_modules` (its options), before they are compared: one session of A's runs and one of
    B's, run i of each from round i (`compare_sessions(..., paired=True)` judges them)."""
    if not 2 <= rounds <= MAX_ROUNDS:
        raise SectionmarkError(f"need between 2 and {MAX_ROUNDS:,} rounds, got {rounds}")
    modules = (a, b)
    order_generator = np.random.default_rng(seed)
    runs: tuple[list, list] = ([], [])
    for round_index in range(rounds):
        order = [int(side) for side in order_generator.permutation(2)]
        for side in order:
            with profile(modules[side], args, function=function, device=device, iterations=iterations,
                         warmup=warmup, quiet=True, timeout=timeout, parameters=parameters, workers=workers,
                         cost=False) as run:  # a round's figures only: no cost rounds, no events kept
                runs[side].append(run.session)
        if not quiet:
            times = ", ".join(f"{'AB'[side]} {runs[side][-1].total_ns / max(runs[side][-1].calls, 1) / 1000:.1f} µs"
                              for side in (0, 1))
            print(f"compare: round {round_index + 1} of {rounds} ({' then '.join('AB'[side] for side in order)}): "
                  f"{times} per call", file=sys.stderr, flush=True)
    return combine_runs(runs[0]), combine_runs(runs[1])
