"""The files of a recording saved by `Recording.save` (`sectionmark.workflows.record`), and telling one apart.

Apart from the recording's code so that ``sectionmark profile`` can tell a recording from a module, and name the
files no output may replace, without importing what records and replays (the runtime, the replay driver).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from sectionmark.section_map import sidecar_path

RECORDING_FILE = "recording.json"
MODEL_FILE = "model.vmfb"
DRIVER_FILE = "replay.vmfb"


def recording_files(directory: Union[str, Path]) -> list[Path]:
    """Every file of a saved recording: what profiling it reads, so what no output of that command may replace.

    The directory is the command's input, but its files are what an output
    path names (``--json REC/model.vmfb``).
    """
    directory = Path(directory)
    return [directory / RECORDING_FILE, directory / MODEL_FILE, sidecar_path(directory / MODEL_FILE),
            directory / DRIVER_FILE, *sorted((directory / "inputs").glob("*.npy"))]


def is_recording(path: Union[str, Path]) -> bool:
    """Whether ``path`` is a directory written by `Recording.save`."""
    return (Path(path) / RECORDING_FILE).is_file()
