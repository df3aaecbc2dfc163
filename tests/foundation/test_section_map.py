"""Reading section maps: every malformed map is one clear error, never a wrong table or a traceback."""

from __future__ import annotations

import copy
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sectionmark.errors import SectionmarkError
from sectionmark.section_map import (PALETTE, UNMARKED_COLOR, Command, CommandBuffer, DispatchSite, SectionMap,
                                     SectionMapError, Share, section_colors)


def small_map() -> SectionMap:
    shares = [Share(("A",), 0.75, flops=300.0, bytes=0.0), Share((), 0.25, flops=100.0, bytes=0.0)]
    return SectionMap(
        sections=[("A",), ("A", "B")],
        command_buffers=[
            CommandBuffer(0, "main", [
                Command("dispatch", "main_dispatch_0", site=0, shares=shares, workgroups=[1, 1, 1], binding_bytes=[64, 64]),
                Command("barrier", "barrier"),
                Command("fill", "fill", shares=[Share(("A", "B"), 1.0)]),
            ])
        ],
        sites=[DispatchSite(0, "main", shares, op_count=2, rule="cost", executable="e", key="main_dispatch_0")],
        target="llvm-cpu",
    )


def test_round_trip_and_reached():
    section_map = small_map()
    assert SectionMap.loads(section_map.dumps()) == section_map
    assert section_map.reached == [("A",), ("A", "B")]


def test_colors_round_trip_and_a_map_without_them_still_reads():
    section_map = small_map()
    section_map.colors = {"B": 0x34A853}
    assert SectionMap.loads(section_map.dumps()).colors == {"B": 0x34A853}
    older = section_map.to_json()
    del older["colors"]  # a map written before colours
    assert SectionMap.from_json(older).colors == {}


def test_one_colour_per_section_name_the_codes_or_the_palettes_in_order():
    paths = [("Block 0",), ("Block 0", "Attn"), ("Block 0", "MLP"), ("Block 1",), ("Block 1", "Attn"),
             ("Block 1", "MLP"), ("Head",)]
    colors = section_colors(paths, {"MLP": 0x34A853})
    assert colors[()] == UNMARKED_COLOR
    assert colors[("Block 0", "MLP")] == colors[("Block 1", "MLP")] == 0x34A853  # the code's, for every block
    assert colors[("Block 0", "Attn")] == colors[("Block 1", "Attn")]  # one colour per name
    # Palette colours by first appearance, skipping the names given one and the palette colours that look like a
    # given one (PALETTE[2] = 0x3DAA5C is MLP's green): the same in every view of the map.
    assert [colors[path] for path in [("Block 0",), ("Block 0", "Attn"), ("Block 1",), ("Head",)]] == [
        PALETTE[0], PALETTE[1], PALETTE[3], PALETTE[4]]
    assert section_colors(paths, {"MLP": 0x34A853}) == colors
    assert section_colors(paths, {"MLP": PALETTE[0]})[("Block 0",)] == PALETTE[1]  # never a chosen colour again


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["sites"][0]["shares"][0].update(weight=float("nan")), "expected a finite number"),
        (lambda d: d["sites"][0]["shares"][0].update(weight=-0.75), "weights must be >= 0 and sum to 1"),
        (lambda d: d["sites"][0]["shares"][0].update(weight=0.5), "weights must be >= 0 and sum to 1"),
        (lambda d: d["sites"][0].update(id="0"), "sites[0].id: expected an integer"),
        (lambda d: d["sites"][0].pop("shares"), "sites[0]: missing field 'shares'"),
        (lambda d: d["command_buffers"][0]["commands"][0].update(op="launch"), "unknown command 'launch'"),
        (lambda d: d["command_buffers"][0]["commands"][0].update(site=7), "no dispatch site 7"),
        (lambda d: d.update(sections=[["A"], "A"]), "sections[1]: expected a list"),
        (lambda d: d.update(version=1), "version 1 is not supported"),
        (lambda d: d["sites"][0]["bindings"].append(
            {"tensor": "input0", "shape": [4], "tensor_shape": [4], "dtype": "f32", "access": "read<img src=x>",
             "read_bytes": 16, "written_bytes": 0}), "bindings[0].access: 'read<img src=x>' is not one of"),
        (lambda d: d["sites"][0].update(rule="<b>"), "sites[0].rule: unknown rule"),
        (lambda d: d.update(framework="<b>"), "framework: unknown exporter"),
        (lambda d: d.update(colors={"A": 0x1000000}), "colors['A']: 16777216 is not a colour 0xRRGGBB"),
        (lambda d: d.update(colors={"A": "#FF0000"}), "colors.A: expected an integer"),
        (lambda d: d["command_buffers"][0]["commands"][2]["shares"][0].update(path=["C"]),
         "commands[2].shares[0].path: ['C'] is not one of the map's sections"),
        (lambda d: d.update(sections=[["A"], ["A", ""]]), "sections[1]: a section path is a list of non-empty names"),
        (lambda d: d["sites"][0].update(executable="\ud800"), "sites[0].executable: not valid Unicode"),
        # Counts and sizes a machine can have: 1e308 FLOPs made NaN in --json, 10**400 bytes an OverflowError.
        (lambda d: d["sites"][0].update(flops=1e308), "sites[0].flops: expected a number from 0 to below 2**63"),
        (lambda d: d["sites"][0].update(flops=-1.0), "sites[0].flops: expected a number from 0 to below 2**63"),
        (lambda d: [owner["shares"][0].update(flops=-300.0)
                    for owner in (d["sites"][0], d["command_buffers"][0]["commands"][0])],
         "commands[0].shares[0].flops: expected a number from 0 to below 2**63, got float -300.0"),
        (lambda d: [owner["shares"][1].update(bytes=1e300)
                    for owner in (d["sites"][0], d["command_buffers"][0]["commands"][0])],
         "commands[0].shares[1].bytes: expected a number from 0 to below 2**63"),
        (lambda d: d["sites"][0]["bindings"].append(
            {"tensor": "input0", "shape": [4], "tensor_shape": [4], "dtype": "f32", "access": "write",
             "read_bytes": 0, "written_bytes": 10**400}), "sites[0].bindings[0].written_bytes: expected a number "
                                                            "from 0 to below 2**63, got int 1000000000"),
        (lambda d: d["sites"][0]["bindings"].append(
            {"tensor": "input0", "shape": [4], "tensor_shape": [4], "dtype": "f32", "access": "read",
             "read_bytes": -16, "written_bytes": 0}), "sites[0].bindings[0].read_bytes: expected a number"),
        (lambda d: d["sites"][0]["bindings"].append(
            {"tensor": "input0", "shape": [-1, 4], "tensor_shape": [2**63, 4], "dtype": "f32", "access": "read",
             "read_bytes": None, "written_bytes": 0}),
         "sites[0].bindings[0].tensor_shape[0]: expected a number from -1 to below 2**63"),
        (lambda d: d["command_buffers"][0]["commands"][0].update(binding_bytes=[64, -64]),
         "commands[0].binding_bytes[1]: expected a number from 0 to below 2**63"),
        (lambda d: d["command_buffers"][0]["commands"][0].update(workgroups=[1, 2**64, 1]),
         "commands[0].workgroups[1]: expected a number from 0 to below 2**63"),
        (lambda d: d["sites"][0].update(op_count=-2), "sites[0].op_count: expected a number from 0 to below 2**63"),
        # Swapping two dispatches' shares in the commands but not in their sites: which would the table use?
        (lambda d: d["command_buffers"][0]["commands"][0].update(shares=[{"path": ["A"], "weight": 1.0}]),
         "commands[0].shares: not the shares of its dispatch site 0"),
    ],
)
def test_malformed_maps_name_the_problem(mutate, message):
    data = small_map().to_json()
    mutate(data)
    with pytest.raises(SectionMapError, match=re.escape(message)):
        SectionMap.loads(json.dumps(data))


def test_a_bad_map_is_the_one_error_type_of_bad_input():
    """errors.py: SectionmarkError is what the CLI and a script catch for any bad input, a map's included."""
    with pytest.raises(SectionmarkError, match="not a sectionmark section map"):
        SectionMap.loads("{}")
    with pytest.raises(SectionmarkError, match="section map version 99 is not supported"):
        SectionMap.loads(json.dumps({**small_map().to_json(), "version": 99}))
def test_a_map_error_is_a_sectionmark_error_and_one_cli_line(tmp_path, capsys):
    """The one exception type the CLI prints as one line; still the ValueError callers caught before."""
    from sectionmark.cli import main

    path = tmp_path / "old.sections.json"
    path.write_text('{"version": 1, "sections": []}')
    for caught in (SectionMapError, SectionmarkError, ValueError):
        with pytest.raises(caught, match="^section map version 1 is not supported"):
            SectionMap.load(path)
    profile = tmp_path / "run.ireeprof"
    profile.write_bytes(b"not read: the map is refused first")
    assert main(["report", str(profile), "--map", str(path)]) == 1
    assert capsys.readouterr().err == (f"sectionmark: error: {path}: section map version 1 is not supported "
                                       "(expected 2); recompile the model with this version of sectionmark\n")


def test_non_json_non_utf8_and_deep_nesting(tmp_path):
    path = tmp_path / "m.sections.json"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(SectionMapError, match="not UTF-8"):
        SectionMap.load(path)
    with pytest.raises(SectionMapError, match="not valid JSON"):
        SectionMap.loads("[" * 100_000)


def _mutations(data):
    """Every place in the document, paired with replacement values of other types."""
    places = []

    def visit(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                places.append(path + [key])
                visit(value, path + [key])
        elif isinstance(node, list):
            for index, value in enumerate(node):
                places.append(path + [index])
                visit(value, path + [index])

    visit(data, [])
    return places


_VALUES = st.sampled_from([None, True, 0, -1, 1.5, float("inf"), "", "x", [], {}, [[]], {"path": []}])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_mutant_loads_exactly_or_fails_with_one_error(data):
    original = small_map().to_json()
    document = copy.deepcopy(original)
    place = data.draw(st.sampled_from(_mutations(document)))
    value = data.draw(_VALUES)
    parent = document
    for key in place[:-1]:
        parent = parent[key]
    parent[place[-1]] = value
    try:
        loaded = SectionMap.loads(json.dumps(document))
    except SectionMapError as error:
        assert "\n" not in str(error)
        return
    # Accepted: it must mean exactly what it says (the same document back).
    assert loaded.to_json() == json.loads(json.dumps(document)) or loaded.to_json() == original
