"""Each device's session of a run on several devices (`sectionmark.profiling.device_sessions`): made without the
sections that ran on other devices only, then given their rows, it is the session of the device's whole map.

Real stack: `TWO_DEVICES` (a matmul split over two local-task devices, each half its own section) profiled on
two devices, each device's events read and summed as `read_device_profile` reads them.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from tiny_profiles import profile_two_devices

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.device_sessions import composition_sections, device_sessions
from sectionmark.profiling.devices import device_section_map
from sectionmark.profiling.read import attributed_totals
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.sources import close_all, open_device_sources

pytest.importorskip("iree.compiler")

ITERATIONS, WARMUP = 3, 1


@pytest.fixture(scope="module")
def summed(tmp_path_factory):
    """Each device's (ordinal, name, map, attribution, totals) of the two-device profile, as it is read."""
    compiled, kept, _run = profile_two_devices(tmp_path_factory.mktemp("sessions"), ITERATIONS, WARMUP)
    sources = open_device_sources(kept, compiled.section_map)
    try:
        read = []
        for ordinal, source in sorted(sources.items()):
            device_map = device_section_map(compiled.section_map, ordinal)
            attribution, totals = attributed_totals(source, device_map, calls=ITERATIONS + WARMUP, warmup=WARMUP,
                                                    function=None)
            read.append((ordinal, "local-task", device_map, attribution, totals))
    finally:
        close_all(sources)
    return read


def test_each_device_session_is_the_session_of_its_whole_map(summed):
    sessions = device_sessions(summed, None, 1)
    absent = 0
    for (ordinal, name, device_map, attribution, totals), session in zip(summed, sessions):
        whole = ProfileSession.from_totals(attribution, totals, device_map, None, 1, name, without_dispatches=True)
        # The rows of sections no composition of this device has a share in: those the device's session adds.
        absent += sum(row.path not in composition_sections(attribution) for row in session.sections[:-1])
        # Their notes are the run's to write (where they ran: `read_device_profile`); every other figure is equal.
        for row in (*session.sections, *whole.sections):
            if row.path not in composition_sections(attribution):
                row.note = None
        assert json.dumps(session.to_json()) == json.dumps(whole.to_json()), ordinal
        assert session.per_call_busy.shape == whole.per_call_busy.shape
        assert session.per_call_busy.tobytes() == whole.per_call_busy.tobytes(), ordinal
    assert absent  # each half's section is absent from the other device's compositions


def test_a_device_problem_names_its_device(summed):
    ordinal, name, device_map, attribution, totals = summed[1]
    broken = (ordinal, name, device_map, attribution, replace(totals, total_wall=10**15))  # not what they cover
    with pytest.raises(SectionmarkError, match=f"^device {ordinal}: internal error: sections cover"):
        device_sessions([summed[0], broken], None, 1)
