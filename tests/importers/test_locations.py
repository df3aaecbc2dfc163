"""The one location reader: NameLoc paths, JAX name stacks, fused and call-site locations."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sectionmark.locations import paths_in_location, section_path, unescape_mlir_string
from sectionmark.section_path import decode_jax_scope, decode_path, encode_jax_scope, encode_path

NAMES = ['quo"te', "back\\slash", "new\nline", "emoji 🤖", "x" * 1000, "a/b", "%2F()", "tab\there"]


@pytest.mark.parametrize("name", NAMES)
def test_path_encodings_round_trip(name):
    path = ("outer/most", name, "\\")
    assert decode_path(encode_path(path)) == path
    assert decode_jax_scope(encode_jax_scope(name)) == name
    assert "/" not in encode_jax_scope(name) and "(" not in encode_jax_scope(name)


def test_name_loc_inside_fused_and_callsite():
    loc = 'loc(fused[callsite("sectionmark:Block 0/MLP"("m.py":3:0) at "f.py":1:2), "other"])'
    assert section_path(loc) == ("Block 0", "MLP")
    assert section_path('loc("m.py":3:0)') is None
    assert section_path("loc(unknown)") is None


def test_mlir_escapes_are_undone_byte_exactly():
    assert unescape_mlir_string(r"a\22b\5Cc\0Ad\F0\9F\A4\96") == 'a"b\\c\nd🤖'
    assert section_path(r'loc("sectionmark:q\22/b\\\\/c"(unknown))') == ('q"', "b\\", "c")


def test_jax_name_stack_forward_and_backward():
    assert section_path('loc("jit(f)/sm:Block%2F0/sm:MLP/dot_general"("x.py":1:0))') == ("Block/0", "MLP")
    assert section_path('loc("jit(f)/transpose(jvp(sm:Block))/sm:MLP/mul"("x.py":1:0))') == (
        "Block (backward)", "MLP (backward)")
    assert section_path('loc("jit(f)/jvp(sm:Block)/tanh"("x.py":1:0))') == ("Block",)
    assert section_path('loc("jit(f)/transpose(jvp())/mul"("x.py":1:0))') is None


def test_several_paths_are_all_reported_once():
    loc = 'loc(fused["sectionmark:A"(unknown), "sectionmark:B"(unknown), "sectionmark:A"(unknown)])'
    assert paths_in_location(loc) == [("A",), ("B",)]


def test_an_op_inlined_from_a_private_function_is_in_the_calls_sections_then_its_own():
    scan_body = ('loc(callsite("sm:Attention/dot_general"(callsite("f"("x.py":1:2 to :5) at "g"("y.py":3:4))) '
                 'at "jit(f)/sm:Layers/while/body/closed_call"("x.py":9:0)))')
    assert section_path(scan_body) == ("Layers", "Attention")
    unmarked_in_helper = 'loc(callsite("mul"("x.py":1:2) at "jit(f)/sm:Outer/jit(helper)"("z.py":2:2)))'
    assert section_path(unmarked_in_helper) == ("Outer",)
    two_levels = ('loc(callsite(callsite("sm:Inner/mul"("x.py":1:2) at "sm:Mid/jit(h2)"("y.py":1:1)) '
                  'at "jit(f)/sm:Outer/jit(h1)"("z.py":2:2)))')
    assert section_path(two_levels) == ("Outer", "Mid", "Inner")
    backward = 'loc(callsite("sm:Attention/mul"("x.py":1:2) at "jit(g)/transpose(jvp(sm:Layers))/while/body/closed_call"("x.py":3:2)))'
    assert section_path(backward) == ("Layers (backward)", "Attention (backward)")
    torch_inlined = 'loc(callsite("sectionmark:Block/Conv"("cnn.py":1:0) at "source.mlir":2:1))'
    assert section_path(torch_inlined) == ("Block", "Conv")  # our paths are absolute


def test_jax_transforms_name_a_level_once_and_remat_is_recompute():
    stack = 'loc("jit(g)/transpose(jvp(sm:Outer))/jvp(sm:Outer)/checkpoint/{}"("a.py":1:1))'
    assert section_path(stack.format("sm:Inner/mul")) == ("Outer (backward)", "Inner (backward)")
    assert section_path(stack.format("rematted_computation/sm:Inner/cos")) == ("Outer (backward)", "Inner (recompute)")
    assert section_path('loc("jit(f)/sm:A/sm:A/add"("a.py":1:1))') == ("A", "A")  # nested as written
    # a section around the grad call stays forward; what is inside the transpose is backward
    assert section_path('loc("jit(f)/sm:Train/transpose(jvp(sm:Block))/mul"("a.py":1:1))') == (
        "Train", "Block (backward)")


def test_a_line_of_mlir_text_with_location_aliases():
    assert paths_in_location('#loc5 = loc("sm:Attention/tanh"(#loc3))') == [("Attention",)]
    assert section_path('loc(fused<"x">["jit(f)/mul"("a.py":1:1), "jit(f)/sm:Z/add"("a.py":1:1)])') == ("Z",)


def test_deep_call_site_chains_are_read_without_recursion_trouble():
    chain = '"f.py":1:2'
    for depth in range(3000):  # torch stacks nest call sites; far deeper than any real one
        chain = f'callsite("g{depth}.py":{depth}:1 at {chain})'
    assert section_path(f'loc("sectionmark:A"({chain}))') == ("A",)
    assert section_path(f"loc({chain})") is None


@given(st.text(alphabet='loc("sm:/)(callsite at fused[],<>#:0123 \\\\jit', max_size=80))
def test_the_reader_never_raises_on_any_text(text):
    section_path(text)
    paths_in_location(text)
