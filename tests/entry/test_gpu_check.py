"""scripts/gpu_check/: the Python of the GPU check, linted and tested here on the CPU on recorded data.

scripts/gpu_check.sh drives a run on the GPU machine; its steps' Python lives in scripts/gpu_check/ and is
copied beside the run (``--write-helpers``). Here: every file compiles and pyflakes finds nothing; the
command lines parse as gpu_check.sh writes them; and the acceptance checks (verify.py) and the summaries
(steps.py) judge hand-built outputs shaped like an H200 run's (docs/gpu.md): a raw capture of dispatch zones
only, the report's own capture with section zones around them, Tracy's csvexport of both, the profile and
report JSON, tracy-stats' JSON. A consistent run passes every check; each kind of fault fails its check.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tiny_profiles import KEY_0, KEY_1, hand_map

from sectionmark.readers.tracy_capture import Capture, Track, Zone
from sectionmark.section_map import DispatchSite

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "scripts" / "gpu_check"
COMMAND_BUFFER_ZONE = "iree_hal_cuda_stream_command_buffer"
DURATIONS = {KEY_0: 100, KEY_1: 300}  # per dispatch; hand_map: KEY_0 all Attn, KEY_1 0.25 Attn / 0.75 MLP
CALLS, WARMUP = 5, 2
CALL_NS = 1000  # one call every microsecond


def save_map(path: Path) -> Path:
    """tiny_profiles' hand-written map (two dispatches a call, the second fused across Attn and MLP), with its
    two dispatch sites, as a map file."""
    section_map = hand_map()
    section_map.sites = [DispatchSite(id=command.site, function="main", shares=command.shares, op_count=1,
                                      key=command.key)
                         for command in section_map.command_buffers[0].commands if command.op == "dispatch"]
    section_map.save(path)
    return path


def load(name: str) -> ModuleType:
    """A fresh copy of scripts/gpu_check/NAME.py (verify.py keeps its results in a module global)."""
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_helpers_compile_and_pyflakes_finds_nothing():
    files = sorted(FOLDER.glob("*.py"))
    assert {path.name for path in files} == {"eager_capture.py", "experiment.py", "sim_capture.py",
                                             "sm_prebuilt_compile.py", "steps.py", "verify.py"}
    lint = subprocess.run([sys.executable, "-m", "pyflakes", *map(str, files)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for path in files:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")


def test_the_driver_writes_these_helpers_and_has_no_python_of_its_own(tmp_path):
    script = ROOT / "scripts" / "gpu_check.sh"
    subprocess.run(["bash", str(script), "--write-helpers", str(tmp_path / "helpers")], check=True, timeout=60)
    assert sorted(path.name for path in (tmp_path / "helpers").iterdir()) == sorted(p.name for p in FOLDER.glob("*.py"))
    for path in FOLDER.glob("*.py"):
        assert (tmp_path / "helpers" / path.name).read_bytes() == path.read_bytes()
    text = script.read_text(encoding="utf-8")
    assert "<<" not in text.replace("<<<", "")  # no heredoc: every line of Python is in scripts/gpu_check/


def test_verify_parses_gpu_check_sh_command_lines():
    verify = load("verify")
    args = verify.parse_args(["profile", ".", "--map", "/g/nanogpt-torch/model.vmfb", "--calls", "23", "--warmup", "3"])
    assert (args.mode, args.dir, args.map, args.calls, args.warmup) == ("profile", ".", "/g/nanogpt-torch/model.vmfb",
                                                                        23, 3)
    args = verify.parse_args(["eager", ".", "--map", "m.vmfb", "--calls", "10"])
    assert (args.mode, args.calls, args.warmup) == ("eager", 10, 3)
    assert verify.parse_args(["profile", "d", "--map", "m"]).calls == 23  # the defaults: 3 warmup + 20 calls
    for wrong in (["profile", "d"], ["replay", "d", "--map", "m"], ["profile", "d", "--map", "m", "--calls", "x"]):
        with pytest.raises(SystemExit):
            verify.parse_args(wrong)


def test_steps_parses_its_subcommands(tmp_path):
    steps = load("steps")
    assert steps.parse_args(["pytest-counts", "x.xml"]).xml == Path("x.xml")
    assert steps.parse_args(["verdicts", str(tmp_path)]).work == tmp_path
    assert steps.parse_args(["install"]).command == "install"
    assert steps.parse_args(["src-digest", "."]).root == Path(".")
    for wrong in ([], ["verdicts"], ["unknown"]):
        with pytest.raises(SystemExit):
            steps.parse_args(wrong)


# ---------------------------------------------------------------------------- a recorded run


def zone_list(spans: list) -> list[Zone]:
    """Zones of nested spans ``[name, start, end, children]``, parents first (as the reader lists them)."""
    zones: list[Zone] = []

    def visit(span, parent, depth):
        zones.append(Zone(span[0], span[1], span[2], depth, parent))
        index = len(zones) - 1
        for child in span[3]:
            visit(child, index, depth + 1)

    for span in spans:
        visit(span, -1, 0)
    return zones


def raw_call(start: int) -> list:
    """One call as the CUDA driver records it without debug groups: dispatch zones in the command buffer's."""
    dispatches, now = [], start + 10
    for key in (KEY_0, KEY_1):
        dispatches.append([key, now, now + DURATIONS[key], []])
        now += DURATIONS[key] + 10
    return [COMMAND_BUFFER_ZONE, start, now, dispatches]


def sections_call(start: int, misplace: bool = False) -> list:
    """One call as the report's own capture draws it: Block > Attn > KEY_0, Block > MLP > KEY_1."""
    first, second = raw_call(start)[3]
    attn = ["Attn", first[1], first[2], [first]]
    mlp = ["MLP", second[1], second[2], [second]]
    if misplace:  # KEY_1 drawn inside Attn: not its command's group
        attn, mlp = ["Attn", first[1], second[2], [first, second]], ["MLP", second[2], second[2] + 5, []]
    return ["Block", attn[1], mlp[2], [attn, mlp]]


def csv_rows(zones: list[Zone]) -> str:
    """Tracy's ``csvexport -g``: name, source location, start, duration."""
    return "name,src_file:src_line,ns_since_start,exec_time_ns\n" + "".join(
        f"{zone.name},stream_command_buffer.c:{index},{zone.start_ns},{zone.duration_ns}\n"
        for index, zone in enumerate(zones))


def section_row(path: list[str], busy: float, dispatches: int) -> dict:
    return {"path": path, "unmarked": not path, "busy_ns": busy, "dispatches": dispatches}


def profile_document(calls: int, warmup: int, coverage_error: float = 0.0) -> dict:
    """What ``sectionmark profile|report --json`` writes of the calls after ``warmup`` (the fields verify reads)."""
    measured = calls - warmup
    attn, mlp = measured * (DURATIONS[KEY_0] + 0.25 * DURATIONS[KEY_1]), measured * 0.75 * DURATIONS[KEY_1]
    return {"coverage_error": coverage_error, "calls": measured, "warmup": warmup, "calls_known": True,
            "total_ns": measured * sum(DURATIONS.values()), "unmarked_ns": 0,
            "sections": [section_row(["Block"], attn + mlp, 2 * measured), section_row(["Block", "Attn"], attn, 2 * measured),
                         section_row(["Block", "MLP"], mlp, measured), section_row([], 0, 0)]}


def recorded_run(directory: Path, misplace: bool = False, coverage_error: float = 0.0) -> dict[str, Capture]:
    """The files one framework's steps leave (gpu_check.sh: profile, report, tracy-stats, csvexport) and the two
    captures as sectionmark's reader gives them."""
    save_map(directory / "model.sections.json")
    raw = Track("gpu", 0, "CUDA context 0", zone_list([raw_call(call * CALL_NS) for call in range(CALLS)]))
    rendered = Track("gpu", 0, "queue 0 sections", zone_list(
        [sections_call(call * CALL_NS, misplace and call == CALLS - 1) for call in range(WARMUP, CALLS)]))
    (directory / "sections.json").write_text(json.dumps(profile_document(CALLS, WARMUP, coverage_error)))
    (directory / "report.json").write_text(json.dumps(profile_document(CALLS, WARMUP, coverage_error)))
    (directory / "report-all.json").write_text(json.dumps(profile_document(CALLS, 0)))
    (directory / "stats-gpu.json").write_text(json.dumps({"zones": [
        {"kind": "gpu", "name": key, "count": CALLS, "total_ns": CALLS * duration} for key, duration in DURATIONS.items()]
        + [{"kind": "gpu", "name": COMMAND_BUFFER_ZONE, "count": CALLS, "total_ns": CALLS * 430}]}))
    (directory / "csvexport-gpu.csv").write_text(csv_rows(raw.zones))
    (directory / "csvexport-sections-gpu.csv").write_text(csv_rows(rendered.zones))
    return {"run.tracy": Capture((0, 11, 2), "iree-benchmark-module", [], [raw]),
            "sections.tracy": Capture((0, 11, 2), "sectionmark", [], [rendered])}


def verify_run(directory: Path, captures: dict[str, Capture], monkeypatch) -> tuple[int, dict[str, dict]]:
    """verify.py's ``profile`` mode on ``directory``, the captures as read: exit status and the checks by name."""
    verify = load("verify")
    monkeypatch.setattr(verify, "load_capture", lambda path: captures[path.name])
    status = verify.main(["profile", str(directory), "--map", str(directory / "model.sections.json"),
                          "--calls", str(CALLS), "--warmup", str(WARMUP)])
    written = json.loads((directory / "verify-profile.json").read_text())
    return status, {result["check"]: result for result in written}


def test_a_consistent_run_passes_every_check(tmp_path, monkeypatch):
    status, checks = verify_run(tmp_path, recorded_run(tmp_path), monkeypatch)
    failed = {name: check["detail"] for name, check in checks.items() if not check["ok"]}
    assert not failed and status == 0
    assert len(checks) == 18  # the profile mode's checks of one framework
    nested = checks["report's Tracy capture: section zones nest their dispatch zones (sectionmark reader)"]["detail"]
    assert nested.startswith(f"{2 * (CALLS - WARMUP)} dispatch zones, each inside its command's group")
    summed = checks[f"all {CALLS} calls: per-section busy summed = dispatch zones (tracy-stats)"]["detail"]
    assert f"tracy-stats {CALLS * 400}" in summed


def test_a_dispatch_drawn_outside_its_group_fails_both_nesting_checks(tmp_path, monkeypatch):
    status, checks = verify_run(tmp_path, recorded_run(tmp_path, misplace=True), monkeypatch)
    failed = sorted(name for name, check in checks.items() if not check["ok"])
    assert status == 1 and failed == [
        "report's Tracy capture: section zones nest their dispatch zones (csvexport time spans)",
        "report's Tracy capture: section zones nest their dispatch zones (sectionmark reader)"]
    assert "1 of 6 not inside their group" in checks[failed[0]]["detail"]


def test_coverage_over_the_limit_fails(tmp_path, monkeypatch):
    status, checks = verify_run(tmp_path, recorded_run(tmp_path, coverage_error=2e-4), monkeypatch)
    assert status == 1 and not checks["profile: coverage error <= 0.01%"]["ok"]
    assert [name for name, check in checks.items() if not check["ok"]] == ["profile: coverage error <= 0.01%"]


def test_a_lost_dispatch_zone_fails_the_counts_and_sums(tmp_path, monkeypatch):
    captures = recorded_run(tmp_path)
    raw = captures["run.tracy"].gpu_contexts[0]
    lost = next(index for index, zone in enumerate(raw.zones) if zone.name == KEY_1)
    raw.zones = [zone._replace(parent=zone.parent - (zone.parent > lost)) for index, zone in enumerate(raw.zones)
                 if index != lost]
    status, checks = verify_run(tmp_path, captures, monkeypatch)
    failed = {name for name, check in checks.items() if not check["ok"]}
    assert status == 1
    assert f"capture: {CALLS} calls x the map's dispatches per call" in failed
    assert "capture: csvexport and sectionmark's reader see the same dispatch zones" in failed


def test_missing_outputs_are_failed_checks_not_a_crash(tmp_path, monkeypatch):
    save_map(tmp_path / "model.sections.json")
    verify = load("verify")  # the real capture reader: the files are missing
    status = verify.main(["profile", str(tmp_path), "--map", str(tmp_path / "model.sections.json")])
    written = json.loads((tmp_path / "verify-profile.json").read_text())
    failed = [result["check"] for result in written if not result["ok"]]
    assert status == 1 and "read run.tracy" in failed and "read sections.tracy" in failed
    assert "csvexport -g output of run.tracy" in failed and "verify ran to the end" not in failed


def test_csvexport_rows_are_read_with_commas_in_names(tmp_path):
    verify = load("verify")
    path = tmp_path / "gpu.csv"
    path.write_text("name,src_file:src_line,ns_since_start,exec_time_ns\nf(a, b),x.c:1,10,5\nbad row\nk,x.c:2,-3,7\n")
    assert verify.csvexport_zones(path) == [("f(a, b)", 10, 5), ("k", -3, 7)]


# ---------------------------------------------------------------------------- steps.py


def junit(path: Path, tests: int, skipped: int = 0, failures: int = 0, nested: bool = True) -> Path:
    suite = f'<testsuite name="pytest" tests="{tests}" failures="{failures}" errors="0" skipped="{skipped}"/>'
    path.write_text(f"<testsuites>{suite}</testsuites>" if nested else suite)
    return path


def test_pytest_counts_need_both_gpu_tests_run_and_passed(tmp_path, capsys):
    steps = load("steps")
    assert steps.main(["pytest-counts", str(junit(tmp_path / "a.xml", 2))]) == 0
    assert "'tests': 2" in capsys.readouterr().out
    assert steps.main(["pytest-counts", str(junit(tmp_path / "b.xml", 2, nested=False))]) == 0
    assert steps.main(["pytest-counts", str(junit(tmp_path / "c.xml", 2, skipped=1))]) == 1  # skipped passes quietly
    assert steps.main(["pytest-counts", str(junit(tmp_path / "d.xml", 1))]) == 1
    assert steps.main(["pytest-counts", str(junit(tmp_path / "e.xml", 3, failures=1))]) == 1


def test_verdicts_and_the_verify_document(tmp_path, capsys):
    steps = load("steps")
    for framework, results in (("jax", [{"check": "c", "ok": False, "detail": "d"}]),
                               ("torch", [{"check": "a", "ok": True, "detail": ""}, {"check": "b", "ok": False,
                                                                                      "detail": ""}])):
        (tmp_path / framework).mkdir()
        (tmp_path / framework / "verify-profile.json").write_text(json.dumps(results))
    (tmp_path / "torch" / "verify-eager.json").write_text(json.dumps([{"check": "e", "ok": True, "detail": ""}]))
    assert steps.main(["verdicts", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "PASS torch/verify-eager: e", "PASS torch/verify-profile: a", "FAIL torch/verify-profile: b",
        "FAIL jax/verify-profile: c"]
    assert steps.main(["verify-json", str(tmp_path)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["jax/verify-profile", "torch/verify-eager", "torch/verify-profile"]
    assert document["torch/verify-profile"][1] == {"check": "b", "ok": False, "detail": ""}


def test_experiment_lines(tmp_path, capsys):
    steps = load("steps")
    record = {"module_has_debug_groups": True, "default_flags_crash": True, "runs": [
        {"run": "graph", "rc": 0, "outcome": "ran"},
        {"run": "tracing", "rc": 0, "outcome": "ran " * 60, "capture": {
            "dispatch_zones": 38, "section_zones": 17, "dispatch_zones_outside_their_group": 0}},
        {"run": "default", "rc": -11, "outcome": "SIGSEGV", "capture": "none written"}]}
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(record))
    assert steps.main(["experiment", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "module has debug groups: True; default flags crash: True",
        "graph: rc=0 (ran)",
        f"tracing: rc=0 ({('ran ' * 60)[:160]}); capture: 38 dispatch zones, 17 section zones, "
        "0 dispatch zones outside their group",
        "default: rc=-11 (SIGSEGV); capture: none written"]


def test_src_digest_is_the_manifests(tmp_path, capsys):
    """gpu_prepare.sh writes it in .gpu/MANIFEST.txt, gpu_check.sh compares: the .py and .c files under src/ in
    path order, each its path from the root then its bytes; other files do not count."""
    import hashlib

    for name, text in (("src/pkg/b.py", "b = 1\n"), ("src/a.c", "int a;\n"), ("src/pkg/notes.txt", "not code")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    expected = hashlib.sha256(b"src/a.cint a;\n" + b"src/pkg/b.pyb = 1\n").hexdigest()
    steps = load("steps")
    assert steps.main(["src-digest", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == expected
    (tmp_path / "src" / "pkg" / "notes.txt").write_text("changed")
    assert steps.src_digest(tmp_path) == expected
    (tmp_path / "src" / "pkg" / "b.py").write_text("b = 2\n")
    assert steps.src_digest(tmp_path) != expected
