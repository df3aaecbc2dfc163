"""A one-run profile says how much such figures moved between runs on this machine, as a --runs profile measured.

Hand-built runs (`test_runs.runs_of`): a profile of several runs stores its coefficients of variation in the
user cache (a private one here), per device and worker count; a later one-run profile of the same
device and workers shows them under its table, naming the profile that measured them; nothing is shown that
was not measured, and a cache that is broken, hostile or unwritable changes nothing but that line.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from test_runs import A, B, runs_of

from sectionmark.profiling.runs import combine_runs
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import RunVariation
from sectionmark.workflows import measure  # the machine's run-variation cache
from sectionmark.workflows.measure import note_run_variation
from sectionmark.renderers.table import render


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test its own cache (the suite's conftest keeps one apart from the user's for all tests)."""
    monkeypatch.setattr(measure, "cache_path", lambda: tmp_path / "cache" / "sectionmark" / "run-variation.json")
    return tmp_path / "cache"


def cache_path():
    return measure.cache_path()


def _made_here(session: ProfileSession, device: str = "local-task", workers=2, module="m.vmfb") -> ProfileSession:
    """As `sm.profile` leaves a session: its device, workers and module known."""
    session.device, session.workers, session.module = device, workers, module
    return session


def _cv(values) -> float:
    values = np.asarray(values, float)
    return float(values.std(ddof=1) / values.mean())


def test_a_runs_profile_is_remembered_and_a_one_run_profile_on_the_same_device_says_it():
    several = _made_here(combine_runs(runs_of([0.9, 1.0, 1.2])))
    note_run_variation(several)
    assert several.run_variation is None  # it measured its own: the runs line says it
    stored = json.loads(cache_path().read_text())
    assert stored["version"] == 1 and len(stored["entries"]) == 1
    variation = RunVariation(**stored["entries"][0])
    totals = several.total_runs.values_ns
    assert variation.total_cv == pytest.approx(_cv(totals))
    section_cvs = [_cv(several.section(path).runs.values_ns) for path in (A, B)]
    assert variation.median_section_cv == pytest.approx(float(np.median(section_cvs)))
    assert variation.worst_section_cv == pytest.approx(max(section_cvs))
    assert (variation.runs, variation.device, variation.workers, variation.module) == (3, "local-task", 2, "m.vmfb")

    one = _made_here(runs_of([1.0])[0], module="other.vmfb")
    note_run_variation(one)
    assert one.run_variation == variation
    expected = (f"one run: on this machine (local-task, 2 workers) figures like these moved between runs by CV "
                    f"{variation.total_cv:.1%} (total per call), {variation.median_section_cv:.1%} (median section), "
                    f"{variation.worst_section_cv:.1%} (worst section), as measured by --runs 3 of m.vmfb at "
                    f"{variation.measured_at}; --runs 5 measures this module's own")
    assert expected in " ".join(render(one).split())  # the notes wrap at the terminal's width
    assert "not measured" not in render(one)
    again = ProfileSession.from_json(json.loads(json.dumps(one.to_json())))  # kept in the profile JSON
    assert again.run_variation == variation


@pytest.mark.parametrize("device, workers", [("local-task", 1), ("vulkan", None)])
def test_another_device_or_worker_count_has_not_been_measured(device, workers):
    note_run_variation(_made_here(combine_runs(runs_of([0.9, 1.0, 1.2]))))
    one = _made_here(runs_of([1.0])[0], device=device, workers=workers)
    note_run_variation(one)
    assert one.run_variation is None
    assert "run-to-run variation not measured (one run, and no --runs profile on this machine" in " ".join(
        render(one).split())


def test_the_latest_runs_profile_of_a_device_replaces_the_earlier_one_and_others_stay():
    note_run_variation(_made_here(combine_runs(runs_of([0.9, 1.0, 1.2]))))
    note_run_variation(_made_here(combine_runs(runs_of([0.5, 1.0, 1.5])), device="vulkan", workers=None))
    note_run_variation(_made_here(combine_runs(runs_of([0.99, 1.0, 1.01, 1.0])), module="new.vmfb"))
    entries = {entry["device"]: entry for entry in json.loads(cache_path().read_text())["entries"]}
    assert set(entries) == {"local-task", "vulkan"}
    assert (entries["local-task"]["module"], entries["local-task"]["runs"]) == ("new.vmfb", 4)


def test_a_recorded_profile_of_unknown_device_says_nothing_was_measured():
    note_run_variation(_made_here(combine_runs(runs_of([0.9, 1.0, 1.2]))))
    recorded = runs_of([1.0])[0]  # `report` of a file: no device
    note_run_variation(recorded)
    assert recorded.run_variation is None


@pytest.mark.parametrize("content", [
    "{not json", "[]", json.dumps({"version": 2, "entries": []}), json.dumps({"version": True, "entries": []}),
    "[" * 100_000 + "]" * 100_000,
    json.dumps({"version": 1, "entries": [{"runs": 3, "total_cv": -0.1, "median_section_cv": 0.1,
                                            "worst_section_cv": 0.2, "device": "local-task", "workers": 2,
                                            "module": None, "measured_at": "x"}]}),
    json.dumps({"version": 1, "entries": [{"runs": 1, "total_cv": 0.1, "median_section_cv": 0.1,
                                            "worst_section_cv": 0.2, "device": "local-task", "workers": 2,
                                            "module": None, "measured_at": "x"}]}),
    '{"version": 1, "entries": [{"runs": 3, "total_cv": NaN, "median_section_cv": 0.1, "worst_section_cv": 0.2, '
    '"device": "local-task", "workers": 2, "module": null, "measured_at": "x"}]}',
])
def test_a_cache_that_does_not_check_is_ignored_and_replaced(content):
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text(content)
    one = _made_here(runs_of([1.0])[0])
    note_run_variation(one)
    assert one.run_variation is None
    note_run_variation(_made_here(combine_runs(runs_of([0.9, 1.0, 1.2]))))
    note_run_variation(one)
    assert one.run_variation is not None and math.isfinite(one.run_variation.total_cv)


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "directory"])
def test_a_fifo_or_a_directory_at_the_cache_path_neither_hangs_nor_fails(make):
    cache_path().parent.mkdir(parents=True)
    make(cache_path())
    one = _made_here(runs_of([1.0])[0])
    note_run_variation(one)  # opened without blocking: no writer ever comes
    assert one.run_variation is None
    note_run_variation(_made_here(combine_runs(runs_of([0.9, 1.0, 1.2]))))  # not written over it, and no error
    note_run_variation(one)
    assert one.run_variation is None


def test_an_unwritable_cache_costs_the_profile_nothing(private_cache):
    private_cache.parent.mkdir(parents=True, exist_ok=True)
    private_cache.write_text("a file where the cache folder would be")  # the cache's folders cannot be made
    several = _made_here(combine_runs(runs_of([0.9, 1.0, 1.2])))
    note_run_variation(several)  # no error
    assert private_cache.read_text() == "a file where the cache folder would be"
    assert measure.recall(_made_here(runs_of([1.0])[0])) is None


def test_the_cache_is_per_host_in_the_user_cache_folder(monkeypatch, tmp_path):
    monkeypatch.undo()  # the real cache_path, under a private XDG_CACHE_HOME
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(measure.socket, "gethostname", lambda: "build box/7")
    assert measure.cache_path() == tmp_path / "xdg" / "sectionmark" / "run-variation-build_box_7.json"
