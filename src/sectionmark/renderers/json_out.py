"""Versioned JSON output of a ProfileSession (schema: docs/profile-json.md), and its reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.session import ProfileSession


def render(session: ProfileSession) -> str:
    return json.dumps(session.to_json(), ensure_ascii=False, indent=1) + "\n"


def load(path: Union[str, Path]) -> ProfileSession:
    """Read a saved profile JSON back (for ``sectionmark report`` on saved results)."""
    return ProfileSession.from_json(read(path))


def read(path: Union[str, Path]) -> Any:
    """The JSON document of a file, not yet checked against any schema; one error line when it is not JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SectionmarkError(f"{path} is not JSON: {error}") from None
