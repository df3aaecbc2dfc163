"""Every Python example of README.md and docs/*.md runs as it is written, or says why not.

A ```python block runs in one namespace per page, the page's blocks in order (a later block uses what an
earlier one made), in a temporary folder of its own (files the examples write land there; the
repository's examples/ is linked in, as the docs are run from the repository's root), with the
peak cache in that folder too. A block that cannot run here is marked by an HTML comment on the line
right before its fence, ``<!-- not run: REASON -->``, with the reason (needs a GPU, a fragment of a
function, ...); it must still parse as Python unless its reason says it is a fragment. So a rename
that breaks a documented spelling fails here, not in a user's script.

Each block is one test, named ``page:line`` (the line of its fence):
``tests/entry/test_docs_examples.py::test_example[docs/quickstart.md:21]``, or ``-k quickstart`` for a page.
Selecting a later block of a page runs the page's earlier blocks first.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*$")
PYTHON = {"python", "py"}
MARK = re.compile(r"^<!--\s*not run\b(.*)-->\s*$")
REASON = re.compile(r"^:\s*(\S.*?)\s*$")
FRAGMENT = "a fragment"
# Pages whose examples take long, marked slow (``-m "not slow"`` leaves them out), with their time on the
# 2-core development machine.
SLOW_PAGES = {"huggingface.md": "a Llama and its KV-cache twin exported and compiled: 80 s"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    mark: Optional[str]  # the text after "not run" in the comment before the fence; None: the block runs

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def reason(self) -> Optional[str]:
        found = REASON.match(self.mark or "")
        return found.group(1) if found else None


def python_blocks(page: Path) -> list[Block]:
    """The fenced Python blocks of ``page``, each with the ``not run`` mark on the line before its fence."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next((at for at in range(index + 1, len(lines)) if lines[at].startswith("```")), len(lines))
        if opening.group(1) in PYTHON:
            before = MARK.match(lines[index - 1].strip()) if index else None
            blocks.append(Block(page, index + 1, "\n".join(lines[index + 1:end]) + "\n",
                                before.group(1) if before else None))
        index = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in python_blocks(page)]


class Page:
    """One page's namespace and folder, and how far its blocks have run."""

    def __init__(self, page: Path, folder: Path):
        self.folder = folder
        (folder / "examples").symlink_to(ROOT / "examples")  # the docs run from the repository's root
        # A module of its own in sys.modules: torch.export looks up the module of a class the example defines.
        self.module = types.ModuleType(f"docs_example_{re.sub(r'[^A-Za-z0-9]', '_', page.stem)}")
        sys.modules[self.module.__name__] = self.module
        self.namespace: dict = self.module.__dict__
        self.ran = 0  # blocks of the page run (or passed over: not run)
        self.failed: Optional[str] = None


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    found = {page: Page(page, tmp_path_factory.mktemp(page.stem)) for page in PAGES}
    yield found
    for page in found.values():
        sys.modules.pop(page.module.__name__, None)


def run_block(page: Page, block: Block, monkeypatch) -> None:
    monkeypatch.chdir(page.folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(page.folder / "cache"))  # sm.peak's cache, never the user's
    try:
        exec(compile(block.code, block.name, "exec"), page.namespace)
    except BaseException as error:
        page.failed = f"{block.name}: {type(error).__name__}: {error}"
        raise


def test_every_page_with_python_is_found():
    names = {block.page.name for block in BLOCKS}
    assert {"README.md", "quickstart.md", "optimise.md", "slice.md"} <= names


@pytest.mark.parametrize("block", [
    pytest.param(block, id=block.name, marks=[pytest.mark.slow] if block.page.name in SLOW_PAGES else [])
    for block in BLOCKS])
def test_example(block: Block, pages, monkeypatch):
    if block.mark is not None:
        assert block.reason, f"{block.name}: `<!-- not run -->` must say why: `<!-- not run: REASON -->`"
        if not block.reason.startswith(FRAGMENT):
            ast.parse(block.code, block.name)
        pytest.skip(f"not run: {block.reason}")
    page = pages[block.page]
    own = [other for other in BLOCKS if other.page == block.page]
    position = own.index(block)
    for earlier in own[page.ran:position]:  # a block selected alone: the page's earlier blocks first
        if earlier.mark is None and page.failed is None:
            run_block(page, earlier, monkeypatch)
    page.ran = max(page.ran, position)
    if page.failed is not None:
        pytest.fail(f"an earlier block of the page failed: {page.failed}", pytrace=False)
    run_block(page, block, monkeypatch)
    page.ran = position + 1


def test_the_marks_are_read(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- not run: needs a GPU -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
                    "<!-- not run -->\n```python\nz\n```\n```bash\nls\n```\n", encoding="utf-8")
    first, second, third = python_blocks(page)
    assert (first.line, first.code, first.reason) == (3, "x = 1\n", "needs a GPU")
    assert (second.line, second.mark) == (7, None)
    assert third.mark == " " and third.reason is None
