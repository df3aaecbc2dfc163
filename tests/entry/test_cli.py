"""The command line: help with examples, one error line for bad input, real runs."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from invariants import assert_profile_invariants

from sectionmark.cli import build_parser, main
from sectionmark.renderers import RENDERERS, json_out
from sectionmark.section_map import SectionMap

COMMANDS = ["compile", "profile", "report", "tracy", "tracy-stats", "compare", "peak", "history", "demo"]
CLI_DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "examples:" in capsys.readouterr().out


def documented_options(command: str) -> set[str]:
    """The options docs/cli.md shows in the usage block of ``## sectionmark COMMAND``."""
    section = re.split(r"^## sectionmark ", CLI_DOCS.read_text(encoding="utf-8"), flags=re.M)
    body = next(part for part in section[1:] if part.split("\n", 1)[0].strip() == command)
    usage = body.split("```")[1]
    return set(re.findall(r"(?<![\w=-])(--?[a-z][a-z-]*)", usage))  # not the value of --iree-arg=--flag


@pytest.mark.parametrize("command", COMMANDS)
def test_docs_show_exactly_the_options_of_each_command(command):
    parser = build_parser().commands.choices[command]
    options = {option for action in parser._actions for option in action.option_strings} - {"-h", "--help"}
    documented = documented_options(command)
    assert documented - options == set(), "documented in docs/cli.md but not an option"
    assert options - documented == set(), "an option missing from docs/cli.md"
    help_text = parser.format_help()
    assert all(re.search(rf"(?<![\w-]){re.escape(option)}\b", help_text) for option in documented)


def test_profile_and_report_have_one_output_option_per_renderer():
    for command in ("profile", "report"):
        options = {option for action in build_parser().commands.choices[command]._actions
                   for option in action.option_strings}
        assert {f"--{name}" for name in RENDERERS} <= options


def test_python_dash_m_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "sectionmark", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and all(command in result.stdout for command in COMMANDS)


def one_error_line(capsys, argv, fragment):
    """A runtime failure: exit 1 and one line naming ``fragment``."""
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("sectionmark: error:") and "Traceback" not in err
    assert fragment in err


def one_usage_line(capsys, argv, fragment):
    """A usage error: exit 2 before any work, one line naming ``fragment`` and pointing to --help."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("sectionmark: error:") and err.endswith("--help')")
    assert fragment in err


def test_bad_inputs_give_one_error_line(tmp_path, capsys):
    garbage = tmp_path / "garbage.ireeprof"
    garbage.write_bytes(b"\x00\x01not a profile" * 10)
    bad_mlir = tmp_path / "bad.mlir"
    bad_mlir.write_text("func.func @main( {")
    empty_map = tmp_path / "m.sections.json"
    SectionMap(sections=[], command_buffers=[], sites=[]).save(empty_map)
    one_error_line(capsys, ["report", str(garbage), "--map", str(tmp_path / "none.json")],
                   f"cannot read module or section map {tmp_path / 'none.json'}: No such file or directory")
    one_error_line(capsys, ["report", str(garbage), "--map", str(garbage)],
                   f"{garbage}: neither an IREE module (.vmfb) nor a section map (.sections.json)")
    one_error_line(capsys, ["report", str(garbage), "--map", str(empty_map)], f"{garbage}: not a valid IREE profile")
    one_error_line(capsys, ["report", str(tmp_path / "missing.ireeprof"), "--map", str(empty_map)],
                   f"cannot read profile {tmp_path / 'missing.ireeprof'}: No such file or directory")
    one_error_line(capsys, ["compile", str(bad_mlir), "-o", str(tmp_path / "x.vmfb")], "MLIR input does not parse")
    one_error_line(capsys, ["compile", str(tmp_path / "missing.mlir"), "-o", str(tmp_path / "x.vmfb")], "no such MLIR file")
    one_error_line(capsys, ["tracy-stats", str(garbage)], f"{garbage}: not a Tracy capture (bad magic bytes)")
    one_usage_line(capsys, ["profile", str(garbage), "-n", "-1"], "--iterations: must be between 1 and 1,000,000, got -1")


@pytest.mark.parametrize("argv, fragment", [
    (["profile", "m.vmfb", "-n", "10000000000000000000000"], "--iterations: must be between 1 and 1,000,000"),
    (["profile", "m.vmfb", "-n", "0"], "--iterations"),
    (["profile", "m.vmfb", "--warmup", "-1"], "--warmup"),
    (["profile", "m.vmfb", "-n", "ten"], "expected a whole number"),
    (["report", "r.ireeprof", "--map", "m.vmfb", "--calls", "0"], "--calls"),
    (["report", "r.ireeprof", "--map", "m.vmfb", "--calls", "-3"], "--calls"),
    (["report", "r.ireeprof", "--map", "m.vmfb", "--workers", "0"], "--workers"),
    (["tracy-stats", "c.tracy", "--top", "-1"], "--top"),
    (["tracy-stats", "c.tracy", "--depth", "-1"], "--depth"),
    (["profile"], "the following arguments are required: vmfb"),
    (["compile", "m.mlir", "-o", "m.vmfb", "--target", "llvm"], "--target: invalid choice: 'llvm'"),
    (["compile", "m.mlir", "-o", "m.vmfb", "--input-type", "pytorch"], "--input-type: invalid choice: 'pytorch'"),
    (["tracy-stats", "c.tracy", "--gpu", "--cpu"], "argument --cpu: not allowed with argument --gpu"),
    (["tracy", "r.ireeprof", "--map", "m.vmfb"], "the following arguments are required: -o/--output"),
    (["frobnicate"], "invalid choice"),
    (["report", "r.ireeprof", "--map", "m.vmfb", "--bogus"], "unrecognized arguments: --bogus (see 'sectionmark report --help')"),
])
def test_usage_errors_are_one_line_with_status_2(argv, fragment, capsys):
    one_usage_line(capsys, argv, fragment)


def test_outputs_that_would_destroy_a_file_are_refused_before_any_work(tmp_path, capsys):
    source = tmp_path / "a.mlir"
    source.write_text(MLIR)
    profile = tmp_path / "run.ireeprof"
    profile.write_bytes(b"precious")
    sections = tmp_path / "m.sections.json"
    sections.write_text("{}")
    report = ["report", str(profile), "--map", str(sections)]
    one_error_line(capsys, ["compile", str(source), "-o", str(source)], "it is also an input")
    one_error_line(capsys, [*report, "--json", str(profile)], "it is also an input")
    one_error_line(capsys, [*report, "--csv", str(sections)], "it is also an input")
    one_error_line(capsys, [*report, "--json", ""], "empty")
    one_error_line(capsys, [*report, "--tracy", "/dev/null"], "not a regular file")
    one_error_line(capsys, [*report, "--chart", str(tmp_path)], "a directory")
    one_error_line(capsys, [*report, "--timeline", str(tmp_path)], "a directory")
    one_error_line(capsys, [*report, "--timeline", str(profile)], "it is also an input")
    one_error_line(capsys, [*report, "--graph", str(tmp_path / "g.png")],  # before the (here failing) run
                   "graph file must end in .dot, .svg or .html, not 'g.png'")
    one_error_line(capsys, [*report, "--json", str(tmp_path / "x"), "--csv", str(tmp_path / "x")], "--json and --csv")
    one_error_line(capsys, ["tracy-stats", str(profile), "--json", str(profile)], "it is also an input")
    one_error_line(capsys, ["tracy", str(profile), "--map", str(sections), "-o", str(profile)], "it is also an input")
    one_error_line(capsys, ["profile", str(tmp_path / "m.vmfb"), "--input", str(profile), "--keep-profile", str(profile)],
                   "it is also an input")
    assert profile.read_bytes() == b"precious" and source.read_text() == MLIR and sections.read_text() == "{}"
    assert Path("/dev/null").exists() and not Path("/dev/null").is_file()


def test_an_output_in_a_directory_without_write_access_fails_at_once_naming_it(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    sections = tmp_path / "m.sections.json"
    sections.write_text("{}")
    for read_only in (locked, Path("/proc")):
        target = read_only / "run.tracy"
        if read_only == locked:
            locked.chmod(0o500)
            if os.access(locked, os.W_OK):  # root ignores permissions: /proc still refuses
                continue
        started = time.monotonic()
        one_error_line(capsys, ["tracy", str(sections), "--map", str(sections), "-o", str(target)], f"cannot write {target}")
        assert time.monotonic() - started < 5


def test_fifos_and_devices_are_refused_at_once(tmp_path):
    """Opening a FIFO for reading waits for a writer (for ever), /dev/zero never ends: every input is
    opened without blocking and refused unless it is a regular file (each command used to hang or fill memory)."""
    fifo = {name: tmp_path / name for name in ("run.ireeprof", "run.tracy", "m.vmfb", "x.npy", "run.jsonl")}
    for path in fifo.values():
        os.mkfifo(path)
    sections = tmp_path / "m.sections.json"
    SectionMap(sections=[], command_buffers=[], sites=[]).save(sections)
    commands = [
        ["report", str(fifo["run.ireeprof"]), "--map", str(sections)],
        ["report", str(fifo["run.jsonl"]), "--map", str(sections)],
        ["report", str(fifo["run.tracy"]), "--map", str(sections)],
        ["report", str(sections), "--map", str(fifo["m.vmfb"])],
        ["tracy-stats", str(fifo["run.tracy"])],
        ["tracy-stats", "/dev/zero"],
        ["profile", str(fifo["m.vmfb"])],
        ["profile", "/dev/zero"],
        ["profile", str(sections), "--input", str(fifo["x.npy"])],
    ]
    processes = [subprocess.Popen([sys.executable, "-m", "sectionmark", *argv], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for argv in commands]
    for argv, process in zip(commands, processes):
        try:
            _out, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"sectionmark {' '.join(argv)} hangs")
        assert process.returncode == 1 and err.count("\n") == 1 and "not a regular file" in err, (argv, err)


def test_a_closed_stdout_exits_quietly(tmp_path):
    """`sectionmark ... | head`: no "Broken pipe" error, status 141 (a writer cut off by SIGPIPE)."""
    source = tmp_path / "m.mlir"
    source.write_text(MLIR)
    process = subprocess.Popen(
        [sys.executable, "-m", "sectionmark", "compile", str(source), "-o", str(tmp_path / "m.vmfb"), "--input-type", "none"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141 and err == b""


def test_files_are_written_even_when_stdout_is_closed_early(tmp_path, compiled_two_matmuls, inputs):
    """`sectionmark report ... --json out.json | head -1`: the table is cut short, the file is still written."""
    from sectionmark.workflows.measure import profile

    _compiled, vmfb = compiled_two_matmuls
    profile(vmfb, inputs, iterations=1, warmup=0, keep_profile=tmp_path / "run.ireeprof", quiet=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "sectionmark", "report", str(tmp_path / "run.ireeprof"), "--map", str(vmfb),
         "--json", str(tmp_path / "out.json"), "--csv", str(tmp_path / "out.csv")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141 and err == b""
    assert (tmp_path / "out.json").stat().st_size > 0 and (tmp_path / "out.csv").stat().st_size > 0


MLIR = """
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %s = math.sin %x : tensor<64xf32> loc("sectionmark:A"("t.py":1:0))
  %c = math.cos %s : tensor<64xf32> loc("sectionmark:A/B"("t.py":2:0))
  %e = math.exp %c : tensor<64xf32> loc("t.py":3:0)
  return %e : tensor<64xf32>
}
"""


@pytest.mark.slow
def test_compile_profile_report_from_the_shell(tmp_path, capsys):
    source = tmp_path / "m.mlir"
    source.write_text(MLIR)
    vmfb = tmp_path / "m.vmfb"
    assert main(["compile", str(source), "-o", str(vmfb), "--input-type", "none"]) == 0
    assert (tmp_path / "m.sections.json").exists()
    np.save(tmp_path / "x.npy", np.linspace(0, 1, 64, dtype=np.float32))
    profile = tmp_path / "run.ireeprof"
    assert main(["profile", str(vmfb), "--input", str(tmp_path / "x.npy"), "-n", "3", "--warmup", "1",
                 "--keep-profile", str(profile), "--json", str(tmp_path / "s.json"), "--sites",
                 "--timeline", str(tmp_path / "profiled.timeline.png")]) == 0
    out = capsys.readouterr().out
    assert "coverage:" in out and "dispatch sites" in out
    assert (tmp_path / "profiled.timeline.png").read_bytes().startswith(b"\x89PNG")
    assert_profile_invariants(json_out.load(tmp_path / "s.json"))
    chart, capture = tmp_path / "sections.out", tmp_path / "run.tracy"
    capture.write_bytes(b"previous")
    assert main(["report", str(profile), "--map", str(vmfb), "--warmup", "1", "--perfetto", str(tmp_path / "p.json"),
                 "--chart", str(chart), "--tracy", str(capture), "--timeline", str(tmp_path / "timeline.out")]) == 0
    out = capsys.readouterr().out
    assert Path(tmp_path / "p.json").stat().st_size > 0
    assert (tmp_path / "timeline.out").read_bytes().startswith(b"\x89PNG")  # PNG whatever the suffix
    assert f"wrote {chart}\n" in out and chart.read_bytes().startswith(b"\x89PNG")  # exactly the file it names
    assert f"wrote {capture}\n" in out and capture.read_bytes().startswith(b"tr\xfdP")  # replaced whole
    table, rows = tmp_path / "table.txt", tmp_path / "s.csv"
    assert main(["report", str(profile), "--map", str(vmfb), "--warmup", "1", "--table", str(table), "--csv", str(rows)]) == 0
    out = capsys.readouterr().out
    assert table.read_text(encoding="utf-8") in out and "coverage:" in table.read_text(encoding="utf-8")
    assert rows.read_bytes().startswith(b"section,path,")
    assert "CPU/call" not in out and "worker count unknown) busy on average" in out  # default table: CPU in a note
    assert main(["report", str(profile), "--map", str(vmfb), "--warmup", "1", "--cpu", "--workers", "2",
                 "--table", str(table)]) == 0
    out = capsys.readouterr().out
    assert "CPU/call" in out and "Tiles/call" in out and "not recorded" not in out and "of 2 workers" in out
    assert "CPU/call" in table.read_text(encoding="utf-8")
    replay = tmp_path / "alias.tracy"  # `tracy` is `report --tracy` without the table
    assert main(["tracy", str(profile), "--map", str(vmfb), "--warmup", "1", "-o", str(replay)]) == 0
    assert capsys.readouterr().out == f"wrote {replay}\n" and replay.read_bytes().startswith(b"tr\xfdP")
    assert main(["tracy-stats", str(replay), "--gpu"]) == 0
    assert "GPU" in capsys.readouterr().out  # the replay's tracks are GPU contexts
    assert main(["tracy-stats", str(replay), "--cpu"]) == 0
    assert "GPU" not in capsys.readouterr().out
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".partial")]


def test_parser_requires_a_command():
    with pytest.raises(SystemExit):
        build_parser().parse_args([])


# Names that would rewrite a terminal: clear the screen, set the window title (ended by BEL), a C1 CSI, a carriage
# return that would print over the line.
CLEAR, TITLE = "Clear\x1b[2J", "Title\x1b]0;pwned\x07\x9b1m\rover"
TERMINAL_MLIR = """
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %s = math.sin %x : tensor<64xf32> loc("sectionmark:Clear\\1B[2J"("t.py":1:0))
  %c = math.cos %s : tensor<64xf32> loc("sectionmark:Clear\\1B[2J/Title\\1B]0;pwned\\07\\C2\\9B1m\\0Dover"("t.py":2:0))
  return %c : tensor<64xf32>
}
"""
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but the line break


def test_names_with_terminal_controls_print_escaped_and_stay_exact_in_files(tmp_path, capsys):
    """`profile`, `report` and `compare` print a name's control characters as \\x1b-style escapes; JSON and CSV
    keep the name byte-exact; an error line quoting one is escaped too."""
    source, vmfb = tmp_path / "m.mlir", tmp_path / "m.vmfb"
    source.write_text(TERMINAL_MLIR)
    assert main(["compile", str(source), "-o", str(vmfb), "--input-type", "none"]) == 0
    assert SectionMap.load(tmp_path / "m.sections.json").sections == [(CLEAR,), (CLEAR, TITLE)]
    capsys.readouterr()
    np.save(tmp_path / "x.npy", np.linspace(0, 1, 64, dtype=np.float32))
    profile, a, b = tmp_path / "run.ireeprof", tmp_path / "a.json", tmp_path / "b.json"
    assert main(["profile", str(vmfb), "--input", str(tmp_path / "x.npy"), "-n", "2", "--warmup", "1",
                 "--keep-profile", str(profile), "--json", str(a), "--sites", "--kernels", str(tmp_path / "k.txt"),
                 "--components", str(tmp_path / "c.txt")]) == 0
    printed = capsys.readouterr().out
    assert main(["report", str(profile), "--map", str(vmfb), "--warmup", "1", "--json", str(b), "--csv",
                 str(tmp_path / "s.csv"), "--by", "name", "--kernels", str(tmp_path / "k2.txt")]) == 0
    printed += capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--json", str(tmp_path / "cmp.json")]) == 0
    printed += capsys.readouterr().out
    escaped_clear, escaped_title = r"Clear\x1b[2J", r"Title\x1b]0;pwned\x07\x9b1m\rover"
    assert not CONTROL.search(printed)
    assert printed.count(escaped_clear) >= 5 and printed.count(escaped_title) >= 4  # tables, sites, components, compare
    for text in (tmp_path / "k.txt", tmp_path / "c.txt"):  # the text tables, as printed
        assert not CONTROL.search(text.read_text(encoding="utf-8")) and escaped_clear in text.read_text(encoding="utf-8")
    for document in (a, b):
        assert [row["path"] for row in json_out.load(document).to_json()["sections"] if row["path"]] == [
            [CLEAR], [CLEAR, TITLE]]
    assert TITLE.encode() in (tmp_path / "s.csv").read_bytes()  # bytes: reading text would make \r a line break
    assert json.loads((tmp_path / "cmp.json").read_bytes())["sections"][1]["path"] == [CLEAR, TITLE]
    assert main(["report", str(tmp_path / f"{CLEAR}.ireeprof"), "--map", str(vmfb)]) == 1
    error = capsys.readouterr().err
    assert not CONTROL.search(error) and escaped_clear in error and error.count("\n") == 1


@pytest.mark.parametrize("target", ["llvm-cpu", "cuda", "vulkan-spirv"])
def test_compile_for_two_devices_from_the_shell(tmp_path, capsys, target):
    """``--devices 2``: each command buffer of the map on the device its affinity names (as sm.compile(devices=2))."""
    from tiny_profiles import TWO_DEVICES

    source, vmfb = tmp_path / "two.mlir", tmp_path / "two.vmfb"
    source.write_text(TWO_DEVICES)
    assert main(["compile", str(source), "-o", str(vmfb), "--target", target, "--devices", "2"]) == 0
    section_map = SectionMap.load(tmp_path / "two.sections.json")
    assert {buffer.device for buffer in section_map.command_buffers} == {0, 1}
    assert main(["compile", str(source), "-o", str(vmfb), "--target", "rocm", "--devices", "2"]) == 1
    assert "several devices of cuda or llvm-cpu or vulkan-spirv" in capsys.readouterr().err
