"""Prints what the conformance oracle measured per program (unmarked shares, timings) after the run."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from .test_conformance import MEASURED

    if not MEASURED:
        return
    write = terminalreporter.write_line
    terminalreporter.section("conformance: unmarked FLOP share (input / map) and unmarked time (profile); seconds")
    for name, data in MEASURED.items():
        shares = "  ".join(f"{key.split('_')[0]} {data[key]:.5f}" for key in ("input_share", "map_share", "profiled_share")
                           if key in data)
        if "input_flops" in data:
            shares += f"  (FLOPs input {data['input_flops']:.0f} map {data['map_flops']:.0f})"
        timings = "  ".join(f"{key} {value:.1f}" for key, value in data.get("timings", {}).items())
        write(f"{name:24} {shares}  |  {timings}")
