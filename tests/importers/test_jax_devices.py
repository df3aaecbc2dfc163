"""JAX on several devices: one warning line for the sharding IREE 3.13 does not partition, and explicit
placement (``sm.jax.to_device``) compiled for and run on two local-task devices, sections kept."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from test_byte_identity import assert_same_executables, plain_compile  # noqa: E402
from two_devices import (RUNTIME_DEVICES, TWO_CPU_DEVICES,  # noqa: E402
                         dispatches_of_sections, dispatches_per_device)

import sectionmark as sm  # noqa: E402
from sectionmark.errors import SectionmarkError  # noqa: E402
from sectionmark.importers.jax_devices import check_sharding  # noqa: E402

CALLS = 2  # profiled
SECTIONS = [("Half 0",), ("Half 1",), ("Join",)]
ON_DEVICE = {0: {"Half 0", "Join"}, 1: {"Half 1"}}


def split_matmul(x, w0, w1):
    """A matmul in halves, the second on device 1, joined on device 0 (weights are arguments: IREE 3.13's
    compiler can crash on a constant moved to a second device)."""
    with sm.section("Half 0"):
        h0 = jnp.tanh(x @ w0)
    with sm.section("Half 1"):
        h1 = jnp.tanh(sm.jax.to_device(x, 1) @ w1)
    with sm.section("Join"):
        return h0 + sm.jax.to_device(h1, 0)


def arguments():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(shape, dtype=np.float32) for shape in ((64, 48), (48, 32), (48, 32)))


def test_explicit_placement_runs_on_two_devices_with_its_sections(tmp_path):
    args = arguments()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # placed, not sharded: no warning
        exported = sm.jax.export(split_matmul, *args, quiet=True)
    assert list(exported.sections) == SECTIONS
    assert exported.mlir.count("flow.tensor.transfer") == 2
    compiled = sm.compile(exported, devices=2, quiet=True)
    assert compiled.section_map.reached == SECTIONS

    result = sm.load(compiled, devices=RUNTIME_DEVICES).main(*args).to_host()
    np.testing.assert_allclose(result, split_matmul(*args), rtol=1e-5, atol=1e-5)  # eager: to_device is the value

    ran = dispatches_per_device(compiled.save(tmp_path / "split.vmfb"), args, tmp_path, calls=CALLS)
    for device, sections in ON_DEVICE.items():
        placed_there = dispatches_of_sections(compiled.section_map, sections, CALLS)
        assert placed_there and ran[device] == placed_there, device

    plain = plain_compile(jax.jit(split_matmul).lower(*args).as_text(debug_info=True), "stablehlo",
                          device_flags=TWO_CPU_DEVICES)
    assert_same_executables(compiled.vmfb, plain, tmp_path)


def test_to_device_takes_a_device_number_or_name():
    with pytest.raises(SectionmarkError, match="to_device takes a device number or name, got None"):
        sm.jax.to_device(jnp.ones(2), None)
    assert np.asarray(sm.jax.to_device(jnp.ones(2), "1")).tolist() == [1.0, 1.0]


# What `jax.jit` with shardings lowers to (JAX 0.10), trimmed to what the warning reads.
SHARDY = 'module @jit_f attributes {mhlo.num_partitions = 2 : i32} {\n  sdy.mesh @mesh = <["x"=2]>\n'
MHLO = ('module @jit_f attributes {mhlo.num_partitions = 2 : i32} {\n'
        '  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})\n')
ONE_DEVICE_MHLO = MHLO.replace("num_partitions = 2", "num_partitions = 1").replace("{devices=[2,1]<=[2]}",
                                                                                   "{replicated}")


def test_shardy_is_one_error_line():
    with pytest.raises(SectionmarkError, match=r"Shardy \(sdy\), which IREE 3.13 cannot compile .*sm.jax.to_device"):
        check_sharding(SHARDY)


def test_mhlo_sharding_is_one_warning_line():
    with pytest.warns(UserWarning) as caught:
        check_sharding(MHLO)
    (message,) = [str(warning.message) for warning in caught]
    assert "mhlo.sharding over 2 devices, which IREE 3.13 drops" in message and "sm.jax.to_device" in message
    assert "\n" not in message


@pytest.mark.parametrize("text", [ONE_DEVICE_MHLO, "module @jit_f attributes {mhlo.num_partitions = 1 : i32} {}"])
def test_nothing_to_partition_is_no_warning(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_sharding(text)


SHARDED_EXPORT = """
import warnings
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import sectionmark as sm
jax.config.update("jax_use_shardy_partitioner", SHARDY_ON)
mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
rows = NamedSharding(mesh, P("x", None))
f = jax.jit(lambda a, b: a @ b, in_shardings=(rows, NamedSharding(mesh, P())), out_shardings=rows)
lines = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        sm.jax.export(f, jnp.ones((8, 4)), jnp.ones((4, 4)), quiet=True)
    except sm.SectionmarkError as error:
        lines.append(f"error: {error}")
lines += [f"warning: {w.message}" for w in caught if "sectionmark" in str(w.message)]
print("\\n".join(lines))
"""


@pytest.mark.parametrize("shardy", [True, False], ids=["shardy", "mhlo"])
def test_a_jit_sharded_over_two_devices_says_so_in_one_line(shardy):
    """A real ``jax.jit`` with ``NamedSharding`` over two JAX CPU devices (a fresh process: JAX counts its
    devices once): JAX 0.10's default Shardy is one error line, ``mhlo.sharding`` one warning line."""
    source = Path(__file__).resolve().parents[2] / "src"
    run = subprocess.run([sys.executable, "-c", SHARDED_EXPORT.replace("SHARDY_ON", str(shardy))], capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
                              "PYTHONPATH": str(source)})
    assert run.returncode == 0, run.stderr[-2000:]
    (line,) = run.stdout.splitlines()
    said = "error: this JAX function is sharded with Shardy (sdy)" if shardy else "warning: sectionmark: this JAX " \
        "function is sharded with mhlo.sharding over 2 devices"
    assert line.startswith(said) and "sm.jax.to_device" in line
