"""The eager role of `section`: zones per thread, nesting, validation, decorator forms.

A recording zone emitter stands in for Tracy here (tests/tracy/test_tracy.py runs
the real one under a capture); it checks what Tracy needs: on every thread,
zones end innermost first.
"""

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import sectionmark as sm
from sectionmark.markers import frameworks, marker as markers, zonestack
from zone_stacks import KINDS, make_stack


class RecordingEmitter:
    """Records begin/end per thread and notes any end Tracy would mis-nest.

    Its zones go through a real zone stack, the Python one or the C extension
    (calling back into Python through C function pointers, see zone_stacks.py).
    """

    def __init__(self, stack_kind):
        self.events = []  # (thread name, "begin"/"end", section name)
        self.open_zones = {}  # thread name -> [zone], innermost last
        self.named_threads = []
        self.errors = []
        self.names = [None]  # location (an int, never 0) -> section name
        self.zone_names = {}  # zone id -> section name
        self.lock = threading.Lock()
        stack = make_stack(stack_kind, self.begin, self.end, self.name_thread)
        self.open, self.close = stack.open, stack.close

    def location(self, name, color):
        self.names.append(name)
        return len(self.names) - 1

    def begin(self, location, active):
        thread = threading.current_thread().name
        with self.lock:
            zone = len(self.zone_names) + 1
            self.zone_names[zone] = self.names[location]
            self.events.append((thread, "begin", self.names[location]))
            self.open_zones.setdefault(thread, []).append(zone)
            if active != 1:
                self.errors.append(f"begin with active={active}")
        return zone

    def end(self, zone):
        thread = threading.current_thread().name
        with self.lock:
            if self.open_zones.get(thread, [None])[-1] != zone:
                self.errors.append(f"zone {self.zone_names.get(zone)} ended out of order on {thread}")
                return
            self.open_zones[thread].pop()
            self.events.append((thread, "end", self.zone_names[zone]))

    def name_thread(self, name):
        if name == "unnameable":
            raise OSError("no names today")
        self.named_threads.append((threading.current_thread().name, name))

    def note(self, text):
        with self.lock:
            self.events.append((threading.current_thread().name, "note", text))

    def on(self, thread):
        return [(kind, name) for who, kind, name in self.events if who == thread]

    def all_closed(self):
        return not self.errors and all(not zones for zones in self.open_zones.values())


@pytest.fixture(params=KINDS)
def zones(request):
    emitter = RecordingEmitter(request.param)
    markers.set_zone_emitter(emitter)
    yield emitter
    markers.set_zone_emitter(None)
    assert emitter.all_closed(), emitter.errors


MAIN = "MainThread"


def test_nesting_opens_and_closes_zones_innermost_first(zones):
    with sm.section("Block 3"):
        with sm.section("Self Attention", color=0x3388FF):
            pass
    assert zones.on(MAIN) == [("begin", "Block 3"), ("begin", "Self Attention"),
                              ("end", "Self Attention"), ("end", "Block 3")]


def test_exception_closes_every_zone(zones):
    with pytest.raises(KeyError):
        with sm.section("outer"):
            with sm.section("inner"):
                raise KeyError("boom")
    assert zones.on(MAIN)[-2:] == [("end", "inner"), ("end", "outer")]


def test_decorator_on_function_method_and_recursion(zones):
    @sm.section("F")
    def recurse(depth):
        if depth:
            recurse(depth - 1)

    class Model:
        @sm.section("method")
        def forward(self):
            return 42

    recurse(2)
    assert Model().forward() == 42
    assert recurse.__name__ == "recurse"
    assert zones.on(MAIN) == [("begin", "F")] * 3 + [("end", "F")] * 3 + [("begin", "method"), ("end", "method")]


def test_one_instance_reused_and_shared_by_threads(zones):
    mlp = sm.section("MLP")
    with mlp:
        with mlp:
            pass
    assert zones.on(MAIN) == [("begin", "MLP")] * 2 + [("end", "MLP")] * 2
    barrier = threading.Barrier(2)

    def worker():
        with mlp:  # the same object, open on both threads at once
            barrier.wait()
            with sm.section("inner"):
                barrier.wait()

    threads = [threading.Thread(target=worker, name=name) for name in ("T1", "T2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("T1", "T2"):
        assert zones.on(name) == [("begin", "MLP"), ("begin", "inner"), ("end", "inner"), ("end", "MLP")]
    assert sorted(zones.named_threads) == [("T1", "T1"), ("T2", "T2")]


def test_interleaved_asyncio_tasks_never_mis_nest(zones):
    # Tasks share their thread's zones; a task leaving first closes the other's
    # inner zone with its own (shortened, not mis-nested).
    async def task(name, delay):
        with sm.section(name):
            await asyncio.sleep(delay)
            return await decorated()

    @sm.section("coroutine")
    async def decorated():
        await asyncio.sleep(0)
        return "done"

    async def main():
        return await asyncio.gather(task("A", 0.02), task("B", 0))

    assert asyncio.run(main()) == ["done", "done"]
    events = zones.on(MAIN)
    assert events[:2] == [("begin", "A"), ("begin", "B")]
    assert events.count(("begin", "coroutine")) == events.count(("end", "coroutine")) == 2
    assert zones.all_closed()


def test_a_decorated_coroutine_run_by_two_tasks_is_never_lengthened(zones):
    @sm.section("step")
    async def step(delay):
        await asyncio.sleep(delay)
        zones.note(f"woke after {delay}")

    async def main():
        await asyncio.gather(step(0.01), step(0.05))

    asyncio.run(main())
    # The first task to leave closes both zones (the later one shortened);
    # nothing is left open to be closed when the second task wakes.
    assert zones.on(MAIN) == [("begin", "step"), ("begin", "step"), ("note", "woke after 0.01"),
                              ("end", "step"), ("end", "step"), ("note", "woke after 0.05")]


def test_swapping_emitters_while_a_zone_is_open_still_closes_it(zones):
    other = RecordingEmitter("python")
    with sm.section("opened before the swap"):
        markers.set_zone_emitter(other)
        with sm.section("opened after"):
            pass
    assert zones.on(MAIN) == [("begin", "opened before the swap"), ("end", "opened before the swap")]
    assert other.on(MAIN) == [("begin", "opened after"), ("end", "opened after")]
    assert other.all_closed()


def test_a_thread_that_cannot_be_named_still_gets_its_zones(zones):
    def work():
        with sm.section("work"):
            pass

    with pytest.warns(RuntimeWarning, match="could not name thread 'unnameable'"):
        thread = threading.Thread(target=work, name="unnameable")
        thread.start()
        thread.join()
    assert zones.on("unnameable") == [("begin", "work"), ("end", "work")]


def test_generator_suspended_inside_a_section(zones):
    def numbers():
        with sm.section("producer"):
            yield 1
            yield 2

    produced = numbers()
    with sm.section("consumer"):
        next(produced)
    produced.close()
    assert zones.on(MAIN)[:3] == [("begin", "consumer"), ("begin", "producer"), ("end", "producer")]
    assert zones.on(MAIN)[3:] == [("end", "consumer")]


def test_manual_out_of_order_exit_closes_inner_zones(zones):
    a, b = sm.section("a"), sm.section("b")
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)  # already closed with a: nothing happens
    assert zones.on(MAIN) == [("begin", "a"), ("begin", "b"), ("end", "b"), ("end", "a")]


@pytest.mark.parametrize("stack_kind", KINDS)
def test_switching_zones_on_or_off_inside_a_section(stack_kind):
    emitter = RecordingEmitter(stack_kind)
    entered_before = sm.section("before")
    entered_before.__enter__()
    markers.set_zone_emitter(emitter)
    try:
        entered_before.__exit__(None, None, None)  # opened no zone: closes none
        with sm.section("open while switched off"):
            markers.set_zone_emitter(None)
        with sm.section("off"):
            pass
    finally:
        markers.set_zone_emitter(None)
    assert emitter.on(MAIN) == [("begin", "open while switched off"), ("end", "open while switched off")]
    assert emitter.all_closed()


def test_without_an_emitter_nothing_is_kept():
    with sm.section("plain"):
        with sm.section("python"):
            assert markers._scopes.depth() == 0


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here")
def test_c_zone_stack_is_built_where_a_compiler_exists():
    assert zonestack.c_extension_available()


@pytest.mark.parametrize("name", ['quo"te', "back\\slash", "new\nline", "emoji 🤖", "x" * 1000, "a/b", "%2F()"])
def test_any_nonempty_text_is_a_name(zones, name):
    with sm.section(name):
        pass
    assert zones.on(MAIN) == [("begin", name), ("end", name)]


@pytest.mark.parametrize(
    "args, error",
    [((None,), TypeError), ((3,), TypeError), (("",), ValueError), (("x", "red"), TypeError),
     (("x", -1), ValueError), (("x", 0x1000000), ValueError), (("x", True), TypeError)],
)
def test_invalid_arguments_raise_clear_errors(args, error):
    with pytest.raises(error, match="section"):
        sm.section(*args)


def test_decorating_a_non_callable_is_a_type_error():
    with pytest.raises(TypeError, match="decorates callables"):
        sm.section("x")(42)




def test_inline_markers_are_shared_per_name_and_color_and_checked_once():
    assert sm.section("MLP") is sm.section("MLP")
    assert sm.section("MLP", color=0x3388FF) is sm.section("MLP", color=0x3388FF)
    assert sm.section("MLP") is not sm.section("MLP", color=0x3388FF)
    with pytest.raises(ValueError, match="lone surrogate"):
        sm.section("bad \ud800 name")
    with pytest.raises(TypeError, match="must be a str"):
        sm.section(["not", "hashable"])


@pytest.fixture
def framework_scope_requests(monkeypatch):
    """Names the section logic asked framework scopes for (none are entered)."""
    torch = pytest.importorskip("torch")
    requests = []

    def record(name):
        requests.append(name)
        return None

    monkeypatch.setattr(markers, "_framework_scopes", record)
    return torch, requests


def test_torchs_export_flag_makes_sections_ask_for_framework_scopes(framework_scope_requests, monkeypatch):
    # The C enter reads the flag behind torch.compiler.is_exporting() itself.
    torch, requests = framework_scope_requests
    with sm.section("eager"):
        pass
    monkeypatch.setattr(torch.compiler, "_is_exporting_flag", True)
    assert torch.compiler.is_exporting()
    with sm.section("exporting"):
        pass
    assert requests == ["exporting"]


def test_a_replaced_torch_probe_is_asked_on_every_entry(framework_scope_requests):
    # As sm.torch.sections() does: its probe is also true while a jittable traces.
    _torch, requests = framework_scope_requests
    restore = frameworks.replace_probe("torch", lambda: True)
    try:
        with sm.section("probed"):
            pass
    finally:
        restore()
    with sm.section("torch's own probe again"):
        pass
    assert requests == ["probed"]


def test_without_the_c_extension_sections_work_in_plain_python():
    code = textwrap.dedent("""
        import sys
        sys.modules["sectionmark.markers._zonestack"] = None  # as if built without a C compiler
        import sectionmark as sm
        from sectionmark.markers import frameworks, marker as markers, zonestack

        events = []
        stack = zonestack.PythonZoneStack(lambda location, active: events.append(("begin", location)) or location,
                                          lambda zone: events.append(("end", zone)))

        class Emitter:
            def __init__(self):
                self.open, self.close = stack.open, stack.close

            def location(self, name, color):
                return name

        assert markers._fast_path is None and sm.section.__mro__[1].__module__ == "sectionmark.markers.marker"
        markers.set_zone_emitter(Emitter())
        with sm.section("outer"):
            with sm.section("inner"):
                pass
        markers.set_zone_emitter(None)
        with sm.section("off"):
            pass
        print(events)
    """)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([("begin", "outer"), ("begin", "inner"), ("end", "inner"), ("end", "outer")])
