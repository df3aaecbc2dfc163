"""Output files are written all at once, never onto an input, never over a non-file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import atomic_path, write_atomic


def test_a_failed_rewrite_leaves_the_previous_file_intact(tmp_path):
    target = tmp_path / "sections.json"
    target.write_text('{"good": true}')
    # A 4 KiB file-size limit, as with `ulimit -f 4`: the rewrite of 1 MB fails part-way.
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "from sectionmark.outputs import write_atomic\n"
        "from sectionmark.errors import SectionmarkError\n"
        "try:\n"
        f"    write_atomic({str(target)!r}, 'x' * 1_000_000)\n"
        "except SectionmarkError as error:\n"
        "    print(error); sys.exit(1)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout.startswith(f"cannot write {target}")
    assert target.read_text() == '{"good": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["sections.json"]  # no temporary left behind


def test_an_exception_while_writing_leaves_nothing(tmp_path):
    target = tmp_path / "chart.png"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as temporary:
            temporary.write_bytes(b"half")
            raise RuntimeError("renderer failed")
    assert list(tmp_path.iterdir()) == []


def test_outputs_that_would_destroy_something_are_refused(tmp_path):
    source = tmp_path / "a.mlir"
    source.write_text("module {}")
    with pytest.raises(SectionmarkError, match="also an input of this command"):
        write_atomic(source, "x", inputs=[source])
    assert source.read_text() == "module {}"
    with pytest.raises(SectionmarkError, match="not a regular file"):
        write_atomic("/dev/null", "x")
    with pytest.raises(SectionmarkError, match="a directory"):
        write_atomic(tmp_path, "x")
    with pytest.raises(SectionmarkError, match="empty"):
        write_atomic("", "x")
    with pytest.raises(SectionmarkError, match="does not exist"):
        write_atomic(tmp_path / "no" / "file.json", "x")


def test_written_files_get_the_usual_mode(tmp_path):
    path = write_atomic(tmp_path / "t.csv", "a,b\r\n")
    umask = os.umask(0)
    os.umask(umask)
    assert (path.stat().st_mode & 0o777) == 0o666 & ~umask


def test_a_writer_killed_mid_write_leaves_the_previous_file_intact(tmp_path):
    import signal
    import time

    target = tmp_path / "run.perfetto.json"
    target.write_text("previous")
    script = (
        "import sys, time\n"
        "from sectionmark.outputs import atomic_path\n"
        f"with atomic_path({str(target)!r}) as temporary:\n"
        "    temporary.write_text('half of a trace')\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    time.sleep(0.1)
    assert target.read_text() == "previous"
    left = [path for path in tmp_path.iterdir() if path != target]
    assert len(left) == 1 and left[0].name.endswith(".partial")  # a kill -9 runs no clean-up...
    running = tmp_path / f".{target.name}.{os.getpid()}.abcd1234.partial"  # (a writer still at work)
    running.write_text("another writer's half")
    write_atomic(target, "next")  # ...the next writer of the file removes what the killed one left
    assert target.read_text() == "next" and sorted(tmp_path.iterdir()) == sorted([target, running])
