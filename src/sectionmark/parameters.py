"""External parameter files, named as IREE's tools name them: ``[scope=]path``.

A model exported after ``aot.externalize_module_parameters`` reads its
weights at run time from parameter files (.irpa, .gguf, .safetensors)
instead of carrying them in the module. ``path`` alone is the anonymous
scope (turbine's default); ``model=weights.irpa`` serves the parameters
externalized with ``external_scope="model"``. Several files may share one
scope. The tools take each as ``--parameters=<spec>``; in-process they
become one ``io_parameters`` module with a provider per scope.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

from sectionmark.errors import IREE_ERRORS, SectionmarkError, first_line

ParameterSpec = Union[str, Path]
Parameters = Union[ParameterSpec, Sequence[ParameterSpec], None]

# The module a program with external parameters imports its loads from.
PARAMETERS_MODULE = "io_parameters"


def parameter_specs(parameters: Parameters) -> list[tuple[str, Path]]:
    """``(scope, path)`` of each file, in order; one clear error for a file that is not there."""
    if parameters is None:
        return []
    if isinstance(parameters, (str, Path)):
        parameters = [parameters]
    specs = []
    for spec in parameters:
        if isinstance(spec, Path):
            scope, path = "", spec
        else:
            scope, separator, name = str(spec).partition("=")
            scope, path = (scope, Path(name)) if separator else ("", Path(spec))
        if not path.is_file():
            raise SectionmarkError(f"parameter file not found: {path}" + (f" (scope {scope!r})" if scope else ""))
        specs.append((scope, path.resolve()))
    return specs


def spec_text(scope: str, path: Path) -> str:
    """``[scope=]path``: a spec as IREE's tools and `parameter_specs` spell it."""
    return f"{scope}={path}" if scope else str(path)


def tool_flags(specs: Sequence[tuple[str, Path]]) -> list[str]:
    """``--parameters=[scope=]path`` for each file, for iree-benchmark-module and friends."""
    return [f"--parameters={spec_text(scope, path)}" for scope, path in specs]


def parameters_module(instance: Any, specs: Sequence[tuple[str, Path]]) -> Optional[Any]:
    """An ``io_parameters`` VM module serving ``specs`` (one index per scope, as IREE's tools build), or None."""
    if not specs:
        return None
    import iree.runtime as rt

    indices: dict[str, Any] = {}
    for scope, path in specs:
        index = indices.setdefault(scope, rt.ParameterIndex())
        try:
            index.load(str(path))
        except IREE_ERRORS as error:
            raise SectionmarkError(f"cannot read parameter file {path}: {first_line(str(error))}") from None
    providers = [index.create_provider(scope=scope) for scope, index in indices.items()]
    return rt.create_io_parameters_module(instance, *providers)
