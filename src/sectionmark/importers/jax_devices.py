"""JAX on several devices: what IREE 3.13 does with JAX's sharding, and explicit placement that it does run.

IREE 3.13 partitions no JAX sharding: ``jit`` with ``NamedSharding`` lowers
to ``mhlo.sharding`` attributes (with ``jax_use_shardy_partitioner=False``),
which IREE drops (all the work on device 0), and by default (JAX 0.10) to
Shardy's ``sdy`` dialect, which it cannot read ("Dialect 'sdy' not found");
``shard_map`` lowers to ``custom_call @Sharding``, which it refuses.
`check_sharding` says so in one line when an export carries them (an error
for Shardy, which nothing past JAX reads; a warning for ``mhlo.sharding``).

What IREE runs is explicit placement, as iree-turbine places torch work:
`to_device` lowers to ``flow.tensor.transfer`` to the logical device
``@__device_<n>`` (the names turbine gives, and the ones the compile flags
``--iree-hal-target-device=local[0] --iree-hal-target-device=local[1]``
define); the ops that read its result run on that device
(docs/multi-device.md).
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Union

from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from sectionmark.errors import SectionmarkError

__all__ = ["to_device", "check_sharding"]

_PARTITIONS = re.compile(r"mhlo\.num_partitions = (\d+)")

_transfer = Primitive("sectionmark_to_device")
_transfer.def_impl(lambda value, *, device: value)  # eager JAX: one process, nothing to move
_transfer.def_abstract_eval(lambda value, *, device: value)
batching.primitive_batchers[_transfer] = lambda values, dims, *, device: (_transfer.bind(values[0], device=device),
                                                                         dims[0])


def to_device(value: Any, device: Union[int, str]) -> Any:
    """``value`` on IREE logical device ``device`` (0, 1, ...: ``@__device_<device>``) once compiled by IREE.

    Inside ``jax.jit`` / ``sm.jax.export`` it becomes ``flow.tensor.transfer``:
    what reads the result runs on that device; outside, the value itself.
    Static shapes only; forward programs (no gradient rule). A program that
    uses it compiles with IREE only (XLA knows no ``flow`` dialect).
    """
    if isinstance(device, bool) or not isinstance(device, (int, str)) or str(device) == "":
        raise SectionmarkError(f"to_device takes a device number or name, got {device!r}")
    return _transfer.bind(value, device=str(device))


def _lower_transfer(ctx: Any, value: Any, *, device: str) -> list:
    (aval,) = ctx.avals_in
    if not all(isinstance(size, int) for size in aval.shape):
        raise SectionmarkError(f"to_device takes static shapes, got {aval.shape}")
    context = ctx.module_context.context
    context.allow_unregistered_dialects = True  # flow and hal are IREE's dialects, printed in generic form
    target = mlir.ir.Attribute.parse(f"#hal.device.promise<@__device_{device}>")
    operation = mlir.ir.Operation.create("flow.tensor.transfer", results=[value.type], operands=[value],
                                         attributes={"target": target})
    return list(operation.results)


mlir.register_lowering(_transfer, _lower_transfer)


def check_sharding(text: str) -> None:
    """The lowered module ``text`` against what IREE 3.13 partitions: Shardy's dialect is one error line (nothing
    could read it), ``mhlo.sharding`` over several devices one warning line (IREE drops it)."""
    if "sdy." in text and re.search(r"\bsdy\.(mesh|sharding)\b", text):
        raise SectionmarkError("this JAX function is sharded with Shardy (sdy), which IREE 3.13 cannot compile "
                               "(\"Dialect 'sdy' not found\"); place work with sm.jax.to_device instead "
                               "(docs/multi-device.md)")
    partitions = _PARTITIONS.search(text)
    if "mhlo.sharding" in text and partitions is not None and int(partitions.group(1)) > 1:
        warnings.warn(f"sectionmark: this JAX function is sharded with mhlo.sharding over {partitions.group(1)} "
                      "devices, which IREE 3.13 drops (all the work runs on device 0); place work with "
                      "sm.jax.to_device instead (docs/multi-device.md)", stacklevel=3)
