"""The demo's nanoGPT models (sectionmark.demo) as tests use them (one place for the set-up)."""

from __future__ import annotations

import functools

import numpy as np

from sectionmark.demo.model_torch import CONFIGS, GPT, example_input


def torch_gpt(marked: bool = True, config: str = "small"):
    """The torch nanoGPT and its example arguments."""
    return GPT(CONFIGS[config], marked=marked), (example_input(CONFIGS[config]),)


def jax_gpt(config: str = "small"):
    """The JAX twin as a function of the tokens alone (weights closed over) and its int32 tokens."""
    import jax

    from sectionmark.demo import model_jax

    settings = CONFIGS[config]
    params = jax.tree_util.tree_map(jax.numpy.asarray, model_jax.init_params(settings))
    forward = functools.partial(model_jax.gpt, params, n_head=settings.n_head)
    return forward, example_input(settings).numpy().astype(np.int32)
