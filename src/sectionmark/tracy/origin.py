"""A capture whose time 0 is the end of the Tracy client's start-up instead of its beginning.

Tracy's client starts when its library loads: `Profiler::Profiler` first
calibrates its timer (`CalibrateTimer` sleeps 200 ms, `CalibrateDelay` times
100,000 reads), and only then can anything be sent. At each connection it
tells the capture both ends of that start-up in its welcome message:
``initBegin`` (`GetInitTime()`, the timer set up before the calibration) and
``initEnd`` (``m_timeBegin``, after it). The capture's time 0 is ``initBegin``
(`Worker::Exec`: ``m_data.baseTime = welcome.initBegin``, every time is stored
relative to it, the first frame "Tracy init" runs from 0 to ``initEnd``), and
the GUI opens a saved capture on ``[GetFirstTime(), GetLastTime()]``
(`View::View` of a file: ``m_vd.zvStart``/``zvEnd``; `GetFirstTime` is 0 unless
the client was built on-demand). A short program's events therefore sit in
the last few percent of the first view, after 200 ms of nothing.

`OriginRelay` sits between the capture tool and the client and forwards the
connection both ways byte for byte, except the welcome's ``initBegin``, which
it sets to ``initEnd``: the capture's time 0 becomes the end of the start-up.
Every time in the capture (CPU zones, GPU zones and their CPU-side times,
GPU contexts' anchors, messages, plots, frames) moves by that one constant, so
every difference and delay stays exact; the "Tracy init" frame is 0 ns long.
The client sends nothing timed before ``initEnd`` (its worker waits for it;
the calibration's own zones are dropped), so no time becomes negative.
Struct layout: `WelcomeMessage` in Tracy's `public/common/TracyProtocol.hpp`
(protocol 72, packed).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Optional

__all__ = ["OriginRelay", "startup_end_origin"]

_HANDSHAKE_WELCOME = 1  # HandshakeStatus::HandshakeWelcome
# WelcomeMessage: double timerMul; int64 initBegin, initEnd; u64 delay, resolution, epoch, exectime, pid;
# int64 samplingPeriod; u8 flags, cpuArch; char cpuManufacturer[12]; u32 cpuId; char programName[64], hostInfo[1024].
_WELCOME_SIZE = 8 * 9 + 1 + 1 + 12 + 4 + 64 + 1024
_INIT_BEGIN_OFFSET = 8
_INIT_END_OFFSET = 16
_RETRY_S = 0.01  # as the capture tool retries its connection
_CHUNK = 1 << 20


def startup_end_origin(handshake_and_welcome: bytes) -> bytes:
    """The client's handshake byte and welcome message with ``initBegin`` set to ``initEnd``; anything other
    than a welcome (a refused handshake) unchanged."""
    if len(handshake_and_welcome) != 1 + _WELCOME_SIZE or handshake_and_welcome[0] != _HANDSHAKE_WELCOME:
        return handshake_and_welcome
    welcome = bytearray(handshake_and_welcome[1:])
    init_end = welcome[_INIT_END_OFFSET:_INIT_END_OFFSET + 8]
    welcome[_INIT_BEGIN_OFFSET:_INIT_BEGIN_OFFSET + 8] = init_end
    return handshake_and_welcome[:1] + bytes(welcome)


class OriginRelay:
    """Listens on a free localhost port (``port``, the capture tool's) and relays its one connection to the client
    listening on ``client_port`` once it does, with the capture's time origin moved (module docstring).

    Runs on daemon threads; `close` (or leaving it as a context manager) ends it.
    """

    def __init__(self, client_port: int):
        self._client_port = client_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._serve, name="sectionmark tracy relay", daemon=True).start()

    def __enter__(self) -> "OriginRelay":
        return self

    def __exit__(self, *_exception) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            for sock in self._sockets:
                _shut(sock)  # wakes the thread blocked in its accept or recv
                sock.close()

    def _keep(self, sock: socket.socket) -> bool:
        """Hold ``sock`` for `close`; False (and closed) when the relay was closed already."""
        with self._lock:
            if self._closed.is_set():
                sock.close()
                return False
            self._sockets.append(sock)
            return True

    def _connect_client(self) -> Optional[socket.socket]:
        while not self._closed.is_set():
            try:
                return socket.create_connection(("127.0.0.1", self._client_port))
            except OSError:
                time.sleep(_RETRY_S)
        return None

    def _serve(self) -> None:
        try:
            capture, _address = self._listener.accept()
        except OSError:  # closed before the capture tool connected
            return
        if not self._keep(capture):
            return
        client = self._connect_client()
        if client is None or not self._keep(client):
            return
        threading.Thread(target=self._forward, args=(capture, client), name="sectionmark tracy relay queries",
                         daemon=True).start()
        start = self._read_exactly(client, 1 + _WELCOME_SIZE)
        try:
            capture.sendall(startup_end_origin(start))
        except OSError:
            return
        self._forward(client, capture)

    @staticmethod
    def _read_exactly(sock: socket.socket, size: int) -> bytes:
        """Up to ``size`` bytes: fewer when the client closes first (a refused handshake is one byte)."""
        data = bytearray()
        while len(data) < size:
            try:
                chunk = sock.recv(size - len(data))
            except OSError:
                break
            if not chunk:
                break
            data += chunk
            if data[0] != _HANDSHAKE_WELCOME:
                break
        return bytes(data)

    @staticmethod
    def _forward(source: socket.socket, target: socket.socket) -> None:
        """Everything from ``source`` to ``target`` until either side closes; then the other direction ends too."""
        try:
            while chunk := source.recv(_CHUNK):
                target.sendall(chunk)
        except OSError:
            pass
        _shut(source)
        _shut(target)


def _shut(sock: socket.socket) -> None:
    """End both directions of ``sock`` (already ended or closed: nothing to do)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
