"""The progress line of export and compile: drawn on a terminal (phase, elapsed, what), silent in a pipe or quiet.

A real terminal is a pseudo-terminal here: a child process exports and compiles a tiny model with its stderr on
the pty's side, and what the terminal received is read back.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PROGRAM = """
import sys, torch
import sectionmark as sm

class Tiny(torch.nn.Module):
    def forward(self, x):
        with sm.section("Scale"):
            return x * 2

quiet = sys.argv[1] == "quiet"
exported = sm.torch.export(Tiny(), args=(torch.ones(4),), quiet=quiet)
sm.compile(exported, quiet=quiet)
print("compiled", file=sys.stderr)
"""


JAX_PROGRAM = """
import sys, jax.numpy as jnp
import sectionmark as sm

def scaled(x):
    with sm.section("Scale"):
        return x * 2

quiet = sys.argv[1] == "quiet"
sm.jax.export(scaled, jnp.ones(4), quiet=quiet)
print("exported", file=sys.stderr)
"""


def terminal_output(mode: str, program: str = PROGRAM) -> str:
    """What a terminal shows of the child's stderr (and stdout)."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(SRC), "TERM": "xterm-256color", "COLUMNS": "120"}
    child = subprocess.Popen([sys.executable, "-W", "ignore", "-c", program, mode], stdin=subprocess.DEVNULL,
                             stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    received = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 600)
        if not ready:
            break
        try:
            chunk = os.read(controller, 1 << 16)
        except OSError:  # the child closed its side
            break
        if not chunk:
            break
        received += chunk
    os.close(controller)
    assert child.wait(timeout=60) == 0, received.decode(errors="replace")[-2000:]
    return received.decode("utf-8", errors="replace")


@pytest.mark.slow
def test_a_terminal_sees_what_is_exported_and_compiled_phase_by_phase():
    shown = terminal_output("loud")
    assert "exporting Tiny with torch.export (0 s)" in shown
    # A phase shorter than the refresh interval may never be drawn: the line shows at least the long ones.
    phases = [phase for phase in ("parsing", "up to dispatch creation", "dispatch sites weighed; executables outlined",
                                  "HAL: command buffers", "code generation and VM bytecode")
              if f"compiling the torch export for llvm-cpu: {phase} (" in shown]
    assert len(phases) >= 2, shown[-3000:]
    assert shown.rstrip().endswith("compiled")  # the line is gone once the work is done


@pytest.mark.slow
def test_quiet_on_a_terminal_and_a_pipe_show_nothing():
    assert terminal_output("quiet").strip() == "compiled"
    piped = subprocess.run([sys.executable, "-W", "ignore", "-c", PROGRAM, "loud"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=600)
    assert piped.returncode == 0 and piped.stderr.strip() == "compiled" and piped.stdout == ""


@pytest.mark.slow
def test_a_jax_export_shows_its_phases_on_a_terminal_and_nothing_when_quiet():
    shown = terminal_output("loud", JAX_PROGRAM)
    # A phase shorter than the refresh interval may never be drawn: one of the two is.
    assert any(f"exporting scaled with jax.jit: {phase} (" in shown
               for phase in ("tracing and lowering", "writing StableHLO with locations")), shown[-2000:]
    assert shown.rstrip().endswith("exported")
    assert terminal_output("quiet", JAX_PROGRAM).strip() == "exported"
