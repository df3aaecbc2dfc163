"""No test asserts on a time it measured: the suite must pass with every core busy (scripts/test_under_load.sh).

A wall time, or a ratio of the times of two separate runs, moves with the machine's load: a test that asserts
one fails without a code change, and then gets ignored. What is exact is checked instead (counts, structure,
sums of the same events); speeds are benchmarks (benchmarks/, each printing its goal line).

The check reads every test module's syntax tree. In each function it follows the values that come from a clock
(``time.perf_counter()``, ``monotonic``, ``time.time``, ``thread_time``, ``process_time`` and their ``_ns``
forms) or from a ratio of two measured times (a division whose both sides name a time or a rate: ``*_ns``,
``*_s``, ``time``, ``total``, ``gb_per_s``, ``gflop``, ``dram``; see `_two_runs`), through assignments, and fails on an ``assert`` that uses
one. Clocks may still bound a wait (``while time.monotonic() < deadline``): that is not an assertion. The few
that remain are listed in ALLOWED with why each is right.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "thread_time",
          "thread_time_ns", "process_time", "process_time_ns"}
TIME_LIKE = re.compile(r"(_ns|_s\b|time|total|gb_per_s|gflop|dram)", re.IGNORECASE)
# "tests/<path>::<function>": why its timed assertion is right (or whose work removes it).
ALLOWED: dict[str, str] = {
    "tests/entry/test_cli.py::test_an_output_in_a_directory_without_write_access_fails_at_once_naming_it":
        "a hang guard, not a speed: refusing an output takes milliseconds, the bound is 5 s; a hang (the bug it "
        "guards against) would otherwise stop the suite instead of failing one test",
}


def _is_clock(node: ast.AST) -> bool:
    """``time.perf_counter()``, ``perf_counter()`` (imported from time) and the other clocks."""
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if isinstance(function, ast.Attribute):
        return function.attr in CLOCKS and isinstance(function.value, ast.Name) and function.value.id == "time"
    return isinstance(function, ast.Name) and function.id in CLOCKS - {"time"}


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _measured(node: ast.AST, tainted: set[str]) -> bool:
    """Whether an expression uses a clock, a name holding a measured time, or a ratio of two measured times."""
    for inner in ast.walk(node):
        if _is_clock(inner) or (isinstance(inner, ast.Name) and inner.id in tainted):
            return True
        if (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Div)
                and TIME_LIKE.search(_text(inner.left)) and TIME_LIKE.search(_text(inner.right))
                and _two_runs(inner.left, inner.right)):
            return True
    return False


def _two_runs(left: ast.AST, right: ast.AST) -> bool:
    """A ratio of the times of two different measurements: one function applied to two runs
    (``f(live) / f(exact)``), or a figure over another run's figure held in a plain name
    (``measured.dram_gb_per_s / dram``); not a figure over a count (``busy_ns / calls``) nor a share of one run's
    total (``row.busy_ns / session.total_ns``: the divisor is the run's own attribute)."""
    def roots(node):  # the names of the values, not of the functions called on them
        called = {id(inner.func) for inner in ast.walk(node) if isinstance(inner, ast.Call)}
        return {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name) and id(inner) not in called}

    def has_call(node):
        return any(isinstance(inner, ast.Call) for inner in ast.walk(node))

    if roots(left) & roots(right):
        return False
    return (has_call(left) and has_call(right)) or isinstance(right, ast.Name)


def timed_assertions(path: Path) -> list[tuple[str, int, str]]:
    """(function, line, assertion) of every assert on a measured time in a test module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        tainted: set[str] = set()
        assignments = [node for node in ast.walk(function) if isinstance(node, (ast.Assign, ast.AugAssign,
                                                                                 ast.AnnAssign))]
        changed = True
        while changed:  # to a fixed point: a measured value passed through several names
            changed = False
            for node in assignments:
                if node.value is None or not _measured(node.value, tainted):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for name in {inner.id for target in targets for inner in ast.walk(target) if isinstance(inner, ast.Name)}:
                    if name not in tainted:
                        tainted.add(name)
                        changed = True
        for node in ast.walk(function):
            if isinstance(node, ast.Assert) and _measured(node.test, tainted):
                found.append((function.name, node.lineno, _text(node.test)))
    return found


def _all_timed_assertions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        for function, line, assertion in timed_assertions(path):
            key = f"{path.relative_to(TESTS.parent).as_posix()}::{function}"
            found.setdefault(key, []).append(f"line {line}: assert {assertion}")
    return found


def test_no_test_asserts_a_time_it_measured_except_the_listed_ones():
    found = _all_timed_assertions()
    unlisted = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert not unlisted, "tests asserting a measured time (check what is exact, or make it a benchmark):\n" + "\n".join(
        f"{key}: {'; '.join(lines)}" for key, lines in unlisted.items())
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"listed in ALLOWED but no longer timed (take them off): {stale}"


def test_the_check_finds_wall_times_and_ratios_of_separate_runs(tmp_path):
    """What the check must catch, and what it must let through, on hand-written tests."""
    module = tmp_path / "test_sample.py"
    module.write_text('''
import time
from time import perf_counter

def test_wall_time():
    began = time.perf_counter()
    work()
    elapsed = time.perf_counter() - began
    assert elapsed < 5

def test_clock_in_the_assert():
    began = perf_counter()
    assert perf_counter() - began < 5

def test_ratio_of_two_runs(live_run):
    live, exact = live_run
    ratio = _median_call_total(live) / _median_call_total(exact)
    assert ratio <= 2.0

def test_ratio_of_two_rates(measured, dram):
    assert 0.5 < measured.dram_gb_per_s / dram_gb_per_s < 2

def test_exact_shares_counts_and_a_bounded_wait(session):
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        break
    assert session.sections[0].busy_ns / session.total_ns == 0.5
    assert row.busy_ns / calls == 100
    assert live.dispatches / live.calls == exact.dispatches / exact.calls
''')
    assert [(function, line) for function, line, _assertion in timed_assertions(module)] == [
        ("test_wall_time", 9), ("test_clock_in_the_assert", 13), ("test_ratio_of_two_runs", 18),
        ("test_ratio_of_two_rates", 21)]
