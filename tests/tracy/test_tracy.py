"""Tracy layer: eager zones, timestamped GPU tracks, headless capture, reader, stats.

Every capture here is real: a Python script runs under iree-tracy-capture and
the reader checks what Tracy recorded. No mocks.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sectionmark.markers import zonestack
from sectionmark.errors import SectionmarkError
from sectionmark.tracy import capture_command, read_capture, zone_stats
from sectionmark.tracy.origin import startup_end_origin
from sectionmark.readers.tracy_capture import Capture, Track, Zone, implausible_zone

CAPTURE_TIMEOUT_S = 60


def capture_script(tmp_path: Path, name: str, script: str) -> Path:
    """Write ``script`` to a file and run it under a headless capture."""
    source = tmp_path / f"{name}.py"
    source.write_text(textwrap.dedent(script))
    return capture_command([sys.executable, str(source)], tmp_path / f"{name}.tracy", timeout=CAPTURE_TIMEOUT_S)


def run_captured(tmp_path: Path, name: str, script: str) -> Capture:
    return read_capture(capture_script(tmp_path, name, script))


def track_named(capture: Capture, name: str) -> Track:
    matches = [track for track in capture.tracks if track.name == name]
    assert len(matches) == 1, f"expected one track {name!r}, got {[t.name for t in capture.tracks]}"
    return matches[0]


def shape(track: Track) -> list[tuple[str, int, str]]:
    """(name, depth, parent name) per zone, in recorded order."""
    return [(zone.name, zone.depth, track.zones[zone.parent].name if zone.parent >= 0 else "") for zone in track.zones]


def assert_properly_nested(track: Track) -> None:
    for zone in track.zones:
        assert zone.start_ns <= zone.end_ns
        if zone.parent >= 0:
            parent = track.zones[zone.parent]
            assert parent.start_ns <= zone.start_ns and zone.end_ns <= parent.end_ns
            assert zone.depth == parent.depth + 1


# --- eager sections become CPU zones ----------------------------------------

EAGER_SCRIPT = """
    import asyncio, threading, time
    import sectionmark as sm
    import sectionmark.tracy as smt

    assert smt.enable() is smt.enable()  # idempotent

    @sm.section("Decode step")
    def decode():
        with sm.section("Sample", color=0x3388FF):
            time.sleep(0.001)

    def generate(tag):
        with sm.section("Prefill " + tag):
            with sm.section("Attention"):
                time.sleep(0.001)
        for _ in range(3):
            decode()

    worker = threading.Thread(target=generate, args=("B",), name="worker-B")
    worker.start()
    generate("A")
    worker.join()

    # Two asyncio tasks interleave sections on one thread: Tracy zones must
    # still nest (the listener closes inner zones early instead of mis-nesting).
    async def task(name, delay):
        with sm.section(name):
            await asyncio.sleep(delay)

    async def interleave():
        await asyncio.gather(task("Task 1", 0.002), task("Task 2", 0.004))

    asyncio.run(interleave())

    assert sm.tracing(False) is None  # the public switch: stops zones
    with sm.section("Not traced"):
        pass
    assert sm.tracing() is smt.enable()
    with sm.section("Traced again"):
        pass
    smt.disable()
    with sm.section("Not traced"):
        pass
"""


@pytest.fixture(scope="module")
def eager_capture(tmp_path_factory) -> Capture:
    return run_captured(tmp_path_factory.mktemp("eager"), "eager", EAGER_SCRIPT)


def test_eager_sections_are_zones_on_their_own_thread(eager_capture):
    expected = lambda tag: [  # noqa: E731
        (f"Prefill {tag}", 0, ""),
        ("Attention", 1, f"Prefill {tag}"),
    ] + [("Decode step", 0, ""), ("Sample", 1, "Decode step")] * 3
    main = track_named(eager_capture, "Main thread")
    worker = track_named(eager_capture, "worker-B")
    assert shape(worker) == expected("B")
    assert shape(main)[: len(expected("A"))] == expected("A")
    for track in (main, worker):
        assert_properly_nested(track)
        sleeps = [zone for zone in track.zones if zone.name in ("Attention", "Sample")]
        assert all(zone.duration_ns >= 1_000_000 for zone in sleeps)


def test_interleaved_async_sections_still_nest(eager_capture):
    main = track_named(eager_capture, "Main thread")
    tasks = [zone for zone in main.zones if zone.name.startswith("Task")]
    assert [zone.name for zone in tasks] == ["Task 1", "Task 2"]
    assert tasks[1].parent == main.zones.index(tasks[0])
    assert_properly_nested(main)


def test_disable_stops_zones(eager_capture):
    assert all(zone.name != "Not traced" for _, zone in eager_capture.zones())
    assert [zone.name for _, zone in eager_capture.zones() if zone.name == "Traced again"] == ["Traced again"]


def test_sections_enclose_iree_runtime_zones(tmp_path):
    # Our zones and IREE's own go through the same Tracy client, so they nest.
    capture = run_captured(
        tmp_path,
        "iree_zones",  # not "iree": the script would shadow the iree package
        """
        import sectionmark as sm
        import sectionmark.tracy as smt
        smt.enable()
        import iree.runtime
        with sm.section("Make device"):
            iree.runtime.Config(device=iree.runtime.get_device("local-task"))
        """,
    )
    main = track_named(capture, "Main thread")
    (index,) = [i for i, zone in enumerate(main.zones) if zone.name == "Make device"]
    inside = [zone.name for zone in main.zones if zone.parent == index]
    assert "iree_hal_driver_registry_try_create" in inside, inside


# --- custom GPU-context timeline with explicit timestamps --------------------

GPU_SCRIPT = """
    import time
    import sectionmark.tracy as smt

    timeline = smt.GpuTimeline("Device queue 0")
    t0 = time.monotonic_ns()
    timeline.begin("Layer 0", t0 + 1_000)
    timeline.zone("matmul", t0 + 2_000, t0 + 7_500, color=0xFF0000)
    timeline.begin("MLP", t0 + 8_000)
    timeline.zone("gelu", t0 + 8_250, t0 + 9_000)
    timeline.end(t0 + 20_000)
    timeline.end(t0 + 1_021_000)
    for i in range(5):
        timeline.zone("step", t0 + 2_000_000 + i * 10_000, t0 + 2_000_000 + i * 10_000 + 1_000 * (i + 1))

    try:
        timeline.zone("too early", t0, t0 + 1)
    except ValueError:
        pass
    else:
        raise SystemExit("decreasing timestamps were accepted")
    second = smt.GpuTimeline("Device queue 1", origin_ns=0)
    second.zone("other queue", 100, 600)
"""


@pytest.fixture(scope="module")
def gpu_capture_path(tmp_path_factory) -> Path:
    return capture_script(tmp_path_factory.mktemp("gpu"), "gpu", GPU_SCRIPT)


@pytest.fixture(scope="module")
def gpu_capture(gpu_capture_path) -> Capture:
    return read_capture(gpu_capture_path)


def test_gpu_timeline_zones_match_explicit_timestamps(gpu_capture):
    queue = track_named(gpu_capture, "Device queue 0")
    assert queue.kind == "gpu"
    assert shape(queue) == [
        ("Layer 0", 0, ""),
        ("matmul", 1, "Layer 0"),
        ("MLP", 1, "Layer 0"),
        ("gelu", 2, "MLP"),
    ] + [("step", 0, "")] * 5
    durations = [zone.duration_ns for zone in queue.zones]
    expected = [1_020_000, 5_500, 12_000, 750] + [1_000 * (i + 1) for i in range(5)]
    assert all(abs(got - want) <= 1_000 for got, want in zip(durations, expected, strict=True))
    # Relative placement is kept too (start offsets from the first zone).
    first = queue.zones[0].start_ns
    starts = [zone.start_ns - first for zone in queue.zones]
    expected_starts = [0, 1_000, 7_000, 7_250] + [1_999_000 + i * 10_000 for i in range(5)]
    assert all(abs(got - want) <= 1_000 for got, want in zip(starts, expected_starts, strict=True))


def test_each_timeline_is_its_own_gpu_context(gpu_capture):
    assert [track.name for track in gpu_capture.gpu_contexts] == ["Device queue 0", "Device queue 1"]
    other = track_named(gpu_capture, "Device queue 1")
    assert [(zone.name, zone.duration_ns) for zone in other.zones] == [("other queue", 500)]


def test_zone_stats_of_gpu_zones(gpu_capture):
    rows = {row.name: row for row in zone_stats(gpu_capture, gpu_only=True)}
    step = rows["step"]
    assert (step.kind, step.count) == ("gpu", 5)
    assert (step.total_ns, step.min_ns, step.max_ns, step.p95_ns) == (15_000, 1_000, 5_000, 5_000)
    assert step.mean_ns == 3_000
    assert [row.name for row in zone_stats(gpu_capture, gpu_only=True, depth=1)] == ["MLP", "matmul"]
    assert list(rows)[0] == "Layer 0"  # sorted by total time


def test_zone_stats_at_depth_zero(eager_capture):
    rows = zone_stats(eager_capture, depth=0)
    names = {(row.name, row.kind) for row in rows}
    assert {("Prefill A", "thread"), ("Prefill B", "thread"), ("Decode step", "thread")} <= names
    decode = next(row for row in rows if row.name == "Decode step")
    assert decode.count == 6 and decode.min_ns <= decode.p95_ns <= decode.max_ns


# --- the capture's time origin: the beginning or the end of the client's start-up ---

# Tracy's client sleeps this long calibrating its timer when it loads (Profiler::Profiler -> CalibrateTimer),
# before it can send anything.
TRACY_CALIBRATION_NS = 200_000_000

ORIGIN_SCRIPT = """
    import time
    import sectionmark as sm
    import sectionmark.tracy as smt

    smt.enable()
    timeline = smt.GpuTimeline("queue")
    t0 = time.monotonic_ns()
    timeline.zone("kernel", t0 + 1_000_000, t0 + 1_500_000)
    with sm.section("Section"):
        time.sleep(0.002)
"""


def welcome_message(init_begin: int, init_end: int) -> bytes:
    """A client's Welcome handshake byte and WelcomeMessage (TracyProtocol.hpp, protocol 72, packed)."""
    times = struct.pack("<dqqQQQQQq", 1.0, init_begin, init_end, 7, 8, 1_700_000_000, 1_600_000_000, 4242, 0)
    return (b"\x01" + times + bytes([0, 2]) + b"GenuineIntel" + struct.pack("<I", 0x906EA)
            + b"python".ljust(64, b"\0") + b"host".ljust(1024, b"\0"))


def test_the_welcome_keeps_everything_but_its_origin_which_moves_to_the_start_up_end():
    welcome = welcome_message(1_000, 250_000_000)
    moved = startup_end_origin(welcome)
    assert len(moved) == len(welcome) and struct.unpack_from("<qq", moved, 9) == (250_000_000, 250_000_000)
    assert moved[:9] == welcome[:9] and moved[17:] == welcome[17:]
    assert startup_end_origin(b"\x02") == b"\x02"  # a refused handshake (protocol mismatch) passes as it is


@pytest.mark.parametrize("after_startup", [False, True], ids=["client start", "start-up end"])
def test_a_capture_can_start_where_the_client_first_can_send(tmp_path, after_startup):
    """With ``origin_after_startup`` time 0 is the end of the client's start-up, so the GUI's opening view (0 to
    the end) starts on the program's events, not on 200 ms of calibration; every time moves by one constant."""
    source = tmp_path / "origin.py"
    source.write_text(textwrap.dedent(ORIGIN_SCRIPT))
    path = capture_command([sys.executable, str(source)], tmp_path / "origin.tracy", timeout=CAPTURE_TIMEOUT_S,
                           origin_after_startup=after_startup)
    capture = read_capture(path)
    start_up, start_up_end, *_rest = capture.frames
    kernel, = track_named(capture, "queue").zones
    section, = [zone for zone in track_named(capture, "Main thread").zones if zone.name == "Section"]
    (sent, _end), = track_named(capture, "queue").cpu_side
    assert capture.opening_view() == (0, capture.end_ns)  # IREE's client is not on-demand
    if not after_startup:  # Tracy's own origin: the first frame is the start-up, nothing comes before its end
        assert start_up == 0 and start_up_end >= TRACY_CALIBRATION_NS and sent >= start_up_end
        return
    assert start_up == start_up_end == 0  # "Tracy init" is 0 ns long: time 0 is its end
    assert 0 <= sent < TRACY_CALIBRATION_NS  # the program's first events open the view
    # Durations, placements and the delay to execution are the program's own (one shift for every time).
    assert abs(kernel.duration_ns - 500_000) <= 1_000 and section.duration_ns >= 2_000_000
    assert 0 < kernel.start_ns - sent <= 1_000_000 + 1_000  # sent at t0 or just after, run at t0 + 1 ms
    assert kernel.start_ns - section.start_ns <= 1_000_000 + 5_000  # the section began after t0 (5 µs: anchoring)
    assert capture.end_ns >= section.end_ns


# --- a large capture: several compressed streams, > 64 KiB inflated ----------

MANY_ZONES = 40_000

MANY_SCRIPT = f"""
    import sectionmark as sm
    import sectionmark.tracy as smt

    smt.enable()
    for i in range({MANY_ZONES} // 4):
        with sm.section("Outer"):
            with sm.section("Inner " + str(i % 7)):
                pass
            with sm.section("Leaf"):
                with sm.section("Deep"):
                    pass
"""


def test_reader_handles_many_blocks_and_streams(tmp_path):
    capture = run_captured(tmp_path, "many", MANY_SCRIPT)
    raw = (tmp_path / "many.tracy").read_bytes()
    streams, blocks, pos = raw[5], 0, 6
    while pos < len(raw):
        pos += 4 + struct.unpack_from("<I", raw, pos)[0]
        blocks += 1
    assert streams > 1 and blocks > 2 * streams, (streams, blocks)  # every stream continues past one block

    main = track_named(capture, "Main thread")
    assert len(main.zones) == MANY_ZONES
    assert shape(main)[:4] == [("Outer", 0, ""), ("Inner 0", 1, "Outer"), ("Leaf", 1, "Outer"), ("Deep", 2, "Leaf")]
    assert [zone.name for zone in main.zones[-3:]] == [f"Inner {(MANY_ZONES // 4 - 1) % 7}", "Leaf", "Deep"]
    assert_properly_nested(main)


# --- bad input -----------------------------------------------------------------


def container(payload: bytes) -> bytes:
    """A one-stream zstd container around an inflated serialization (as Tracy writes it)."""
    compressor = zstandard.ZstdCompressor().compressobj()
    out = [b"tr\xfdP\x01\x01"]
    for start in range(0, len(payload), 64 * 1024):
        block = compressor.compress(payload[start : start + 64 * 1024])
        block += compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        out.append(struct.pack("<I", len(block)) + block)
    return b"".join(out)


def inflate(raw: bytes) -> bytes:
    streams = raw[5]
    decoders = [zstandard.ZstdDecompressor().decompressobj() for _ in range(streams)]
    chunks, pos, index = [], 6, 0
    while pos < len(raw):
        (size,) = struct.unpack_from("<I", raw, pos)
        chunks.append(decoders[index % streams].decompress(raw[pos + 4 : pos + 4 + size]))
        pos, index = pos + 4 + size, index + 1
    return b"".join(chunks)


def expect_one_line_error(path: Path, *fragments: str) -> None:
    with pytest.raises(SectionmarkError) as caught:
        read_capture(path)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_bad_files_give_one_clear_line(gpu_capture_path, gpu_capture, tmp_path):
    raw = gpu_capture_path.read_bytes()
    payload = inflate(raw)

    rewrapped = tmp_path / "rewrapped.tracy"
    rewrapped.write_bytes(container(payload))
    assert read_capture(rewrapped).gpu_contexts == gpu_capture.gpu_contexts

    truncated = tmp_path / "truncated.tracy"
    truncated.write_bytes(raw[: len(raw) // 2])
    expect_one_line_error(truncated, "truncated")

    # Cut at a block boundary inside the part the reader parses (strings, zones).
    for cut in (300, 1000):
        cut_payload = tmp_path / f"cut_payload_{cut}.tracy"
        cut_payload.write_bytes(container(payload[:cut]))
        expect_one_line_error(cut_payload, "truncated or corrupt")

    garbage = tmp_path / "garbage.tracy"
    garbage.write_bytes(os.urandom(4096))
    expect_one_line_error(garbage, "not a Tracy capture")

    corrupt_stream = tmp_path / "corrupt_stream.tracy"
    corrupt_stream.write_bytes(raw[:6] + struct.pack("<I", 64) + os.urandom(64))
    expect_one_line_error(corrupt_stream, "corrupt")

    other_version = tmp_path / "other_version.tracy"
    other_version.write_bytes(container(b"tracy\x00\x0c\x00" + payload[8:]))
    expect_one_line_error(other_version, "version 0.12.0 is not supported", "0.11.2")

    legacy = tmp_path / "legacy.tracy"
    legacy.write_bytes(b"tZst" + raw[6:])
    expect_one_line_error(legacy, "older than 0.9")

    expect_one_line_error(tmp_path / "missing.tracy", "cannot read Tracy capture")


# --- missing runtime / tools ---------------------------------------------------------


def run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=60
    )


def test_no_tracing_runtime_is_a_clear_error():
    env = {key: value for key, value in os.environ.items() if key != "IREE_PY_RUNTIME"}
    result = run_python(
        """
        import sectionmark.tracy as smt
        from sectionmark.errors import SectionmarkError
        try:
            smt.enable()
        except SectionmarkError as error:
            print(error)
        """,
        env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "Tracy zones need IREE's tracing runtime: set IREE_PY_RUNTIME=tracy before starting Python"
    )


def test_bogus_library_is_a_clear_error(tmp_path):
    bogus = tmp_path / "libnot_tracy.so"
    bogus.write_bytes(b"not a shared library")
    result = run_python(
        f"""
        from sectionmark.tracy import TracyClient
        from sectionmark.errors import SectionmarkError
        try:
            TracyClient({str(bogus)!r})
        except SectionmarkError as error:
            print(error)
        """,
        dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cannot bind Tracy's C API in {bogus}")


def test_failing_program_under_capture_is_a_clear_error(tmp_path):
    with pytest.raises(SectionmarkError, match="exited with status 3"):
        capture_command([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "x.tracy", timeout=CAPTURE_TIMEOUT_S)


def test_program_that_never_loads_tracy_is_reported(tmp_path):
    with pytest.raises(SectionmarkError, match="never loaded the tracing runtime"):
        capture_command(
            [sys.executable, "-c", "pass"], tmp_path / "x.tracy", timeout=CAPTURE_TIMEOUT_S, save_timeout=2
        )


def test_missing_capture_tool_is_a_clear_error(tmp_path):
    # An iree._runtime_libs_tracy without its binaries, found first on the path.
    package = tmp_path / "iree" / "_runtime_libs_tracy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = run_python(
        """
        from sectionmark.tracy import capture_command
        from sectionmark.errors import SectionmarkError
        try:
            capture_command(["true"], "x.tracy")
        except SectionmarkError as error:
            print(error)
        """,
        env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"IREE tool 'iree-tracy-capture' not found in {package} or not executable "
        "(reinstall iree-base-runtime: pip install --force-reinstall iree-base-runtime)"
    )


@pytest.mark.parametrize("use_c", [True, False], ids=["c-stack", "python-stack"])
def test_a_program_leaving_sections_open_finishes_and_its_capture_is_readable(tmp_path, use_c):
    """Left open at exit, on a thread that ended (daemon too), entered on one thread and left on another."""
    if use_c and not zonestack.c_extension_available():
        pytest.skip("sectionmark.markers._zonestack not built")
    capture = run_captured(tmp_path, "left_open", f"""
        import threading
        import sectionmark as sm
        from sectionmark.markers import marker as markers
        from sectionmark.tracy import TracyZones

        markers.set_zone_emitter(TracyZones(use_c={use_c}))
        for daemon in (False, True):
            thread = threading.Thread(target=lambda: sm.section(f"thread daemon={{daemon}}").__enter__(), daemon=daemon)
            thread.start()
            thread.join()
        crossing = sm.section("crossing")
        thread = threading.Thread(target=crossing.__enter__)
        thread.start()
        thread.join()
        crossing.__exit__(None, None, None)
        sm.section("outer left open").__enter__()
        sm.section("inner left open").__enter__()
    """)  # finishing at all is the check: a program that hung at exit would reach the capture's timeout, an error
    zones = [zone for track in capture.tracks for zone in track.zones]
    names = {zone.name: zone for zone in zones}
    assert sorted(names) == sorted(["thread daemon=False", "thread daemon=True", "crossing", "outer left open",
                                    "inner left open"])
    track = next(track for track in capture.tracks if any(zone.name == "inner left open" for zone in track.zones))
    inner = next(zone for zone in track.zones if zone.name == "inner left open")
    assert track.zones[inner.parent].name == "outer left open"
    assert all(zone.duration_ns >= 0 for zone in zones)


def test_tracy_names_keep_their_bytes_up_to_the_limit_and_mark_the_rest():
    from sectionmark.tracy.binding import NAME_LIMIT_BYTES, tracy_name

    exact = "é" * (NAME_LIMIT_BYTES // 2) + "x"
    assert tracy_name(exact) == exact.encode() and len(exact.encode()) == NAME_LIMIT_BYTES
    assert tracy_name(exact + "y").decode().endswith("…") and len(tracy_name(exact + "y")) <= NAME_LIMIT_BYTES
    assert tracy_name("é" * 40_000).decode() == "é" * 32_766 + "…"  # never half a character
    assert tracy_name("a\0b") == "a␀b".encode()


def test_odd_names_reach_a_capture_byte_exact_up_to_tracys_limit(tmp_path):
    names = ["a\0b", "x" * 70_000, "\r\n/\"'\\ 😀 \u202e [/x]", "é" * 40_000]
    capture = run_captured(tmp_path, "names", f"""
        import time
        import sectionmark as sm
        import sectionmark.tracy
        from sectionmark.tracy import GpuTimeline

        sectionmark.tracy.enable()
        for name in {names!r}:
            with sm.section(name):
                pass
        timeline = GpuTimeline("gpu\\0track")
        now = time.monotonic_ns()
        timeline.zone("z" * 70_000, now + 1_000, now + 2_000)
    """)
    cpu = track_named(capture, "Main thread")
    assert [zone.name for zone in cpu.zones] == ["a␀b", "x" * 65_532 + "…", names[2], "é" * 32_766 + "…"]
    gpu = track_named(capture, "gpu␀track")
    assert [zone.name for zone in gpu.zones] == ["z" * 65_532 + "…"]


def test_a_capture_with_impossible_zones_is_refused(gpu_capture_path, tmp_path):
    """No checksum in a .tracy: zones that cannot have been recorded mark it corrupt (one line)."""
    payload = inflate(gpu_capture_path.read_bytes())
    # "other queue", the only 500 ns zone: a leaf GPU zone record ends with its
    # child count (0) and is followed by its end record, (CPU delta, GPU delta = 500).
    leaf = [match.start() for match in re.finditer(re.escape(bytes(8)) + b"(?s:.{8})" + re.escape(struct.pack("<q", 500)), payload)]
    assert len(leaf) == 1
    at = leaf[0] + 16
    backwards = tmp_path / "backwards.tracy"
    backwards.write_bytes(container(payload[:at] + struct.pack("<q", -500) + payload[at + 8 :]))
    expect_one_line_error(backwards, "corrupt Tracy capture", "'other queue'", "ends before it begins")
    late = tmp_path / "late.tracy"  # inside its parent (none), but after the capture's own recorded end
    late.write_bytes(container(payload[:at] + struct.pack("<q", 10**12) + payload[at + 8 :]))
    expect_one_line_error(late, "corrupt Tracy capture", "'other queue'", "ends after the capture ended")
    beyond = tmp_path / "beyond.tracy"  # a delta that takes the running time past 64 bits
    beyond.write_bytes(container(payload[:at] + struct.pack("<q", 2**63 - 1) + payload[at + 8 :]))
    expect_one_line_error(beyond, "corrupt Tracy capture", "a time beyond 64 bits")


def test_a_small_file_never_inflates_to_more_than_its_blocks(tmp_path):
    """A zstd bomb (one 245-byte block of 64 MiB of zeros) is refused after 64 KiB, not inflated whole."""
    import tracemalloc

    block = zstandard.ZstdCompressor(level=19).compress(bytes(64 << 20))
    bomb = tmp_path / "bomb.tracy"
    bomb.write_bytes(b"tr\xfdP\x01\x01" + struct.pack("<I", len(block)) + block)
    tracemalloc.start()
    try:
        expect_one_line_error(bomb, "corrupt Tracy capture", "inflate past their last block")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(block) < 10_000 and peak < 8 << 20, (len(block), peak)


def test_plausibility_of_hand_built_zone_trees():
    def capture(*zones):
        return Capture((0, 11, 2), "p", [Track("thread", 1, "T", [Zone(*zone) for zone in zones])], [])

    assert implausible_zone(capture(("A", 0, 100, 0, -1), ("B", 10, 100, 1, 0), ("C", 100, 100, 0, -1))) is None
    assert "'B' on thread track 'T' lies outside its parent 'A'" in implausible_zone(
        capture(("A", 0, 100, 0, -1), ("B", 10, 101, 1, 0)))
    assert "lies outside its parent" in implausible_zone(capture(("A", 10, 100, 0, -1), ("B", 9, 50, 1, 0)))
    assert "'A' on thread track 'T' ends before it begins" in implausible_zone(capture(("A", 10, 9, 0, -1)))


def test_a_capture_tool_that_stops_early_does_not_leave_the_program_hanging(tmp_path, monkeypatch):
    """The program waits at exit for a capture (TRACY_NO_EXIT): when the tool is gone, it is ended."""
    from sectionmark.tracy import capture as capture_module

    failing_tool = tmp_path / "capture-tool"
    failing_tool.write_text("#!/bin/sh\necho 'Cannot open trace file for writing' >&2\nexit 1\n")
    failing_tool.chmod(0o755)
    monkeypatch.setattr(capture_module, "find_tool", lambda name, tracing: failing_tool)
    monkeypatch.setattr(capture_module, "_EXIT_GRACE_S", 0.5)
    previous = tmp_path / "run.tracy"
    previous.write_bytes(b"previous capture")
    # Only the grace path says "capture tool stopped ... before the captured program finished": a program left
    # waiting for the capture would end by the timeout instead, with "did not finish within" (no wall time asserted).
    with pytest.raises(SectionmarkError, match="capture tool stopped .exited with status 1. before the captured program "
                                               "finished: Cannot open trace file for writing"):
        capture_command([sys.executable, "-c", "import sectionmark.tracy; sectionmark.tracy.enable()"], previous,
                        timeout=CAPTURE_TIMEOUT_S)
    assert previous.read_bytes() == b"previous capture"  # and no temporary file left beside it
    assert sorted(tmp_path.iterdir()) == sorted([failing_tool, previous])


def test_a_frame_count_the_file_cannot_hold_is_refused_in_one_line(gpu_capture_path, tmp_path, monkeypatch):
    """A mutated frame count once sized a format string of gigabytes (the suite's runner was killed for memory):
    a count the rest of the file cannot hold is refused before anything is sized by it."""
    from sectionmark.readers import tracy_capture

    payload = bytearray(inflate(gpu_capture_path.read_bytes()))
    frame_sets: list[int] = []  # where each frame set's header lies in the inflated serialization
    take = tracy_capture._Parser.take

    def noting(self, fmt):
        if fmt is tracy_capture._FRAME_SET:
            frame_sets.append(self.pos)
        return take(self, fmt)

    monkeypatch.setattr(tracy_capture._Parser, "take", noting)
    read_capture(gpu_capture_path)
    monkeypatch.setattr(tracy_capture._Parser, "take", take)
    assert frame_sets
    for huge in (1 << 40, (1 << 64) - 1):
        struct.pack_into("<Q", payload, frame_sets[0] + 9, huge)  # the frames count after name (u64), continuous (u8)
        mutant = tmp_path / "huge-frames.tracy"
        mutant.write_bytes(container(bytes(payload)))
        with pytest.raises(SectionmarkError, match="truncated or corrupt"):
            read_capture(mutant)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_captures_are_read_plausibly_or_refused_in_one_line(gpu_capture_path, tmp_path, data):
    """Tracy captures carry no checksum (docs/limitations.md): a mutant is either refused in one
    line or read into zones that still make sense (each ends after it begins, inside its parent)."""
    payload = bytearray(inflate(gpu_capture_path.read_bytes()))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(payload) - 8))
        width = data.draw(st.sampled_from([1, 2, 4, 8]))
        payload[position:position + width] = data.draw(st.binary(min_size=width, max_size=width))
    mutant = tmp_path / "mutant.tracy"
    mutant.write_bytes(container(bytes(payload)))
    try:
        capture = read_capture(mutant)
    except SectionmarkError as error:
        assert "\n" not in str(error)
        return
    for track in capture.tracks:
        for zone in track.zones:
            assert zone.start_ns <= zone.end_ns <= capture.end_ns
            if zone.parent >= 0:
                parent = track.zones[zone.parent]
                assert parent.start_ns <= zone.start_ns and zone.end_ns <= parent.end_ns
