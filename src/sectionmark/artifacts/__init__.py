"""What the runtime side reads, without ``iree.compiler``: compiled modules, their section maps, IREE's tools.

`sm.load`, `sm.profile`, `sm.report`, ``sectionmark report`` and
``tracy-stats`` go through here, so a runtime-only install (iree-base-runtime
alone) can run and profile modules compiled elsewhere
(tests/entry/test_import_graph.py checks that none of them imports the compiler).

* `modules`: a compiled object, .vmfb bytes or a .vmfb file, and its section
  map (embedded, or a sidecar ``.sections.json``), read; the module file
  IREE's benchmark tool runs is written by `sectionmark.workflows.runner`;
* `files`: opening any file sectionmark reads: regular files only, never
  blocking on a FIFO, never reading past the size a file had when opened;
* `tools`: the IREE tools and the tracing runtime of the installed
  iree-base-runtime, running one in a process group of its own, and the one
  line that explains a tool's failure;
* `scratch`: a run's scratch folder, removed on any end (a signal included),
  and what a ``kill -9`` left removed by the next run.
"""

from sectionmark.artifacts.files import open_regular, read_regular
from sectionmark.artifacts.modules import module_bytes_and_map, read_section_map, sidecar_path
from sectionmark.artifacts.tools import exit_description, find_tool, last_useful_line, tracing_runtime_library

__all__ = [
    "exit_description",
    "find_tool",
    "last_useful_line",
    "module_bytes_and_map",
    "open_regular",
    "read_regular",
    "read_section_map",
    "sidecar_path",
    "tracing_runtime_library",
]
