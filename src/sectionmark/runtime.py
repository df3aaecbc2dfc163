"""In-process execution of a compiled module with iree.runtime.

Results are returned as IREE device arrays (no host copy, no added
synchronisation); call ``.to_host()`` when the values are needed. Each call is
an eager `section` named after the function, so with Tracy enabled every call
is a zone on the calling thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from sectionmark.errors import SectionmarkError
from sectionmark.markers import section
from sectionmark.section_map import SectionMap


class LoadedModule:
    """A .vmfb loaded on an IREE device; functions are attributes (``module.main(x)``)."""

    def __init__(self, source: Union[Any, str, Path, bytes], device: str = "local-task"):
        import iree.runtime as rt

        vmfb, self.section_map = _vmfb_and_map(source)
        try:
            config = rt.Config(device)
        except (ValueError, RuntimeError) as error:
            raise SectionmarkError(f"cannot open IREE device {device!r}: {error}") from None
        self.device = device
        self._context = rt.SystemContext(config=config)
        try:
            vm_module = rt.VmModule.copy_buffer(config.vm_instance, vmfb)
        except (ValueError, RuntimeError) as error:
            raise SectionmarkError(f"not a loadable IREE module: {error}") from None
        self._context.add_vm_module(vm_module)
        self.name = vm_module.name
        self._module = self._context.modules[vm_module.name]

    @property
    def functions(self) -> list[str]:
        return [name for name in self._module.vm_module.function_names if not name.startswith("__")]

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            invoke = self._module[name]
        except KeyError:
            raise AttributeError(f"module {self.name!r} has no function {name!r} (has: {', '.join(self.functions)})") from None
        marker = section(f"{self.name}.{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            with marker:
                return invoke(*args, **kwargs)

        call.__name__ = name
        return call


def _vmfb_and_map(source: Any) -> tuple[bytes, Optional[SectionMap]]:
    if hasattr(source, "vmfb"):
        return source.vmfb, source.section_map
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), None
    path = Path(source)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror}") from None
    from sectionmark.compiler import read_section_map

    try:
        return data, read_section_map(path)
    except SectionmarkError:
        return data, None  # a plain IREE module runs fine without a map


def load(source: Union[Any, str, Path, bytes], device: str = "local-task") -> LoadedModule:
    """Load a CompiledModule, a .vmfb path or its bytes on ``device`` (e.g. "local-task", "cuda")."""
    return LoadedModule(source, device)
