"""The defaults and bounds of a comparison (`sectionmark.profiling.compare`), apart from its code.

The command line shows them in ``sectionmark compare --help`` and builds every command's parser before it knows
which command runs: here they cost it nothing (no numpy, no session), so a command imports only what it runs.
"""

MIN_CHANGE = 10.0  # percent beyond which an interval over rounds is a change (benchmarks/bench_compare.py)
RUNS_MIN_CHANGE = 25.0  # the same over the scaled runs of two profiles taken apart (benchmarks/bench_compare.py)
DRIFT_BOUND = 100.0  # percent two runs of one module differed by as wholes, at most, on a loaded machine (docs/cli.md)
# Two modules run alternately (sectionmark.workflows.interleave): rounds of one run of each.
# 10 rounds: the interval runs from the second lowest to the second highest ratio (97.9%), so one round disturbed
# on either side (a stalled run) moves neither end.
DEFAULT_ROUNDS = 10
MAX_ROUNDS = 1_000
DEFAULT_ITERATIONS = 20  # measured calls per run
DEFAULT_WARMUP = 3
