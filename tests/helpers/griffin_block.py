"""A small Griffin-style recurrent block in JAX, each part a section (tests/profiling/test_kernels.py, test_graph.py).

Dense in-projection, a depthwise causal convolution over the sequence, sigmoid
gates and a linear recurrence h_t = a_t * h_{t-1} + b_t (associative scan),
differentiated with ``jax.value_and_grad``: the shape of model whose
convolution made XLA-style layouts insert full-tensor transposes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import sectionmark as sm

BATCH, TIME, WIDTH, KERNEL = 2, 32, 16, 4


@sm.section("Dense")
def dense(x, w):
    return x @ w


@sm.section("Conv")
def causal_depthwise_conv(x, kernel):
    """Depthwise conv over time, padded on the left only (causal); x [B, T, D], kernel [K, 1, D]."""
    return jax.lax.conv_general_dilated(
        x, kernel, window_strides=(1,), padding=[(KERNEL - 1, 0)],
        dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=WIDTH)


@sm.section("Gates")
def gates(x, w_a, w_x):
    return jax.nn.sigmoid(x @ w_a), jax.nn.sigmoid(x @ w_x) * x


@sm.section("Recurrence")
def linear_recurrence(a, b):
    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    return jax.lax.associative_scan(combine, (a, b), axis=1)[1]


def loss(params, x):
    w_in, kernel, w_a, w_x = params
    h = causal_depthwise_conv(dense(x, w_in), kernel)
    a, b = gates(h, w_a, w_x)
    return (linear_recurrence(a, b) ** 2).mean()


def arguments():
    rng = np.random.default_rng(0)
    params = tuple(jnp.asarray(rng.standard_normal(shape, np.float32) * 0.2)
                   for shape in ((WIDTH, WIDTH), (KERNEL, 1, WIDTH), (WIDTH, WIDTH), (WIDTH, WIDTH)))
    return params, jnp.asarray(rng.standard_normal((BATCH, TIME, WIDTH), np.float32))


def export():
    """The exported ``value_and_grad`` of the block and its arguments as numpy arrays."""
    params, x = arguments()
    exported = sm.jax.export(jax.value_and_grad(loss), params, x)
    return exported, [np.asarray(a) for a in (*params, x)]
