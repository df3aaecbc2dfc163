"""A CPU hog on every core, for the benchmarks that measure the second half of an experiment on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys


class Hog:
    """A busy loop on every core while in use (killed by pid after)."""

    def __enter__(self):
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(os.cpu_count() or 1)]
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
            process.wait()
