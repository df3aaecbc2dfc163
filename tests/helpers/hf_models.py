"""Tiny Hugging Face causal LMs with sections, built the way docs/huggingface.md describes.

Weights are random (seeded) from small configs: the test machines cannot
download from the hub, and attribution does not depend on the weights.
Sections are added by wrapping ``forward`` on submodule *instances*, so the
transformers source stays untouched. Two wrappers make the models compile
with IREE: ``Logits`` (one call over a whole sequence) and ``CachedLM`` (one
step, prefill or decode, with a fixed-size KV cache passed in and returned as
tensors).
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin

import sectionmark as sm

VOCAB = 256
HIDDEN = 64
HEADS = 4
LAYERS = 2
MAX_LEN = 16  # positions the models know, and slots of the KV cache


def mark(module: torch.nn.Module, name: str) -> None:
    """Make every call of ``module`` the section ``name`` (this instance only; its class is untouched)."""
    module.forward = sm.section(name)(module.forward)


def tiny_gpt2() -> GPT2LMHeadModel:
    """GPT-2 with sections: Embedding, Layer i (Self Attention, MLP), Final Norm, LM Head."""
    return marked_gpt2(GPT2Config(
        vocab_size=VOCAB, n_positions=MAX_LEN, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
        bos_token_id=0, eos_token_id=0,
    ))


def marked_gpt2(config: GPT2Config) -> GPT2LMHeadModel:
    """A GPT-2 of ``config`` (seeded random weights) with the sections of `tiny_gpt2`."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    mark(model.transformer.wte, "Embedding")  # token and position embeddings: one section,
    mark(model.transformer.wpe, "Embedding")  # two modules
    for index, layer in enumerate(model.transformer.h):
        mark(layer, f"Layer {index}")
        mark(layer.attn, "Self Attention")
        mark(layer.mlp, "MLP")
    mark(model.transformer.ln_f, "Final Norm")
    mark(model.lm_head, "LM Head")
    return model


def tiny_llama() -> LlamaForCausalLM:
    """Llama (grouped-query attention) with the GPT-2 sections plus "Rotary Embedding".

    The rotary module's ``forward`` is decorated ``@torch.no_grad()`` in
    transformers: its section must survive a grad-mode switch inside export.
    """
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, max_position_embeddings=MAX_LEN,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    mark(model.model.embed_tokens, "Embedding")
    mark(model.model.rotary_emb, "Rotary Embedding")
    for index, layer in enumerate(model.model.layers):
        mark(layer, f"Layer {index}")
        mark(layer.self_attn, "Self Attention")
        mark(layer.mlp, "MLP")
    mark(model.model.norm, "Final Norm")
    mark(model.lm_head, "LM Head")
    return model


def causal_mask(positions: torch.Tensor, length: int) -> torch.Tensor:
    """The prepared 4-D attention mask, ``[1, 1, len(positions), length]`` bool (True: may attend).

    A query at position p sees key slots 0..p. Given a 4-D mask, transformers
    uses it as is; without one it builds its own with ops IREE cannot compile
    (``aten.diff``, or an ``i1`` literal from a 2-D mask).
    """
    return (torch.arange(length, dtype=positions.dtype)[None, :] <= positions[:, None])[None, None]


class Logits(torch.nn.Module):
    """``input_ids [1, T] -> logits [1, T, vocab]``: the whole sequence in one call, no cache."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        mask = causal_mask(torch.arange(length), length)
        return self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits


class TensorCacheLayer(CacheLayerMixin):
    """One layer's keys and values, ``[batch, kv_heads, MAX_LEN, head_dim]``, written out of place.

    transformers' ``StaticLayer`` writes its own buffers in place and counts
    steps in a tensor attribute; here the cache is an input and the written
    cache a new tensor, so export returns it as an output. The write is a
    ``scatter`` at the step's positions: ``index_copy`` of a slice of an input
    fails to compile for llvm-cpu in IREE 3.13 (docs/huggingface.md).
    """

    is_sliding = False
    is_compileable = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        super().__init__()
        self.keys, self.values, self.positions = keys, values, positions
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise TypeError("TensorCacheLayer is created from its tensors; it never allocates")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys = self._write(self.keys, key_states)
        self.values = self._write(self.values, value_states)
        return self.keys, self.values

    def _write(self, cache: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        slots = self.positions[None, None, :, None].expand(new.shape)
        return cache.scatter(2, slots, new)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[2], 0

    def get_seq_length(self) -> int:
        raise TypeError("a TensorCacheLayer does not know how many slots are filled: pass position_ids")

    def get_max_length(self) -> int:
        return self.keys.shape[2]


class BlendedCacheLayer(TensorCacheLayer):
    """The same write as a one-hot blend (elementwise ops and a matmul), exact as the scatter.

    For Vulkan: IREE 3.13's SPIR-V code generation fails on the scatter
    ("'vector.transfer_read' op with rank > 1 should be broken down by prior passes").
    """

    def _write(self, cache: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        slots = torch.arange(cache.shape[2], dtype=self.positions.dtype)[:, None] == self.positions[None, :]
        slots = slots.to(cache.dtype)  # [MAX_LEN, T]: 1 where a new token's keys and values go
        kept = 1 - slots.sum(1)[None, None, :, None]
        return cache * kept + torch.einsum("bhtd,lt->bhld", new, slots)


def empty_cache(model: PreTrainedModel, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroed keys and values, ``[layers, batch, kv_heads, MAX_LEN, head_dim]`` each."""
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (config.num_hidden_layers, batch, kv_heads, MAX_LEN, head_dim)
    return torch.zeros(shape), torch.zeros(shape)


class CachedLM(torch.nn.Module):
    """One step over new tokens with a fixed-size KV cache: prefill and decode are the same code.

    ``(input_ids [1, T], positions [T], keys, values) -> (logits [1, T, vocab], keys, values)``;
    the new tokens' keys and values are written at ``positions``, and each
    token attends to the slots up to its own position.
    """

    def __init__(self, model: PreTrainedModel, cache_layer: type[TensorCacheLayer] = TensorCacheLayer):
        super().__init__()
        self.model, self.cache_layer = model, cache_layer

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor):
        layers = [self.cache_layer(keys[index], values[index], positions) for index in range(keys.shape[0])]
        output = self.model(
            input_ids=input_ids,
            attention_mask=causal_mask(positions, keys.shape[3]),
            position_ids=positions[None],
            past_key_values=Cache(layers=layers),
            use_cache=True,
        )
        return output.logits, torch.stack([layer.keys for layer in layers]), torch.stack([layer.values for layer in layers])
