"""The compiler hook: real in-process IREE compiles of tiny programs.

Checks invariant 1 (executables byte-identical, same dispatch and executable
counts, bit-identical outputs with and without markers), that every HAL
dispatch is in the section map with its site's composition, that debug groups
are balanced and nested as the sections, that the map's command sequence is
exactly what the runtime profile records, and the one-line errors.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest

import sectionmark as sm
import sectionmark.compiler as smc
import sectionmark.compiler.pipeline as pipeline
import sectionmark.compiler.flow as flow
from sectionmark.artifacts import read_section_map
from sectionmark.errors import SectionmarkError

RUNTIME_TOOLS = Path(__import__("iree._runtime_libs", fromlist=["_"]).__file__).parent

# Three sections fused into one elementwise dispatch, then a matmul of its own.
FUSED = """
func.func @main(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = arith.addf %a, %b : tensor<16x16xf32> LOC_A
  %1 = arith.mulf %0, %b : tensor<16x16xf32> LOC_AB
  %2 = math.exp %1 : tensor<16x16xf32> LOC_C
  %e = tensor.empty() : tensor<16x16xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = linalg.matmul ins(%2, %b : tensor<16x16xf32>, tensor<16x16xf32>) outs(%f : tensor<16x16xf32>) -> tensor<16x16xf32> LOC_D
  return %3 : tensor<16x16xf32>
}
"""
_FUSED_LOCS = {"LOC_AB": ("A/B", 2), "LOC_A": ("A", 1), "LOC_C": ("C", 3), "LOC_D": ("D", 4)}


def fused_source(marked: bool) -> str:
    """Same text and file locations either way; only the section NameLocs differ."""
    text = FUSED
    for token, (path, line) in _FUSED_LOCS.items():
        inner = f'"x.py":{line}:0'
        text = text.replace(token, f'loc("sectionmark:{path}"({inner}))' if marked else f"loc({inner})")
    return text


# Several exported functions: dynamic shapes (one-shot command buffer), a
# fill from a runtime scalar, a copy from a concatenation.
MULTI = """
func.func @dyn(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %0 = arith.addf %a, %b : tensor<?x16xf32> loc("sectionmark:Dyn/Add"("x.py":1:0))
  %1 = math.exp %0 : tensor<?x16xf32> loc("sectionmark:Dyn/Exp"("x.py":2:0))
  return %1 : tensor<?x16xf32>
}
func.func @fill_copy(%a: tensor<8x16xf32>, %c: f32) -> (tensor<8x16xf32>, tensor<16x16xf32>) {
  %e = tensor.empty() : tensor<8x16xf32> loc("sectionmark:Fill"("x.py":3:0))
  %f = linalg.fill ins(%c : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32> loc("sectionmark:Fill"("x.py":3:0))
  %n = arith.negf %a : tensor<8x16xf32> loc("sectionmark:Neg"("x.py":4:0))
  %cat = tensor.concat dim(0) %a, %n : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32> loc("sectionmark:Concat"("x.py":5:0))
  return %f, %cat : tensor<8x16xf32>, tensor<16x16xf32>
}
"""


# --------------------------------------------------------------------------- helpers


def compile_capturing_hal(source, **options) -> tuple[smc.CompiledProgram, str]:
    """Compile and also return the hal-phase IR exactly as it goes on to the VM."""
    captured = {}
    original = pipeline.embed_section_map

    def capture(module, section_map):
        result = original(module, section_map)
        captured["ir"] = module.get_asm(large_elements_limit=16)
        return result

    pipeline.embed_section_map = capture
    try:
        return smc.compile(source, **options), captured["ir"]
    finally:
        pipeline.embed_section_map = original


def executables(vmfb: bytes) -> dict[str, bytes]:
    """The executable binaries a .vmfb carries (its zip entries besides the module)."""
    with zipfile.ZipFile(BytesIO(vmfb)) as archive:
        return {name: archive.read(name) for name in archive.namelist() if name != "module.fb"}


def dump(vmfb: bytes, tmp_path: Path, output: str) -> str:
    path = tmp_path / "dump.vmfb"
    path.write_bytes(vmfb)
    return subprocess.run(
        [RUNTIME_TOOLS / "iree-dump-module", f"--output={output}", path],
        check=True, capture_output=True, text=True,
    ).stdout


def vm_call_count(disassembly: str, import_name: str) -> int:
    return len(re.findall(rf"@{re.escape(import_name)}\b", disassembly)) - 1  # minus the vm.import line


def run(vmfb: bytes, function: str, *args):
    results = getattr(sm.load(vmfb), function)(*args)
    results = results if isinstance(results, (list, tuple)) else [results]
    return [np.asarray(result.to_host()) for result in results]


def profile_sequences(vmfb: bytes, tmp_path: Path, function: str, inputs: list[str]) -> list[list[tuple[str, str]]]:
    """Per runtime command buffer, the (op, key) sequence iree-profile records."""
    module, capture, rows = tmp_path / "p.vmfb", tmp_path / "p.ireeprof", tmp_path / "p.jsonl"
    module.write_bytes(vmfb)
    subprocess.run(
        [RUNTIME_TOOLS / "iree-benchmark-module", "--device=local-task", f"--module={module}",
         f"--function={function}", *[f"--input={i}" for i in inputs], "--benchmark_min_time=2x",
         "--device_profiling_mode=queue-events,host-execution,executable-metadata",
         f"--device_profiling_output={capture}"],
        check=True, capture_output=True,
    )
    subprocess.run(
        [RUNTIME_TOOLS / "iree-profile", "export", "--format=ireeperf-jsonl", f"--output={rows}", capture],
        check=True, capture_output=True,
    )
    buffers: dict[int, list] = {}
    for line in rows.read_text().splitlines():
        row = json.loads(line)
        if row["record_type"] == "command_operation":
            buffers.setdefault(row["command_buffer_id"], []).append((row["command_index"], row["op"], row["key"]))
    return [[(op, key) for _, op, key in sorted(commands)] for commands in buffers.values()]


def group_events(hal_ir: str) -> list[tuple[str, object]]:
    """("begin", label) / ("end", None) / ("command", None) / ("finalize", None), in IR order."""
    events = []
    for line in hal_ir.splitlines():
        if "hal.command_buffer.begin_debug_group" in line:
            events.append(("begin", re.search(r'label\("((?:[^"\\]|\\.)*)"\)', line).group(1)))
        elif "hal.command_buffer.end_debug_group" in line:
            events.append(("end", None))
        elif re.search(r"hal\.command_buffer\.(dispatch|fill_buffer|copy_buffer|update_buffer)\b", line):
            events.append(("command", None))
        elif "hal.command_buffer.finalize" in line:
            events.append(("finalize", None))
    return events


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def fused():
    marked, hal_ir = compile_capturing_hal(fused_source(True))
    plain = smc.compile(fused_source(False), markers=False)
    return marked, plain, hal_ir


@pytest.fixture(scope="module")
def multi():
    return compile_capturing_hal(MULTI)


def _gpt(marked: bool):
    torch = pytest.importorskip("torch")
    import sectionmark as sm

    nn = torch.nn
    section = sm.section if marked else (lambda name: contextlib.nullcontext())

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln2, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            with section("Self Attention"):
                q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
                x = x + self.proj(torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ v)
            with section("MLP"):
                x = x + self.down(nn.functional.gelu(self.up(self.ln2(x))))
            return x

    class GPT(nn.Module):
        def __init__(self, d=32, layers=2):
            super().__init__()
            self.embed, self.head = nn.Embedding(64, d), nn.Linear(d, 64)
            self.blocks = nn.ModuleList(Block(d) for _ in range(layers))

        def forward(self, tokens):
            with section("Embedding"):
                x = self.embed(tokens)
            for i, block in enumerate(self.blocks):
                with section(f"Block {i}"):
                    x = block(x)
            with section("Head"):
                return self.head(x)

    torch.manual_seed(0)
    tokens = torch.randint(0, 64, (1, 16))
    return sm.torch.export(GPT(), args=(tokens,)), tokens.numpy()


@pytest.fixture(scope="module")
def gpt():
    exported, tokens = _gpt(marked=True)
    plain_exported, _ = _gpt(marked=False)
    marked, hal_ir = compile_capturing_hal(exported)
    plain = smc.compile(plain_exported, markers=False)
    return marked, plain, hal_ir, tokens


# --------------------------------------------------------------------------- invariant 1


def _assert_same_program(marked: smc.CompiledProgram, plain: smc.CompiledProgram, tmp_path: Path) -> None:
    marked_exes, plain_exes = executables(marked.vmfb), executables(plain.vmfb)
    assert marked_exes and marked_exes == plain_exes  # byte-identical, same count
    marked_asm, plain_asm = dump(marked.vmfb, tmp_path, "disassembly"), dump(plain.vmfb, tmp_path, "disassembly")
    for call in ("hal.command_buffer.dispatch", "hal.executable.create"):
        assert vm_call_count(marked_asm, call) == vm_call_count(plain_asm, call) > 0, call


def test_fused_program_is_unchanged_by_markers(fused, tmp_path):
    marked, plain, _ = fused
    _assert_same_program(marked, plain, tmp_path)
    rng = np.random.default_rng(0)
    a, b = rng.random((16, 16), np.float32), rng.random((16, 16), np.float32)
    np.testing.assert_array_equal(run(marked.vmfb, "main", a, b)[0], run(plain.vmfb, "main", a, b)[0])


def test_gpt_with_repeated_blocks_is_unchanged_by_markers(gpt, tmp_path):
    marked, plain, _, tokens = gpt
    _assert_same_program(marked, plain, tmp_path)
    # Blocks deduplicate to shared executables, yet each site keeps its own block.
    blocks_of_key: dict[str, set[str]] = {}
    for site in marked.section_map.sites:
        outer = {share.path[0] for share in site.shares}
        assert len(outer) == 1, site  # no site leaks into another block
        blocks_of_key.setdefault(site.key, set()).update(outer)
    assert {"Block 0", "Block 1"} in blocks_of_key.values()
    np.testing.assert_array_equal(run(marked.vmfb, "main", tokens)[0], run(plain.vmfb, "main", tokens)[0])


# --------------------------------------------------------------------------- the map


def test_fused_dispatch_lists_all_three_sections(fused):
    section_map = fused[0].section_map
    fused_site = next(site for site in section_map.sites if len(site.shares) > 1)
    assert {share.path for share in fused_site.shares} == {("A",), ("A", "B"), ("C",)}
    assert sum(share.weight for share in fused_site.shares) == pytest.approx(1.0)
    matmul = next(site for site in section_map.sites if "matmul" in (site.key or ""))
    assert [share.path for share in matmul.shares] == [("D",)]


def test_every_hal_dispatch_is_in_the_map(gpt, tmp_path):
    marked, _, hal_ir, _ = gpt
    commands = [c for buffer in marked.section_map.command_buffers for c in buffer.commands if c.op == "dispatch"]
    assert len(commands) == hal_ir.count("hal.command_buffer.dispatch<")
    assert len(commands) == vm_call_count(dump(marked.vmfb, tmp_path, "disassembly"), "hal.command_buffer.dispatch")
    site_ids = {site.id for site in marked.section_map.sites}
    assert sorted(c.site for c in commands) == sorted(site_ids)
    for command in commands:
        assert command.key and command.shares and command.workgroups and command.binding_bytes
        assert sum(share.weight for share in command.shares) == pytest.approx(1.0)


def test_map_matches_runtime_profile_exactly(gpt, tmp_path):
    marked, _, _, tokens = gpt
    np.save(tmp_path / "tokens.npy", tokens)
    runtime = profile_sequences(marked.vmfb, tmp_path, "main", [f"@{tmp_path / 'tokens.npy'}"])
    static = [buffer.signature() for buffer in marked.section_map.command_buffers]
    assert runtime and all(sequence in static for sequence in runtime)
    assert ("barrier", "barrier") in runtime[0]  # the runtime counts execution barriers


def test_multiple_functions_dynamic_shapes_fill_and_copy(multi, tmp_path):
    compiled, _ = multi
    buffers = {buffer.function: buffer for buffer in compiled.section_map.command_buffers}
    assert set(buffers) == {"dyn", "fill_copy"}
    dyn = buffers["dyn"].commands[0]
    assert dyn.workgroups is None  # dynamic shape: known only at run time
    assert {share.path for share in dyn.shares} == {("Dyn", "Add"), ("Dyn", "Exp")}
    ops = {command.op: command for command in buffers["fill_copy"].commands}
    assert ops["fill"].sections == [("Fill",)] and ops["copy"].sections == [("Concat",)]
    np.save(tmp_path / "d.npy", np.ones((5, 16), np.float32))
    np.save(tmp_path / "a.npy", np.ones((8, 16), np.float32))
    for function, inputs in (("dyn", [f"@{tmp_path / 'd.npy'}"] * 2), ("fill_copy", [f"@{tmp_path / 'a.npy'}", "3"])):
        runtime = profile_sequences(compiled.vmfb, tmp_path, function, inputs)
        assert runtime and all(sequence == buffers[function].signature() for sequence in runtime)


def test_map_is_embedded_and_saved_beside(multi, tmp_path):
    compiled, _ = multi
    path = compiled.save(tmp_path / "model.vmfb")
    assert (tmp_path / "model.sections.json").exists()
    (tmp_path / "model.sections.json").unlink()
    assert read_section_map(path) == compiled.section_map  # from the .vmfb alone


def test_plain_compile_has_no_map_and_sidecar_is_the_fallback(fused, tmp_path):
    _, plain, _ = fused
    path = tmp_path / "plain.vmfb"
    path.write_bytes(plain.vmfb)
    with pytest.raises(SectionmarkError, match="no embedded section map"):
        read_section_map(path)
    fused[0].section_map.save(tmp_path / "plain.sections.json")
    assert read_section_map(path) == fused[0].section_map


# --------------------------------------------------------------------------- debug groups


def _check_groups(hal_ir: str, section_map) -> None:
    """Groups balanced per command buffer, and each command inside its section's groups."""
    expected = []
    for buffer in section_map.command_buffers:
        for command in buffer.commands:
            if command.op != "barrier":
                heaviest = [s.path for s in command.shares if s.weight == command.shares[0].weight]
                expected.append(heaviest if command.shares else [()])
    stack: list[str] = []
    seen = 0
    for event, label in group_events(hal_ir):
        if event == "begin":
            stack.append(label)
        elif event == "end":
            assert stack, "end_debug_group without a matching begin"
            stack.pop()
        elif event == "finalize":
            assert stack == [], "command buffer finalized with open groups"
        else:
            assert tuple(stack) in expected[seen]
            seen += 1
    assert stack == [] and seen == len(expected)


def test_debug_groups_are_balanced_and_nested_as_sections(gpt, fused, multi):
    for compiled, hal_ir in ((gpt[0], gpt[2]), (fused[0], fused[2]), multi):
        _check_groups(hal_ir, compiled.section_map)
    # Nested paths share the outer group: Block 0 opens once around its two sections.
    events = [label for event, label in group_events(gpt[2]) if event == "begin"]
    assert events.count("Block 0") <= 3 and events.count("MLP") == 2


def test_debug_groups_false_keeps_command_buffers_untouched(tmp_path):
    compiled, hal_ir = compile_capturing_hal(fused_source(True), debug_groups=False)
    assert "debug_group" not in hal_ir
    assert compiled.section_map.command_buffers[0].commands[0].shares
    assert "begin_debug_group" not in dump(compiled.vmfb, tmp_path, "metadata")


@pytest.mark.parametrize("target", ["cuda", "rocm"])
def test_gpu_compiles_without_debug_groups_their_runtime_cannot_take(target, tmp_path):
    """IREE 3.13's CUDA/HIP stream-mode command buffers have no debug-group entry (a null call on an H200)."""
    compiled = smc.compile(fused_source(True), target=target)
    assert "debug_group" not in dump(compiled.vmfb, tmp_path, "metadata")
    assert compiled.section_map.target == target
    assert any(len(site.shares) == 3 for site in compiled.section_map.sites)
    asked = smc.compile(fused_source(True), target=target, debug_groups=True)  # for a runtime that takes them
    assert "hal.command_buffer.begin_debug_group" in dump(asked.vmfb, tmp_path, "metadata")


# --------------------------------------------------------------------------- bad input


def test_unparsable_mlir_gives_one_line_with_the_first_diagnostic():
    with pytest.raises(SectionmarkError) as error:
        smc.compile("func.func @main( {\n")
    message = str(error.value)
    assert "\n" not in message and message.startswith("MLIR input does not parse:")
    assert len(message) > len("MLIR input does not parse: ")


def test_unknown_target_names_the_known_ones():
    with pytest.raises(SectionmarkError, match="unknown target 'tpu'.*llvm-cpu"):
        smc.compile(fused_source(True), target="tpu")


def test_missing_file_and_unwritable_output(fused, tmp_path):
    with pytest.raises(SectionmarkError, match="not found"):
        smc.compile(str(tmp_path / "missing.mlir"))
    with pytest.raises(SectionmarkError, match="cannot write"):
        fused[0].save(tmp_path / "no" / "such" / "dir" / "m.vmfb")


def test_compile_says_how_many_sections_reached_dispatches(tmp_path, capsys):
    from sectionmark import cli

    source = """
    func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {
      %c = arith.constant dense<2.0> : tensor<8xf32> loc("sectionmark:Folded"("f.py":1:0))
      %d = arith.mulf %c, %c : tensor<8xf32> loc("sectionmark:Folded"("f.py":1:0))
      %0 = arith.addf %a, %d : tensor<8xf32> loc("sectionmark:Add"("f.py":2:0))
      return %0 : tensor<8xf32>
    }
    """
    compiled = smc.compile(source)
    assert compiled.section_map.sections == [("Folded",), ("Add",)]
    assert compiled.section_map.reached == [("Add",)]
    assert compiled.sections_summary == "1 of 2 sections reached dispatches (not: Folded)"
    (tmp_path / "f.mlir").write_text(source)
    assert cli.main(["compile", str(tmp_path / "f.mlir"), "-o", str(tmp_path / "f.vmfb")]) == 0
    assert "1 of 2 sections reached dispatches (not: Folded)" in capsys.readouterr().out


def test_memoized_command_buffers_belong_to_the_function_that_runs_them(fused):
    marked = fused[0]
    assert {buffer.function for buffer in marked.section_map.command_buffers} == {"main"}


def test_compiling_loads_no_typed_op_classes_and_leaves_them_loadable():
    """The hook reads ops generically: a fresh process that compiles imports no hal or linalg op classes
    (a quarter of a second), and they still load afterwards for the program's own use."""
    code = f"""
import sys
import sectionmark as sm
compiled = sm.compile({fused_source(True)!r}, target="llvm-cpu")
dispatches = [command for command in compiled.section_map.command_buffers[0].commands if command.op == "dispatch"]
assert all(command.workgroups and command.binding_bytes for command in dispatches), dispatches
assert dispatches[-1].binding_bytes == [1024, 1024, 1024], dispatches[-1]  # the matmul: a, b and its result
loaded = [name for name in ("iree.compiler.dialects.hal", "iree.compiler.dialects.linalg") if name in sys.modules]
assert not loaded, loaded
from iree.compiler import ir
with ir.Context():
    module = ir.Module.parse({fused_source(False)!r})
    matmul = [op for op in module.body.operations[0].regions[0].blocks[0].operations if op.name == "linalg.matmul"]
    assert type(matmul[0]).__name__ == "MatmulOp", type(matmul[0])
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_sites_are_weighed_before_the_compiler_goes_on_when_its_context_runs_one_thread(monkeypatch):
    """Weighing creates attributes in the compiler's context (named ops' memoized maps): beside the
    running compiler only when the context locks what it uniques, i.e. runs threads."""
    from sectionmark.compiler.flow import weigh_sites
    from sectionmark.compiler.phases import PhasedCompilation

    events: list[str] = []
    advance = PhasedCompilation.advance

    def recording_advance(self, phase):
        events.append(phase)
        return advance(self, phase)

    def recording_weigh(copy):
        sites = weigh_sites(copy)
        events.append("weighed")
        return sites

    monkeypatch.setattr(PhasedCompilation, "advance", recording_advance)
    monkeypatch.setattr(pipeline, "weigh_sites", recording_weigh)
    monkeypatch.setattr(PhasedCompilation, "multithreaded", property(lambda self: False))
    compiled = smc.compile(fused_source(True))
    assert events == ["dispatch-creation", "weighed", "flow", "hal"]
    assert compiled.section_map.sites and compiled.section_map.reached


def test_a_failure_while_weighing_sites_in_the_second_thread_reaches_the_caller(monkeypatch):
    """The sites are weighed in a second thread while the compiler goes on: an error there is the
    caller's one line, the thread's copy of the module goes before the compiler's context, and the
    next compile works."""
    from sectionmark.compiler.flow import weigh_sites

    def fail(copy):
        def weigh(site):
            raise SectionmarkError("internal error: cannot weigh the sites")
        monkeypatch.setattr(flow, "_weighed_site", lambda site, *rest: weigh(site))  # fails holding a site op
        return weigh_sites(copy)

    monkeypatch.setattr(pipeline, "weigh_sites", fail)
    with pytest.raises(SectionmarkError, match="cannot weigh the sites"):
        smc.compile(fused_source(True))
    monkeypatch.undo()
    import gc

    gc.collect()
    assert len(smc.compile(fused_source(True)).section_map.sites) > 0
