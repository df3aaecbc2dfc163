"""The command line: help with examples, one error line for bad input, real runs."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from invariants import assert_profile_invariants

from sectionmark.cli import build_parser, main
from sectionmark.renderers import json_out

COMMANDS = ["compile", "profile", "report", "tracy", "tracy-stats"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "examples:" in capsys.readouterr().out


def test_python_dash_m_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "sectionmark", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and all(command in result.stdout for command in COMMANDS)


def one_error_line(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("sectionmark: error:") and "Traceback" not in err
    assert fragment in err


def test_bad_inputs_give_one_error_line(tmp_path, capsys):
    garbage = tmp_path / "garbage.ireeprof"
    garbage.write_bytes(b"\x00\x01not a profile" * 10)
    bad_mlir = tmp_path / "bad.mlir"
    bad_mlir.write_text("func.func @main( {")
    one_error_line(capsys, ["report", str(garbage), "--map", str(tmp_path / "none.json")], "")
    one_error_line(capsys, ["report", str(tmp_path / "missing.ireeprof"), "--map", str(garbage)], "")
    one_error_line(capsys, ["compile", str(bad_mlir), "-o", str(tmp_path / "x.vmfb")], "parse")
    one_error_line(capsys, ["compile", str(tmp_path / "missing.mlir"), "-o", str(tmp_path / "x.vmfb")], "no such MLIR file")
    one_error_line(capsys, ["tracy-stats", str(garbage)], "")
    one_error_line(capsys, ["profile", str(garbage), "-n", "-1"], "--iterations")


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
                 "--keep-profile", str(profile), "--json", str(tmp_path / "s.json"), "--sites"]) == 0
    out = capsys.readouterr().out
    assert "coverage:" in out and "dispatch sites" in out
    assert_profile_invariants(json_out.load(tmp_path / "s.json"))
    assert main(["report", str(profile), "--map", str(vmfb), "--warmup", "1", "--perfetto", str(tmp_path / "p.json")]) == 0
    assert Path(tmp_path / "p.json").stat().st_size > 0


def test_parser_requires_a_command():
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
