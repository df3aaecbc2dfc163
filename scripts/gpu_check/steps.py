"""The small checks and summaries of gpu_check.sh's steps (each a subcommand; the script is the driver).

    python steps.py install                 what was installed: sectionmark, IREE's runtime, C extensions, tools
    python steps.py pytest-counts XML       `pytest -m gpu`'s junit XML: exit 1 unless >= 2 tests ran, all passed
    python steps.py verdicts WORK           one PASS/FAIL line per check of WORK/*/verify-*.json
    python steps.py experiment JSON         the informational experiment's record (experiment.py), in lines
    python steps.py verify-json WORK        every WORK/*/verify-*.json in one JSON document (the run's verify.json)
    python steps.py src-digest ROOT         sha256 of ROOT/src's .py and .c files (gpu_prepare.sh writes it in
                                            .gpu/MANIFEST.txt; gpu_check.sh warns when src/ changed since)

Skipped tests would pass quietly, so `pytest-counts` requires both GPU tests to have run and passed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Optional, Sequence

MIN_GPU_TESTS = 2  # tests/gpu/test_gpu.py's tests marked gpu


def install() -> int:
    """Print what the install step left importable; exit 1 when an import fails (iree.compiler must not import)."""
    import sectionmark  # first, as a user's program would
    import iree.runtime
    import iree.runtime.version as version
    import zstandard
    import numpy
    import ml_dtypes

    print("sectionmark", sectionmark.__version__, "from", os.path.dirname(sectionmark.__file__))
    print("IREE runtime", version.VERSION, version.REVISIONS, "from", os.path.dirname(iree.runtime.__file__))
    print("zstandard", zstandard.__version__, "ml_dtypes", ml_dtypes.__version__, "numpy", numpy.__version__, "python",
          sys.version.split()[0])
    for name in ("sectionmark.markers._zonestack", "sectionmark.readers._ireeprof", "sectionmark.profiling._sectionpass"):
        module = importlib.import_module(name)
        print("C extension", name, "OK:", os.path.basename(module.__file__))
    from sectionmark.artifacts.tools import find_tool

    for tool, tracing in (("iree-benchmark-module", True), ("iree-tracy-capture", True),
                          ("iree-benchmark-module", False)):
        print("tool", find_tool(tool, tracing=tracing))
    try:
        compiler = importlib.import_module("iree.compiler")
        print("iree.compiler importable (unexpected here):", compiler.__file__)
    except ImportError:
        print("iree.compiler: not installed (expected: modules were compiled beforehand)")
    return 0


def pytest_counts(xml_path: Path) -> dict[str, int]:
    """tests, failures, errors and skipped of a junit XML file (its one test suite)."""
    suite = ET.parse(xml_path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


def gpu_tests_passed(counts: dict[str, int]) -> bool:
    return counts["tests"] >= MIN_GPU_TESTS and counts["failures"] == counts["errors"] == counts["skipped"] == 0


def verify_files(work: Path) -> list[Path]:
    """The verify results of every framework, in the order the summary lists them (torch, then jax)."""
    return [path for framework in ("torch", "jax") for path in sorted((work / framework).glob("verify-*.json"))]


def verdicts(work: Path) -> list[str]:
    """``PASS torch/verify-profile: <check>`` for each check of each framework's verify results."""
    return [f"{'PASS' if result['ok'] else 'FAIL'} {path.parent.name}/{path.stem}: {result['check']}"
            for path in verify_files(work) for result in json.loads(path.read_text())]


def experiment_lines(record: dict) -> list[str]:
    """The experiment's record (experiment.py's experiment.json) as the summary's lines."""
    lines = [f"module has debug groups: {record['module_has_debug_groups']}; "
             f"default flags crash: {record['default_flags_crash']}"]
    for run in record["runs"]:
        capture = run.get("capture")
        if isinstance(capture, dict):
            capture = (f"{capture['dispatch_zones']} dispatch zones, {capture['section_zones']} section zones, "
                       f"{capture['dispatch_zones_outside_their_group']} dispatch zones outside their group")
        lines.append(f"{run['run']}: rc={run['rc']} ({run['outcome'][:160]})" + (f"; capture: {capture}" if capture else ""))
    return lines


def verify_document(work: Path) -> dict:
    """Every ``WORK/FRAMEWORK/verify-MODE.json`` under the key ``FRAMEWORK/verify-MODE``."""
    return {f"{path.parent.name}/{path.stem}": json.loads(path.read_text()) for path in sorted(work.glob("*/verify-*.json"))}


def src_digest(root: Path) -> str:
    """sha256 over ``src``'s Python and C files in path order, each its path from ``root`` then its bytes."""
    digest = hashlib.sha256()
    for path in sorted((root / "src").rglob("*")):
        if path.suffix in (".py", ".c"):
            digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install")
    commands.add_parser("pytest-counts").add_argument("xml", type=Path)
    commands.add_parser("verdicts").add_argument("work", type=Path)
    commands.add_parser("experiment").add_argument("record", type=Path)
    commands.add_parser("verify-json").add_argument("work", type=Path)
    commands.add_parser("src-digest").add_argument("root", type=Path)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.command == "install":
        return install()
    if args.command == "pytest-counts":
        counts = pytest_counts(args.xml)
        print("pytest -m gpu:", counts)
        return 0 if gpu_tests_passed(counts) else 1
    if args.command == "verdicts":
        print("\n".join(verdicts(args.work)))
    elif args.command == "src-digest":
        print(src_digest(args.root))
    elif args.command == "experiment":
        print("\n".join(experiment_lines(json.loads(args.record.read_text()))))
    else:
        print(json.dumps(verify_document(args.work), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
