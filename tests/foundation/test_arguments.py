"""Arguments users have: scalars and JAX pytrees in sm.load, sm.profile and sm.record.

A torch program with scalar inputs (0-d tensors in the export) is called
with Python scalars; a torch program of a dict of tensors and a JAX
function of a Flax-style nested params dict are called with the same dict
(flattened as each exporter flattened it: torch in insertion order, JAX with
keys sorted). Each must compute what the framework computes,
profile, and replay from a recording; anything else is one error line that
names the argument.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import sectionmark as sm
from invariants import assert_profile_invariants
from sectionmark.arguments import element_type, flatten_arguments
from sectionmark.workflows.runner import write_inputs


class Scaled(torch.nn.Module):
    def forward(self, x, scale, shift):
        with sm.section("Scale"):
            y = torch.tanh(x @ x.T) * scale
        with sm.section("Shift"):
            return y + shift


@pytest.fixture(scope="module")
def torch_scalars():
    x = torch.randn(16, 16)
    exported = sm.torch.export(Scaled(), args=(x, torch.tensor(2.0), torch.tensor(3)))
    compiled = sm.compile(exported, target="llvm-cpu")
    return SimpleNamespace(compiled=compiled, x=x.numpy(), expected=Scaled()(x, 0.5, 7).numpy())


def test_the_map_knows_the_argument_types(torch_scalars):
    assert torch_scalars.compiled.section_map.argument_types("main") == ["f32", "f32", "i64"]
    assert torch_scalars.compiled.section_map.framework == "torch"


def test_python_scalars_in_load_profile_and_record(torch_scalars, tmp_path):
    module = sm.load(torch_scalars.compiled)
    np.testing.assert_allclose(module.main(torch_scalars.x, 0.5, 7).to_host(), torch_scalars.expected, rtol=1e-5)
    np.testing.assert_allclose(module.main(torch.from_numpy(torch_scalars.x), np.float64(0.5), np.int32(7)).to_host(),
                               torch_scalars.expected, rtol=1e-5)
    result = module.main(torch_scalars.x, 0.5, 7)
    assert flatten_arguments([result, 0.5, 7], ["f32", "f32", "i64"])[0] is result  # no host copy of a device array
    again = Scaled()(torch.from_numpy(torch_scalars.expected), 0.5, 7).numpy()
    np.testing.assert_allclose(module.main(result, 0.5, 7).to_host(), again, rtol=1e-5)
    inputs = [np.load(path) for path in write_inputs([result, 0.5, 7], tmp_path, ["f32", "f32", "i64"])]
    np.testing.assert_array_equal(inputs[0], result.to_host())  # profile's .npy inputs: device arrays copied
    assert [(array.dtype, array.shape) for array in inputs[1:]] == [(np.float32, ()), (np.int64, ())]
    session = sm.profile(torch_scalars.compiled, args=(torch_scalars.x, 0.5, 7), iterations=2, warmup=1, quiet=True)
    assert_profile_invariants(session)
    with sm.record(module) as recording:
        module.main(torch_scalars.x, 0.5, 7)
    assert [value.dtype for value in recording.inputs] == [np.float32, np.float32, np.int64]
    np.testing.assert_allclose(recording.replay(), torch_scalars.expected, rtol=1e-5)


def test_device_arrays_pass_through_and_become_host_arrays_on_request(torch_scalars):
    result = sm.load(torch_scalars.compiled).main(torch_scalars.x, 0.5, 7)
    for _ in range(2):  # the first sight of IREE's device array type, then the fast path that knows it
        flat = flatten_arguments([result, torch_scalars.x], ["f32", "f32"])
        assert flat[0] is result and flat[1] is torch_scalars.x
        host = flatten_arguments([result, torch_scalars.x], ["f32", "f32"], host=True)
        assert type(host[0]) is np.ndarray and host[1] is torch_scalars.x
        np.testing.assert_array_equal(host[0], result.to_host())
    with pytest.raises(sm.SectionmarkError, match="^the function takes 3 array arguments and was given 2"):
        flatten_arguments([result, torch_scalars.x], ["f32", "f32", "i64"])


def test_a_loaded_module_keeps_its_functions_and_needs_no_collector_to_be_freed(torch_scalars):
    module = sm.load(torch_scalars.compiled)
    assert module.main is module.main  # made once: a decode loop looks the function up at every step
    np.testing.assert_allclose(module.main(torch_scalars.x, 0.5, 7).to_host(), torch_scalars.expected, rtol=1e-5)
    gone = weakref.ref(module)
    gc.disable()
    try:
        del module
        assert gone() is None  # no reference cycle through the kept functions: the IREE context goes at once
    finally:
        gc.enable()


def test_an_unsupported_argument_is_named(torch_scalars):
    module = sm.load(torch_scalars.compiled)
    with pytest.raises(sm.SectionmarkError, match=r"^argument 1: unsupported type str; pass arrays, tensors, "
                                                  r"scalars or pytrees of them$"):
        module.main(torch_scalars.x, "0.5", 7)
    with pytest.raises(sm.SectionmarkError, match=r"^the function takes 3 array arguments and was given 2"):
        sm.profile(torch_scalars.compiled, args=(torch_scalars.x, 0.5), iterations=1, quiet=True)


class Scalar(torch.nn.Module):
    def forward(self, x, scale):
        return x * scale


def test_python_scalars_at_export_are_constants():
    """torch.export specialises a Python scalar of the example arguments: the function does not take it."""
    x = torch.randn(4)
    compiled = sm.compile(sm.torch.export(Scalar(), args=(x, 2.0)), target="llvm-cpu")
    assert compiled.section_map.argument_types("main") == ["f32"]
    module = sm.load(compiled)
    np.testing.assert_allclose(module.main(x).to_host(), (x * 2.0).numpy())
    with pytest.raises(sm.SectionmarkError, match=r"^the function takes 1 array argument and was given 2 \(pytrees "
                                                  r"count each leaf\); torch.export makes Python scalars in the "
                                                  r"example arguments constants of the program: export with 0-d "
                                                  r"tensors \(torch.tensor\(2.0\)\) to pass scalars at call time$"):
        module.main(x, 3.0)


class Batch(torch.nn.Module):
    def forward(self, batch):
        with sm.section("Mix"):
            return batch["b"] * 2 + batch["a"] - batch["c"]


def test_a_torch_dict_is_flattened_in_insertion_order():
    """torch.export flattens a dict in insertion order, not sorted: {"b", "a", "c"} must stay so."""
    batch = {"b": torch.randn(8), "a": torch.randn(8), "c": torch.randn(8)}
    compiled = sm.compile(sm.torch.export(Batch(), args=(batch,)), target="llvm-cpu")
    expected = Batch()(batch).numpy()
    np.testing.assert_allclose(sm.load(compiled).main(batch).to_host(), expected, rtol=1e-6)
    session = sm.profile(compiled, args=(batch,), iterations=2, warmup=1, quiet=True)
    assert_profile_invariants(session)


class HalfScaled(torch.nn.Module):
    def forward(self, x, scale):
        return torch.tanh(x) * scale


def test_bfloat16_tensors_and_scalars():
    """numpy has no bfloat16: torch bf16 tensors and scalars for bf16 arguments become ml_dtypes arrays."""
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    compiled = sm.compile(sm.torch.export(HalfScaled(), args=(x, torch.tensor(2.0, dtype=torch.bfloat16))),
                          target="llvm-cpu")
    assert compiled.section_map.argument_types("main") == ["bf16", "bf16"]
    expected = HalfScaled()(x, torch.tensor(0.5, dtype=torch.bfloat16)).float().numpy()
    result = sm.load(compiled).main(x, 0.5).to_host()
    assert str(result.dtype) == "bfloat16"
    np.testing.assert_allclose(result.astype(np.float32), expected, rtol=1e-2)
    session = sm.profile(compiled, args=(x, 0.5), iterations=1, warmup=0, quiet=True)
    assert_profile_invariants(session)


def test_element_types_of_mlir_tensor_types():
    assert [element_type(text) for text in ("tensor<2x?xf32>", "!torch.vtensor<[4],si64>", "!torch.vtensor<[],ui8>",
                                            "tensor<bf16>", "tensor<4xf32, #encoding>", "!torch.int", "i64")] == \
        ["f32", "i64", "ui8", "bf16", "f32", "", ""]


def test_dict_order_follows_the_exporter():
    tree = ({"b": np.zeros(2), "a": np.ones(1)},)
    assert [leaf.shape for leaf in flatten_arguments(tree, framework="torch")] == [(2,), (1,)]
    assert [leaf.shape for leaf in flatten_arguments(tree, framework="jax")] == [(1,), (2,)]


jax = pytest.importorskip("jax")
jnp = jax.numpy


def dense_block(params, x, scale):
    with sm.section("Dense"):
        h = jnp.tanh(x @ params["dense"]["kernel"] + params["dense"]["bias"])
    with sm.section("Out"):
        return (h @ params["out"]["kernel"]) * scale


@pytest.fixture(scope="module")
def jax_params():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {"dense": {"kernel": jax.random.normal(keys[0], (8, 16)), "bias": jnp.zeros(16)},
              "out": {"kernel": jax.random.normal(keys[1], (16, 4))}}
    x = jax.random.normal(keys[2], (2, 8))
    compiled = sm.compile(sm.jax.export(dense_block, params, x, 2), target="llvm-cpu")
    return SimpleNamespace(compiled=compiled, params=params, x=x, expected=np.asarray(dense_block(params, x, 3)))


def test_a_params_dict_in_load_profile_and_record(jax_params):
    assert jax_params.compiled.section_map.argument_types("main") == ["f32", "f32", "f32", "f32", "i32"]
    assert jax_params.compiled.section_map.framework == "jax"
    module = sm.load(jax_params.compiled)
    np.testing.assert_allclose(module.main(jax_params.params, jax_params.x, 3).to_host(), jax_params.expected,
                               rtol=1e-5, atol=1e-6)
    session = sm.profile(jax_params.compiled, args=(jax_params.params, jax_params.x, 3), iterations=2, warmup=1,
                         quiet=True)
    assert_profile_invariants(session)
    assert {row.path for row in session.sections if row.dispatched} >= {("Dense",), ("Out",)}
    with sm.record(module) as recording:
        module.main(jax_params.params, jax_params.x, 3)
    np.testing.assert_allclose(recording.replay(), jax_params.expected, rtol=1e-5, atol=1e-6)


def test_pytree_leaves_are_named_in_errors(jax_params):
    params = {"dense": {"kernel": jax_params.params["dense"]["kernel"], "bias": "zeros"},
              "out": jax_params.params["out"]}
    with pytest.raises(sm.SectionmarkError, match=r"^args\[0\]\['dense'\]\['bias'\]: unsupported type str"):
        sm.load(jax_params.compiled).main(params, jax_params.x, 3)


def test_flattening_follows_jax_order():
    tree = ({"b": np.ones(1), "a": [np.zeros(2), None, 3.0]}, np.full(3, 2.0))
    leaves = flatten_arguments(tree, ["f32", "f64", "f32", "f32"])
    assert [leaf.shape for leaf in leaves] == [(2,), (), (1,), (3,)]
    assert leaves[1].dtype == np.float64
    assert [leaf.shape for leaf in flatten_arguments(tree)] == [(2,), (), (1,), (3,)]
    plain = [np.ones(2), np.zeros(3)]
    assert all(a is b for a, b in zip(flatten_arguments(plain), plain))  # plain arrays are passed as they are


def test_without_jax_the_order_is_jax_order():
    """Without JAX imported (or installed) containers are flattened by sectionmark in JAX's order."""
    tree = ({"b": [np.zeros(1), None, np.zeros(2)], "a": OrderedDict(z=np.zeros(3), y=np.zeros(4))}, (np.zeros(5),))
    expected = [leaf.shape for leaf in jax.tree_util.tree_leaves(tree)]
    code = (
        "import sys; from collections import OrderedDict; import numpy as np; "
        "from sectionmark.arguments import flatten_arguments; "
        "tree = ({'b': [np.zeros(1), None, np.zeros(2)], 'a': OrderedDict(z=np.zeros(3), y=np.zeros(4))}, (np.zeros(5),)); "
        "print([leaf.shape for leaf in flatten_arguments(tree)], 'jax' in sys.modules)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == f"{expected} False"
