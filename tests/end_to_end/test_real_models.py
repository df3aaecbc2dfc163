"""Real third-party model code on the real stack: export -> compile -> load / profile.

* Hugging Face GPT-2 and Llama (tiny configs, random weights), marked without
  editing transformers (tests/helpers/hf_models.py): sections exactly as written,
  almost no "(unmarked)" time, numerics of the compiled module equal to eager.
* The same models as two functions of one module, prefill and decode, sharing
  a KV cache through iree-turbine's FxProgramsBuilder: both profiled, both
  numerically equal to one eager call over the whole sequence.
* A ResNet-style CNN and a matmul fused with its bias add: in a fused dispatch
  the expensive op (conv, matmul) must get the time, not an even split by op
  count (acceptance tests of the cost-based weights, DESIGN.md "Fused dispatches").
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from iree.turbine import aot  # noqa: E402

import sectionmark as sm  # noqa: E402
from invariants import assert_profile_invariants  # noqa: E402
from hf_models import LAYERS, MAX_LEN, VOCAB, CachedLM, Logits, empty_cache, tiny_gpt2, tiny_llama  # noqa: E402

# Compiled float32 against eager torch: the largest differences seen are 2.4e-7
# on logits, 2e-7 on cache entries and 6e-8 on the CNN's outputs.
RTOL, ATOL = 1e-4, 1e-5
UNMARKED_LIMIT = 0.05  # of all dispatch time, for models marked top to bottom
PROMPT = 8  # prefill length; decode then runs at positions PROMPT, PROMPT + 1, ...
DECODE_STEPS = 3
ITERATIONS = 3

BUILDERS = {"gpt2": tiny_gpt2, "llama": tiny_llama}


def written_sections(name: str) -> set[tuple[str, ...]]:
    """The section paths tests/helpers/hf_models.py marks, as a reader of that file would list them."""
    sections = {("Embedding",), ("Final Norm",), ("LM Head",)}
    if name == "llama":
        sections.add(("Rotary Embedding",))
    for index in range(LAYERS):
        layer = f"Layer {index}"
        sections |= {(layer,), (layer, "Self Attention"), (layer, "MLP")}
    return sections


def tokens(count: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, count), generator=torch.Generator().manual_seed(1))


def reference_logits(model, input_ids: torch.Tensor) -> np.ndarray:
    """Plain transformers, eager: no cache, the model's own causal mask."""
    with torch.no_grad():
        return model(input_ids=input_ids, use_cache=False).logits.numpy()


def assert_profile_is_marked(profile, expected: set[tuple[str, ...]]) -> None:
    """Almost all time in sections, and every section ran a dispatch per call or says why not.

    IREE hoists work that depends only on constants (Llama's rotary cos/sin of
    positions 0..T-1 when the positions are not an input) into the module
    initializer: it runs once at load, and the table says so for that section.
    """
    assert_profile_invariants(profile)
    assert profile.unmarked_ns / profile.total_ns < UNMARKED_LIMIT, profile.table()
    rows = {row.path: row for row in profile.sections}
    idle = sorted(
        path for path in expected
        if rows[path].busy_ns <= 0 and rows[path].note != "no dispatches: ran only in initializers"
    )
    assert not idle, f"sections without time: {idle}\n{profile.table()}"


# --------------------------------------------------------------- whole sequence


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def whole_sequence(request):
    """A model exported as one function over MAX_LEN tokens, compiled for llvm-cpu."""
    model = BUILDERS[request.param]()
    input_ids = tokens(MAX_LEN)
    exported = sm.torch.export(Logits(model), args=(input_ids,))
    compiled = sm.compile(exported, target="llvm-cpu")
    return SimpleNamespace(name=request.param, model=model, input_ids=input_ids, exported=exported, compiled=compiled)


def test_sections_are_exactly_those_written(whole_sequence):
    assert set(whole_sequence.exported.sections) == written_sections(whole_sequence.name)


def test_compiled_logits_match_eager(whole_sequence):
    logits = sm.load(whole_sequence.compiled).main(whole_sequence.input_ids.numpy()).to_host()
    expected = reference_logits(whole_sequence.model, whole_sequence.input_ids)
    np.testing.assert_allclose(logits, expected, rtol=RTOL, atol=ATOL)


def test_profile_time_is_in_the_sections(whole_sequence):
    profile = sm.profile(whole_sequence.compiled, args=(whole_sequence.input_ids.numpy(),),
                         iterations=ITERATIONS, warmup=1)
    assert_profile_is_marked(profile, written_sections(whole_sequence.name))


def test_plain_aot_export_in_a_fresh_process_keeps_every_section_without_a_warning(tmp_path):
    """The user's own export, no scope, in a process where sectionmark has done nothing yet (the first a model
    placed on two devices, whose transfers turbine expands only with the hooks' help)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from parallel_gpt import gpt_sections
    from test_byte_identity import assert_same_executables

    helpers = Path(__file__).resolve().parents[1] / "helpers"
    run = subprocess.run([sys.executable, str(helpers / "fresh_plain_export.py"), str(tmp_path), str(PROMPT)],
                         capture_output=True, text=True, timeout=600, cwd=helpers,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(helpers.parents[1] / "src"), str(helpers)])})
    assert run.returncode == 0, run.stderr[-3000:]
    sections = {style: {tuple(path) for path in paths} for style, paths in json.loads(run.stdout.splitlines()[-1]).items()}
    assert sections == {"nn.Module": written_sections("gpt2"), "ExportedProgram": written_sections("gpt2"),
                        "FxProgramsBuilder": written_sections("llama"), "several devices": set(gpt_sections())}
    for pair in ("", "devices_"):
        assert_same_executables((tmp_path / f"{pair}ours.vmfb").read_bytes(),
                                (tmp_path / f"{pair}plain.vmfb").read_bytes(), tmp_path)
    noise = [line for line in run.stderr.splitlines() if "sectionmark" in line]  # ours, or one naming our globals
    assert not noise, noise


# --------------------------------------------------------------- prefill + decode


@pytest.fixture(scope="module", params=[(name, strict) for name in sorted(BUILDERS) for strict in (True, False)],
                ids=lambda param: f"{param[0]}-{'strict' if param[1] else 'non-strict'}")
def prefill_decode(request):
    """``prefill`` (PROMPT tokens) and ``decode`` (one token) of one CachedLM, in one module.

    Exported with TorchDynamo (``strict=True``, turbine's default) and without.
    ``export_program`` exports right away and re-traces Llama's no_grad rotary
    embedding, so it runs inside ``sm.torch.sections()``.
    """
    name, strict = request.param
    model = BUILDERS[name]()
    keys, values = empty_cache(model)
    builder = aot.FxProgramsBuilder(CachedLM(model))
    with sm.torch.sections():

        @builder.export_program(name="prefill", args=(tokens(PROMPT), torch.arange(PROMPT), keys, values),
                                strict=strict)
        def prefill(module, input_ids, positions, keys, values):
            return module(input_ids, positions, keys, values)

        @builder.export_program(name="decode", args=(tokens(1), torch.tensor([PROMPT]), keys, values), strict=strict)
        def decode(module, input_ids, positions, keys, values):
            return module(input_ids, positions, keys, values)

    exported = sm.torch.export(builder)
    compiled = sm.compile(exported, target="llvm-cpu")
    return SimpleNamespace(name=name, model=model, exported=exported, compiled=compiled)


def test_prefill_decode_sections_are_exactly_those_written(prefill_decode):
    assert set(prefill_decode.exported.sections) == written_sections(prefill_decode.name)


def test_prefill_then_decode_match_one_eager_call(prefill_decode):
    """Decode steps chain the cache on the device; each step's logits equal the full sequence's."""
    input_ids = tokens(PROMPT + DECODE_STEPS)
    expected = reference_logits(prefill_decode.model, input_ids)
    module = sm.load(prefill_decode.compiled)
    keys, values = (cache.numpy() for cache in empty_cache(prefill_decode.model))
    logits, keys, values = module.prefill(input_ids[:, :PROMPT].numpy(), np.arange(PROMPT), keys, values)
    np.testing.assert_allclose(logits.to_host(), expected[:, :PROMPT], rtol=RTOL, atol=ATOL)
    for position in range(PROMPT, PROMPT + DECODE_STEPS):
        logits, keys, values = module.decode(input_ids[:, position:position + 1].numpy(), np.array([position]), keys, values)
        np.testing.assert_allclose(logits.to_host(), expected[:, position:position + 1], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("function", ["prefill", "decode"])
def test_prefill_and_decode_profiles_are_in_the_sections(prefill_decode, function):
    step = CachedLM(prefill_decode.model)
    keys, values = empty_cache(prefill_decode.model)
    prompt = tokens(PROMPT)
    if function == "prefill":
        args = (prompt, torch.arange(PROMPT), keys, values)
    else:
        with torch.no_grad():
            _logits, keys, values = step(prompt, torch.arange(PROMPT), keys, values)
        args = (tokens(1), torch.tensor([PROMPT]), keys, values)
    profile = sm.profile(prefill_decode.compiled, args=[arg.numpy() for arg in args], function=function,
                         iterations=ITERATIONS, warmup=1)
    assert profile.calls == ITERATIONS
    assert_profile_is_marked(profile, written_sections(prefill_decode.name))


# --------------------------------------------------------------- fused dispatches


class ConvBlock(torch.nn.Module):
    """conv -> batch norm -> ReLU, each op its own section (IREE fuses all three into the conv)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(channels)
        with torch.no_grad():  # statistics of a trained network, so the norm is not the identity
            self.norm.running_mean.uniform_(-0.5, 0.5)
            self.norm.running_var.uniform_(0.5, 2.0)
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        with sm.section("Conv"):
            x = self.conv(x)
        with sm.section("BatchNorm"):
            x = self.norm(x)
        with sm.section("ReLU"):
            return torch.relu(x)


class ResNetStyle(torch.nn.Module):
    """Two conv blocks, a residual add around them, global average pooling and a linear head."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.blocks = torch.nn.ModuleList([ConvBlock(channels) for _ in range(2)])
        self.head = torch.nn.Linear(channels, classes)

    def forward(self, x):
        y = x
        for index, block in enumerate(self.blocks):
            with sm.section(f"Block {index}"):
                y = block(y)
        with sm.section("Residual"):
            y = y + x
        with sm.section("Head"):
            return self.head(y.mean(dim=(2, 3)))


CNN_SECTIONS = {("Residual",), ("Head",), ("Block 0",), ("Block 1",)} | {
    (f"Block {index}", op) for index in range(2) for op in ("Conv", "BatchNorm", "ReLU")
}


class MatmulBias(torch.nn.Module):
    """A 128x128x128 matmul and its bias add in separate sections (IREE fuses the add)."""

    def __init__(self, size: int = 128):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(size, size))
        self.bias = torch.nn.Parameter(torch.randn(size))

    def forward(self, x):
        with sm.section("Matmul"):
            y = x @ self.weight
        with sm.section("Bias Add"):
            return y + self.bias


def run_marked(model: torch.nn.Module, x: torch.Tensor) -> SimpleNamespace:
    exported = sm.torch.export(model, args=(x,))
    compiled = sm.compile(exported, target="llvm-cpu")
    profile = sm.profile(compiled, args=(x.numpy(),), iterations=ITERATIONS, warmup=1)
    assert_profile_invariants(profile)
    return SimpleNamespace(model=model, x=x, exported=exported, compiled=compiled, profile=profile)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return run_marked(ResNetStyle().eval(), torch.randn(1, 16, 16, 16))


@pytest.fixture(scope="module")
def matmul_bias():
    torch.manual_seed(0)
    return run_marked(MatmulBias(), torch.randn(128, 128))


def fused_sites(profile, *names: str) -> list:
    """Dispatch sites whose composition includes a section ending in each of ``names``."""
    return [site for site in profile.sites if set(names) <= {path[-1] for path, _weight in site.sections if path}]


def weight_of(site, name: str) -> float:
    return sum(weight for path, weight in site.sections if path and path[-1] == name)


@pytest.mark.parametrize("example", ["cnn", "matmul_bias"])
def test_fused_examples_compile_with_their_sections_and_numerics(example, request):
    run = request.getfixturevalue(example)
    expected = CNN_SECTIONS if example == "cnn" else {("Matmul",), ("Bias Add",)}
    assert set(run.exported.sections) == expected
    with torch.no_grad():
        reference = run.model(run.x).numpy()
    np.testing.assert_allclose(sm.load(run.compiled).main(run.x.numpy()).to_host(), reference, rtol=RTOL, atol=ATOL)
    assert run.profile.unmarked_ns == 0, run.profile.table()


def test_conv_gets_the_time_of_its_fused_conv_batchnorm_relu_dispatch(cnn):
    """Acceptance (cost-based weights): the conv's FLOPs dwarf the elementwise ops fused into it."""
    fused = fused_sites(cnn.profile, "Conv", "BatchNorm", "ReLU")
    assert fused, f"IREE no longer fuses conv, batch norm and ReLU into one dispatch:\n{cnn.profile.table()}"
    for site in fused:
        assert weight_of(site, "Conv") >= 0.9, f"{site.key}: {site.sections}"


def test_bias_add_fused_into_a_matmul_gets_little_time(matmul_bias):
    """Acceptance (cost-based weights): 128^2 adds next to 2 * 128^3 matmul FLOPs."""
    profile = matmul_bias.profile
    fused = fused_sites(profile, "Matmul", "Bias Add")
    assert fused, f"IREE no longer fuses the bias add into the matmul:\n{profile.table()}"
    for site in fused:
        assert weight_of(site, "Bias Add") <= 0.05, f"{site.key}: {site.sections}"
    assert profile.section(("Bias Add",)).busy_ns <= 0.05 * profile.total_ns, profile.table()
