"""The JSON reading every versioned format shares (sectionmark.serialization), on hand-built documents.

Python's ``True == 1`` makes JSON ``true`` slip through any check written as a
comparison: each integer place, the ``version`` of every document included,
must refuse it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import pytest

from sectionmark.errors import SectionmarkError
from sectionmark.workflows.replay import REPLAY_JSON_VERSION, ReplayProfile
from sectionmark.serialization import SchemaError, check_version, from_json, from_versioned_json


@dataclass
class Counts:
    calls: int
    limit: Optional[int] = None
    per_call: list[int] = field(default_factory=list)


@pytest.mark.parametrize("data, message", [
    ({"calls": True}, "Counts.calls: expected an integer, got bool True"),
    ({"calls": False}, "Counts.calls: expected an integer, got bool False"),
    ({"calls": 1.0}, "Counts.calls: expected an integer, got float 1.0"),
    ({"calls": 1, "limit": True}, "Counts.limit: expected an integer, got bool True"),
    ({"calls": 1, "per_call": [1, True]}, "Counts.per_call[1]: expected an integer, got bool True"),
])
def test_an_int_field_refuses_true_false_and_floats(data, message):
    with pytest.raises(SchemaError, match=f"^{re.escape(message)}$"):
        from_json(Counts, data)


def test_an_int_field_takes_integers():
    assert from_json(Counts, {"calls": 0, "limit": None, "per_call": [3]}) == Counts(0, None, [3])


@pytest.mark.parametrize("version", [True, 1.0, "1", None])
def test_a_version_is_an_integer_too(version):
    with pytest.raises(SchemaError, match=r"^counts version .* is not supported \(expected 1\); count again$"):
        check_version({"version": version}, 1, "counts", "count again")
    with pytest.raises(SchemaError, match="is not supported"):
        from_versioned_json(Counts, {"version": version, "calls": 1}, version=1, document="counts", root="counts",
                            advice="count again")
    assert from_versioned_json(Counts, {"version": 1, "calls": 1}, version=1, document="counts", root="counts",
                               advice="count again") == Counts(1)


def test_a_replay_profile_of_version_true_is_refused():
    """The replay profile JSON is at version 1, the integer Python takes ``true`` for."""
    assert REPLAY_JSON_VERSION == 1
    data = {"version": 1, "kind": "replay", "replays": 1, "warmup": 0, "calls_per_replay": 1, "functions": []}
    assert ReplayProfile.from_json(data).replays == 1
    with pytest.raises(SectionmarkError, match=r"^replay profile JSON version True is not supported"):
        ReplayProfile.from_json({**data, "version": True})
