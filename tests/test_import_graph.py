"""The data flow in the imports: markers -> importers -> compiler -> runtime -> readers -> profiling -> renderers.

Each module of src/sectionmark belongs to one stage (docs/architecture.md);
a module imports only its own stage, earlier stages and the shared foundation
(errors, paths, outputs, serialization, parameters, arguments, and the section
map, the first data model). Both module-level imports and imports inside functions
count: a lazy import is still a dependency. The few justified exceptions are
listed below with their reason.

The runtime side must not need the compiler: `sm.load`, `sm.report` and the
``report`` / ``tracy-stats`` commands run in subprocesses and must leave
``iree.compiler`` out of ``sys.modules``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "sectionmark"

STAGES = ["foundation", "markers", "importers", "compiler", "runtime", "readers", "profiling", "renderers", "entry"]
FOUNDATION = {"errors", "paths", "outputs", "serialization", "parameters", "section_map", "lazy", "arguments"}
PREFIX_STAGES = {
    "markers": "markers", "importers": "importers", "locations": "importers", "compiler": "compiler",
    "runtime": "runtime", "artifacts": "runtime", "readers": "readers", "profiling": "profiling", "tracy": "profiling",
    "renderers": "renderers", "cli": "entry", "__main__": "entry",
}
# (importer, imported) pairs against the flow, and why they are right.
EXCEPTIONS = {
    # A marker entered while a framework traces enters that framework's scope;
    # imported only once the framework itself is (sectionmark.markers.marker).
    ("sectionmark.markers.marker", "sectionmark.importers.torch"),
    ("sectionmark.markers.marker", "sectionmark.importers.jax"),
    # A torch export is also iree-turbine's ExportOutput, whose compile()
    # compiles it: the drop-in keeps that method (sectionmark.importers.turbine).
    ("sectionmark.importers.turbine", "sectionmark.compiler.driver"),
    # prof.render(name) / prof.save(path) look the format up in the registry
    # when called; no renderer module is imported by the session (checked
    # below at run time as well).
    ("sectionmark.profiling.session", "sectionmark.renderers"),
}


def stage(module: str) -> str:
    parts = module.split(".")
    if parts == ["sectionmark"]:
        return "entry"
    head = parts[1]
    if head in FOUNDATION:
        return "foundation"
    return PREFIX_STAGES[head]


def module_name(path: Path) -> str:
    relative = path.relative_to(SRC).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sectionmark_imports(path: Path) -> set[str]:
    """Every sectionmark module ``path`` imports, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("sectionmark"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("sectionmark"):
                continue
            # `from sectionmark.x import y` imports sectionmark.x.y when y is a module
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                is_module = (SRC / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    SRC / Path(*candidate.split(".")) / "__init__.py").exists()
                found.add(candidate if is_module else target)
    return found


def test_stages_cover_every_module():
    for path in PACKAGE.rglob("*.py"):
        assert stage(module_name(path)) in STAGES, path


def test_imports_follow_the_data_flow():
    against_the_flow = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for imported in sorted(sectionmark_imports(path)):
            if STAGES.index(stage(imported)) > STAGES.index(stage(importer)) and (importer, imported) not in EXCEPTIONS:
                against_the_flow.append(f"{importer} ({stage(importer)}) imports {imported} ({stage(imported)})")
    assert not against_the_flow, "\n".join(against_the_flow)


def test_listed_exceptions_are_still_needed():
    """An exception nobody uses any more is taken off the list."""
    used = {(module_name(path), imported) for path in PACKAGE.rglob("*.py") for imported in sectionmark_imports(path)}
    assert EXCEPTIONS <= used, EXCEPTIONS - used


MAX_MODULE_LINES = 600
# Modules still over the limit, each to be split by a later step of issue 26.
LONG_MODULES = {
    "sectionmark/cli.py",  # the CLI's one path for replay and per-function profiles (result family)
    "sectionmark/profiling/session.py",  # derived views computed on demand instead of embedded (session JSON)
}


def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
            for path in PACKAGE.rglob("*.py")}
    long = {name: lines for name, lines in long.items() if lines > MAX_MODULE_LINES}
    assert set(long) == LONG_MODULES, long


def test_profiling_imports_no_renderer_module():
    for path in (PACKAGE / "profiling").rglob("*.py"):
        renderer_modules = {name for name in sectionmark_imports(path) if name.startswith("sectionmark.renderers.")}
        assert not renderer_modules, f"{module_name(path)} imports {renderer_modules}"


def _modules_loaded(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; which sectionmark/IREE modules it loaded."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        print(json.dumps({
            "iree.compiler": "iree.compiler" in sys.modules,
            "renderers": sorted(m for m in sys.modules if m.startswith("sectionmark.renderers")),
            "frameworks": sorted(m for m in ("torch", "jax") if m in sys.modules),
        }))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_sectionmark_and_the_session_loads_no_compiler_framework_or_renderer():
    loaded = _modules_loaded("import sectionmark as sm, sectionmark.profiling; sm.section('x')")
    assert loaded == {"iree.compiler": False, "renderers": [], "frameworks": []}


@pytest.fixture(scope="module")
def saved_module(tmp_path_factory):
    """A tiny compiled module with its profile, saved as a runtime-only user receives them."""
    from sectionmark.compiler import compile
    from tiny_profiles import TWO_MATMULS

    directory = tmp_path_factory.mktemp("runtime-only")
    compiled = compile(TWO_MATMULS, target="llvm-cpu")
    vmfb = directory / "model.vmfb"
    compiled.save(vmfb)
    profile = directory / "run.ireeprof"
    import sectionmark as sm

    sm.profile(compiled, args=_tiny_args(), iterations=2, warmup=1, keep_profile=profile, quiet=True)
    return vmfb, profile


def _tiny_args():
    import numpy as np

    return (np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))


def test_load_and_report_do_not_import_the_compiler(saved_module):
    vmfb, profile = saved_module
    loaded = _modules_loaded(
        f"""
        import numpy as np, sectionmark as sm
        module = sm.load({str(vmfb)!r})
        module.main(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)).to_host()
        print(sm.report({str(profile)!r}, {str(vmfb)!r}).table())
        """
    )
    assert loaded["iree.compiler"] is False


@pytest.mark.parametrize("command", ["report", "tracy-stats"])
def test_runtime_commands_do_not_import_the_compiler(saved_module, tmp_path, command):
    vmfb, profile = saved_module
    if command == "report":
        argv = ["report", str(profile), "--map", str(vmfb)]
    else:
        replay = tmp_path / "replay.tracy"
        _modules_loaded(f"from sectionmark.cli import main; main(['tracy', {str(profile)!r}, '--map', "
                        f"{str(vmfb)!r}, '-o', {str(replay)!r}])")
        argv = ["tracy-stats", str(replay)]
    loaded = _modules_loaded(f"from sectionmark.cli import main\nmain({argv!r})")
    assert loaded["iree.compiler"] is False
