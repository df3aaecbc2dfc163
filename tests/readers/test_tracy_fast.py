"""The fast path of reading a Tracy capture gives exactly what the plain way gives, and what Tracy reads.

The C extension (``sectionmark.readers._tracyread``) and the reader's Python
walks read a real capture with many nested zones on several threads and GPU
contexts into identical captures, walk hand-built zone trees (cut anywhere,
times past 64 bits, zones left open at the end of the capture) into identical rows, and refuse damaged
captures with the same line. Tracy's own reader (``csvexport``, in
shared/tools) lists the same zones with the same times.
"""

from __future__ import annotations

import gc
import struct
from pathlib import Path

import numpy as np
import pytest
from shared_tools import CSVEXPORT, csvexport
from test_tracy import capture_script, container, inflate

from sectionmark.errors import SectionmarkError
from sectionmark.readers import tracy_capture as reader
from sectionmark.readers.tracy_capture import Capture, Zone, read_capture

SEEDS = range(8)
needs_c = pytest.mark.skipif(reader._native is None, reason="sectionmark.readers._tracyread not built (no C compiler)")

# Nested sections on three threads, two GPU contexts with nested zones (one fed from two threads).
NESTED_SCRIPT = """
    import threading, time
    import sectionmark as sm
    import sectionmark.tracy as smt

    smt.enable()

    def blocks(tag):
        for i in range(1500):
            with sm.section(tag + " block"):
                with sm.section("attention " + str(i % 3)):
                    pass
                with sm.section("mlp"):
                    with sm.section("gelu"):
                        pass

    workers = [threading.Thread(target=blocks, args=("worker " + str(n),)) for n in range(2)]
    for worker in workers:
        worker.start()
    blocks("main")
    for worker in workers:
        worker.join()

    def replay(timeline, t, layers):
        for i in range(layers):
            timeline.begin("layer", t)
            timeline.zone("matmul", t + 10, t + 500)
            timeline.begin("mlp", t + 600)
            timeline.zone("gelu", t + 700, t + 900 + i % 50)
            timeline.end(t + 1_000)
            timeline.end(t + 2_000)
            t += 3_000
        return t

    queues = [smt.GpuTimeline("Device queue " + str(n)) for n in range(2)]
    now = time.monotonic_ns()
    later = threading.Thread(target=replay, args=(queues[0], replay(queues[0], now, 1500), 1500))
    later.start()
    later.join()
    replay(queues[1], now, 1500)
"""


@pytest.fixture(scope="module")
def nested_capture_path(tmp_path_factory) -> Path:
    return capture_script(tmp_path_factory.mktemp("nested"), "nested", NESTED_SCRIPT)


def read_both(path: Path, monkeypatch) -> tuple:
    """What the reader gives with the C extension and without it (each: a Capture, or the error's line)."""

    def read():
        try:
            return read_capture(path)
        except SectionmarkError as error:
            return str(error)

    with_c = read()
    monkeypatch.setattr(reader, "_native", None)
    return with_c, read()


def test_c_extension_is_built():
    assert reader._native is not None


@needs_c
def test_c_and_python_read_a_nested_capture_alike(nested_capture_path, monkeypatch):
    with_c, without = read_both(nested_capture_path, monkeypatch)
    assert isinstance(with_c, Capture) and with_c == without
    depths = {track.name: max(zone.depth for zone in track.zones) for track in with_c.tracks}
    assert len(with_c.threads) == 3 and len(with_c.gpu_contexts) == 2 and min(depths.values()) == 2, depths
    assert sum(len(track.zones) for track in with_c.tracks) == 3 * 4 * 1500 + 4 * 4500
    assert not any(gc.is_tracked(zone) for _track, zone in with_c.zones())  # no work for the collector


@pytest.mark.skipif(CSVEXPORT is None, reason="Tracy's csvexport not found (shared/tools/tracy-csvexport-0.11.2)")
def test_the_reader_lists_the_zones_tracys_own_reader_lists(nested_capture_path):
    """Every CPU zone (`csvexport -u`) and GPU zone (`-g`): name, start since capture start, duration."""

    def listed(option: str, time_columns: slice) -> list[tuple]:
        rows = csvexport(nested_capture_path, option)
        return sorted((row[0], *map(int, row[time_columns])) for row in rows)

    capture = read_capture(nested_capture_path)

    def ours(tracks) -> list[tuple]:
        return sorted((zone.name, zone.start_ns, zone.duration_ns) for track in tracks for zone in track.zones)

    assert ours(capture.threads) == listed("-u", slice(3, 5))
    assert ours(capture.gpu_contexts) == listed("-g", slice(2, 4))


def serialized_tree(rng: np.random.Generator, cpu: bool, wild: bool) -> tuple[int, bytes]:
    """(top-level zone count, serialization) of a random zone tree as Tracy writes a thread's (cpu) or a GPU
    context's zones; ``wild``: some deltas huge or negative (times past 64 bits, ends before starts, zones
    left open)."""
    out = bytearray()

    def delta() -> int:
        if wild and rng.random() < 0.1:
            return int(rng.choice([2**63 - 1, -(2**63), 2**62, -(2**62), -1, -1000]))
        return int(rng.integers(0, 1000))

    def zone(depth: int) -> None:
        children = int(rng.integers(0, 4)) if depth < 5 else 0
        srcloc, extra = int(rng.integers(-5, 5)), int(rng.integers(0, 3))
        if cpu:
            out.extend(struct.pack("<hqII", srcloc, delta(), extra, children))
        else:
            out.extend(struct.pack("<qqh3sHQ", delta(), delta(), srcloc, b"\0\0\0", 0, children))
        for _ in range(children):
            zone(depth + 1)
        out.extend(struct.pack("<q", delta()) if cpu else struct.pack("<qq", delta(), delta()))

    top = int(rng.integers(1, 12))
    for _ in range(top):
        zone(0)
    return top, bytes(out)


def walk_both(cpu: bool, buf: bytes, pos: int, count: int, last_time: int) -> tuple:
    name = "cpu_zone_table" if cpu else "gpu_zone_table"
    return getattr(reader._native, name)(buf, pos, count, last_time), getattr(reader, name)(buf, pos, count, last_time)


@needs_c
@pytest.mark.parametrize("cpu", [True, False], ids=["cpu", "gpu"])
@pytest.mark.parametrize("seed", SEEDS)
def test_c_and_python_walk_zone_trees_alike(seed, cpu):
    rng = np.random.default_rng(seed)
    for wild in (False, True):
        top, tree = serialized_tree(rng, cpu, wild)
        buf = bytes(7) + tree + bytes(rng.integers(0, 256, 40, np.uint8))  # zones between other data
        last_time = int(rng.integers(0, 10**6))
        with_c, without = walk_both(cpu, buf, 7, top, last_time)
        assert with_c == without and with_c[0] == 7 + len(tree)
        assert wild or (not with_c[2] and len(with_c[1]) > 0)
        for cut in sorted(set(rng.integers(7, 7 + len(tree), 20).tolist())):  # cut anywhere: None from both
            assert walk_both(cpu, buf[:cut], 7, top, last_time) == (None, None)
        more = walk_both(cpu, buf, 7, top + 1, last_time)  # a count past the zones reads the bytes after them
        assert more[0] == more[1]


@needs_c
def test_zone_rows_of_a_hand_written_tree():
    """A (start 10, end left open) holds B (15..20) and C (25..23: ends before it begins, refused later)."""
    tree = (struct.pack("<hqII", 1, 10, 0, 2) + struct.pack("<hqII", 2, 5, 3, 0) + struct.pack("<q", 5)
            + struct.pack("<hqII", -1, 5, 0, 0) + struct.pack("<q", -2) + struct.pack("<q", -100))
    for walk in (reader._native.cpu_zone_table, reader.cpu_zone_table):
        pos, rows, overflow = walk(tree, 0, 1, 1_000)
        table = np.frombuffer(rows, reader.ZONE_FIELDS)
        assert (pos, overflow) == (len(tree), False)
        # A CPU zone's CPU side is its start and end again.
        assert table.tolist() == [(10, 1_000, -1, 0, 1, 0, 10, 1_000), (15, 20, 0, 1, 2, 3, 15, 20),
                                  (25, 23, 0, 1, -1, 0, 25, 23)]
        assert walk(tree[:-1], 0, 1, 1_000) is None
        past_64_bits = struct.pack("<hqII", 1, 2**63 - 1, 0, 0) + struct.pack("<q", 1)
        assert walk(past_64_bits, 0, 1, 1_000) == (len(past_64_bits), b"", True)


@needs_c
def test_gpu_zone_rows_carry_their_cpu_side_on_its_own_running_time():
    """A GPU zone's record starts with its CPU-side delta, its end record too: the CPU side (when the client sent
    begin and end; Tracy's "CPU command setup" and "delay to execution") runs on its own reference."""
    outer = struct.pack("<qqh3sHQ", 5, 100, 0, bytes(3), 0, 1)  # CPU side 5, GPU 100, one child
    inner = struct.pack("<qqh3sHQ", 2, 10, 1, bytes(3), 0, 0)  # CPU 7, GPU 110
    tree = outer + inner + struct.pack("<qq", 1, 20) + struct.pack("<qq", 3, 5)  # inner ends 8 / 130, outer 11 / 135
    for walk in (reader._native.gpu_zone_table, reader.gpu_zone_table):
        pos, rows, overflow = walk(tree, 0, 1, 1_000)
        assert (pos, overflow) == (len(tree), False)
        assert np.frombuffer(rows, reader.ZONE_FIELDS).tolist() == [(100, 135, -1, 0, 0, 0, 5, 11),
                                                                   (110, 130, 0, 1, 1, 0, 7, 8)]


def test_a_gpu_context_fed_from_several_threads_keeps_each_zone_under_its_parent():
    """Tracy stores a GPU context's zones per sending thread; merged into one track, parents still point right."""
    names = reader._Names({0: "outer", 1: "inner"}, [], np.zeros(0, np.int64))

    def one_nested_pair(start: int) -> bytes:
        outer, inner = struct.pack("<qqh3sHQ", 0, start, 0, bytes(3), 0, 1), struct.pack("<qqh3sHQ", 0, 1, 1, bytes(3), 0, 0)
        tree = outer + inner + struct.pack("<qq", 0, 1) + struct.pack("<qq", 0, 1)
        return reader.gpu_zone_table(tree, 0, 1, 0)[1]

    table = reader._ZoneTable([one_nested_pair(10), one_nested_pair(100)], names, cpu=False)
    assert table.zones() == [Zone("outer", 10, 13, 0, -1), Zone("inner", 11, 12, 1, 0), Zone("outer", 100, 103, 0, -1),
                             Zone("inner", 101, 102, 1, 2)]


@pytest.mark.parametrize("seed", SEEDS)
def test_c_and_python_refuse_damaged_captures_alike(nested_capture_path, tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    payload = inflate(nested_capture_path.read_bytes())
    native = reader._native
    for mutant_index in range(4):
        mutant = bytearray(payload)
        for _ in range(int(rng.integers(1, 4))):
            width = int(rng.choice([1, 2, 4, 8]))
            position = int(rng.integers(0, len(mutant) - width))
            mutant[position:position + width] = rng.integers(0, 256, width, np.uint8).tobytes()
        path = tmp_path / f"mutant{mutant_index}.tracy"
        path.write_bytes(container(bytes(mutant)))
        monkeypatch.setattr(reader, "_native", native)
        with_c, without = read_both(path, monkeypatch)
        assert with_c == without
        assert isinstance(with_c, Capture) or "\n" not in with_c
