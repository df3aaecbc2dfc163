"""In-process execution of a compiled module with iree.runtime.

Results are returned as IREE device arrays (no host copy, no added
synchronisation); call ``.to_host()`` when the values are needed: where IREE
3.13's own copy to the host fails (Vulkan, lavapipe: an unaligned numpy array
it cannot import), theirs goes through a staging buffer
(``sectionmark.arguments.readable_on_host``). Each call is
an eager `section` named after the function, so with Tracy enabled every call
is a zone on the calling thread.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Optional, Sequence, Union

from sectionmark.arguments import flatten_arguments, readable_on_host
from sectionmark.artifacts.modules import ModuleSource, module_bytes_and_map
from sectionmark.errors import IREE_ERRORS, SectionmarkError, first_line
from sectionmark.markers import section
from sectionmark.parameters import PARAMETERS_MODULE, Parameters, parameter_specs, parameters_module


class _CallState:
    """What the function wrappers of one module read at every call.

    Kept apart from the module so that the wrappers, cached in the module,
    hold no reference back to it: a reference cycle would keep the IREE
    context alive until the garbage collector ran.
    """

    __slots__ = ("recording",)

    def __init__(self) -> None:
        self.recording: Optional[Any] = None  # what `sectionmark.record` attaches: its note() after each call


class LoadedModule:
    """A .vmfb loaded on an IREE device, or on several; functions are attributes (``module.main(x)``).

    Arguments may be arrays, tensors, device arrays, scalars and JAX pytrees
    (`sectionmark.arguments`). ``devices``: the devices in the order the
    module's logical devices are numbered (its arguments go to the first,
    then the module moves them where it placed them); ``device`` is the first.
    """

    def __init__(self, source: ModuleSource, device: str = "local-task", parameters: Parameters = None,
                 devices: Optional[Sequence[str]] = None):
        self.vmfb, self.section_map = module_bytes_and_map(source)
        self.devices = _device_list(device, devices)
        self.device = self.devices[0]
        # The parameter files as served: an unscoped file is given the module's one scope (`open_context`).
        self._context, (vm_module,), self.parameters = open_context(self.devices, parameter_specs(parameters),
                                                                    [self.vmfb])
        self.name = vm_module.name
        self._module = self._context.modules[vm_module.name]
        self._state = _CallState()

    @property
    def functions(self) -> list[str]:
        return [name for name in self._module.vm_module.function_names if not name.startswith("__")]

    def __getattr__(self, name: str):
        """A function of the module: made once, then kept as an attribute (a decode loop looks it up every step)."""
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            invoke = self._module[name]
        except KeyError:
            raise AttributeError(f"module {self.name!r} has no function {name!r} (has: {', '.join(self.functions)})") from None
        marker = section(f"{self.name}.{name}")
        section_map = self.section_map
        types = section_map.argument_types(name) if section_map is not None else None
        framework = section_map.framework if section_map is not None else None
        state = self._state

        def call(*args: Any, **kwargs: Any) -> Any:
            arrays = flatten_arguments(args, types, framework=framework)
            recording = state.recording
            if recording is not None and kwargs:
                raise SectionmarkError(f"{name}: keyword arguments cannot be recorded; pass them by position")
            try:
                with marker:
                    result = readable_on_host(invoke(*arrays, **kwargs))
            except IREE_ERRORS as error:  # wrong shapes, dtypes, byte order: IREE's first line says which
                raise SectionmarkError(f"{name}: {first_line(str(error)).removeprefix(_INVOKE_PREFIX)}") from None
            if recording is not None:
                recording.note(name, arrays, result)
            return result

        call.__name__ = name
        self.__dict__[name] = call
        return call


def _device_list(device: str, devices: Optional[Sequence[str]]) -> list[str]:
    """The devices a module is loaded on: ``devices`` when given (then ``device`` must be left as it is)."""
    if devices is None:
        return [device]
    if isinstance(devices, str) or not devices:
        raise SectionmarkError(f"devices= takes a list of IREE devices (e.g. ['local-task', 'local-task']), "
                               f"got {devices!r}")
    if device != "local-task":
        raise SectionmarkError(f"pass device= or devices=, not both (got device={device!r}, devices={list(devices)})")
    return [str(name) for name in devices]


def open_context(device: Union[str, Sequence[str]], specs: list, modules: Sequence[bytes]
                 ) -> tuple[Any, list[Any], list]:
    """An IREE context on ``device`` (or on several, in order) with the parameter files and ``modules``
    (.vmfb bytes, in order).

    Returns the context, the modules' VM modules and the parameter specs it
    serves. A later module may import the functions of an earlier one (a
    replay driver imports the model's). Parameter files given without a scope
    (``weights.irpa``) for a module that reads one named scope (turbine's
    ``model``) are served in that scope: IREE names the scope it wanted.
    Every failure is one SectionmarkError line.
    """
    devices = [device] if isinstance(device, str) else list(device)
    try:
        return (*_open_context(devices, specs, modules), specs)
    except _UnservedScope as unserved:
        if not specs or any(scope for scope, _path in specs):
            raise SectionmarkError(_registration_failure(unserved.message, specs)) from None
        scoped = [(unserved.scope, path) for _scope, path in specs]
        try:
            return (*_open_context(devices, scoped, modules), scoped)
        except _UnservedScope as again:  # a second scope: the files cannot all be in the first one
            raise SectionmarkError(_registration_failure(again.message, specs)) from None


class _UnservedScope(Exception):
    """A module read parameters of a scope no provider serves (``scope``), with IREE's ``message``."""

    def __init__(self, scope: str, message: str):
        super().__init__(message)
        self.scope, self.message = scope, message


_UNSERVED_SCOPE = re.compile(r"no provider registered that handles scopes like '([^']*)'")
_INVOKE_PREFIX = "Error invoking function: "


def _open_context(devices: list[str], specs: list, modules: Sequence[bytes]) -> tuple[Any, list[Any]]:
    import iree.runtime as rt

    config = _config(devices)
    context = rt.SystemContext(config=config)
    provider = parameters_module(config.vm_instance, specs)
    if provider is not None:
        context.add_vm_module(provider)
    vm_modules = []
    for vmfb in modules:
        try:
            vm_module = rt.VmModule.copy_buffer(config.vm_instance, vmfb)
        except IREE_ERRORS as error:
            raise SectionmarkError(f"not a loadable IREE module: {first_line(str(error))}") from None
        try:
            context.add_vm_module(vm_module)
        except IREE_ERRORS as error:
            unserved = _UNSERVED_SCOPE.search(str(error))
            if unserved is not None:
                raise _UnservedScope(unserved.group(1), str(error)) from None
            raise SectionmarkError(_registration_failure(str(error), specs)) from None
        vm_modules.append(vm_module)
    return context, vm_modules


# Devices opened for several-device modules, by (device, how many of it came before in the list): kept for the
# process, as iree.runtime keeps the one device of a one-device Config, since host arrays of results
# (``to_host()``) map their memory and outlive the module.
_opened_devices: dict[tuple[str, int], Any] = {}
_opening = threading.Lock()


def _config(devices: list[str]) -> Any:
    """An iree.runtime Config whose HAL module holds ``devices`` in order, each a device of its own (two
    ``local-task`` are two devices, as iree-run-module's two ``--device`` flags make)."""
    import iree.runtime as rt

    if len(devices) == 1:
        try:
            return rt.Config(devices[0])
        except IREE_ERRORS as error:
            raise SectionmarkError(f"cannot open IREE device {devices[0]!r}: {error}") from None
    opened = []
    with _opening:
        for index, device in enumerate(devices):
            key = (device, devices[:index].count(device))
            if key not in _opened_devices:
                try:
                    _opened_devices[key] = rt.get_device(device, cache=False)
                except IREE_ERRORS as error:
                    raise SectionmarkError(f"cannot open IREE device {device!r}: {first_line(str(error))}") from None
            opened.append(_opened_devices[key])
    config = rt.Config(device=opened[0])
    try:
        config.default_vm_modules = (rt.create_hal_module(config.vm_instance, devices=opened),)
    except IREE_ERRORS as error:
        raise SectionmarkError(f"cannot open devices {', '.join(devices)} together: {first_line(str(error))}"
                               + (_ONE_GROUP_EACH if _ONE_GROUP_EACH_ERROR in str(error) else "")) from None
    return config


# IREE 3.13's Python runtime creates each device in a device group of its own; a Vulkan device's queues then
# belong to that group, and a module of several Vulkan devices cannot group them again (local-task devices can).
_ONE_GROUP_EACH_ERROR = "queue frontier already assigned"
_ONE_GROUP_EACH = (" (IREE 3.13's Python runtime opens each Vulkan device in a group of its own: run a module of "
                   "several Vulkan devices with iree-run-module --device=vulkan --device=vulkan, profile it with "
                   "sm.profile(devices=[...]); docs/multi-device.md)")


def _registration_failure(message: str, specs: list) -> str:
    """One line for a module the runtime would not load, saying what to pass when parameters are missing."""
    detail = first_line(message, message)
    if PARAMETERS_MODULE in detail and not specs:
        return ("this module reads external parameters: pass parameters= (e.g. 'model=weights.irpa'; "
                "'model' is iree-turbine's scope when none is given)")
    return f"cannot load the module: {detail}"


def load(
    source: ModuleSource, device: str = "local-task", parameters: Parameters = None, *,
    devices: Optional[Sequence[str]] = None,
) -> LoadedModule:
    """Load a CompiledProgram (what `compile` returns), a .vmfb path or its bytes on ``device`` (e.g. "local-task", "cuda").

    ``parameters``: the external parameter file(s) of a model exported with
    ``aot.externalize_module_parameters``, each ``path`` or ``scope=path`` as
    IREE's ``--parameters`` spells it (see `sectionmark.parameters`).
    ``devices``: instead of ``device``, the devices of a module compiled for
    several (``["local-task", "local-task"]``), in the order of its logical
    devices, as iree-run-module's repeated ``--device`` (docs/multi-device.md).
    """
    return LoadedModule(source, device, parameters, devices)
