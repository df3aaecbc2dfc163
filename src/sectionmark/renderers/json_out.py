"""Versioned JSON output of a ProfileSession (schema: docs/profile-json.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Union

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import write_text


def dumps(session: ProfileSession) -> str:
    return json.dumps(session.to_json(), ensure_ascii=False, indent=1)


def save(session: ProfileSession, path: Union[str, Path], inputs: Iterable[PathLike] = ()) -> Path:
    return write_text(path, dumps(session) + "\n", inputs=inputs)


def load(path: Union[str, Path]) -> ProfileSession:
    """Read a saved profile JSON back (for ``sectionmark report`` on saved results)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SectionmarkError(f"{path} is not JSON: {error}") from None
    return ProfileSession.from_json(data)
