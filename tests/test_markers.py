"""The eager role of `section`: paths per thread and task, validation, decorator forms."""

import asyncio
import threading

import pytest

import sectionmark as sm
from sectionmark import markers


def test_nesting_builds_a_path_and_unwinds():
    assert sm.current_path() == ()
    with sm.section("Block 3"):
        with sm.section("Self Attention"):
            assert sm.current_path() == ("Block 3", "Self Attention")
        assert sm.current_path() == ("Block 3",)
    assert sm.current_path() == ()


def test_exception_unwinds_the_stack():
    with pytest.raises(KeyError):
        with sm.section("outer"):
            with sm.section("inner"):
                raise KeyError("boom")
    assert sm.current_path() == ()


def test_decorator_on_function_method_and_recursion():
    seen = []

    @sm.section("F")
    def recurse(depth):
        seen.append(sm.current_path())
        if depth:
            recurse(depth - 1)

    class Model:
        @sm.section("method")
        def forward(self):
            return sm.current_path()

    recurse(2)
    assert seen == [("F",), ("F", "F"), ("F", "F", "F")]
    assert Model().forward() == ("method",)
    assert recurse.__name__ == "recurse"


def test_one_instance_reused_and_shared_by_threads():
    mlp = sm.section("MLP")
    with mlp:
        with mlp:
            assert sm.current_path() == ("MLP", "MLP")
    results = {}
    barrier = threading.Barrier(2)

    def worker(name):
        with sm.section(name):
            barrier.wait()
            results[name] = sm.current_path()
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("T1", "T2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"T1": ("T1",), "T2": ("T2",)}


def test_asyncio_tasks_do_not_see_each_other():
    async def task(name, delay):
        with sm.section(name):
            await asyncio.sleep(delay)
            inner = await decorated()
            return sm.current_path(), inner

    @sm.section("coroutine")
    async def decorated():
        await asyncio.sleep(0)
        return sm.current_path()

    async def main():
        return await asyncio.gather(task("A", 0.01), task("B", 0))

    assert asyncio.run(main()) == [(("A",), ("A", "coroutine")), (("B",), ("B", "coroutine"))]


@pytest.mark.parametrize("name", ['quo"te', "back\\slash", "new\nline", "emoji 🤖", "x" * 1000, "a/b", "%2F()"])
def test_any_nonempty_text_is_a_name(name):
    with sm.section(name):
        assert sm.current_path() == (name,)


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


def test_out_of_order_exit_is_reported():
    a, b = sm.section("a"), sm.section("b")
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="out of order"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    assert sm.current_path() == ()


def test_eager_listeners_see_enter_and_exit_in_order():
    events = []

    class Recorder:
        def enter(self, marker):
            events.append(("enter", marker.name, marker.color))

        def exit(self, marker):
            events.append(("exit", marker.name, marker.color))

    recorder = Recorder()
    markers.add_eager_listener(recorder)
    try:
        with sm.section("Prefill", color=0x3388FF):
            with sm.section("Decode"):
                pass
    finally:
        markers.remove_eager_listener(recorder)
    assert events == [
        ("enter", "Prefill", 0x3388FF), ("enter", "Decode", None),
        ("exit", "Decode", None), ("exit", "Prefill", 0x3388FF),
    ]
