"""The data flow in the imports: markers -> importers -> compiler -> runtime -> readers -> profiling -> workflows
-> renderers.

Each module of src/sectionmark belongs to one stage (docs/architecture.md);
a module imports only its own stage, earlier stages and the shared foundation
(errors, section_path, outputs, serialization, parameters, arguments, and the section
map, the first data model). Both module-level imports and imports inside functions
count: a lazy import is still a dependency; an import under ``if TYPE_CHECKING:``
is not (it never runs). The few justified exceptions are listed below with
their reason.

Within a stage, files import one way too: no cycle of files among runtime
imports, except the cycles listed with their reason, and the IREE profile
readers' files in the order of READER_LAYERS; no private name (``_name``)
is imported from another file; and no source file, Python or C, is over
MAX_LINES lines (a file that long does several jobs).

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

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "sectionmark"

STAGES = ["foundation", "markers", "importers", "compiler", "runtime", "readers", "profiling", "workflows", "renderers",
          "entry"]
FOUNDATION = {"errors", "section_path", "outputs", "serialization", "parameters", "section_map", "lazy", "arguments",
              "progress"}
PREFIX_STAGES = {
    "markers": "markers", "importers": "importers", "locations": "importers", "compiler": "compiler",
    "runtime": "runtime", "artifacts": "runtime", "readers": "readers", "profiling": "profiling", "tracy": "profiling",
    "workflows": "workflows", "renderers": "renderers", "cli": "entry", "commands": "entry", "__main__": "entry",
    "pytest_plugin": "entry", "demo": "entry",
}
# (importer, imported) pairs against the flow, and why they are right.
EXCEPTIONS = {
    # The one seam between markers and importers: a marker entered while a
    # framework traces enters the scope that framework's importer registered;
    # the registry imports that importer on the first section the framework
    # traces, only once the framework itself is imported
    # (sectionmark.markers.frameworks). The marker knows frameworks only
    # through the registry.
    ("sectionmark.markers.frameworks", "sectionmark.importers.torch"),
    ("sectionmark.markers.frameworks", "sectionmark.importers.jax"),
    # A torch export is also iree-turbine's ExportOutput, whose compile()
    # compiles it: the drop-in keeps that method (sectionmark.importers.turbine).
    ("sectionmark.importers.turbine", "sectionmark.compiler.pipeline"),
    # prof.render(name) / prof.save(path) look the format up in the registry
    # when called; no renderer module is imported by the session (checked
    # below at run time as well).
    ("sectionmark.profiling.session", "sectionmark.renderers"),
    # A run renders its session through the same registry, with its events for the views that draw them.
    ("sectionmark.profiling.read", "sectionmark.renderers"),
    # Several ranks' profiles (a RankReport) render through the same registry, looked up when called.
    ("sectionmark.profiling.ranks", "sectionmark.renderers"),
    # A run on several devices likewise, with each device's events for the views that draw them.
    ("sectionmark.profiling.device_run", "sectionmark.renderers"),
    # A replay's per-function profiles render through the same registry, looked up when called.
    ("sectionmark.workflows.replay", "sectionmark.renderers"),
    # A several-device profile renders its table, JSON and CSV through the same outputs, looked up when called.
    ("sectionmark.profiling.devices", "sectionmark.renderers"),
    # A replay on several devices renders each function's several-device outputs the same way, looked up when called.
    ("sectionmark.workflows.replay_devices", "sectionmark.renderers"),
    # Jupyter's hooks of the results (repr, inline HTML) ask the registry for the notebook view when called.
    ("sectionmark.profiling.display", "sectionmark.renderers"),
}
# Cycles of files (runtime imports), each with why it is right. A cycle not listed fails the test.
ALLOWED_CYCLES: dict[frozenset[str], str] = {
    # The markers' one seam (the first exceptions above): the registry imports a framework's importer on the
    # first section that framework traces, and the importer registers its scope in the registry when imported
    # (importers.torch through its hooks module). The marker itself imports only the registry.
    frozenset({"sectionmark.markers.frameworks", "sectionmark.importers.jax", "sectionmark.importers.torch",
               "sectionmark.importers.torch.exporting", "sectionmark.importers.torch.hooks"}):
        "framework registry <-> the importers registering in it: the registry imports one lazily, on first use",
    # compile() takes any export form and a section slice (pipeline -> exported, slicing), a slice is cut from
    # an export and compiled for --bench (slicing -> pipeline, exported), and a torch export is iree-turbine's
    # ExportOutput whose compile() compiles it (turbine -> pipeline, exported -> turbine): the compiler's public
    # entry and the export forms name each other.
    frozenset({"sectionmark.compiler.pipeline", "sectionmark.compiler.slicing", "sectionmark.importers.exported",
               "sectionmark.importers.turbine"}):
        "compile() <-> the export forms it accepts, and a slice compiled for --bench",
}
MAX_LINES = 600
# Source files over MAX_LINES, each with why it still is. Taken off once split (a test says so).
OVERSIZED: dict[str, str] = {}


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


def _is_module(name: str) -> bool:
    """A Python file, a package, or a C extension (its source: the built file may be missing)."""
    path = SRC / Path(*name.split("."))
    return any(path.with_suffix(suffix).exists() for suffix in (".py", ".c")) or (path / "__init__.py").exists()


def _type_checking_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): its body runs only under a type checker."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except what lies in the body of an ``if TYPE_CHECKING:`` block."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _import_target(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def sectionmark_imports(path: Path) -> set[str]:
    """Every sectionmark module (file) ``path`` imports when it runs, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("sectionmark"))
        elif isinstance(node, ast.ImportFrom):
            target = _import_target(node, package)
            if not target.startswith("sectionmark"):
                continue
            # `from sectionmark.x import y` imports sectionmark.x.y when y is a module
            found.update(f"{target}.{alias.name}" if _is_module(f"{target}.{alias.name}") else target
                         for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each sectionmark module -> the sectionmark modules it imports at run time."""
    return {module_name(path): sectionmark_imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The cycles of ``graph``: its strongly connected components of more than one node, or of one node that
    imports itself (Tarjan's algorithm, iterative: an import chain may be deeper than Python's recursion)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = lowest[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = lowest[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    lowest[node] = min(lowest[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowest[parent] = min(lowest[parent], lowest[node])
            if lowest[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(frozenset(component))
    return found


def test_cycle_finder_on_a_hand_built_graph():
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"}, "e": set(),  # a chain below it
        "f": {"f"},  # a module importing itself
        "g": {"h"}, "h": {"g", "a"},  # a second cycle, reaching into the first
        "i": {"missing"},  # an import of a module the graph does not list
    }
    assert sorted(map(sorted, cycles(graph))) == [["a", "b", "c"], ["f"], ["g", "h"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    chain = {str(n): {str(n + 1)} for n in range(5000)} | {"5000": {"0"}}  # deeper than the recursion limit
    assert cycles(chain) == [frozenset(map(str, range(5001)))]


def test_type_checking_imports_are_not_runtime_imports(tmp_path, monkeypatch):
    package = tmp_path / "sectionmark"
    package.mkdir()
    for name in ("errors", "section_path", "outputs"):
        (package / f"{name}.py").write_text("")
    module = package / "outputs.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sectionmark import errors\n"
                      "else:\n    from sectionmark import section_path\ndef f():\n    import sectionmark.errors as e\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert sectionmark_imports(module) == {"sectionmark.section_path", "sectionmark.errors"}
    module.write_text("import typing\nif typing.TYPE_CHECKING:\n    from sectionmark import errors\n")
    assert sectionmark_imports(module) == set()


def test_no_cycle_of_files():
    graph = import_graph()
    unlisted = ["; ".join(f"{module} imports {', '.join(sorted(graph[module] & cycle))}" for module in sorted(cycle))
                for cycle in cycles(graph) if cycle not in ALLOWED_CYCLES]
    assert not unlisted, "import cycles (break them, or list them in ALLOWED_CYCLES with the reason):\n" + "\n".join(unlisted)


def test_listed_cycles_still_exist():
    """A cycle that was broken is taken off the list."""
    assert set(ALLOWED_CYCLES) <= set(cycles(import_graph()))


def test_no_source_file_over_the_line_limit():
    """Python and C (the extensions and the header they share) alike."""
    lengths = {str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
               for pattern in ("*.py", "*.c", "*.h") for path in PACKAGE.rglob(pattern)}
    assert any(name.endswith(".c") for name in lengths)  # the C sources are where the patterns look
    too_long = [f"{name}: {lines} lines" for name, lines in sorted(lengths.items())
                if lines > MAX_LINES and name not in OVERSIZED]
    assert not too_long, f"over {MAX_LINES} lines (split by job):\n" + "\n".join(too_long)
    assert all(lengths.get(name, 0) > MAX_LINES for name in OVERSIZED), "take split files off OVERSIZED"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_extension(name: str) -> bool:
    """A C extension module of src/sectionmark (setup.py builds it from the .c file of its name)."""
    return (SRC / Path(*name.split("."))).with_suffix(".c").exists()


def private_imports(path: Path) -> list[str]:
    """The private names ``path`` takes from other sectionmark modules: ``from sectionmark.x import _name``
    (aliased or not, inside functions and under ``if TYPE_CHECKING:`` too), and any import of or from a private
    module (``import sectionmark.x._y``, ``from sectionmark.x._y import z``).

    A C extension is a private module reached through one accessor in its own
    package (`sectionmark.readers.event_model.native`,
    `sectionmark.profiling.native.native_passes`, ...): importing it from its
    package is not crossing; from another package it is.
    """
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def crossing(module: str) -> bool:
        private_parts = [part for part in module.split(".") if _private(part)]
        return bool(private_parts) and not (_is_extension(module) and module.rpartition(".")[0] == package)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"import {alias.name}" for alias in node.names
                      if alias.name.startswith("sectionmark") and crossing(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            target = _import_target(node, package)
            if not target.startswith("sectionmark"):
                continue
            found += [f"from {target} import {alias.name}" for alias in node.names
                      if crossing(target) or (_private(alias.name) and crossing(f"{target}.{alias.name}"))]
    return found


def test_private_import_finder_on_hand_built_modules(tmp_path, monkeypatch):
    package = tmp_path / "sectionmark"
    for folder in ("readers", "profiling"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "readers" / "_fast.c").write_text("")
    (package / "readers" / "bundle.py").write_text("_LAYOUT = 1\n")
    module = package / "readers" / "stream.py"
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    crossing = {
        "from sectionmark.readers.bundle import (LAYOUT,\n    _LAYOUT as layout)\n": ["from sectionmark.readers.bundle import _LAYOUT"],
        "def f():\n    from .bundle import _LAYOUT\n": ["from sectionmark.readers.bundle import _LAYOUT"],
        "from sectionmark.readers._fast import walk\n": [],  # its own package's extension
        "from sectionmark.readers import _fast\n": [],
        "from sectionmark.readers import bundle, __doc__\n": [],
    }
    for source, expected in crossing.items():
        module.write_text(source)
        assert private_imports(module) == expected, source
    outside = package / "profiling" / "passes.py"  # another package reaching into the readers' extension
    outside.write_text("import sectionmark.readers._fast\nfrom sectionmark.readers import _fast\n")
    assert private_imports(outside) == ["import sectionmark.readers._fast", "from sectionmark.readers import _fast"]


def test_no_private_name_crosses_files():
    crossing = [f"{module_name(path)}: {line}" for path in sorted(PACKAGE.rglob("*.py")) for line in private_imports(path)]
    assert not crossing, "private names taken from another file (make them public where they belong):\n" + "\n".join(
        crossing)


# The IREE profile readers' files, layer by layer: a file imports only files of earlier layers, never one of its own
# layer or a later one (no back-and-forth). The events every reader makes and the numpy helpers; the cross-table
# checks and the one error line; the device clock mapping, and the bundle's container (its records, chunks and
# record layouts); the decode of the bundle's records into tables; the readers (the whole bundle, its windows, the
# JSONL export); `read_profile`, which picks one.
READER_LAYERS = [
    {"event_model", "arrays"},
    {"checks"},
    {"device_events", "bundle_records"},
    {"bundle_events"},
    {"ireeprof_bundle", "ireeprof_stream", "ireeprof_jsonl"},
    {"ireeprof"},
]


def test_profile_reader_files_import_one_way():
    graph = import_graph()
    layer_of = {f"sectionmark.readers.{name}": index for index, layer in enumerate(READER_LAYERS) for name in layer}
    assert set(layer_of) <= set(graph), sorted(set(layer_of) - set(graph))
    backwards = [f"{importer} imports {imported}" for importer in sorted(layer_of) for imported in sorted(graph[importer])
                 if imported in layer_of and layer_of[imported] >= layer_of[importer]]
    assert not backwards, "\n".join(backwards)


def test_every_module_belongs_to_exactly_one_stage():
    """The stage lists name each top-level module and package of src/sectionmark once, and nothing else.

    A new module must be placed in a stage on purpose (not by a default), a name
    listed twice would have two stages, and a stale name hides nothing.
    """
    on_disk = {path.stem for path in PACKAGE.iterdir()
               if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()}
    listed = [*FOUNDATION, *PREFIX_STAGES]
    assert sorted(name for name in set(listed) if listed.count(name) > 1) == []
    assert sorted(on_disk - set(listed)) == [] and sorted(set(listed) - on_disk) == []
    assert {"foundation", *PREFIX_STAGES.values()} == set(STAGES)  # every stage has a module, none is unknown
    assert [path for path in SRC.rglob("*.py") if PACKAGE not in path.parents] == []  # nothing beside the package


def test_imports_follow_the_data_flow():
    against_the_flow = []
    for importer, imported_modules in import_graph().items():
        for imported in sorted(imported_modules):
            if STAGES.index(stage(imported)) > STAGES.index(stage(importer)) and (importer, imported) not in EXCEPTIONS:
                against_the_flow.append(f"{importer} ({stage(importer)}) imports {imported} ({stage(imported)})")
    assert not against_the_flow, "\n".join(against_the_flow)


def test_importers_reach_the_markers_only_through_the_framework_registry():
    """The seam between markers and importers: no importer imports the marker or reads or writes its names."""
    for path in sorted((PACKAGE / "importers").rglob("*.py")):
        markers = {name for name in sectionmark_imports(path) if name.startswith("sectionmark.markers")}
        assert markers <= {"sectionmark.markers.frameworks"}, f"{module_name(path)} imports {markers}"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        private = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                   and isinstance(node.value, ast.Name) and node.value.id == "frameworks" and node.attr.startswith("_")]
        assert not private, f"{module_name(path)} uses the registry's private {private}"


def test_listed_exceptions_are_still_needed():
    """An exception nobody uses any more is taken off the list."""
    used = {(importer, imported) for importer, imports in import_graph().items() for imported in imports}
    assert EXCEPTIONS <= used, EXCEPTIONS - used


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
            "sectionmark": sorted(m for m in sys.modules if m.startswith("sectionmark")),
            "numpy": "numpy" in sys.modules,
        }))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_sectionmark_and_the_session_loads_no_compiler_framework_or_renderer():
    loaded = _modules_loaded("import sectionmark as sm, sectionmark.profiling; sm.section('x')")
    assert (loaded["iree.compiler"], loaded["renderers"], loaded["frameworks"]) == (False, [], [])


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


# What the command line itself may add to the modules `sm.profile` and the table need: its parser, its commands, and
# what the parser shows of the other commands (compare's defaults and the compile targets, apart from their code).
CLI_OWN_MODULES = {"sectionmark.cli", "sectionmark.commands", "sectionmark.profiling.compare_defaults",
                   "sectionmark.workflows.recording_files", "sectionmark.compiler", "sectionmark.compiler.targets"}


def test_the_profile_command_imports_only_what_sm_profile_needs(saved_module, tmp_path):
    """``sectionmark profile`` pays for no other command: not compare's statistics, not the recording's replay and
    runtime, not the markers (issue Q: ``--no-cost`` is a short profile, and its imports are most of it)."""
    import numpy as np

    vmfb, _profile = saved_module
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", np.ones((64, 64), np.float32))
    inputs = [str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]
    command = _modules_loaded(
        f"""
        from sectionmark.cli import main
        assert main(['profile', {str(vmfb)!r}, '--input', {inputs[0]!r}, '--input', {inputs[1]!r}, '-n', '1',
                     '--warmup', '0', '--no-cost']) == 0
        """
    )
    library = _modules_loaded(
        f"""
        import sectionmark as sm
        from sectionmark.workflows.inputs import load_input_array
        run = sm.profile({str(vmfb)!r}, [load_input_array(path) for path in {inputs!r}], iterations=1, warmup=0,
                         cost=False)
        run.render("table")
        """
    )
    assert set(command["sectionmark"]) - set(library["sectionmark"]) <= CLI_OWN_MODULES
    assert not {"sectionmark.profiling.compare", "sectionmark.workflows.record", "sectionmark.runtime",
                "sectionmark.markers"} & set(command["sectionmark"])


@pytest.mark.parametrize("argv", [["--help"], ["profile", "--help"], ["compare", "--help"]])
def test_help_imports_no_numpy(argv):
    """The parser shows every command's options without importing what any of them runs."""
    loaded = _modules_loaded(f"from sectionmark.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass")
    assert loaded["numpy"] is False


# Folders of tests/ beside the stages: the shared builders and the oracle, whole-stack runs of real model code,
# the GPU drivers' end-to-end checks.
TEST_FOLDERS_BESIDE_STAGES = {"helpers", "end_to_end", "gpu"}


def test_tests_mirror_the_source_packages():
    """Each test lives in the folder of what it tests: a stage (or a package of one, such as tracy/), the
    foundation, the entry points, or one of the folders beside them; nothing but conftest.py at the top."""
    tests = SRC.parent / "tests"
    assert sorted(path.name for path in tests.glob("*.py")) == ["conftest.py"]
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    allowed = set(STAGES) | packages | TEST_FOLDERS_BESIDE_STAGES
    folders = {path.name for path in tests.iterdir() if path.is_dir() and not path.name.startswith((".", "_"))}
    assert folders <= allowed, sorted(folders - allowed)
    assert all(any(folder.glob("test_*.py")) or folder.name == "helpers" for folder in map(tests.joinpath, folders))


# What a renderer may not import: it draws what it is given, and never measures, compiles or runs a process.
RENDERERS_NEVER_IMPORT = ("sectionmark.workflows", "sectionmark.compiler", "subprocess", "multiprocessing")


def test_renderers_only_draw():
    """No renderer imports a workflow, the compiler or the runner, or a module that starts processes (the
    graph's Graphviz runs in artifacts/graphviz.py, the Tracy replay's process in tracy/capture.py)."""
    found = []
    for path in sorted((PACKAGE / "renderers").glob("*.py")):
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.name} imports {name}" for name in names
                      if name.startswith(RENDERERS_NEVER_IMPORT)]
    assert not found, "\n".join(found)
