"""The torch and JAX nanoGPT demo models (sectionmark.demo) carry the same sections."""

import functools

import pytest

import sectionmark as sm
from sectionmark.demo.model_torch import CONFIGS, GPT, example_input


def test_torch_and_jax_gpt_have_the_same_section_set():
    pytest.importorskip("jax")
    from sectionmark.demo import model_jax

    config = CONFIGS["small"]
    torch_sections = set(sm.torch.export(GPT(config), args=(example_input(config),)).sections)
    params = model_jax.init_params(config)
    fn = functools.partial(model_jax.gpt, n_head=config.n_head)
    jax_sections = set(sm.jax.export(fn, params, example_input(config).numpy()).sections)
    assert torch_sections == jax_sections
    assert ("Block 1", "Self Attention", "Attention Softmax") in torch_sections
    assert {("Embedding",), ("LM Head",), ("Layer Norm",)} <= torch_sections


def test_unmarked_model_has_no_sections():
    config = CONFIGS["small"]
    assert sm.torch.export(GPT(config, marked=False), args=(example_input(config),)).sections == ()
