"""The JAX twin of model_torch.GPT: same architecture, same section names."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import sectionmark as sm
from sectionmark.demo.model_torch import GPTConfig


def init_params(config: GPTConfig, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def dense(n_in, n_out):
        return {"w": rng.normal(0, 0.02, (n_in, n_out)).astype(np.float32), "b": np.zeros(n_out, np.float32)}

    def norm():
        return {"g": np.ones(config.n_embd, np.float32), "b": np.zeros(config.n_embd, np.float32)}

    C = config.n_embd
    return {
        "wte": rng.normal(0, 0.02, (config.vocab_size, C)).astype(np.float32),
        "wpe": rng.normal(0, 0.02, (config.block_size, C)).astype(np.float32),
        "blocks": [
            {"ln_1": norm(), "qkv": dense(C, 3 * C), "proj": dense(C, C), "ln_2": norm(),
             "fc": dense(C, 4 * C), "mlp_proj": dense(4 * C, C)}
            for _ in range(config.n_layer)
        ],
        "ln_f": norm(),
        "lm_head": rng.normal(0, 0.02, (C, config.vocab_size)).astype(np.float32),
    }


def _linear(p, x):
    return x @ p["w"] + p["b"]


@sm.section("Layer Norm")
def layer_norm(p, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * p["g"] + p["b"]


@sm.section("Self Attention", color=0x4C8BF5)
def self_attention(p, x, n_head):
    B, T, C = x.shape
    with sm.section("QKV"):
        q, k, v = jnp.split(_linear(p["qkv"], x), 3, axis=2)
        q, k, v = (t.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3) for t in (q, k, v))
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(k.shape[-1]))
    with sm.section("Attention Softmax"):
        mask = jnp.tril(jnp.ones((T, T), bool))
        att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
    with sm.section("Projection"):
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        return _linear(p["proj"], y)


@sm.section("MLP", color=0x34A853)
def mlp(p, x):
    return _linear(p["mlp_proj"], jax.nn.gelu(_linear(p["fc"], x), approximate=False))


def gpt(params: dict, idx: jnp.ndarray, n_head: int = 4) -> jnp.ndarray:
    with sm.section("Embedding", color=0xFBBC05):
        x = params["wte"][idx] + params["wpe"][jnp.arange(idx.shape[1])]
    for i, p in enumerate(params["blocks"]):
        with sm.section(f"Block {i}"):
            x = x + self_attention(p, layer_norm(p["ln_1"], x), n_head)
            x = x + mlp(p, layer_norm(p["ln_2"], x))
    x = layer_norm(params["ln_f"], x)
    with sm.section("LM Head", color=0xEA4335):
        return x @ params["lm_head"]
