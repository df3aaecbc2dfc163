"""A nanoGPT-style GPT in PyTorch with sections named like the LLM visualisation.

Random weights (no downloads). ``marked=False`` builds the identical model
without sections, for overhead and invariant checks.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

import sectionmark as sm


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 512
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    seq_len: int = 32  # tokens per example input


CONFIGS = {
    "small": GPTConfig(),
    "gpt2-small": GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, seq_len=128),
}


def _unmarked(name: str, color=None):
    return contextlib.nullcontext()


class SelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, section):
        super().__init__()
        self.section = section
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.shape
        with self.section("Self Attention", color=0x4C8BF5):
            with self.section("QKV"):
                q, k, v = self.qkv(x).split(C, dim=2)
                q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            with self.section("Attention Softmax"):
                att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
            with self.section("Projection"):
                y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
                return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig, section):
        super().__init__()
        self.section = section
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        with self.section("MLP", color=0x34A853):
            return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, index: int, section):
        super().__init__()
        self.section, self.name = section, f"Block {index}"
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = SelfAttention(config, section)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config, section)

    def forward(self, x):
        with self.section(self.name):
            with self.section("Layer Norm"):
                h = self.ln_1(x)
            x = x + self.attn(h)
            with self.section("Layer Norm"):
                h = self.ln_2(x)
            return x + self.mlp(h)


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, marked: bool = True, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.config = config
        self.section = sm.section if marked else _unmarked
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config, i, self.section) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx):
        with self.section("Embedding", color=0xFBBC05):
            pos = torch.arange(idx.shape[1], dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        with self.section("Layer Norm"):
            x = self.ln_f(x)
        with self.section("LM Head", color=0xEA4335):
            return self.lm_head(x)


def example_input(config: GPTConfig, batch: int = 1, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, config.seq_len), generator=generator)
