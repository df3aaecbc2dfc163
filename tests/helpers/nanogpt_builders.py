"""The examples/nanogpt models as tests use them (one place for the path and the set-up)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from model_torch import CONFIGS, GPT, example_input  # noqa: E402


def torch_gpt(marked: bool = True, config: str = "small"):
    """The torch nanoGPT and its example arguments."""
    return GPT(CONFIGS[config], marked=marked), (example_input(CONFIGS[config]),)


def jax_gpt(config: str = "small"):
    """The JAX twin as a function of the tokens alone (weights closed over) and its int32 tokens."""
    import jax
    import model_jax

    settings = CONFIGS[config]
    params = jax.tree_util.tree_map(jax.numpy.asarray, model_jax.init_params(settings))
    forward = functools.partial(model_jax.gpt, params, n_head=settings.n_head)
    return forward, example_input(settings).numpy().astype(np.int32)
