"""The two zone stacks (Python and C) do the same thing, and keep Tracy's rule.

Random sequences of open/close on a few markers, from hypothesis: both stacks
must make the same begin/end calls, return the same results and have the same
depth after every step, and every end must close the innermost open zone.
"""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sectionmark.markers import zonestack
from zone_stacks import KINDS, make_stack

MARKERS = [object() for _ in range(4)]
operations = st.lists(st.tuples(st.sampled_from(["open", "close"]), st.integers(0, len(MARKERS) - 1)), max_size=60)


class Recorder:
    def __init__(self):
        self.calls, self.open, self.errors = [], [], []

    def begin(self, location, active):
        zone = len(self.calls) + 1
        self.calls.append(("begin", location, active))
        self.open.append(zone)
        return zone

    def end(self, zone):
        self.calls.append(("end", zone))
        if not self.open or self.open[-1] != zone:
            self.errors.append(f"zone {zone} is not the innermost of {self.open}")
        else:
            self.open.pop()


def replay(kind, steps):
    recorder = Recorder()
    stack = make_stack(kind, recorder.begin, recorder.end)
    results = []
    for operation, index in steps:
        if operation == "open":
            results.append(stack.open(MARKERS[index], index + 1))
        else:
            results.append(stack.close(MARKERS[index]))
        results.append(stack.depth())
    for marker in MARKERS:  # leave nothing open for the next example
        while stack.close(marker):
            pass
    assert stack.depth() == 0
    return recorder, results


@pytest.mark.skipif(not zonestack.c_extension_available(), reason="sectionmark.markers._zonestack not built")
@settings(max_examples=300, deadline=None)
@given(operations)
def test_python_and_c_stacks_agree_and_close_innermost_first(steps):
    python, python_results = replay("python", steps)
    c, c_results = replay("c", steps)
    assert python.calls == c.calls
    assert python_results == c_results
    assert python.errors == c.errors == []
    assert python.open == c.open == []


@pytest.mark.parametrize("kind", KINDS)
def test_each_thread_has_its_own_stack(kind):
    lock = threading.Lock()
    began_on, ended_on, depths = {}, {}, []

    def begin(location, active):
        with lock:
            zone = len(began_on) + 1
            began_on[zone] = threading.current_thread().name
            return zone

    def end(zone):
        ended_on[zone] = threading.current_thread().name

    stack = make_stack(kind, begin, end)
    marker = object()  # one marker, open on every thread at once
    barrier = threading.Barrier(4)

    def work():
        for _ in range(50):
            stack.open(marker, 1)
            stack.open(marker, 2)
            barrier.wait()
            depths.append(stack.depth())
            stack.close(marker)
            stack.close(marker)
            depths.append(stack.depth())

    threads = [threading.Thread(target=work, name=f"T{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(began_on) == 4 * 50 * 2
    assert ended_on == began_on  # every zone ended, on the thread that began it
    assert sorted(set(depths)) == [0, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_zones_left_open_are_closed_innermost_first_on_their_own_thread(kind):
    """A thread ending inside sections has them closed by its end; close_all() closes the caller's."""
    began_on, ended = {}, []

    def begin(location, active):
        zone = len(began_on) + 1
        began_on[zone] = threading.get_ident()
        return zone

    def end(zone):
        ended.append((zone, threading.get_ident()))

    stack = make_stack(kind, begin, end)
    outer, inner = object(), object()

    def leave_open():
        stack.open(outer, 1)
        stack.open(inner, 2)

    for daemon in (False, True):
        thread = threading.Thread(target=leave_open, daemon=daemon)
        thread.start()
        thread.join()
        thread_zones = sorted(began_on)[-2:]
        assert ended[-2:] == [(thread_zones[1], thread.ident), (thread_zones[0], thread.ident)]
    stack.open(outer, 1)
    stack.open(inner, 2)
    assert stack.close_all() == 2 and stack.depth() == 0 and stack.close_all() == 0
    assert [zone for zone, _ in ended[-2:]] == [6, 5] and {ident for _, ident in ended[-2:]} == {threading.get_ident()}
    assert not stack.close(outer)  # its section's own exit then finds nothing
