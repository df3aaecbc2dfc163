"""The project's shared check tools (Tracy's csvexport and GUI, shared/tools), where this checkout can see them.

A worktree sits one or two folders below the folder that holds ``shared/``; tests that need a tool skip with
one line when it is missing (a user's machine has none).
"""

from __future__ import annotations

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
