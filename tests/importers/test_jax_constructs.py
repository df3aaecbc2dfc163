"""JAX constructs that lower to private functions or regions keep full section paths, forward and backward.

``lax.scan``, ``fori_loop``, ``while_loop``, ``cond``, ``switch``, a nested
``jax.jit``, ``jax.checkpoint``, ``custom_vjp``, ``custom_jvp`` and ``vmap``,
each with a section "Inner" inside a section "Outer": the export declares
exactly the paths written (backward ones " (backward)" once per level, the
forward that ``checkpoint`` recomputes " (recompute)"), warns of nothing, and
the profile puts time in every section that ran. Then a Flax linen model with
``nn.scan`` over ``nn.remat`` layers and its training step.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import sectionmark as sm  # noqa: E402
from invariants import assert_profile_invariants  # noqa: E402

W = np.full((3, 16, 16), 0.05, np.float32)
X = np.linspace(0.1, 1.0, 8 * 16, dtype=np.float32).reshape(8, 16)


def inner(h, w=W[0]):
    with sm.section("Inner"):
        return jnp.tanh(h @ w)


def scan(x):
    def body(h, w):
        return inner(h, w), None

    with sm.section("Outer"):
        return lax.scan(body, x, W)[0]


def fori_loop(x):
    with sm.section("Outer"):
        return lax.fori_loop(0, 3, lambda i, h: inner(h), x)


def while_loop(x):
    with sm.section("Outer"):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, inner(c[1])), (0, x))[1]


def cond(x):
    with sm.section("Outer"):
        return lax.cond(x.sum() > 0, inner, lambda h: h * 2, x)


def switch(x):
    with sm.section("Outer"):
        return lax.switch((x.sum() > 0).astype(jnp.int32), [lambda h: h * 2, inner], x)


@jax.jit
def _jitted_inner(h):
    return inner(h)


def nested_jit(x):
    with sm.section("Outer"):
        return _jitted_inner(x)


def checkpoint(x):
    with sm.section("Outer"):
        return jax.checkpoint(inner)(x)


@jax.custom_vjp
def _custom_vjp_inner(h):
    return inner(h)


_custom_vjp_inner.defvjp(lambda h: (inner(h), h), lambda h, g: (g * (1 - inner(h) ** 2) @ W[0].T,))


def custom_vjp(x):
    with sm.section("Outer"):
        return _custom_vjp_inner(x)


@jax.custom_jvp
def _custom_jvp_inner(h):
    return inner(h)


@_custom_jvp_inner.defjvp
def _custom_jvp_rule(primals, tangents):
    (h,), (t,) = primals, tangents
    out = inner(h)
    with sm.section("Inner"):
        return out, (1 - out**2) * (t @ W[0])


def custom_jvp(x):
    with sm.section("Outer"):
        return _custom_jvp_inner(x)


def vmap(x):
    with sm.section("Outer"):
        return jax.vmap(inner)(x)


CONSTRUCTS = [scan, fori_loop, while_loop, cond, switch, nested_jit, checkpoint, custom_vjp, custom_jvp, vmap]
FORWARD = {("Outer",), ("Outer", "Inner")}
BACKWARD = {("Outer (backward)",), ("Outer (backward)", "Inner (backward)")}


def export_quietly(fn, *args):
    """The export and the sectionmark warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = sm.jax.export(fn, *args)
    return exported, [str(w.message) for w in caught if "sectionmark" in str(w.message)]


def profiled(exported, *args):
    compiled = sm.compile(exported)
    profile = sm.profile(compiled, args=args, iterations=2, warmup=1, quiet=True)
    assert_profile_invariants(profile)
    return compiled, profile


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=[c.__name__ for c in CONSTRUCTS])
def test_forward_sections_nest_through_the_construct(construct):
    exported, warned = export_quietly(construct, X)
    assert set(exported.sections) == FORWARD and not warned, (exported.sections, warned)
    compiled, profile = profiled(exported, X)
    np.testing.assert_allclose(sm.load(compiled).main(X).to_host(), jax.jit(construct)(X), rtol=1e-5, atol=1e-6)
    assert compiled.section_map.reached == compiled.section_map.sections
    assert profile.section(("Outer", "Inner")).busy_ns > 0


DIFFERENTIABLE = [construct for construct in CONSTRUCTS if construct is not while_loop]  # JAX cannot reverse it
# A branch's backward and the other branch's forward run the same deduplicated dispatch in command
# buffers that IREE memoizes with identical commands: the profile cannot tell them apart (docs/limitations.md).
AMBIGUOUS_PROFILE = (cond, switch)


@pytest.mark.parametrize("construct", DIFFERENTIABLE, ids=[c.__name__ for c in DIFFERENTIABLE])
def test_backward_sections_are_named_once_per_level(construct):
    grad = jax.grad(lambda x: (construct(x) ** 2).sum())
    exported, warned = export_quietly(grad, X)
    expected = FORWARD | BACKWARD | ({("Outer (backward)", "Inner (recompute)")} if construct is checkpoint else set())
    assert set(exported.sections) == expected and not warned, (exported.sections, warned)
    if construct in AMBIGUOUS_PROFILE:
        with pytest.raises(sm.SectionmarkError, match="ambiguous"):
            profiled(exported, X)
        return
    compiled, profile = profiled(exported, X)
    np.testing.assert_allclose(sm.load(compiled).main(X).to_host(), jax.jit(grad)(X), rtol=1e-4, atol=1e-6)
    for row in profile.section_rows:
        assert row.busy_ns > 0 or row.note, row.name


# --------------------------------------------------------------- Flax


def _flax_model():
    nn = pytest.importorskip("flax.linen")

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, h, _):
            with sm.section("Attention"):
                h = h + jnp.tanh(nn.Dense(16)(h))
            with sm.section("MLP"):
                h = h + nn.Dense(16)(jax.nn.gelu(nn.Dense(32)(h)))
            return h, None

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            with sm.section("Embed"):
                h = nn.Dense(16)(x)
            with sm.section("Layers"):
                stack = nn.scan(nn.remat(Layer), variable_axes={"params": 0}, split_rngs={"params": True}, length=3)
                h, _ = stack()(h, None)
            with sm.section("Head"):
                return nn.Dense(4)(h)

    model = Model()
    return model, model.init(jax.random.PRNGKey(0), X)


LINEN_FORWARD = {("Embed",), ("Layers",), ("Layers", "Attention"), ("Layers", "MLP"), ("Head",)}


def test_flax_scan_of_remat_layers_nests_every_layer_section():
    model, params = _flax_model()
    exported, warned = export_quietly(model.apply, params, X)
    assert set(exported.sections) == LINEN_FORWARD and not warned
    compiled, profile = profiled(exported, params, X)
    assert compiled.section_map.reached == compiled.section_map.sections
    assert all(row.busy_ns > 0 for row in profile.section_rows)


def test_flax_training_step_has_backward_and_recompute_rows_per_section():
    model, params = _flax_model()

    def step(params, x):
        loss, grads = jax.value_and_grad(lambda p: (model.apply(p, x) ** 2).mean())(params)
        return loss, jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    exported, warned = export_quietly(step, params, X)
    backward = {("Embed (backward)",), ("Layers (backward)",), ("Layers (backward)", "Attention (backward)"),
                ("Layers (backward)", "MLP (backward)"), ("Head (backward)",)}
    recompute = {("Layers (backward)", "Attention (recompute)"), ("Layers (backward)", "MLP (recompute)")}
    assert set(exported.sections) == LINEN_FORWARD | backward | recompute and not warned, (exported.sections, warned)
    compiled, profile = profiled(exported, params, X)
    assert compiled.section_map.reached == compiled.section_map.sections
    assert all(row.busy_ns > 0 and row.note is None for row in profile.section_rows), profile.table()
    assert profile.unmarked_ns > 0  # the loss and the parameter update are in no section


def test_memoized_command_buffers_name_the_function_that_runs_them():
    """IREE numbers its memoize helpers (``__main_memoize_apply_0``); the map names ``main``."""
    model, params = _flax_model()
    compiled = sm.compile(sm.jax.export(model.apply, params, X))
    assert {buffer.function for buffer in compiled.section_map.command_buffers} == {"main"}


def test_loop_invariant_ops_hoisted_out_of_a_scan_stay_in_their_section():
    """Under grad JAX hoists ``w * 2`` out of the body and names it ``jit(f)/sm:Inner/mul``:
    Inner ran only inside Outer, so that is where its time goes (no top-level Inner)."""
    w = W[0]

    def f(x, w):
        def body(h, _):
            with sm.section("Inner"):
                return jnp.tanh(h @ (w * 2.0)), None

        with sm.section("Outer"):
            return lax.scan(body, x, None, length=3)[0]

    grad = jax.grad(lambda x, w: (f(x, w) ** 2).sum(), argnums=1)
    exported, warned = export_quietly(grad, X, w)
    assert set(exported.sections) == FORWARD | BACKWARD and not warned
    compiled, profile = profiled(exported, X, w)
    assert compiled.section_map.sections == list(exported.sections)
    assert all(share.path[:1] != ("Inner",) for site in compiled.section_map.sites for share in site.shares)


def _scan_step():
    """The issue's program: a loop-invariant ``sin(c)`` in a scan body under grad, and a section without ops."""
    def f(w, xs, c):
        def body(h, x):
            with sm.section("Inner"):
                return jnp.tanh(h * x + jnp.sin(c) * 2.0), None

        with sm.section("Nothing"):
            pass
        with sm.section("Outer"):
            return lax.scan(body, w, xs)[0].sum()

    return jax.jit(jax.grad(f))


@pytest.mark.parametrize("ran_first", [False, True], ids=["fresh", "ran first"])
def test_a_function_that_already_ran_exports_the_same_sections(ran_first):
    """JAX reuses the trace of a jitted function that ran: no Python ran during the export, so no section was seen
    entered, the hoisted ``sin(c)`` (named ``sm:Inner`` at the top) became a top-level Inner with real time, and the
    empty section went unreported. Exported twice, the second export is as right as the first."""
    step, args = _scan_step(), (jnp.ones(8), jnp.ones((4, 8)), jnp.ones(8))
    if ran_first:
        step(*args)  # a reference run, as everyone does
    expected = {("Outer",), ("Outer", "Inner"), ("Outer (backward)",), ("Outer (backward)", "Inner (backward)")}
    for _again in range(2):
        exported, warned = export_quietly(step, *args)
        assert set(exported.sections) == expected
        assert warned == ["sectionmark: section 'Nothing' produced no ops in the export"]
    compiled = sm.compile(exported)
    assert set(compiled.section_map.sections) == expected
    assert all(share.path[:1] != ("Inner",) for site in compiled.section_map.sites for share in site.shares)
    np.testing.assert_allclose(sm.load(compiled).main(*map(np.asarray, args)).to_host(), step(*args), rtol=1e-5)
