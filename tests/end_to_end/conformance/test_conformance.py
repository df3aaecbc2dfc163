"""The conformance table (programs.PROGRAMS), each program checked by one oracle: `check_program`.

See tests/end_to_end/conformance/__init__.py for the table and what the oracle checks.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("flax")

import sectionmark as sm  # noqa: E402
from sectionmark.compiler.targets import target_flags  # noqa: E402
from invariants import assert_profile_invariants  # noqa: E402
from test_byte_identity import assert_same_executables, plain_compile  # noqa: E402

from .input_flops import InputFlops, count_input_flops  # noqa: E402
from .programs import PROGRAMS, Program  # noqa: E402

pytestmark = pytest.mark.slow

# The unmarked FLOP share counted on the input (phase "input") and the map's may differ by
# UNMARKED_ABSOLUTE + UNMARKED_RELATIVE x the larger share. Both sides count the same ops at two
# phases; in between IREE decomposes softmax / layer norm / GELU / attention into other op counts,
# folds constants, CSEs and hoists constant-only work into initializers (outside ``main``). Measured
# (IREE 3.13, this table): the unmarked FLOPs agree (flax-training-step: 35401 on both sides) and all
# FLOPs differ by at most 1.0%, so the shares differ by about that relative amount; the largest
# difference is 0.00052 (flax-training-step, 0.05766 vs 0.05714: 0.9% of the share), the others at
# most 0.00001. 5% relative is 5x the worst case; 0.001
# absolute allows a few elementwise ops to move between phases where a program has almost no
# unmarked work, and is still 1/10 of PROFILED_UNMARKED_FLOOR.
UNMARKED_ABSOLUTE = 0.001
UNMARKED_RELATIVE = 0.05
PROFILED_UNMARKED_FLOOR = 0.01  # unmarked FLOP share above which the profile must show unmarked time
COVERAGE_ERROR = 1e-6
ITERATIONS, WARMUP = 2, 1

CHECKS = ("sections", "unmarked", "unmarked-time", "numerics", "executables", "coverage")
MEASURED: dict[str, dict[str, Any]] = {}  # per program, for the terminal summary (conftest.py)


@dataclass
class Built:
    """A program exported and compiled once; its input count and profile made on first use."""

    program: Program
    exported: Any
    compiled: Any
    timings: dict[str, float] = field(default_factory=dict)

    @functools.cached_property
    def input_flops(self) -> InputFlops:
        return self._timed("input count", lambda: count_input_flops(self.exported.mlir, self.program.input_type))

    @property
    def devices(self) -> Optional[list[str]]:
        """The local-task devices of a program of several (None: one, as sm.load and sm.profile default)."""
        return ["local-task"] * self.program.devices if self.program.devices > 1 else None

    @functools.cached_property
    def profile(self):
        """The profile (of several devices: a DeviceProfile, each device's session checked alike: `sessions`)."""
        return self._timed("profile", lambda: sm.profile(self.compiled, args=self.program.args, iterations=ITERATIONS,
                                                         warmup=WARMUP, quiet=True, devices=self.devices))

    @property
    def sessions(self) -> list:
        """The profile's sessions: one, or one per device."""
        profile = self.profile
        return [device.session for device in profile.devices] if self.devices else [profile]

    def _timed(self, what: str, make):
        start = time.perf_counter()
        value = make()
        self.timings[what] = time.perf_counter() - start
        MEASURED.setdefault(self.program.name, {})["timings"] = self.timings
        return value


MAIN_FUNCTIONS = re.compile(r"^(?:__)?main(?:\$async)?(?:_memoize_apply(?:_\d+)?)?$")


def map_unmarked_flops(section_map) -> tuple[float, float]:
    """(unmarked FLOPs, all FLOPs) of what a call of ``main`` records: every dispatch command of a command
    buffer of ``main`` (torch: ``main$async``; memoized ones are recorded in ``__main_memoize_apply*``),
    its site's shares, once per command. The programs are static, so a site without FLOPs (rule "root": a
    fill or a copy; "op-count": sectionmark's fallback when the cost model found only addressing, such as a
    causal mask computed from iotas) costs nothing."""
    unmarked = total = 0.0
    sites = {site.id: site for site in section_map.sites}
    for buffer in section_map.command_buffers:
        if not MAIN_FUNCTIONS.match(buffer.function):
            continue
        for command in buffer.commands:
            if command.op != "dispatch":
                continue
            site = sites[command.site]
            if not site.shares:  # wholly unmarked: "shares: []", its FLOPs on the site
                total += site.flops or 0.0
                unmarked += site.flops or 0.0
            for share in site.shares:
                flops = share.flops or 0.0
                total += flops
                unmarked += flops if share.path == () else 0.0
    return unmarked, total


# --------------------------------------------------------------- the oracle


def check_sections(built: Built, tmp_path: Path) -> None:
    """Every section present as written, parents included, in the export and in the compiled map."""
    expected = built.program.expected
    for where, declared in [("export", built.exported.sections), ("map", built.compiled.section_map.sections)]:
        declared = set(declared)
        assert declared == expected, (
            f"{where}: missing {sorted(expected - declared)}, unexpected {sorted(declared - expected)}")


def check_unmarked(built: Built, tmp_path: Path) -> None:
    """Unmarked FLOP share counted on the input program = the map's, within the tolerance above; none in the
    input => none in the map."""
    counted = built.input_flops
    assert not counted.unknown_ops, f"ops the count cannot size: {counted.unknown_ops}"
    assert counted.total > 0
    unmarked, total = map_unmarked_flops(built.compiled.section_map)
    map_share = unmarked / total
    MEASURED.setdefault(built.program.name, {}).update(input_share=counted.unmarked_share, map_share=map_share,
                                                       input_flops=counted.total, map_flops=total)
    tolerance = UNMARKED_ABSOLUTE + UNMARKED_RELATIVE * max(counted.unmarked_share, map_share)
    assert abs(counted.unmarked_share - map_share) <= tolerance, (
        f"unmarked FLOPs: input {counted.unmarked_share:.4f} vs map {map_share:.4f}")
    if counted.unmarked == 0:
        assert unmarked == 0, f"the map has {unmarked} unmarked FLOPs, the input none"


def check_unmarked_time(built: Built, tmp_path: Path) -> None:
    """The profile agrees with the input both ways: no unmarked FLOPs in the input => no unmarked time;
    unmarked FLOPs above PROFILED_UNMARKED_FLOOR of all => some unmarked time."""
    counted, profile = built.input_flops, built.profile
    unmarked_ns = sum(session.unmarked_ns for session in built.sessions)  # over every device
    MEASURED.setdefault(built.program.name, {})["profiled_share"] = unmarked_ns / sum(
        session.total_ns for session in built.sessions)
    if counted.unmarked == 0:
        assert unmarked_ns == 0, profile.table()
    if counted.unmarked_share > PROFILED_UNMARKED_FLOOR:
        assert unmarked_ns > 0, profile.table()


def check_numerics(built: Built, tmp_path: Path) -> None:
    """The compiled function's outputs equal eager's (torch under no_grad, JAX jitted)."""
    program = built.program
    result = sm.load(built.compiled, devices=built.devices).main(*program.args)
    outputs = [np.asarray(value.to_host()) for value in (result if isinstance(result, (tuple, list)) else [result])]
    expected = program.reference()
    assert len(outputs) == len(expected)
    for index, (got, want) in enumerate(zip(outputs, expected)):
        np.testing.assert_allclose(got, want, rtol=program.rtol, atol=program.atol, err_msg=f"output {index}")


def check_executables(built: Built, tmp_path: Path) -> None:
    """Executables byte-identical to the plain pipeline's (Program.plain_note says which)."""
    plain_text = built.program.plain_text()
    if built.program.framework == "torch":
        plain_text = same_fx_keys(plain_text, built.exported.mlir)
    devices = target_flags("llvm-cpu", devices=built.program.devices)
    plain = plain_compile(plain_text, built.program.input_type, device_flags=devices)
    try:
        assert_same_executables(built.compiled.vmfb, plain, tmp_path)
    except AssertionError as error:
        raise AssertionError(f"against {built.program.plain_note}: {error}") from None


FX_KEY = re.compile(r"<eval_with_key>\.(\d+)")


def same_fx_keys(plain: str, ours: str) -> str:
    """``plain`` with torch.fx's generated-code names numbered as in ``ours``.

    A graph torch re-traces (Llama's ``@torch.no_grad()`` rotary embedding) gets
    locations in its generated code, ``<eval_with_key>.N``, N counting every
    GraphModule the process made: two exports in one process differ in N alone
    (the plain pipeline against itself too), and IREE embeds locations in the
    executables. Keys are matched in order of first appearance, so anything
    else that differs still fails.
    """
    ours_keys, plain_keys = (list(dict.fromkeys(FX_KEY.findall(text))) for text in (ours, plain))
    assert len(ours_keys) == len(plain_keys), (ours_keys, plain_keys)
    renumber = dict(zip(plain_keys, ours_keys))
    return FX_KEY.sub(lambda match: f"<eval_with_key>.{renumber[match.group(1)]}", plain)


def check_coverage(built: Built, tmp_path: Path) -> None:
    """Sections + unmarked = all measured time (busy and wall), wall <= busy: the profile invariants."""
    for session in built.sessions:  # each device's, for a program of several
        assert_profile_invariants(session)
        assert session.coverage_error <= COVERAGE_ERROR, session.coverage_error
        assert session.calls == ITERATIONS


ORACLE = {"sections": check_sections, "unmarked": check_unmarked, "unmarked-time": check_unmarked_time,
          "numerics": check_numerics,
          "executables": check_executables, "coverage": check_coverage}


def check_program(built: Built, tmp_path: Path, checks: tuple[str, ...] = CHECKS) -> None:
    """The oracle: every check of ``checks`` on one exported and compiled program."""
    for check in checks:
        ORACLE[check](built, tmp_path)


# --------------------------------------------------------------- the table


@pytest.fixture(scope="module", params=list(PROGRAMS))
def built(request) -> Built:
    timings: dict[str, float] = {}
    start = time.perf_counter()
    program = PROGRAMS[request.param]()
    exported = program.export()
    timings["export"] = time.perf_counter() - start
    start = time.perf_counter()
    compiled = sm.compile(exported, target="llvm-cpu", devices=program.devices)
    timings["compile"] = time.perf_counter() - start
    MEASURED.setdefault(program.name, {})["timings"] = timings
    return Built(program, exported, compiled, timings)


# Checks that fail because sectionmark is wrong (reported with a minimal repro; strict: a fix makes them fail).
KNOWN_BUGS: dict[tuple[str, str], str] = {
}


@pytest.mark.parametrize("check", CHECKS)
def test_program(built, check, tmp_path, request):
    reason = KNOWN_BUGS.get((built.program.name, check))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    start = time.perf_counter()
    check_program(built, tmp_path, (check,))
    built.timings[check] = time.perf_counter() - start
