"""The profiler's own cost: paired rounds, an interval, "no measurable cost" below it, and a way to skip it.

Hand-built rounds for the figures and the words (a ratio below 1 is never shown as a cost of its own); a file
written before the rounds still reads; the real stack for what ``cost=False`` / ``--no-cost`` leaves out.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_session import synthetic

from sectionmark.workflows import runner
from sectionmark.workflows.runner import COST_ROUNDS
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import ProfilerCost
from sectionmark.renderers.table import profiler_cost_text


def test_the_cost_is_the_median_ratio_of_the_rounds_with_the_interval_of_the_median():
    # Round 3 ran while the machine was busy: both of its runs are slow, and its ratio stays in line.
    cost = ProfilerCost.from_rounds([130.0, 126.0, 390.0, 128.0, 140.0], [100.0, 100.0, 300.0, 100.0, 100.0])
    assert cost.ratios == pytest.approx([1.3, 1.26, 1.3, 1.28, 1.4])
    assert cost.ratio == pytest.approx(1.3) and cost.rounds == 5
    assert (cost.low, cost.high, cost.confidence) == (pytest.approx(1.26), pytest.approx(1.4), 0.9375)
    assert (cost.profiled_ns, cost.unprofiled_ns) == (130.0, 100.0)  # the median round of each kind
    assert cost.measurable
    assert profiler_cost_text(cost) == (
        "1.30x per call (interval 1.26–1.40x over 5 paired rounds (94% confidence), each round's median call timed "
        "by iree-benchmark-module, same calls and inputs; median call 130 ns profiled vs 100 ns unprofiled)")


@pytest.mark.parametrize("profiled", [[81.0, 95.0, 104.0, 90.0, 99.0],  # an interval around 1
                                      [81.0, 85.0, 90.0, 88.0, 92.0]])  # all below 1: noise, not a speed-up
def test_an_interval_reaching_1_is_no_measurable_cost_never_a_bare_ratio_below_1(profiled):
    cost = ProfilerCost.from_rounds(profiled, [100.0] * 5)
    assert not cost.measurable
    text = profiler_cost_text(cost)
    assert text.startswith("no measurable cost (profiled / unprofiled 0.81–")
    assert f"{cost.ratio:.2f}x" not in text.replace(f"0.81–{cost.high:.2f}x", "")  # the median is not shown alone


def test_the_rounds_survive_json_and_a_file_from_before_the_rounds_still_reads(tmp_path):
    attribution, section_map = synthetic([(0, 100, ((("A",), 1.0),))], declared=[("A",)])
    session = ProfileSession.build(attribution, section_map, function="main")
    session.profiler_cost = ProfilerCost.from_rounds([130.0, 126.0, 135.0], [100.0, 101.0, 99.0])
    document = json.loads(json.dumps(session.to_json()))
    stored = document["profiler_cost"]
    assert stored["ratios"] == session.profiler_cost.ratios and stored["measurable"] is True
    assert stored["ratio"] == pytest.approx(1.3) and stored["confidence"] == 0.75
    assert ProfileSession.from_json(document).profiler_cost == session.profiler_cost
    # Version 2 as written before the rounds: one unprofiled and one profiled run, and the ratio of the two.
    document["profiler_cost"] = {"profiled_ns": 114045, "unprofiled_ns": 141657, "ratio": 0.81}
    old = ProfileSession.from_json(document).profiler_cost
    assert (old.ratios, old.low, old.high, old.measurable) == ([], None, None, False)
    assert old.ratio == 114045 / 141657
    assert profiler_cost_text(old) == ("no measurable cost (one unpaired run each, median call 114.045 µs profiled "
                                       "vs 141.657 µs unprofiled: 0.81x, no interval)")
    document["profiler_cost"] = {"profiled_ns": 27600, "unprofiled_ns": 20200, "ratio": 1.37}
    assert profiler_cost_text(ProfileSession.from_json(document).profiler_cost) == (
        "1.37x per call (median call 27.600 µs profiled vs 20.200 µs unprofiled; one unpaired run each, no interval)")


@pytest.fixture
def tool_runs(monkeypatch):
    """The command lines of the tool runs a profile makes (each still runs: the real function is called)."""
    made = []
    real = runner._run_tool

    def counted(command, device, timeout):
        made.append(command)
        return real(command, device, timeout)

    monkeypatch.setattr(runner, "_run_tool", counted)
    return made


def test_cost_false_runs_the_profile_alone_and_the_rounds_alternate_otherwise(compiled_two_matmuls, inputs,
                                                                              tool_runs):
    import sectionmark as sm

    _compiled, vmfb = compiled_two_matmuls
    skipped = sm.profile(vmfb, args=inputs, iterations=2, warmup=1, quiet=True, cost=False)
    assert skipped.profiler_cost is None and skipped.to_json()["profiler_cost"] is None
    assert len(tool_runs) == 1 and any(flag.startswith("--device_profiling_output=") for flag in tool_runs[0])
    tool_runs.clear()
    measured = sm.profile(vmfb, args=inputs, iterations=2, warmup=1, quiet=True)
    assert len(measured.profiler_cost.ratios) == COST_ROUNDS and len(tool_runs) == 2 * COST_ROUNDS + 1
    profiled = [any(flag.startswith("--device_profiling_mode=") for flag in command) for command in tool_runs]
    assert profiled == [False, True, True, False, False, True, True, False, False, True, True]  # U P, P U, ..., the run


def test_each_round_runs_one_warmup_and_at_most_five_measured_calls(compiled_two_matmuls, inputs, tool_runs):
    """The rounds' runs are short whatever the profile's length (a large model's profile is not paid 10 times
    over); the profile itself makes every call asked."""
    import sectionmark as sm

    _compiled, vmfb = compiled_two_matmuls
    sm.profile(vmfb, args=inputs, iterations=30, warmup=4, quiet=True)
    repetitions = [next(int(flag.split("=")[1]) for flag in command if flag.startswith("--benchmark_repetitions="))
                   for command in tool_runs]
    assert repetitions == [1 + 5] * (2 * COST_ROUNDS) + [4 + 30]


def test_no_cost_on_the_command_line_leaves_the_cost_out(compiled_two_matmuls, inputs, tmp_path, tool_runs, capsys):
    from sectionmark.cli import main

    _compiled, vmfb = compiled_two_matmuls
    arguments = []
    for index, array in enumerate(inputs):
        np.save(tmp_path / f"{index}.npy", array)
        arguments += ["--input", str(tmp_path / f"{index}.npy")]
    assert main(["profile", str(vmfb), *arguments, "-n", "2", "--no-cost", "--json", str(tmp_path / "p.json")]) == 0
    assert "profiler cost" not in capsys.readouterr().out and len(tool_runs) == 1
    assert json.loads((tmp_path / "p.json").read_text())["profiler_cost"] is None
