"""Workflows: what compiles, runs and profiles in one go, a stage above the compiler and profiling.

`record` notes the calls a program makes through a loaded module and replays
them under IREE's profiler with a generated replay module (`replay_module`),
split per function (`replay`); `slice_bench` compiles one section cut out of
a model and profiles it alone. Each uses the compiler, the runtime and
profiling as a user would; nothing below this stage imports it.
"""
