"""pytest plugin (-p sm_prebuilt_compile): `sm.compile` served from modules compiled beforehand.

iree-base-compiler (83 MB) cannot be sent to the GPU machine, so scripts/gpu_prepare.sh compiles,
on a CPU machine with the same IREE 3.13 compiler, exactly the `sm.compile(...)` calls tests/gpu/test_gpu.py
makes (the cuda target compiles without a GPU) and stores each .vmfb (section map embedded) under
$SM_PREBUILT_DIR as <key>.vmfb, key = sha256 of the call's arguments. Where iree.compiler imports,
this plugin does nothing. A call that was not compiled beforehand fails with one line.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path


def compile_key(source, target="llvm-cpu", extra_args=(), markers=True, debug_groups=None, input_type=None) -> str:
    if not isinstance(source, str):
        raise TypeError(f"only MLIR text can be compiled beforehand, not {type(source).__name__}")
    call = [source, target, list(extra_args), bool(markers), None if debug_groups is None else bool(debug_groups), input_type]
    return hashlib.sha256(json.dumps(call).encode()).hexdigest()


class PrebuiltExport:
    """What `sm.compile` returns (`CompiledProgram`): .vmfb bytes, section map, target; `save`."""

    def __init__(self, vmfb: bytes, section_map, target: str):
        self.vmfb, self.section_map, self.target = vmfb, section_map, target

    def save(self, path, inputs=()):
        from sectionmark.outputs import check_output_path, write_atomic
        from sectionmark.section_map import sidecar_path

        path = Path(path)
        check_output_path(path, inputs)
        write_atomic(path, self.vmfb, inputs)
        if self.section_map is not None:
            write_atomic(sidecar_path(path), self.section_map.dumps(), inputs)
        return path


def prebuilt_compile(source, target="llvm-cpu", extra_args=(), markers=True, debug_groups=None, input_type=None):
    from sectionmark.artifacts import read_section_map
    from sectionmark.errors import SectionmarkError

    key = compile_key(source, target, extra_args, markers, debug_groups, input_type)
    path = Path(os.environ.get("SM_PREBUILT_DIR", ".gpu/prebuilt-compile")) / f"{key}.vmfb"
    if not path.is_file():
        raise SectionmarkError(f"no module compiled beforehand for this sm.compile call (target {target}, key "
                               f"{key[:12]}): iree-base-compiler is not installed here; run scripts/gpu_prepare.sh again")
    return PrebuiltExport(path.read_bytes(), read_section_map(path) if markers else None, target)


def _has_compiler() -> bool:
    try:
        importlib.import_module("iree.compiler")
    except ImportError:
        return False
    return True


def pytest_configure(config):
    import sectionmark

    if not _has_compiler():
        sectionmark.compile = prebuilt_compile  # sm.compile (a lazy attribute until set)


def pytest_report_header(config):
    if _has_compiler():
        return "sm_prebuilt_compile: iree.compiler is installed, sm.compile compiles"
    return f"sm_prebuilt_compile: sm.compile served from {os.environ.get('SM_PREBUILT_DIR')} (no iree-base-compiler here)"
