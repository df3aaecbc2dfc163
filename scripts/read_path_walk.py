"""Follow a compiled program through `sm.profile` (or a profile file through `sm.report`) to its session.

Prints, in call order, every sectionmark module entered by a call that is
passed the program or anything made of it (a call counts when one of its
arguments is the object followed, or was returned by a call that counted, or
is an attribute of one), and the calls that climb from a lower stage of the
data flow back up into a higher one (stages as tests/entry/test_import_graph.py
orders them). Issue D's measure of how far a newcomer has to read.

Usage: python scripts/read_path_walk.py [profile|report]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "entry"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from test_import_graph import STAGES, stage as stage_of  # noqa: E402  (the import test's stages: one definition)
from tiny_profiles import TWO_MATMULS, hand_map  # noqa: E402

import sectionmark as sm  # noqa: E402


class Walk:
    """A profile hook noting the modules and climbs of the calls that carry the followed objects."""

    def __init__(self, followed: Any):
        self.carried: set[int] = set()
        self.paths: set[str] = set()  # file names followed: a Path made again from one is the same file
        self.keep: list[Any] = []  # the carried objects stay alive: their ids are not reused
        self.follow(followed)
        self.modules: list[str] = []
        self.climbs: list[tuple[str, str]] = []
        self.counted: set[int] = set()  # frames whose call counted

    def __call__(self, frame: FrameType, event: str, argument: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("sectionmark"):
            return
        if event == "call":
            code = frame.f_code
            values = [frame.f_locals.get(name) for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
            if not any(self._carries(value) for value in values):
                return
            self.counted.add(id(frame))
            if module not in self.modules:
                self.modules.append(module)
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            if caller.startswith("sectionmark") and _stage_index(module) > _stage_index(caller):
                self.climbs.append((f"{caller}.{frame.f_back.f_code.co_name}", f"{module}.{code.co_name}"))
        elif event == "return" and id(frame) in self.counted:
            self.counted.discard(id(frame))
            self.follow(argument)

    def follow(self, value: Any) -> None:
        """Carry ``value`` and what it is made of one level down: its attributes, or its items (a dict's values)."""
        if isinstance(value, (tuple, list)):
            members = list(value)
        else:
            members = list((value if isinstance(value, dict) else getattr(value, "__dict__", {})).values())
        for item in [value, *members]:
            if isinstance(item, Path):
                self.paths.add(str(item))
            if item is not None and not isinstance(item, (bool, int, float, str)) and id(item) not in self.carried:
                self.carried.add(id(item))
                self.keep.append(item)

    def _carries(self, value: Any) -> bool:
        return id(value) in self.carried or (isinstance(value, (str, Path)) and str(value) in self.paths)


def _stage_index(module: str) -> int:
    return STAGES.index(stage_of(module))


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "profile"
    rng = np.random.default_rng(0)
    inputs = [rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)]
    with tempfile.TemporaryDirectory() as scratch:
        compiled = sm.compile(TWO_MATMULS, target="llvm-cpu")
        kept = Path(scratch) / "run.ireeprof"
        sm.profile(compiled, inputs, iterations=3, warmup=1, section_map=hand_map(), keep_profile=kept,
                   quiet=True).close()
        followed: Any = compiled if what == "profile" else kept
        walk = Walk(followed)
        sys.setprofile(walk)
        try:
            if what == "profile":
                run = sm.profile(compiled, inputs, iterations=3, warmup=1, quiet=True)
            else:
                run = sm.report(kept, compiled.section_map, calls=4, warmup=1)
        finally:
            sys.setprofile(None)
        run.close()
    print(f"sm.{what}: {len(walk.modules)} modules entered, {len(walk.climbs)} calls from a lower stage up")
    for module in walk.modules:
        print(f"  {stage_of(module):<10} {module}")
    for caller, callee in walk.climbs:
        print(f"  climb: {caller} -> {callee}")


if __name__ == "__main__":
    main()
