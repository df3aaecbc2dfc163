"""Versioned JSON output of a profile (schema: docs/profile-json.md) or of a replay's profiles, and its reader.

The session holds data (`ProfileSession.to_json`); the views computed from it
(the component view by name, the kernel table, the run's parallelism and
utilization) are computed here, when the file is written, for its readers, and
never read back: `ProfileSession.from_json` recomputes what it needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union

from sectionmark import serialization
from sectionmark.artifacts.files import read_regular
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.components import components
from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.workflows.replay import REPLAY_JSON_VERSION, ReplayProfile


def render(session: ProfileSession) -> str:
    return _text(profile_document(session))


def render_replay(replay: ReplayProfile) -> str:
    """One document for a replay: its own fields, and each function's profile as a profile document."""
    document = {"version": REPLAY_JSON_VERSION, "kind": "replay", **serialization.to_json(replay)}
    for written, entry in zip(document["functions"], replay.functions):
        written["profile"] = None if entry.profile is None else profile_document(entry.profile)
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
    return ProfileSession.from_json(read(path))


MAX_JSON_BYTES = 256 << 20  # far beyond any profile (1,000 samples a section); a larger file is refused unread


def read(path: Union[str, Path]) -> Any:
    """The JSON document of a file, not yet checked against any schema; one error line when it is not JSON.

    Read like every input (`artifacts.files.read_regular`): a FIFO or device is
    refused without blocking, and a file larger than ``MAX_JSON_BYTES`` unread.
    """
    path = Path(path)
    data = read_regular(path, "profile JSON", limit=MAX_JSON_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SectionmarkError(f"{path} is not JSON: {error}") from None
    except RecursionError:
        raise SectionmarkError(f"{path} is not a profile JSON: nested too deeply") from None
