"""sm.slice / bench_section on the real stack: nanoGPT (torch and JAX), and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

import sectionmark as sm
from sectionmark.errors import SectionmarkError
from sectionmark.section_map import Command, CommandBuffer, SectionMap, Share
from sectionmark.workflows.slice_bench import (
    SliceBench, bench_section, capture_boundary, fused_across_boundary, run_slice,
)
from nanogpt_builders import jax_gpt, torch_gpt

ATTENTION = "Block 0/Self Attention"


@pytest.fixture(scope="module")
def torch_export():
    model, args = torch_gpt()
    return sm.torch.export(model, args=args), [args[0].numpy()]


def test_torch_slice_reproduces_the_whole_models_values_bit_for_bit_and_prints_the_table(torch_export):
    exported, args = torch_export
    bench = bench_section(exported, ATTENTION, args, iterations=3, warmup=1)
    assert bench.max_abs_error == [0.0]  # same kernels on the same inputs: bit-identical
    assert bench.in_context_ns > 0 and bench.isolated_ns > 0
    assert bench.in_context_dispatches >= 1 and bench.isolated_dispatches >= 1
    table = bench.table()
    assert "Block 0 / Self Attention" in table and "in context" in table and "isolated" in table
    assert "dispatches fused across the boundary" in table
    assert bench.in_context_bytes > 0 and bench.isolated_bytes > 0
    assert "bytes read + written per call" in table
    # The output projection is fused with Block 0's residual add in context: it also reads the residual there.
    assert bench.fused_across_boundary == 1 and "1 fusion(s) across the boundary lost" in table
    assert bench.in_context_bytes > bench.isolated_bytes


def slice_bench(in_context: float, isolated: float, fused: int) -> SliceBench:
    return SliceBench(path=("Block 0", "Self Attention"), in_context_ns=30e3, isolated_ns=35e3,
                      in_context_dispatches=in_context, isolated_dispatches=isolated, fused_across_boundary=fused,
                      max_abs_error=[0.0], in_context_bytes=324_400.0, isolated_bytes=None)


def test_table_says_which_fusions_across_the_boundary_were_lost():
    lost = slice_bench(in_context=9, isolated=11, fused=2).table()
    assert "bytes read + written per call         324.4 kB    n/a" in lost
    assert "2 fusion(s) across the boundary lost" in lost
    assert "alone, the section runs 2 more dispatch(es) per call than in context" in lost
    assert "1 fewer dispatch(es)" in slice_bench(in_context=3, isolated=2, fused=1).table()
    same = slice_bench(in_context=11, isolated=11, fused=0).table()
    assert "lost" not in same and "alone, the section runs" not in same


def test_bench_without_inputs_runs_the_model_on_random_ones(torch_export, tmp_path, capsys):
    """No --input: random inputs of the model's shapes; the slice still gets the model's own boundary values."""
    from sectionmark.cli import main

    exported, _args = torch_export
    model_path = exported.save_mlir(tmp_path / "gpt.mlir")
    argv = ["slice", str(model_path), "--section", ATTENTION, "-o", str(tmp_path / "attn.mlir"), "--bench", "-n", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "inputs: random values of the model's argument shapes" in out
    assert "max abs difference per output): 0" in out and "bytes read + written per call" in out


def test_random_arguments_follow_the_types():
    from sectionmark.workflows.slice_bench import random_arguments

    tokens, weights = random_arguments(["!torch.vtensor<[1,16],si64>", "tensor<4x8xf32>"])
    assert tokens.shape == (1, 16) and tokens.dtype == np.int64 and set(np.unique(tokens)) <= {0, 1}
    assert weights.shape == (4, 8) and weights.dtype == np.float32
    with pytest.raises(sm.SectionmarkError, match=r"argument 0 of the model \(tensor<\?x8xf32>\): give the model's inputs"):
        random_arguments(["tensor<?x8xf32>"])


def test_fused_across_boundary_counts_dispatches_shared_with_ops_outside_the_section():
    attention, softmax, mlp = ("Block 0", "Attention"), ("Block 0", "Attention", "Softmax"), ("Block 0", "MLP")
    commands = [
        Command(op="dispatch", key="inside", shares=[Share(attention, 0.5), Share(softmax, 0.5)]),
        Command(op="dispatch", key="across", shares=[Share(softmax, 0.9), Share(mlp, 0.1)]),
        Command(op="dispatch", key="unmarked"),
        Command(op="barrier"),
    ]
    section_map = SectionMap(sections=[attention, softmax, mlp], command_buffers=[CommandBuffer(0, "main", commands)],
                             sites=[])
    assert fused_across_boundary(section_map, attention) == 1
    assert fused_across_boundary(section_map, softmax) == 2  # its parent's own ops are outside it
    assert fused_across_boundary(section_map, ("Block 0",)) == 0


def test_slice_signature_is_the_values_crossing_the_boundary(torch_export):
    exported, _ = torch_export
    attention = sm.slice(exported, ATTENTION)
    assert attention.inputs == ["!torch.vtensor<[1,32,64],f32>"]
    assert attention.outputs == ["!torch.vtensor<[1,32,64],f32>"]
    assert "util.global.load" in attention.mlir  # parameters stay parameters


def test_jax_slice_reproduces_the_whole_models_values():
    forward, tokens = jax_gpt()
    exported = sm.jax.export(forward, tokens)
    attention = sm.slice(exported, ("Block 0", "Self Attention"))
    inputs, expected = capture_boundary(attention, [tokens])
    outputs = run_slice(sm.compile(attention.program), inputs)
    assert len(outputs) == len(expected) >= 1
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_unknown_path_lists_the_known_sections(torch_export):
    exported, _ = torch_export
    with pytest.raises(SectionmarkError, match="unknown section 'Block 9'; known sections: Embedding;") as error:
        sm.slice(exported, "Block 9")
    assert "\n" not in str(error.value)


def test_mlir_without_sections_is_one_line():
    text = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}\n"
    with pytest.raises(SectionmarkError, match="^the MLIR has no sections"):
        sm.slice(text, "A")


def test_mlir_that_does_not_parse_is_one_line_with_where():
    with pytest.raises(SectionmarkError, match=r'^cannot parse the MLIR: .* at loc\("-":1:1\)$'):
        sm.slice("garbage {", "A")


def test_section_with_no_ops_of_its_own_is_one_line():
    # "B" owns only a constant nothing outside reads: no value leaves it.
    text = (
        'func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
        '  %c = arith.constant dense<1.0> : tensor<4xf32> loc("sectionmark:B")\n'
        '  %y = arith.addf %x, %x : tensor<4xf32> loc("sectionmark:A")\n'
        '  return %y : tensor<4xf32>\n'
        '}\n'
    )
    assert sm.slice(text, "A").inputs == ["tensor<4xf32>"]
    with pytest.raises(SectionmarkError, match="^section 'B' computes nothing used outside it"):
        sm.slice(text, "B")


def test_cli_writes_the_slice_and_refuses_an_unknown_section_in_one_line(torch_export, tmp_path, capsys):
    from sectionmark.cli import main

    exported, _ = torch_export
    model = exported.save_mlir(tmp_path / "gpt.mlir")
    assert main(["slice", str(model), "--section", "Block 0 / Self Attention", "-o", str(tmp_path / "attn.mlir")]) == 0
    assert "util.global.load" in (tmp_path / "attn.mlir").read_text()
    assert main(["slice", str(model), "--section", "Nope", "-o", str(tmp_path / "nope.mlir")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("sectionmark: error: unknown section 'Nope'") and error.count("\n") == 1
    assert not (tmp_path / "nope.mlir").exists()


def test_a_repeated_nested_section_is_addressed_by_its_path(torch_export):
    exported, args = torch_export
    qkv = sm.slice(exported, "Block 1/Self Attention/QKV")
    assert qkv.path == ("Block 1", "Self Attention", "QKV")
    inputs, expected = capture_boundary(qkv, args)
    outputs = run_slice(sm.compile(qkv.program), inputs)
    assert len(outputs) == len(expected) >= 1
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(got, want)


def test_a_slice_of_a_model_with_external_parameters_reads_the_same_parameter_file(tmp_path, capsys):
    import torch
    from iree.turbine import aot

    from sectionmark.cli import main

    class TwoLayers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)

        def forward(self, x):
            with sm.section("First"):
                x = torch.relu(self.first(x))
            with sm.section("Second"):
                return self.second(x)

    torch.manual_seed(0)
    model, x = TwoLayers().eval(), torch.randn(4, 64)
    aot.externalize_module_parameters(model)
    aot.save_module_parameters(tmp_path / "weights.irpa", model)
    exported = sm.torch.export(model, args=(x,))
    second = sm.slice(exported, "Second")
    weights = [line for line in second.mlir.splitlines() if line.lstrip().startswith("util.global")]
    assert weights and all(".parameter.named<\"model\"::\"second." in line for line in weights)  # its own, still external
    model_path = exported.save_mlir(tmp_path / "two.mlir")
    np.save(tmp_path / "x.npy", x.numpy())

    def bench(inputs: str = "x.npy", parameters: str = "weights.irpa") -> list[str]:
        return ["slice", str(model_path), "--section", "Second", "-o", str(tmp_path / "second.mlir"), "--bench",
                "--input", str(tmp_path / inputs), "--parameters", f"model={tmp_path / parameters}", "-n", "2"]

    assert main(bench()) == 0
    out = capsys.readouterr().out
    assert "section Second" in out and "max abs difference per output): 0" in out

    # The slice compiles as it is (it was refused: "cannot compile a SectionSlice") and reads the same file.
    hidden = np.maximum(x.numpy() @ model.first.weight.detach().numpy().T + model.first.bias.detach().numpy(), 0)
    sliced = sm.load(sm.compile(second), parameters=f"model={tmp_path / 'weights.irpa'}").main(hidden).to_host()
    np.testing.assert_allclose(sliced, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)

    # Inputs the model cannot take and parameter files that are not one: one line each (were tracebacks).
    weights = (tmp_path / "weights.irpa").read_bytes()
    (tmp_path / "truncated.irpa").write_bytes(weights[: len(weights) // 2])
    (tmp_path / "foreign.irpa").write_bytes(b"GGUF" + bytes(256))
    np.save(tmp_path / "shape.npy", np.zeros((4, 32), np.float32))
    np.save(tmp_path / "dtype.npy", np.zeros((4, 64), np.float64))
    np.save(tmp_path / "order.npy", np.zeros((4, 64), ">f4"))
    for argv, fragment in [(bench(inputs="shape.npy"), "shape dimension 1 mismatch"),
                           (bench(inputs="dtype.npy"), "element type mismatch"),
                           (bench(inputs="order.npy"), "could not map dtype"),
                           (bench(parameters="truncated.irpa"), "cannot read parameter file"),
                           (bench(parameters="foreign.irpa"), "cannot read parameter file")]:
        assert main(argv) == 1, argv
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith("sectionmark: error: ") and fragment in error, error
