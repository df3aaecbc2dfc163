"""Headless Chromium for the tests of pages we write: load a file, get its DOM after the scripts ran and what
its console said. Debian's ``chromium`` (installed by .ci/run); tests skip with one reason line without it."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
MISSING = f"needs Chromium at {CHROMIUM} (apt-get install chromium)"
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_CONSOLE = re.compile(r":CONSOLE[:(]")  # Chromium's --enable-logging=stderr lines for console messages


def available() -> bool:
    return os.path.exists(CHROMIUM)


def require_chromium() -> None:
    if not available():
        pytest.skip(MISSING)


@dataclass
class LoadedPage:
    dom: str  # the document serialised after its scripts ran (--dump-dom)
    console: list[str]  # console messages (errors, CSP violations, uncaught exceptions)


def load(page: Path, fragment: str = "", timeout: float = 120.0) -> LoadedPage:
    """Load ``page`` (with ``#fragment``) in a fresh headless Chromium profile; its DOM and console messages."""
    profile = page.with_name(page.name + f".chromium{abs(hash(fragment))}")
    uri = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000", "--dump-dom", uri],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0 and "<" in done.stdout, done.stderr[-2000:]
    return LoadedPage(done.stdout, [line for line in done.stderr.splitlines() if _CONSOLE.search(line)])


@dataclass
class Element:
    tag: str
    attributes: dict[str, str]
    text: str = ""  # the text directly inside (for leaf elements such as <td>, <title>)


def elements(dom: str) -> list[Element]:
    """Every element of a serialised DOM in document order, with its attributes and its own text."""

    class Collector(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.found: list[Element] = []
            self.open: list[Element] = []

        def handle_starttag(self, tag, attrs):
            element = Element(tag, {name: value or "" for name, value in attrs})
            self.found.append(element)
            if tag not in _VOID:
                self.open.append(element)

        def handle_endtag(self, tag):
            while self.open and self.open.pop().tag != tag:
                pass

        def handle_data(self, data):
            if self.open:
                self.open[-1].text += data

    collector = Collector()
    collector.feed(dom)
    return collector.found
