"""The public API, name by name: what ``sm.`` offers and what each object in hand does (docs/*.md, README).

A rename that breaks a documented spelling fails here (and in tests/entry/test_docs_examples.py, which runs the
docs' examples). A documented name that was renamed keeps working with a `DeprecationWarning` naming the new one.
Each entry function says, with typing overloads, which inputs it takes, and refuses anything else with one
`TypeError` (a `SectionmarkError` too: one error line on the command line) naming the type.
"""

from __future__ import annotations

import inspect
import os
import sys
import typing
import warnings
from pathlib import Path

import pytest
from test_kernels import hand_built
from test_replay_outputs import replay_of_two_functions
from test_roofline import fake_peak, two_blocks

import sectionmark as sm
from sectionmark.errors import SectionmarkError, SectionmarkTypeError
from sectionmark.profiling.components import components
from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.roofline import component_roofline, roofline
from sectionmark.workflows.replay import ReplayProfile

PUBLIC_NAMES = [
    "section", "SectionPath", "SectionmarkError", "SectionedExport", "CompiledProgram", "ProfileSession", "ProfileRun",
    "Recording", "ReplayProfile", "torch", "jax", "compile", "load", "profile", "report", "compare", "record", "tracing",
    "slice", "bench_section", "peak", "report_ranks",
]
# Each object's documented methods and properties (docs/quickstart.md, optimise.md, record.md, slice.md, cli.md).
DOCUMENTED = {
    "ProfileSession": ["table", "render", "save", "save_json", "save_csv", "save_perfetto", "save_tracy",
                       "save_chart", "save_timeline", "save_graph", "to_json", "from_json", "section", "section_rows",
                       "unmarked", "parallelism", "utilization", "components", "kernels", "traffic", "roofline"],
    # sm.profile's and sm.report's (the session's figures are reached on it too: prof.sections, prof.components())
    "ProfileRun": ["table", "render", "save", "save_json", "save_perfetto", "save_tracy", "events", "close", "to_json"],
    "ReplayProfile": ["table", "render", "save", "save_json", "to_json", "from_json", "function", "function_names"],
    "CompiledProgram": ["save", "sections_summary"],
    "Recording": ["profile", "save"],
    "SectionedExport": ["save_mlir", "sections"],  # a torch one also compile()s (iree-turbine's ExportOutput)
    "Peak": ["roofline", "component_roofline", "text", "ridge"],  # sm.peak()'s
    "SliceBench": ["table"],  # sm.bench_section's
    "RankReport": ["table", "render", "save", "to_json", "section", "rank_files"],  # sm.report_ranks's
    "DeviceRankReport": ["table", "render", "save", "to_json", "device", "rank_files"],  # of ranks of several devices
}
# What the functions of ``sm`` return, by the name of the class (not in ``sm.__all__``: reached from the object).
RETURNED = {"Peak": (sm.peak, "Peak"), "SliceBench": (sm.bench_section, "SliceBench"),
            "RankReport": (sm.report_ranks, "RankReport"), "DeviceRankReport": (sm.report_ranks, "DeviceRankReport")}


def test_sm_all_is_the_documented_list_and_each_name_resolves():
    assert sm.__all__ == PUBLIC_NAMES
    for name in PUBLIC_NAMES:
        assert getattr(sm, name) is not None, name
    assert set(PUBLIC_NAMES) <= set(dir(sm))


@pytest.mark.parametrize("owner", sorted(DOCUMENTED))
def test_each_objects_documented_methods_exist(owner):
    if owner in RETURNED:
        function, name = RETURNED[owner]
        cls = getattr(sys.modules[function.__module__], name)
        returned = typing.get_type_hints(function)["return"]
        assert returned is cls or cls in typing.get_args(returned)
    else:
        cls = getattr(sm, owner)
    missing = [name for name in DOCUMENTED[owner] if not hasattr(cls, name)]
    assert not missing, f"{owner} lost {missing}"


def test_a_documented_name_that_was_renamed_warns_naming_the_new_one():
    with pytest.warns(DeprecationWarning, match=r"sectionmark\.CompiledExport is deprecated: use "
                                                r"sectionmark\.CompiledProgram"):
        assert sm.CompiledExport is sm.CompiledProgram
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        sm.CompiledExport
    assert "CompiledExport" not in sm.__all__
    with pytest.raises(AttributeError, match="no attribute 'CompiledExprt'"):
        sm.CompiledExprt


def test_the_session_offers_its_views():
    session = hand_built()
    assert session.kernels() == kernels(session)
    assert session.components() == components(session)
    blocks = two_blocks()
    assert session.components(by="name") == components(session, "name")
    assert blocks.components(by="*/MLP") == components(blocks, "*/MLP")
    assert blocks.roofline(fake_peak()) == roofline(blocks, fake_peak())
    assert blocks.roofline(fake_peak(), by="name") == component_roofline(blocks, fake_peak(), "name")


def test_traffic_is_each_sections_traffic_by_path():
    session = hand_built()
    traffic = session.traffic()
    assert list(traffic) == [row.path for row in session.sections if row.traffic is not None]
    assert [(path, item) for path, item in traffic.items()] == [
        (row.path, row.traffic) for row in session.sections if row.traffic is not None]
    mlp = traffic[("MLP",)]
    assert mlp.bytes == 2 * 49152 and mlp.flops == 2 * 2 * 64 ** 3  # as test_roofline reads it


def test_replay_to_json_is_the_data_and_reads_back():
    replay = replay_of_two_functions()
    document = replay.to_json()
    assert document["kind"] == "replay" and document["version"] == 1
    assert [entry["function"] for entry in document["functions"]] == ["step", "init", "finish"]
    assert document["functions"][1]["profile"] is None
    assert document["functions"][0]["profile"] == replay.function("step").to_json()
    again = ReplayProfile.from_json(document)
    assert again.to_json() == document


def test_the_json_file_is_to_json_with_each_profiles_views(tmp_path):
    import json

    replay = replay_of_two_functions()
    written = json.loads(replay.save(tmp_path / "replay.json").read_text(encoding="utf-8"))
    document = replay.to_json()
    for entry in (*written["functions"], *document["functions"]):
        if entry["profile"] is not None:
            for view in ("components", "kernels", "parallelism", "utilization"):
                entry["profile"].pop(view, None)
    assert written == document


# ---------------------------------------------------------------------------- overloads and TypeError


class Where:
    """A value of a type no entry function takes (named with its module in the error)."""


def first_parameter_types(function) -> list[str]:
    """The annotation of the first parameter of each overload of ``function``, as written."""
    return [str(inspect.signature(overload).parameters[next(iter(inspect.signature(overload).parameters))]
                .annotation) for overload in typing.get_overloads(function)]


def test_compile_profile_and_compare_declare_each_input_they_take():
    path = "Union[str, 'os.PathLike[str]']"  # annotations as written (the modules defer them)
    assert first_parameter_types(sm.compile) == ["SectionedExport", "'ExportOutput'", "'SectionSlice'", path]
    assert first_parameter_types(sm.profile) == ["'CompiledProgram'", path]
    assert first_parameter_types(sm.compare) == ["Profiled", "'CompiledProgram'"]  # Profiled: a session, a run, a path
    for function in (sm.compile, sm.profile, sm.compare):
        # Each overload returns what the function says, or one of the kinds it says it may return (comparing two
        # compiled programs gives a one-device Comparison; two runs may be of several devices).
        declared = inspect.signature(function).return_annotation
        kinds = {declared, *declared.removeprefix("Union[").removesuffix("]").split(", ")}
        returned = {inspect.signature(overload).return_annotation for overload in typing.get_overloads(function)}
        assert declared in returned and returned <= kinds


@pytest.mark.parametrize("call, message", [
    (lambda: sm.compile(42), "sm.compile takes an export (sm.torch.export, aot.export, sm.jax.export), a slice "
                             "(sm.slice), MLIR text or a .mlir/.mlirbc path, not int"),
    (lambda: sm.compile(b"module {}"), "sm.compile takes an export (sm.torch.export, aot.export, sm.jax.export), a "
                                       "slice (sm.slice), MLIR text or a .mlir/.mlirbc path, not bytes"),
    (lambda: sm.profile(3.5), "sm.profile takes a compiled program (sm.compile) or a .vmfb path, not float"),
    (lambda: sm.compare(hand_built(), Where()), "sm.compare takes profiles (ProfileSession, ProfileRun), profile JSON "
                                                "files (a path) or modules (CompiledProgram, a .vmfb path), not "
                                                "test_public_api.Where"),
], ids=["compile-int", "compile-bytes", "profile-float", "compare-object"])
def test_an_input_of_another_type_is_one_type_error_naming_it(call, message):
    with pytest.raises(TypeError) as error:
        call()
    assert isinstance(error.value, SectionmarkError) and isinstance(error.value, SectionmarkTypeError)
    assert str(error.value) == message


def test_a_path_like_source_is_taken_as_a_path(tmp_path):
    class Missing(os.PathLike):
        def __fspath__(self):
            return str(tmp_path / "missing.mlir")

    with pytest.raises(SectionmarkError, match="MLIR file not found"):
        sm.compile(Missing())
    with pytest.raises(SectionmarkError, match="missing.json") as error:
        sm.compare(Path(tmp_path / "missing.json"), Missing())
    assert not isinstance(error.value, TypeError)


def test_no_deprecation_warning_on_the_current_names():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in PUBLIC_NAMES:
            getattr(sm, name)
