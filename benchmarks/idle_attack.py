"""Clients that only hold connections, for ``benchmarks/reliability.py --only idle`` (issue
#55): ``idle`` connections that never send a byte, and ``kept`` ones that send one request every
``every_s`` on a kept-alive connection. Each reconnects a second after the server closes it,
as an attacker would. All run in a process of their own (one selector; in the measuring
process they would slow the measurement down), from loopback addresses of their own
(``127.0.<block>.<n>``, a few to an address) so that the server's per-address cap is not what
saves the page: its reserve and its idle deadline are.

While they hold, :func:`page_times` opens the dashboard as a new visitor would (the page and
its layout, each on a new connection from 127.0.0.1) and times it."""

from __future__ import annotations

import errno
import multiprocessing
import selectors
import socket
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

HEALTH = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
RECONNECT_S = 1.0


@dataclass
class _Client:
    source: str
    kept: bool
    sock: socket.socket | None = None
    next_send: float = 0.0
    reconnect_at: float = 0.0


@dataclass
class Attack:
    """``idle`` + ``kept`` clients against ``port`` until :meth:`stop`."""

    port: int
    idle: int
    kept: int
    every_s: float = 30.0
    per_address: int = 5
    _ctx: Any = field(default_factory=lambda: multiprocessing.get_context("fork"))
    _closed: Any = None  # a shared counter: connections the server closed
    _stop: Any = None
    _proc: Any = None

    def start(self) -> None:
        self._closed, self._stop = self._ctx.Value("q", 0), self._ctx.Event()
        self._proc = self._ctx.Process(target=self._run, name="idle-attack", daemon=True)
        self._proc.start()

    def stop(self) -> None:
        self._stop.set()
        self._proc.join(timeout=30)
        if self._proc.exitcode is None:
            self._proc.kill()

    @property
    def closed_by_server(self) -> int:
        return int(self._closed.value)

    def _clients(self) -> list[_Client]:
        out = []
        for i in range(self.idle + self.kept):
            block, n = divmod(i // self.per_address, 250)
            out.append(_Client(f"127.0.{10 + block}.{1 + n}", kept=i >= self.idle))
        return out

    def _connect(self, sel: selectors.BaseSelector, c: _Client, now: float) -> None:
        s = socket.socket()
        s.setblocking(False)
        s.bind((c.source, 0))
        if s.connect_ex(("127.0.0.1", self.port)) not in (0, errno.EINPROGRESS):
            s.close()
            c.reconnect_at = now + RECONNECT_S
            return
        c.sock, c.next_send = s, now + (self.every_s if c.kept else float("inf"))
        sel.register(s, selectors.EVENT_READ, c)

    def _drop(self, sel: selectors.BaseSelector, c: _Client, now: float) -> None:
        assert c.sock is not None
        sel.unregister(c.sock)
        c.sock.close()
        c.sock, c.reconnect_at = None, now + RECONNECT_S
        with self._closed.get_lock():
            self._closed.value += 1

    def _run(self) -> None:
        clients = self._clients()
        tick = 0.0
        with selectors.DefaultSelector() as sel:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.1):
                    self._read(sel, key.data, time.monotonic())
                now = time.monotonic()
                if now < tick:
                    continue
                tick = now + 0.1  # timers: reconnects and requests, ten times a second
                for c in clients:
                    if c.sock is None and now >= c.reconnect_at:
                        self._connect(sel, c, now)
                    elif c.sock is not None and now >= c.next_send:
                        c.next_send = now + self.every_s
                        try:
                            c.sock.send(HEALTH)
                        except OSError:
                            self._drop(sel, c, now)
            for c in clients:
                if c.sock is not None:
                    c.sock.close()

    def _read(self, sel: selectors.BaseSelector, c: _Client, now: float) -> None:
        assert c.sock is not None
        try:
            data = c.sock.recv(65536)  # an answer to a kept client's request: read, dropped
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sel, c, now)

    def held(self) -> int:
        """Connections the server holds open for the attack now (read from /proc)."""
        want = f"{self.port:04X}"
        held = 0
        with open("/proc/net/tcp") as fh:
            for line in fh.readlines()[1:]:
                local, remote, state = line.split()[1:4]
                # the client's end, ESTABLISHED (01), from the attack's 127.0.10+.x (the
                # address is little-endian hex: "010A007F" is 127.0.10.1)
                if state == "01" and remote.endswith(":" + want) and int(local[2:4], 16) >= 10:
                    held += 1
        return held


def page_times(url: str, seconds: float, pause_s: float = 0.5) -> list[float]:
    """Seconds to fetch the page and its layout (new connections), again for ``seconds``;
    a fetch that fails or takes over 30 s counts as 30 s (the target is 2 s)."""
    times = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            for path in ("/", "/_dash-layout"):
                with urllib.request.urlopen(url + path, timeout=30) as r:
                    r.read()
            times.append(time.monotonic() - t0)
        except OSError:
            times.append(30.0)
        time.sleep(pause_s)
    return times
