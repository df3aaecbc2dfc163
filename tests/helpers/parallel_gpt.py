"""The demo's nanoGPT (sectionmark.demo.model_torch) split over devices, as iree-turbine users split models.

* `pipeline_gpt`: pipeline-parallel, blocks 0-1 on device 0, blocks 2-3 on
  device 1 (the activations move once, inside "Block 2"), the head on device 1.
* `tensor_parallel_gpt`: tensor-parallel (Megatron-style), every block's
  attention heads and MLP hidden units in equal parts, one part per device
  (two devices by default: halves; ``devices=8``: issue M's scale, 8 heads),
  joined on device 0 by adding the parts' projections.

Both are the demo GPT (same weights, same sections, marked as users mark:
``with section``), placed with ``transfer_to_logical_device`` and the
exported argument's ``DeviceAffinity``; each returns the unsplit model it was
built from, whose eager outputs the compiled ones must equal. Tiny sizes: each
compiles in a few seconds for two CPU devices.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import torch
from torch import nn
from torch.nn import functional as F

from sectionmark.demo.model_torch import GPT, GPTConfig, example_input
from sectionmark.section_path import SectionPath

CONFIG = GPTConfig(vocab_size=128, block_size=16, n_layer=4, n_head=4, n_embd=32, seq_len=16)
PIPELINE_STAGES = {0: (0, 1), 1: (2, 3)}  # device -> the blocks it runs


def gpt_sections() -> list[SectionPath]:
    """The sections the demo GPT declares for `CONFIG`, parents first, as its code marks them."""
    block = [(), ("Layer Norm",), ("Self Attention",), ("Self Attention", "QKV"),
             ("Self Attention", "Attention Softmax"), ("Self Attention", "Projection"), ("MLP",)]
    layers = [(f"Block {index}", *path) for index in range(CONFIG.n_layer) for path in block]
    return [("Embedding",), *layers, ("Layer Norm",), ("LM Head",)]


def to_device(device: int, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on logical device ``device`` (a copy in eager torch, ``flow.tensor.transfer`` once exported)."""
    from iree.turbine.ops.iree import transfer_to_logical_device

    return transfer_to_logical_device(str(device), tensor)


def export_arguments():
    """The example tokens and the ``arg_device`` that puts them on device 0, as ``aot.export`` takes them."""
    from iree.turbine.aot import DeviceAffinity

    return (example_input(CONFIG),), {0: DeviceAffinity(0)}


class PipelineGPT(nn.Module):
    """The demo GPT with its blocks in two stages, one per device (`PIPELINE_STAGES`)."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, idx):
        model = self.model
        with model.section("Embedding"):
            pos = torch.arange(idx.shape[1], dtype=torch.long)
            x = model.wte(idx) + model.wpe(pos)
        for device, blocks in PIPELINE_STAGES.items():
            for index in blocks:
                if device and index == blocks[0]:
                    with model.section(model.blocks[index].name):  # the hand-over belongs to the stage's first block
                        x = to_device(device, x)
                x = model.blocks[index](x)
        with model.section("Layer Norm"):
            x = model.ln_f(x)
        with model.section("LM Head"):
            return model.lm_head(x)


def _parts(size: int, devices: int) -> list[slice]:
    """``range(size)`` cut into ``devices`` consecutive equal parts, device d's the d-th."""
    part = size // devices
    return [slice(device * part, (device + 1) * part) for device in range(devices)]


def _cut(weight: torch.Tensor, parts: list[slice], dim: int) -> nn.ParameterList:
    """``weight`` cut along ``dim`` into one parameter per device: ``parts[d]`` are device d's rows or columns
    (copies, so that each device's weights are constants of that device alone, never transferred)."""
    return nn.ParameterList(nn.Parameter(weight.detach().narrow(dim, part.start, part.stop - part.start).clone())
                            for part in parts)


def _on_every_device(x: torch.Tensor, devices: int) -> list[torch.Tensor]:
    """``x`` (on device 0) and its copy moved to each other device, in device order."""
    return [x, *(to_device(device, x) for device in range(1, devices))]


def _joined(partial: list[torch.Tensor], bias: torch.Tensor) -> torch.Tensor:
    """The devices' partial projections moved to device 0 and added there in device order, then ``bias``."""
    total = partial[0]
    for part in partial[1:]:
        total = total + to_device(0, part)
    return total + bias


class ParallelAttention(nn.Module):
    """The demo's SelfAttention with its heads in ``devices`` equal parts, device d running the d-th."""

    def __init__(self, attention: nn.Module, section, n_embd: int, devices: int = 2):
        super().__init__()
        self.section, self.devices, self.n_head = section, devices, attention.n_head // devices
        rows = [[slice(start + part.start, start + part.stop) for start in (0, n_embd, 2 * n_embd)]
                for part in _parts(n_embd, devices)]
        self.qkv_weight = nn.ParameterList(nn.Parameter(torch.cat([attention.qkv.weight.detach()[r] for r in part]))
                                           for part in rows)
        self.qkv_bias = nn.ParameterList(nn.Parameter(torch.cat([attention.qkv.bias.detach()[r] for r in part]))
                                         for part in rows)
        self.proj_weight = _cut(attention.proj.weight, _parts(n_embd, devices), dim=1)
        self.proj_bias = nn.Parameter(attention.proj.bias.detach().clone())
        self.register_buffer("mask", attention.mask.clone())

    def forward(self, x):
        B, T, C = x.shape
        width = C // self.devices  # each device's heads' width
        with self.section("Self Attention"):
            with self.section("QKV"):
                scores, values = [], []
                for device, shard in enumerate(_on_every_device(x, self.devices)):
                    q, k, v = F.linear(shard, self.qkv_weight[device], self.qkv_bias[device]).split(width, dim=2)
                    q, k, v = (t.view(B, T, self.n_head, width // self.n_head).transpose(1, 2) for t in (q, k, v))
                    scores.append((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1))))
                    values.append(v)
            with self.section("Attention Softmax"):
                future = self.mask[:, :, :T, :T] == 0
                weights = [F.softmax(att.masked_fill(to_device(device, future) if device else future, float("-inf")),
                                     dim=-1) for device, att in enumerate(scores)]
            with self.section("Projection"):
                partial = [F.linear((att @ v).transpose(1, 2).contiguous().view(B, T, width), self.proj_weight[d])
                           for d, (att, v) in enumerate(zip(weights, values))]
                return _joined(partial, self.proj_bias)


class ParallelMLP(nn.Module):
    """The demo's MLP with its hidden units in ``devices`` equal parts: the first projection cut by rows, the
    second by columns."""

    def __init__(self, mlp: nn.Module, section, devices: int = 2):
        super().__init__()
        self.section, self.devices = section, devices
        parts = _parts(mlp.fc.out_features, devices)
        self.fc_weight, self.fc_bias = _cut(mlp.fc.weight, parts, dim=0), _cut(mlp.fc.bias, parts, dim=0)
        self.proj_weight = _cut(mlp.proj.weight, parts, dim=1)
        self.proj_bias = nn.Parameter(mlp.proj.bias.detach().clone())

    def forward(self, x):
        with self.section("MLP"):
            partial = [F.linear(F.gelu(F.linear(shard, self.fc_weight[d], self.fc_bias[d])), self.proj_weight[d])
                       for d, shard in enumerate(_on_every_device(x, self.devices))]
            return _joined(partial, self.proj_bias)


def pipeline_gpt(marked: bool = True) -> tuple[PipelineGPT, GPT]:
    """The pipeline-parallel GPT and the demo GPT it runs (the eager reference)."""
    model = GPT(CONFIG, marked=marked).eval()
    return PipelineGPT(model).eval(), model


def tensor_parallel_config(devices: int = 2) -> GPTConfig:
    """The config of the GPT split over ``devices``: `CONFIG` where its 4 heads split evenly (2 devices: the model
    of the tests, the conformance row and the recorded data), else `CONFIG` with one head per device."""
    config = CONFIG if CONFIG.n_head % devices == 0 else replace(CONFIG, n_head=devices)
    if config.n_embd % config.n_head:
        raise ValueError(f"{devices} devices: {config.n_head} heads do not split the {config.n_embd} channels")
    return config


def tensor_parallel_gpt(marked: bool = True, devices: int = 2) -> tuple[GPT, GPT]:
    """The tensor-parallel GPT over ``devices`` (the demo GPT at `tensor_parallel_config` with parallel attention
    and MLP in every block) and the demo GPT it was cut from (the eager reference, the one-device model)."""
    model = GPT(tensor_parallel_config(devices), marked=marked).eval()
    parallel = copy.deepcopy(model)
    for block in parallel.blocks:
        block.attn = ParallelAttention(block.attn, parallel.section, model.config.n_embd, devices)
        block.mlp = ParallelMLP(block.mlp, parallel.section, devices)
    return parallel.eval(), model


# ------------------------------------------------------------------ prefill + decode with a KV cache on both devices

KV_CONFIG = GPTConfig(vocab_size=128, block_size=16, n_layer=1, n_head=4, n_embd=32, seq_len=4)
KV_PROMPT = KV_CONFIG.seq_len


class CachedParallelGPT(nn.Module):
    """The tensor-parallel GPT (`tensor_parallel_gpt`, `KV_CONFIG`: one block) with a fixed-size KV cache: each
    device keeps the keys and values of its own heads (``[1, heads / 2, block_size, head size]``), written at the
    call's positions and returned, so that prefill and every decode step pass it along where it lives.

    ``forward(tokens, positions, keys0, values0, keys1, values1)`` -> (logits, the four caches written).
    """

    def __init__(self, parallel: GPT):
        super().__init__()
        self.model = parallel

    def forward(self, idx, positions, keys0, values0, keys1, values1):
        model, block = self.model, self.model.blocks[0]
        with model.section("Embedding"):
            x = model.wte(idx) + model.wpe(positions)
        with model.section(block.name):
            with model.section("Layer Norm"):
                h = block.ln_1(x)
            attended, caches = self._attention(block.attn, h, positions, [(keys0, values0), (keys1, values1)])
            x = x + attended
            with model.section("Layer Norm"):
                h = block.ln_2(x)
            x = x + block.mlp(h)
        with model.section("Layer Norm"):
            x = model.ln_f(x)
        with model.section("LM Head"):
            return (model.lm_head(x), *caches)

    def _attention(self, attention: ParallelAttention, x, positions, caches):
        """`ParallelAttention` over each device's cache: its heads' keys and values written at ``positions``, every
        slot up to each query's position attended to (each device computes its own mask from its positions)."""
        B, T, C = x.shape
        section, size = self.model.section, C // 2 // attention.n_head
        with section("Self Attention"):
            with section("QKV"):
                shards = [(x, positions), (to_device(1, x), to_device(1, positions))]
                written, scores, values = [], [], []
                for device, ((shard, where), (keys, cached)) in enumerate(zip(shards, caches)):
                    q, k, v = F.linear(shard, attention.qkv_weight[device], attention.qkv_bias[device]).split(C // 2, 2)
                    q, k, v = (t.view(B, T, attention.n_head, size).transpose(1, 2) for t in (q, k, v))
                    slots = where[None, None, :, None].expand(k.shape)
                    keys, cached = keys.scatter(2, slots, k), cached.scatter(2, slots, v)
                    written += [keys, cached]
                    scores.append((q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(size)))
                    values.append(cached)
            with section("Attention Softmax"):
                weights = []
                for att, (_shard, where) in zip(scores, shards):
                    later = torch.arange(att.shape[-1])[None, :] > where[:, None]
                    weights.append(F.softmax(att.masked_fill(later, float("-inf")), dim=-1))
            with section("Projection"):
                partial = [F.linear((att @ v).transpose(1, 2).contiguous().view(B, T, C // 2),
                                    attention.proj_weight[d]) for d, (att, v) in enumerate(zip(weights, values))]
                return partial[0] + to_device(0, partial[1]) + attention.proj_bias, written


def empty_kv_cache() -> list[torch.Tensor]:
    """Zero keys and values of each device's heads: keys0, values0, keys1, values1."""
    shape = (1, KV_CONFIG.n_head // 2, KV_CONFIG.block_size, KV_CONFIG.n_embd // KV_CONFIG.n_head)
    return [torch.zeros(shape) for _ in range(4)]


def cached_parallel_gpt(marked: bool = True) -> CachedParallelGPT:
    """`CachedParallelGPT` of the demo GPT at `KV_CONFIG`, its attention and MLP split as `tensor_parallel_gpt`'s."""
    model = GPT(KV_CONFIG, marked=marked).eval()
    for block in model.blocks:
        block.attn = ParallelAttention(block.attn, model.section, KV_CONFIG.n_embd)
        block.mlp = ParallelMLP(block.mlp, model.section)
    return CachedParallelGPT(model).eval()


def export_cached_parallel_gpt(model: CachedParallelGPT, tokens: torch.Tensor):
    """prefill (the prompt ``tokens``) and decode (one token) of ``model`` as two functions of one export
    (``aot.FxProgramsBuilder``), tokens and positions on device 0, each device's cache on that device."""
    import sectionmark as sm
    from iree.turbine import aot
    from iree.turbine.aot import DeviceAffinity

    placement = {index: DeviceAffinity(device) for index, device in enumerate([0, 0, 0, 0, 1, 1])}
    builder = aot.FxProgramsBuilder(model)
    cache = empty_kv_cache()
    with sm.torch.sections():

        @builder.export_program(name="prefill", args=(tokens, torch.arange(tokens.shape[1]), *cache),
                                arg_device=placement)
        def prefill(module, idx, positions, keys0, values0, keys1, values1):
            return module(idx, positions, keys0, values0, keys1, values1)

        @builder.export_program(name="decode", args=(tokens[:, :1], torch.tensor([tokens.shape[1]]), *cache),
                                arg_device=placement)
        def decode(module, idx, positions, keys0, values0, keys1, values1):
            return module(idx, positions, keys0, values0, keys1, values1)

    return sm.torch.export(builder, quiet=True)
