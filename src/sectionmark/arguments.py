"""The arguments a user has, as the flat list of arrays a compiled function takes.

A compiled function takes buffers, one per tensor argument of the exported
program. Users call it with what their framework gives them: numpy arrays,
torch tensors, JAX arrays, IREE device arrays (results of an earlier call),
Python and numpy scalars, and pytrees (a Flax/NNX-style params dict, a dict
of tensors). `flatten_arguments` turns them into that list, in one place for
`sm.load`, `sm.profile` and `sm.record`:

- containers (dict, list, tuple) are flattened in the order the exporter
  flattened the example arguments: JAX's (``jax.tree_util.tree_flatten``: dict
  keys sorted, an OrderedDict in its own order; with JAX imported its own
  flattening is used, so registered pytree classes work too) or, for a torch
  program, torch.export's (dicts in insertion order);
- a scalar becomes a 0-d array of the element type the function declares for
  that argument (from the section map's function signatures), so ``2`` is an
  ``i32`` for a JAX program and an ``i64`` for a torch one;
- device arrays stay on the device unless a host value is asked for;
- anything else is one error naming the argument (``args[0]['dense']['w']``).

A foundation module (numpy only): the compiler reads function signatures with
`element_type`, the runtime and the profiler flatten arguments.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import OrderedDict
from typing import Any, Optional, Sequence

import numpy as np

from sectionmark.errors import SectionmarkError

# Element types as MLIR spells them -> numpy (and ml_dtypes below, for the types numpy lacks).
NUMPY_TYPES = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
                "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
                "f16": np.float16, "f32": np.float32, "f64": np.float64}
# MLIR element types numpy lacks -> their ml_dtypes names (a dependency of iree-base-runtime, whose
# arrays IREE reads as those types, in calls and in .npy inputs).
_ML_DTYPES = {"bf16": "bfloat16"}
# Without a declared type: what torch.export and jax.jit make of a Python scalar by default.
_DEFAULT_TYPES = {bool: np.bool_, int: np.int64, float: np.float32}
_CONTAINERS = (dict, list, tuple)
# A tensor type as printed: tensor<2x?x8xf32>, tensor<4xf32, #encoding>, !torch.vtensor<[2,-1,8],si64>;
# torch's signed si64 is read as the builtin i64.
_TENSOR_TYPE = re.compile(r"^(?:tensor<((?:[0-9?]+x)*)|!torch\.v?tensor<\[([^\]]*)\],)(?:s(?=i))?([a-z]+[0-9]*)[>,]")
_PYTHON_SCALARS = (bool, int, float)
_HOST_ARRAY = frozenset({np.ndarray})
# Types passed to a function as they are: numpy arrays, and IREE's device array class once one was seen
# (learned, not imported: this module does not load the runtime).
_device_arrays: set[type] = {np.ndarray}


def element_type(text: str) -> str:
    """The element type of an MLIR tensor type (``f32``, ``i64``, ``bf16``); ``""`` for other types."""
    match = _TENSOR_TYPE.match(text.strip())
    return match.group(3) if match is not None else ""


def tensor_type(text: str) -> Optional[tuple[tuple[Optional[int], ...], np.dtype]]:
    """Shape (None for a dynamic size) and numpy dtype of an MLIR tensor type; None for other types."""
    match = _TENSOR_TYPE.match(text.strip())
    if match is None or match.group(3) not in NUMPY_TYPES:
        return None
    builtin, torch_sizes, element = match.groups()
    sizes = builtin.split("x")[:-1] if builtin is not None else [size for size in torch_sizes.split(",") if size]
    shape = tuple(None if size.strip() in ("?", "-1") else int(size) for size in sizes)
    return shape, np.dtype(NUMPY_TYPES[element])


def flatten_arguments(
    args: Sequence[Any], types: Optional[Sequence[str]] = None, *, framework: Optional[str] = None, host: bool = False
) -> list[Any]:
    """The arrays to pass to the function, in order: numpy arrays, and IREE device arrays unless ``host``.

    Each result is either an ``np.ndarray`` (a host value: arrays and
    tensors as they are or copied to the host, scalars as 0-d arrays) or the
    caller's own device array object, untouched. ``types``: the element type
    of each flat argument as the function declares it
    (`SectionMap.argument_types`), or None when unknown (scalars are then
    ``i64``, ``f32`` or ``i1``). ``framework``: the exporter of the program
    (`SectionMap.framework`); ``"torch"`` flattens dicts in insertion order,
    anything else in JAX's order. Plain arrays, and device arrays unless
    ``host``, go through untouched (the common case costs one type check per
    argument).
    """
    args = tuple(args)
    if types is None or len(types) == len(args):
        # A decode step's token array and device-resident state.
        passed = _HOST_ARRAY if host else _device_arrays
        if all(type(value) in passed for value in args):
            return list(args)
    leaves = _leaves(args, framework == "torch")
    if types is not None and len(types) != len(leaves):
        raise SectionmarkError(_count_mismatch(len(types), leaves, framework))
    return [_array(name, value, types[index] if types is not None else "", host)
            for index, (name, value) in enumerate(leaves)]


def _count_mismatch(expected: int, leaves: list[tuple[str, Any]], framework: Optional[str]) -> str:
    """Wrong number of flat arguments, saying why when torch.export made the example's Python scalars constants."""
    message = (f"the function takes {expected} array argument{'s' * (expected != 1)} and was given {len(leaves)} "
               "(pytrees count each leaf)")
    scalars = any(isinstance(leaf, _PYTHON_SCALARS) for _, leaf in leaves)
    if framework == "torch" and len(leaves) > expected and scalars:
        message += ("; torch.export makes Python scalars in the example arguments constants of the program: export "
                    "with 0-d tensors (torch.tensor(2.0)) to pass scalars at call time")
    return message


def _leaves(args: tuple, torch_order: bool) -> list[tuple[str, Any]]:
    """``(readable name, leaf)`` of each argument, pytrees flattened in JAX's order or torch's (``torch_order``)."""
    if not any(isinstance(value, _CONTAINERS) or (not torch_order and _is_registered_pytree(value)) for value in args):
        return [(f"argument {index}", value) for index, value in enumerate(args)]
    if not torch_order and "jax" in sys.modules:
        import jax

        flat, _tree = jax.tree_util.tree_flatten_with_path(list(args))
        return [(f"args{jax.tree_util.keystr(path)}", value) for path, value in flat]
    leaves: list[tuple[str, Any]] = []

    def visit(value: Any, name: str) -> None:
        if isinstance(value, dict):
            # torch.utils._pytree keeps insertion order; JAX sorts keys except an OrderedDict's.
            for key in value if torch_order or isinstance(value, OrderedDict) else sorted(value):
                visit(value[key], f"{name}[{key!r}]")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                visit(item, f"{name}[{index}]")
        elif value is not None:  # None is an empty pytree, as in JAX and torch
            leaves.append((name, value))

    for index, value in enumerate(args):
        visit(value, f"args[{index}]")
    return leaves


def _is_registered_pytree(value: Any) -> bool:
    """A JAX-registered container (a flax struct, a namedtuple of arrays...); False without JAX loaded."""
    if "jax" not in sys.modules or _is_array(value):
        return False
    import jax

    return not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(value))


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "__array__") or hasattr(value, "to_host")


# IREE 3.13's DeviceArray.to_host() on a Vulkan device that offers host-pointer import (lavapipe,
# and GPUs with VK_EXT_external_memory_host) imports a fresh numpy array that is not page-aligned.
_IMPORT_ALIGNMENT_ERROR = "minImportedHostPointerAlignment"


def host_array(value: Any) -> np.ndarray:
    """The values of an IREE device array on the host.

    ``to_host()``, except where IREE's Python fails to import an unaligned
    host array on Vulkan ("does not satisfy Vulkan
    minImportedHostPointerAlignment"): there the copy goes through a staging
    buffer of the device's own, which is the path IREE takes for allocators
    that cannot import host memory (docs/gpu.md).
    """
    try:
        return value.to_host()
    except ValueError as error:
        if _IMPORT_ALIGNMENT_ERROR not in str(error):
            raise
    return _staged_copy(value)


def readable_on_host(result: Any) -> Any:
    """A function's result (a device array, or a tuple or list of them) whose ``to_host()``, ``np.asarray`` and
    arithmetic read the values as `host_array` does: each IREE ``DeviceArray`` becomes a `_staged_type` one in
    place (no copy, no wait)."""
    if isinstance(result, (tuple, list)):
        for item in result:
            readable_on_host(item)
    elif type(result).__name__ == "DeviceArray" and type(result).__module__.startswith("iree."):
        result.__class__ = _staged_type()
    return result


@functools.cache
def _staged_type() -> type:
    """IREE's ``DeviceArray`` with its copy to the host made by `_staged_copy` where importing host memory fails."""
    from iree.runtime import DeviceArray

    class StagedDeviceArray(DeviceArray):
        def _copy_to_host(self) -> np.ndarray:
            try:
                return super()._copy_to_host()
            except ValueError as error:
                if _IMPORT_ALIGNMENT_ERROR not in str(error):
                    raise
            return _staged_copy(self)

    _device_arrays.add(StagedDeviceArray)  # passed to the next call as it is, like IREE's own
    return StagedDeviceArray


def _staged_copy(value: Any) -> np.ndarray:
    """A device array's values copied through a host-visible staging buffer that the device allocates."""
    from iree.runtime import BufferUsage, HalFence, MemoryType

    device, view = value._device, value._buffer_view  # DeviceArray has no public accessors for them
    source = view.get_buffer()
    staging = device.allocator.allocate_buffer(
        memory_type=int(MemoryType.HOST_LOCAL | MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(BufferUsage.TRANSFER_TARGET | BufferUsage.MAPPING_SCOPED),
        allocation_size=source.byte_length(),
    )
    semaphore = device.create_semaphore(0)
    device.queue_copy(source, staging, wait_semaphores=HalFence.create_at(semaphore, 0),
                      signal_semaphores=HalFence.create_at(semaphore, 1))
    HalFence.create_at(semaphore, 1).wait()
    raw = np.array(staging.map().asarray(tuple(view.shape), value._get_raw_dtype()))  # a copy: the mapping goes
    return raw if raw.dtype == value.dtype else raw.astype(value.dtype)  # bools are i8 on the device


def _array(name: str, value: Any, declared: str, host: bool) -> Any:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "to_host"):  # an IREE device array
        if host:
            return host_array(value)
        if type(value).__module__.startswith("iree."):
            _device_arrays.add(type(value))  # passed through untouched from now on (flatten_arguments' fast path)
        return value
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        return _tensor_array(name, value)
    if isinstance(value, (*_PYTHON_SCALARS, np.generic)):
        kind = _numpy_type(declared) or _DEFAULT_TYPES.get(type(value)) or type(value)
        return np.asarray(value, dtype=kind)
    if hasattr(value, "__array__") and not isinstance(value, str):  # a JAX array, and other array-likes
        array = np.asarray(value)
        if array.dtype != object:
            return array
    raise SectionmarkError(
        f"{name}: unsupported type {type(value).__name__}; pass arrays, tensors, scalars or pytrees of them"
    )


def _numpy_type(declared: str) -> Any:
    """The numpy type of an MLIR element type, None when unknown (``""``: not declared)."""
    kind = NUMPY_TYPES.get(declared)
    if kind is None and declared in _ML_DTYPES:
        import ml_dtypes

        kind = getattr(ml_dtypes, _ML_DTYPES[declared])
    return kind


def _tensor_array(name: str, tensor: Any) -> np.ndarray:
    """A torch tensor on the host; one of a type numpy lacks (bfloat16, float8) as its ml_dtypes twin."""
    tensor = tensor.detach().cpu()
    try:
        return tensor.numpy()
    except TypeError:  # "Got unsupported ScalarType BFloat16"
        pass
    import ml_dtypes

    kind = getattr(ml_dtypes, str(tensor.dtype).removeprefix("torch."), None)
    if kind is None or np.dtype(kind).itemsize != tensor.element_size():
        raise SectionmarkError(f"{name}: a torch tensor of {tensor.dtype} has no numpy equivalent")
    raw = tensor.contiguous().reshape(-1).view(sys.modules["torch"].uint8).numpy()
    return raw.view(kind).reshape(tuple(tensor.shape))
