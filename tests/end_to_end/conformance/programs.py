"""The table: real third-party programs, tiny configs, seeded random weights, each marked as a user would.

Every builder returns a `Program`. Hugging Face models are marked from outside
(`recorder.mark_by_spec`: a marking spec per model, ``{i}`` for each layer);
the others are marked in their own code with ``sm.section``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

import sectionmark as sm
from hf_models import Logits

from .recorder import backward, mark_by_spec, recompute, record_sections

LAYERS = 2
HIDDEN = 64
HEADS = 4
VOCAB = 256
SEQUENCE = 8


@dataclass
class Program:
    """One row of the table.

    ``export()`` gives the SectionedExport; ``reference()`` the eager outputs
    (a list of arrays); ``plain_text()`` the MLIR of the plain pipeline (which
    one: ``plain_note``); ``expected`` the section paths the program must declare.
    """

    name: str
    framework: str  # "torch" or "jax"
    export: Callable[[], Any]
    reference: Callable[[], list[np.ndarray]]
    plain_text: Callable[[], str]
    args: tuple  # what the compiled function is called with (arrays or JAX pytrees)
    expected: set[tuple[str, ...]]
    plain_note: str = "the plain iree-turbine / JAX pipeline"
    rtol: float = 1e-4
    atol: float = 1e-5
    devices: int = 1  # local-task devices it is compiled for and runs on (several: `sm.compile(devices=N)`)

    @property
    def input_type(self) -> str:
        return "torch" if self.framework == "torch" else "stablehlo"


def _torch_forward(name: str, model: torch.nn.Module, args: tuple, spec: Optional[list[tuple[str, str]]] = None) -> Program:
    """A torch module whose forward returns one tensor: eager under no_grad, sections recorded by running it.

    ``spec``: the marking spec applied to the model; every module it names must run (a spec naming a
    module the model never calls would silently expect less).
    """
    from test_byte_identity import _torch_plain_text

    def eager():
        with torch.no_grad():
            return model(*args)

    recorded = set(record_sections(eager))
    never_ran = {section for _path, section in spec or () if not any(section in path for path in recorded)}
    assert not never_ran, f"{name}: marked modules that never ran: {never_ran}"
    return Program(
        name=name, framework="torch",
        export=lambda: sm.torch.export(model, args=args),
        reference=lambda: [eager().numpy()],
        plain_text=lambda: _torch_plain_text(model, args),
        args=tuple(arg.numpy() for arg in args),
        expected=recorded,
    )


class Output(torch.nn.Module):
    """``inputs -> one tensor``: a Hugging Face model's logits (like tests/hf_models.Logits)."""

    def __init__(self, model: torch.nn.Module, call: Callable):
        super().__init__()
        self.model, self.call = model, call

    def forward(self, *inputs):
        return self.call(self.model, *inputs)


def _layers(template: list[tuple[str, str]], layers: int = LAYERS) -> list[tuple[str, str]]:
    return [(path.format(i=i), name.format(i=i)) for i in range(layers) for path, name in template]


def _tokens(count: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, count), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------- Hugging Face transformers


def _causal_lm(name: str, model, prefix: str) -> Program:
    """A Llama-style decoder-only LM (modules under ``prefix``), the whole sequence in one call with a
    prepared causal mask (tests/hf_models.Logits)."""
    spec = [
        (f"{prefix}.embed_tokens", "Embedding"), (f"{prefix}.rotary_emb", "Rotary Embedding"),
        *_layers([(f"{prefix}.layers.{{i}}", "Layer {i}"), (f"{prefix}.layers.{{i}}.self_attn", "Attention"),
                  (f"{prefix}.layers.{{i}}.mlp", "MLP")]),
        (f"{prefix}.norm", "Final Norm"), ("lm_head", "LM Head"),
    ]
    mark_by_spec(model, spec)
    return _torch_forward(name, Logits(model), (_tokens(SEQUENCE),), spec)


def gpt2() -> Program:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                       bos_token_id=0, eos_token_id=0)).eval()
    spec = [
        ("transformer.wte", "Embedding"), ("transformer.wpe", "Embedding"),  # two modules, one section
        *_layers([("transformer.h.{i}", "Layer {i}"), ("transformer.h.{i}.attn", "Attention"),
                  ("transformer.h.{i}.mlp", "MLP")]),
        ("transformer.ln_f", "Final Norm"), ("lm_head", "LM Head"),
    ]
    mark_by_spec(model, spec)
    return _torch_forward("gpt2", Logits(model), (_tokens(SEQUENCE),), spec)


def llama() -> Program:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=16,
        bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    return _causal_lm("llama", model, "model")


def qwen2_gqa() -> Program:
    """Qwen2 with grouped-query attention: 4 query heads share 2 key/value heads (and q/k/v have biases)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, max_position_embeddings=16,
        bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    return _causal_lm("qwen2-gqa", model, "model")


def bert() -> Program:
    """BertForMaskedLM (bidirectional, no mask given: transformers builds none)."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                       num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                                       max_position_embeddings=16)).eval()
    spec = [
        ("bert.embeddings", "Embeddings"),
        *_layers([("bert.encoder.layer.{i}", "Layer {i}"), ("bert.encoder.layer.{i}.attention", "Attention"),
                  ("bert.encoder.layer.{i}.intermediate", "MLP"), ("bert.encoder.layer.{i}.output", "MLP")]),
        ("cls", "LM Head"),
    ]
    mark_by_spec(model, spec)
    return _torch_forward("bert", Output(model, lambda m, ids: m(input_ids=ids).logits), (_tokens(SEQUENCE),), spec)


def t5() -> Program:
    """T5 encoder–decoder, the whole model with decoder_input_ids; the shared embedding runs in both stacks."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN, num_layers=LAYERS,
        num_decoder_layers=LAYERS, num_heads=HEADS, decoder_start_token_id=0)).eval()
    spec = [
        ("encoder", "Encoder"), ("encoder.embed_tokens", "Embedding"),  # tied to model.shared, own modules
        *_layers([("encoder.block.{i}", "Layer {i}"), ("encoder.block.{i}.layer.0", "Self Attention"),
                  ("encoder.block.{i}.layer.1", "MLP")]),
        ("encoder.final_layer_norm", "Final Norm"),
        ("decoder", "Decoder"), ("decoder.embed_tokens", "Embedding"),
        *_layers([("decoder.block.{i}", "Layer {i}"), ("decoder.block.{i}.layer.0", "Self Attention"),
                  ("decoder.block.{i}.layer.1", "Cross Attention"), ("decoder.block.{i}.layer.2", "MLP")]),
        ("decoder.final_layer_norm", "Final Norm"),
        ("lm_head", "LM Head"),
    ]
    mark_by_spec(model, spec)
    call = lambda m, ids, decoder_ids: m(input_ids=ids, decoder_input_ids=decoder_ids, use_cache=False).logits  # noqa: E731
    return _torch_forward("t5", Output(model, call), (_tokens(SEQUENCE), _tokens(SEQUENCE - 2, seed=2)), spec)


def vit() -> Program:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    model = ViTForImageClassification(ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=2 * HIDDEN, num_labels=10)).eval()
    spec = [
        ("vit.embeddings", "Patch Embedding"),
        *_layers([("vit.layers.{i}", "Layer {i}"), ("vit.layers.{i}.attention", "Attention"),
                  ("vit.layers.{i}.mlp", "MLP")]),
        ("vit.layernorm", "Final Norm"), ("classifier", "Head"),
    ]
    mark_by_spec(model, spec)
    pixels = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    return _torch_forward("vit", Output(model, lambda m, x: m(pixel_values=x).logits), (pixels,), spec)


# --------------------------------------------------------------- torch, marked in its own code


def resnet_batchnorm() -> Program:
    """tests/end_to_end/test_real_models.py ResNetStyle: conv -> BatchNorm (inference) -> ReLU blocks, residual, head."""
    from test_real_models import ResNetStyle

    torch.manual_seed(0)
    model = ResNetStyle().eval()
    return _torch_forward("resnet-batchnorm", model, (torch.randn(1, 16, 16, 16, generator=torch.Generator().manual_seed(1)),))


class TrainNet(torch.nn.Module):
    """A pre-norm residual MLP classifier; the cross-entropy loss is in no section. Returns ``(loss,)``."""

    def __init__(self, features: int = 32, hidden: int = HIDDEN, classes: int = 8):
        super().__init__()
        self.embed = torch.nn.Linear(features, hidden)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(hidden) for _ in range(LAYERS))
        self.up = torch.nn.ModuleList(torch.nn.Linear(hidden, 2 * hidden) for _ in range(LAYERS))
        self.down = torch.nn.ModuleList(torch.nn.Linear(2 * hidden, hidden) for _ in range(LAYERS))
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, y):
        with sm.section("Embed"):
            h = self.embed(x)
        for index in range(LAYERS):
            with sm.section(f"Block {index}"):
                with sm.section("Norm"):
                    n = self.norms[index](h)
                with sm.section("MLP"):
                    h = h + self.down[index](F.gelu(self.up[index](n)))
        with sm.section("Head"):
            logits = self.head(h)
        return (F.cross_entropy(logits, y),)  # y: class probabilities


def torch_training_step() -> Program:
    """``sm.torch.export_training_step``: forward, loss and the gradient of every parameter.

    Plain pipeline: iree-turbine has no training-step export (a user would have to
    rebuild sectionmark's importer: torch's ``_export_forward_backward`` and new
    output specs), so the plain side is the very program sectionmark exported with
    its names stripped (``strip_sectionmark_names``), compiled by ``iree.compiler``
    alone: it checks that compiling with sections changes no executable, not the export.
    """
    from sectionmark.locations import strip_sectionmark_names

    torch.manual_seed(0)
    model = TrainNet()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    # Class probabilities, not indices: with indices the joint graph has aten.squeeze.dims, which IREE 3.13's
    # torch input conversion cannot legalize (with or without sectionmark).
    y = torch.softmax(torch.randn(16, 8, generator=torch.Generator().manual_seed(2)), dim=-1)
    forward = record_sections(lambda: model(x, y))
    exported_once: list = []

    def export():
        exported_once.append(sm.torch.export_training_step(model, args=(x, y)))
        return exported_once[-1]

    def reference():
        model.zero_grad()
        (loss,) = model(x, y)
        loss.backward()
        return [loss.detach().numpy(), *(p.grad.numpy() for p in model.parameters() if p.requires_grad)]

    return Program(
        name="torch-training-step", framework="torch", export=export, reference=reference,
        plain_text=lambda: strip_sectionmark_names(exported_once[-1].mlir),
        args=(x.numpy(), y.numpy()),
        expected=set(forward) | {backward(path) for path in forward},  # every section has parameters: all have a backward
        plain_note="the same exported program with sectionmark's names stripped, compiled by iree.compiler alone",
    )


# --------------------------------------------------------------- JAX / Flax


def _jax_program(name: str, fn: Callable, args: tuple, expected: set, **options) -> Program:
    import jax

    return Program(
        name=name, framework="jax",
        export=lambda: sm.jax.export(fn, *args),
        reference=lambda: [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(jax.jit(fn)(*args))],
        plain_text=lambda: jax.jit(fn).lower(*args).as_text(debug_info=True),
        args=args, expected=expected, **options,
    )


def _linen_model():
    """A Flax linen model: Embed, an ``nn.scan`` over ``nn.remat`` layers (Attention, MLP), Head."""
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, h, _):
            with sm.section("Attention"):
                q, k, v = (nn.Dense(32)(h) for _ in range(3))
                weights = jax.nn.softmax(q @ k.T / jnp.sqrt(32.0), axis=-1)
                h = h + nn.Dense(32)(weights @ v)
            with sm.section("MLP"):
                h = h + nn.Dense(32)(jax.nn.gelu(nn.Dense(64)(nn.LayerNorm()(h))))
            return h, None

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            with sm.section("Embed"):
                h = nn.Dense(32)(x)
            with sm.section("Layers"):
                stack = nn.scan(nn.remat(Layer), variable_axes={"params": 0}, split_rngs={"params": True}, length=LAYERS)
                h, _ = stack()(h, None)
            with sm.section("Head"):
                return nn.Dense(4)(h)

    x = np.linspace(-1.0, 1.0, SEQUENCE * 16, dtype=np.float32).reshape(SEQUENCE, 16)
    model = Model()
    return model, model.init(jax.random.PRNGKey(0), x), x


def _traced(fn: Callable, *args) -> list[tuple[str, ...]]:
    import jax

    return record_sections(lambda: jax.eval_shape(fn, *args))


def flax_linen_scan_remat() -> Program:
    model, params, x = _linen_model()
    return _jax_program("flax-linen-scan-remat", model.apply, (params, x), set(_traced(model.apply, params, x)))


def flax_training_step() -> Program:
    """value_and_grad of a squared-output loss (in no section) and an SGD update (in no section).

    Expected: the forward paths; every one again with " (backward)" on every name
    (all hold parameters); and the forward of the remat'd layers recomputed in
    the backward pass: ("Layers (backward)", "<child> (recompute)").
    """
    import jax

    model, params, x = _linen_model()

    def step(params, x):
        loss, grads = jax.value_and_grad(lambda p: (model.apply(p, x) ** 2).mean())(params)
        return loss, jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    forward = _traced(model.apply, params, x)
    remat = {recompute(path, 1) for path in forward if path[0] == "Layers" and len(path) > 1}  # nn.remat(Layer) under "Layers"
    expected = set(forward) | {backward(path) for path in forward} | remat
    return _jax_program("flax-training-step", step, (params, x), expected)


def flax_nnx_scan() -> Program:
    """A Flax NNX model: layers made by ``nnx.vmap``, run by ``nnx.scan``; a pure function of
    ``nnx.split``'s state that ``nnx.merge``s the model (what ``jax.jit`` needs)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class Layer(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.attn = nnx.Linear(32, 32, rngs=rngs)
            self.up, self.down = nnx.Linear(32, 64, rngs=rngs), nnx.Linear(64, 32, rngs=rngs)

        def __call__(self, h):
            with sm.section("Attention"):
                h = h + jnp.tanh(self.attn(h))
            with sm.section("MLP"):
                return h + self.down(jax.nn.gelu(self.up(h)))

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.embed = nnx.Linear(16, 32, rngs=rngs)

            @nnx.split_rngs(splits=LAYERS)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def layers(rngs: nnx.Rngs) -> Layer:
                return Layer(rngs)

            self.layers = layers(rngs)
            self.head = nnx.Linear(32, 4, rngs=rngs)

        def __call__(self, x):
            with sm.section("Embed"):
                h = self.embed(x)
            with sm.section("Layers"):
                @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
                def run(h, layer):
                    return layer(h)

                h = run(h, self.layers)
            with sm.section("Head"):
                return self.head(h)

    graphdef, state = nnx.split(Model(nnx.Rngs(0)))

    def forward(state, x):
        return nnx.merge(graphdef, state)(x)

    x = np.linspace(-1.0, 1.0, SEQUENCE * 16, dtype=np.float32).reshape(SEQUENCE, 16)
    return _jax_program("flax-nnx-scan", forward, (state, x), set(_traced(forward, state, x)))


# --------------------------------------------------------------- several devices


def tensor_parallel_gpt() -> Program:
    """The demo GPT split over two devices, tensor-parallel (tests/helpers/parallel_gpt.py): every block's heads
    and MLP hidden units in halves, placed as iree-turbine users place them (``DeviceAffinity``,
    ``transfer_to_logical_device``)."""
    import parallel_gpt
    from test_byte_identity import _torch_plain_text

    model, reference = parallel_gpt.tensor_parallel_gpt()
    args, arg_device = parallel_gpt.export_arguments()

    def eager():
        with torch.no_grad():
            return [reference(*args).numpy()]

    def plain_text():
        with sm.torch.sections():  # a plain aot.export keeps the sections in a sections scope, stripped here
            return _torch_plain_text(model, args, arg_device=arg_device)

    return Program(
        name="tensor-parallel-gpt", framework="torch",
        export=lambda: sm.torch.export(model, args=args, arg_device=arg_device, quiet=True),
        reference=eager, plain_text=plain_text, args=tuple(arg.numpy() for arg in args),
        expected=set(parallel_gpt.gpt_sections()), devices=2,
        plain_note="plain aot.export compiled for the same two devices",
    )


PROGRAMS: dict[str, Callable[[], Program]] = {
    "gpt2": gpt2,
    "llama": llama,
    "qwen2-gqa": qwen2_gqa,
    "bert": bert,
    "t5": t5,
    "vit": vit,
    "resnet-batchnorm": resnet_batchnorm,
    "torch-training-step": torch_training_step,
    "flax-linen-scan-remat": flax_linen_scan_remat,
    "flax-training-step": flax_training_step,
    "flax-nnx-scan": flax_nnx_scan,
    "tensor-parallel-gpt": tensor_parallel_gpt,
}
