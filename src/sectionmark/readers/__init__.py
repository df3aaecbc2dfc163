"""Readers: each turns a measurement file into the events attribution joins, plus where they came from.

The stage between `artifacts` (finding and opening files) and `profiling`
(attribution, the session): IREE's HAL profiles (`.ireeprof` bundles and their
JSONL export) and Tracy captures (GPU dispatch zones, live captures of the
tracing runtime). Nothing here imports profiling/.
"""
