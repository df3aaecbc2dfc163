"""The sections a program enters, recorded by running it, without any of sectionmark's readers.

A marked module (``mark``) or a ``with sm.section(name):`` in model code pushes
its name on a stack while it runs; every stack seen is an expected path, so
nesting comes from the calls the program really makes (a T5 embedding called
by the encoder and by the decoder is two paths), parents included.
``record_sections`` runs the program once eagerly (torch) or traces it
(``jax.eval_shape``) with ``sectionmark.section`` wrapped by a recorder: what is
expected comes from the recorder's stack, never from sectionmark's readers.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator, Optional

import torch

import sectionmark as sm

Path = tuple[str, ...]


class Recorder:
    def __init__(self) -> None:
        self.stack: list[str] = []
        self.paths: dict[Path, None] = {}  # in the order first entered

    @contextlib.contextmanager
    def enter(self, name: str) -> Iterator[None]:
        self.stack.append(name)
        self.paths.setdefault(tuple(self.stack), None)
        try:
            yield
        finally:
            self.stack.pop()


_active: Optional[Recorder] = None


def mark(module: torch.nn.Module, name: str) -> None:
    """Make every call of ``module`` the section ``name`` (this instance only), as tests/helpers/hf_models.py does,
    and tell an active recorder when the section is entered."""
    forward = sm.section(name)(module.forward)

    @functools.wraps(module.forward)
    def recorded(*args, **kwargs):
        if _active is None:
            return forward(*args, **kwargs)
        with _active.enter(name):
            return forward(*args, **kwargs)

    module.forward = recorded


def mark_by_spec(model: torch.nn.Module, spec: list[tuple[str, str]]) -> None:
    """``spec``: (submodule path as ``get_submodule`` spells it, section name), in any order."""
    for path, name in spec:
        mark(model.get_submodule(path), name)


def record_sections(run: Callable[[], object]) -> list[Path]:
    """The paths ``run()`` enters: marked modules and ``sm.section(...)`` blocks, parents before children."""
    global _active
    recorder = Recorder()
    original = sm.section

    @contextlib.contextmanager
    def section(name: str, *args, **kwargs) -> Iterator[None]:
        # The real section too: JAX caches traces (nnx.scan's body), so the program must trace as it always does.
        with recorder.enter(name), original(name, *args, **kwargs):
            yield

    _active, sm.section = recorder, section
    try:
        run()
    finally:
        _active, sm.section = None, original
    return list(recorder.paths)


def backward(path: Path) -> Path:
    """The path of a section's backward ops: " (backward)" after every name."""
    return tuple(f"{name} (backward)" for name in path)


def recompute(path: Path, depth: int) -> Path:
    """The path of forward ops that a remat (checkpoint) scope at ``depth`` recomputes in the backward pass:
    the enclosing sections are in their backward, the sections inside the scope " (recompute)"."""
    return backward(path[:depth]) + tuple(f"{name} (recompute)" for name in path[depth:])
