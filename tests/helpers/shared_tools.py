"""The project's shared check tools (Tracy's csvexport and GUI, shared/tools), where this checkout can see them.

A worktree sits one or two folders below the folder that holds ``shared/``; tests that need a tool skip with
one line when it is missing (a user's machine has none).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

_ROOT = Path(__file__).resolve().parents[2]


def shared_tool(name: str) -> Optional[Path]:
    """``shared/tools/<name>`` beside this checkout or its parent folder, None when neither has it."""
    for folder in (_ROOT.parent, _ROOT.parent.parent):
        tool = folder / "shared" / "tools" / name
        if tool.exists():
            return tool
    return None


CSVEXPORT = shared_tool("tracy-csvexport-0.11.2")


def csvexport(path: Path, *options: str) -> list[list[str]]:
    """Tracy's own reader's rows (header left out) for ``path``, split at commas.

    csvexport 0.11.2 lists GPU zones (``-g``) once its CPU zone statistics are ready, not its GPU ones (the same
    background job makes them next): on a busy machine it can list none, so it is asked again then (5 times).
    """
    for _attempt in range(5 if "-g" in options else 1):
        lines = subprocess.run([str(CSVEXPORT), *options, str(path)], capture_output=True, text=True, check=True,
                               timeout=60).stdout.splitlines()
        if len(lines) > 1:
            break
    return [line.split(",") for line in lines[1:]]
