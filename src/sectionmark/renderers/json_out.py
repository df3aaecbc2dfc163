"""Versioned JSON output of a profile (schema: docs/profile-json.md) or of a replay's profiles, and its reader.

The session holds data (`ProfileSession.to_json`); the views computed from it
(the component view by name, the kernel table, the run's parallelism and
utilization) are computed here, when the file is written, for its readers, and
never read back: `ProfileSession.from_json` recomputes what it needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from sectionmark import serialization
from sectionmark.artifacts.files import read_json
from sectionmark.profiling.components import components
from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.session import ProfileSession

if TYPE_CHECKING:
    from sectionmark.workflows.replay import ReplayProfile


def render(session: ProfileSession) -> str:
    return _text(profile_document(session))


def render_replay(replay: "ReplayProfile") -> str:
    """One document for a replay: its own fields, and each function's profile as a profile document."""
    document = replay.to_json()
    for written, entry in zip(document["functions"], replay.functions):
        if entry.profile is not None:
            written["profile"] = profile_document(entry.profile)
    return _text(document)


def profile_document(session: ProfileSession) -> dict[str, Any]:
    """The profile JSON document: the session's data, then the views computed from it."""
    return {
        **session.to_json(),
        "components": serialization.to_json(components(session)),
        "kernels": serialization.to_json(kernels(session)),
        "parallelism": session.parallelism,
        "utilization": session.utilization,
    }


def _text(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


def load(path: Union[str, Path]) -> ProfileSession:
    """Read a saved profile JSON back (for ``sectionmark report`` on saved results)."""
    return ProfileSession.from_json(read_json(path, "profile JSON"))


