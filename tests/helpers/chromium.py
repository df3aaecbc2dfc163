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


@dataclass
class FramedPage:
    """A page loaded through the DevTools protocol, every frame seen: what `load` cannot see inside an iframe."""

    frames: list[str]  # each frame's document serialised after its scripts ran (the top one first)
    console: list[str]  # console calls, uncaught exceptions and browser log entries (CSP, failed loads) of every frame
    fetched: list[str]  # URLs requested over the network (http, https, ws ...): not file:, data:, about: or blob:


def _onto_fds_3_and_4(read_end: int, write_end: int) -> None:
    """In the child: ``read_end`` as fd 3 and ``write_end`` as fd 4, by way of fds above both (either may be 3 or 4)."""
    import fcntl
    import os

    high_read, high_write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_end, write_end))
    os.dup2(high_read, 3)
    os.dup2(high_write, 4)


def load_frames(page: Path, settle: float = 3.0, timeout: float = 120.0) -> FramedPage:
    """Load ``page`` in headless Chromium driven over ``--remote-debugging-pipe`` (fds 3 and 4, NUL-terminated
    JSON): every frame's DOM after ``settle`` seconds, out-of-process frames included (attached as their own
    sessions), with the console messages and network requests of all of them."""
    import json
    import os
    import threading
    import time

    to_browser_read, to_browser = os.pipe()
    from_browser, from_browser_write = os.pipe()
    profile = page.with_name(page.name + ".cdp-profile")
    # Chromium reads commands on fd 3 and writes on fd 4: the pipes are placed there before it runs.
    process = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
         "--remote-debugging-pipe", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=False,  # pass_fds would close the fds 3 and 4 made in preexec_fn, which runs before the closing
        preexec_fn=lambda: _onto_fds_3_and_4(to_browser_read, from_browser_write))
    os.close(to_browser_read)
    os.close(from_browser_write)
    replies: dict[int, dict] = {}
    events: list[dict] = []
    arrived = threading.Condition()

    def read_messages():
        buffer = b""
        while chunk := os.read(from_browser, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            with arrived:
                for raw in messages:
                    message = json.loads(raw)
                    (replies.__setitem__(message["id"], message) if "id" in message else events.append(message))
                arrived.notify_all()

    threading.Thread(target=read_messages, daemon=True).start()
    counter = iter(range(1, 1 << 30))
    deadline = time.monotonic() + timeout

    def call(method: str, params: dict | None = None, session: str | None = None, gone: bool = False) -> dict:
        """The result of ``method``; ``gone``: an error reply (a context a navigation destroyed) gives {}."""
        number = next(counter)
        message = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(to_browser, json.dumps(message).encode() + b"\0")
        with arrived:  # a hang guard, not a measure: a browser that never answers ends the test
            if not arrived.wait_for(lambda: number in replies, timeout=max(deadline - time.monotonic(), 0.1)):
                raise TimeoutError(f"Chromium did not answer {method}")
        reply = replies.pop(number)
        if gone and "error" in reply:
            return {}
        assert "error" not in reply, (method, reply["error"])
        return reply["result"]

    def watch(session: str) -> None:
        for domain in ("Runtime", "Log", "Network", "Page"):
            call(f"{domain}.enable", session=session)
        call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
             session=session)
        call("Runtime.runIfWaitingForDebugger", session=session)

    try:
        target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
        top = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        watch(top)
        call("Page.navigate", {"url": page.resolve().as_uri()}, session=top)
        watched = {top}
        settled = time.monotonic() + settle
        while time.monotonic() < settled:  # frames out of process attach as they load: watch each
            with arrived:
                attached = [event["params"]["sessionId"] for event in events
                            if event.get("method") == "Target.attachedToTarget"]
            for session in attached:
                if session not in watched:
                    watched.add(session)
                    watch(session)
            time.sleep(0.1)
        with arrived:
            seen = list(events)
        contexts = [(event.get("sessionId"), event["params"]["context"]) for event in seen
                    if event.get("method") == "Runtime.executionContextCreated"]
        frames = []
        for session, context in contexts:
            if not context.get("auxData", {}).get("isDefault"):
                continue
            result = call("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                               "contextId": context["id"], "returnByValue": True},
                          session=session, gone=True)
            if result and "exceptionDetails" not in result:  # not a context destroyed by a navigation (about:blank's)
                frames.append(result["result"]["value"])
    finally:
        os.close(to_browser)
        process.kill()
        process.wait()
        os.close(from_browser)
    console = [json.dumps(event["params"])[:500] for event in seen if event.get("method") in (
        "Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")]
    fetched = [event["params"]["request"]["url"] for event in seen if event.get("method") == "Network.requestWillBeSent"
               and event["params"]["request"]["url"].split(":", 1)[0] not in ("file", "data", "about", "blob")]
    return FramedPage(frames, console, fetched)
