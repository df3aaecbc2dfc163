"""JAX export: the same marker inside jax.jit, forward and backward passes."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sectionmark as sm  # noqa: E402


@sm.section("Block")
def block(x, w):
    y = jnp.tanh(x @ w)
    with sm.section("MLP"):
        return y * 2.0


def loss(w, x):
    return (block(x, w) ** 2).sum()


ARGS = (jnp.ones((4, 4)) * 0.1, jnp.ones((2, 4)))


def test_forward_sections_from_plain_and_jitted_functions():
    assert sm.jax.export(loss, *ARGS).sections == (("Block",), ("Block", "MLP"))
    assert sm.jax.export(jax.jit(loss), *ARGS).sections == (("Block",), ("Block", "MLP"))


def test_grad_reports_backward_sections():
    sections = set(sm.jax.export(jax.value_and_grad(loss), *ARGS).sections)
    assert {("Block",), ("Block", "MLP"), ("Block (backward)",), ("Block (backward)", "MLP (backward)")} <= sections


def test_names_with_odd_characters_survive():
    names = ['quo"te', "back\\slash", "new\nline", "emoji 🤖", "n" * 1000, "a/b", "(x)%"]

    def fn(x):
        for name in names:
            with sm.section(name):
                x = jnp.sin(x)
        return x

    assert sm.jax.export(fn, jnp.ones(3)).sections == tuple((name,) for name in names)


def test_eager_use_outside_jit_adds_no_jax_scope():
    from sectionmark.markers import marker as markers

    with sm.section("eager"):
        assert markers._scopes.depth() == 0  # no jax named_scope entered
        assert np.asarray(jnp.ones(2) + 1).tolist() == [2.0, 2.0]


def test_stablehlo_compiles_for_llvm_cpu_and_runs():
    import iree.compiler

    exported = sm.jax.export(jax.value_and_grad(loss), *ARGS)
    vmfb = iree.compiler.compile_str(exported.mlir, target_backends=["llvm-cpu"], input_type="stablehlo")
    value, grad = sm.load(vmfb).main(*[np.asarray(a) for a in ARGS])
    want_value, want_grad = jax.value_and_grad(loss)(*ARGS)
    np.testing.assert_allclose(value.to_host(), want_value, rtol=1e-5)
    np.testing.assert_allclose(grad.to_host(), want_grad, rtol=1e-5)


def test_a_section_without_ops_is_reported_in_one_warning_line():
    import warnings

    import jax.numpy as jnp

    def fn(x):
        with sm.section("Scale"):
            x = x * 2.0
        with sm.section("Nothing"):
            pass
        with sm.section("Outer"):
            with sm.section("Host only"):
                _ = len("no tracing here")
            x = x + 1.0
        return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = sm.jax.export(fn, jnp.ones(4))
    messages = [str(warning.message) for warning in caught if "sectionmark" in str(warning.message)]
    assert messages == [
        "sectionmark: section 'Nothing' produced no ops in the export",
        "sectionmark: section 'Outer / Host only' produced no ops in the export",
    ]
    assert exported.sections == (("Scale",), ("Outer",))


def test_a_jax_export_saves_as_text_and_refuses_bytecode_in_one_line(tmp_path):
    from sectionmark.errors import SectionmarkError
    from sectionmark.importers.exported import find_sections

    exported = sm.jax.export(loss, *ARGS)
    assert find_sections(exported.save_mlir(tmp_path / "loss.mlir").read_text(encoding="utf-8")) == exported.sections
    with pytest.raises(SectionmarkError, match=r"a jax export is MLIR text: save it as \.mlir, not loss\.mlirbc"):
        exported.save_mlir(tmp_path / "loss.mlirbc")
    assert not (tmp_path / "loss.mlirbc").exists()
