"""Issue D's reading cost: how many modules a compiled program (`sm.profile`) or a profile file (`sm.report`) passes
through on its way to the session, and how many calls climb back up the data flow (scripts/read_path_walk.py).

The bounds are where the code stands, so that a change that spreads the path over more files fails here: issue
D's goal is 14 modules for both; `sm.profile` is at 18 (docs/benchmarks.md says which modules and why).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MOST_MODULES = {"profile": 18, "report": 14}
MOST_CLIMBS = 3
_SUMMARY = re.compile(r"^sm\.(\w+): (\d+) modules entered, (\d+) calls from a lower stage up$")


@pytest.mark.parametrize("entry", sorted(MOST_MODULES))
def test_the_walk_to_the_session_stays_short(entry):
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                                            os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "read_path_walk.py"), entry], capture_output=True,
                            text=True, timeout=600, env=environment, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    summary = _SUMMARY.match(result.stdout.splitlines()[0])
    assert summary is not None and summary.group(1) == entry, result.stdout
    modules, climbs = int(summary.group(2)), int(summary.group(3))
    assert modules <= MOST_MODULES[entry], result.stdout
    assert climbs <= MOST_CLIMBS, result.stdout
