"""Torch counterparts of the JAX constructs: SDPA in a section, activation checkpointing in a
training step, one export with a dynamic dimension profiled at several lengths.

(``torch.cond`` is not importable by iree-turbine 3.9 with or without sectionmark:
"Higher-order operation 'cond' not implemented in the FxImporter"; docs/limitations.md.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sectionmark as sm
from invariants import assert_profile_invariants


def profiled(compiled, *args):
    profile = sm.profile(compiled, args=args, iterations=2, warmup=1, quiet=True)
    assert_profile_invariants(profile)
    return profile


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x):
        with sm.section("QKV"):
            q, k, v = self.qkv(x).view(1, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        with sm.section("SDPA"):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(1, 8, 16)


def test_scaled_dot_product_attention_keeps_its_section():
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.rand(1, 8, 16)
    compiled = sm.compile(sm.torch.export(model, args=(x,)))
    assert compiled.section_map.reached == compiled.section_map.sections == [("QKV",), ("SDPA",)]
    np.testing.assert_allclose(sm.load(compiled).main(x.numpy()).to_host(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    profile = profiled(compiled, x.numpy())
    assert profile.section(("SDPA",)).busy_ns > 0 and profile.unmarked_ns == 0


class Checkpointed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(16, 2)

    def block(self, x):
        with sm.section("Inner"):
            return torch.tanh(self.hidden(x))

    def forward(self, x, y):
        with sm.section("Outer"):
            h = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
        with sm.section("Head"):
            out = self.head(h)
        return (((out - y) ** 2).mean(),)


def test_activation_checkpointing_in_a_training_step_keeps_forward_and_backward_sections():
    """Non-strict: torch's strict export itself fails on checkpoint (KeyError '_checkpoint_context_fn')."""
    args = (torch.rand(4, 16), torch.rand(4, 2))
    exported = sm.torch.export_training_step(Checkpointed(), args=args, strict_export=False)
    forward = {("Outer",), ("Outer", "Inner"), ("Head",)}
    backward = {("Outer (backward)",), ("Outer (backward)", "Inner (backward)"), ("Head (backward)",)}
    assert set(exported.sections) == forward | backward
    compiled = sm.compile(exported)
    assert compiled.section_map.reached == compiled.section_map.sections
    profile = profiled(compiled, *(arg.numpy() for arg in args))
    assert all(row.busy_ns > 0 for row in profile.section_rows)


class Dynamic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        with sm.section("Linear"):
            h = self.linear(x)
        with sm.section("Activation"):
            return torch.relu(h) * 2


@pytest.fixture(scope="module")
def dynamic():
    torch.manual_seed(0)
    model = Dynamic().eval()
    exported = sm.torch.export(model, args=(torch.rand(4, 16),), dynamic_shapes={"x": {0: torch.export.Dim("n", max=64)}})
    return model, sm.compile(exported)


@pytest.mark.parametrize("length", [3, 17, 40])
def test_one_dynamic_export_profiles_at_several_lengths_and_says_it_split_by_op_count(dynamic, length):
    model, compiled = dynamic
    x = np.random.default_rng(length).random((length, 16), np.float32)
    np.testing.assert_allclose(sm.load(compiled).main(x).to_host(), model(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    profile = profiled(compiled, x)
    data = profile.to_json()
    assert data["weight_rule"] == "op-count" and data["split_rules"] == {"op-count": 1}
    assert "by op count (shapes not static)" in " ".join(profile.table().split())
    assert {row.path for row in profile.section_rows if row.busy_ns > 0} == {("Linear",), ("Activation",)}


class UsedBeforeDefined(torch.nn.Module):
    """Parameters registered in one order (b, a) and used in the other (a, then b)."""

    def __init__(self):
        super().__init__()
        self.b, self.a = torch.nn.Linear(4, 3), torch.nn.Linear(2, 4)

    def forward(self, x, y):
        return (((self.b(self.a(x)) - y) ** 2).mean(),)


def test_training_step_gradients_come_in_named_parameters_order():
    torch.manual_seed(0)
    model, x, y = UsedBeforeDefined(), torch.rand(5, 2), torch.rand(5, 3)
    loss, *gradients = sm.load(sm.compile(sm.torch.export_training_step(model, args=(x, y)))).main(x.numpy(), y.numpy())
    model(x, y)[0].backward()
    expected = [parameter.grad.numpy() for _name, parameter in model.named_parameters()]
    assert [gradient.to_host().shape for gradient in gradients] == [grad.shape for grad in expected]
    for gradient, grad in zip(gradients, expected):
        np.testing.assert_allclose(gradient.to_host(), grad, rtol=1e-5, atol=1e-6)
