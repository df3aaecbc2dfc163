"""The one location reader: NameLoc paths, JAX name stacks, fused and call-site locations."""

import pytest

from sectionmark.locations import section_path, section_paths, unescape_mlir_string
from sectionmark.paths import decode_jax_scope, decode_path, encode_jax_scope, encode_path

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
    assert section_paths(loc) == [("A",), ("B",)]
