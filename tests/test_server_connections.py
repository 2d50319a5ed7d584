"""Clients that hold connections, and clients that ask before they send, against the real
``serve`` over raw sockets (and real curl): idle and slow clients cannot keep a page from being
answered, one address cannot hold more than its share, and a body announced with
``Expect: 100-continue`` over the endpoint's limit is refused in JSON before it is sent."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from app import connections
from tests.conftest import Server, start_server

OPERATOR = "operator-token-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("conns")
    (tmp / "op").write_text(OPERATOR + "\n")
    args = ["serve", "--store", str(tmp / "s.duckdb"), "--accept-ingest"]
    srv = start_server([*args, "--operator-token-file", str(tmp / "op")], tmp / "serve.log")
    yield srv
    srv.stop()


def _port(srv: Server) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def _open(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _closed(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (an answer or nothing to read means it did not)."""
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _page_s(srv: Server) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(srv.url + "/", timeout=10) as r:
        assert r.status == 200 and b"<html" in r.read().lower()
    return time.monotonic() - t0


def _health(port: int, source: str) -> socket.socket:
    """A kept-alive connection that has been answered once and then says nothing."""
    s = _open(port, source)
    s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(4096)
    head, body = got.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 200") and len(body) == length, got
    return s


def test_idle_clients_leave_room_for_a_page(server: Server) -> None:
    """600 connections that send nothing (6 from each of 100 loopback addresses) and 40
    kept-alive ones that were answered once: with waitress's cap reached (200 before), a
    page waited until an idle connection timed out (60 s). Now the idlest make room, and one
    address keeps at most ``PER_ADDRESS``: its oldest connections are the ones closed."""
    port = _port(server)
    with ExitStack() as stack:
        # From an address of their own (the fixture's first page may still count for
        # 127.0.0.1), idle for longer than a just-opened connection is spared.
        own = [
            stack.enter_context(_open(port, "127.0.4.1")) for _ in range(connections.PER_ADDRESS)
        ]
        time.sleep(connections.GRACE_S + 0.5)
        own += [stack.enter_context(_open(port, "127.0.4.1")) for _ in range(8)]
        time.sleep(0.5)
        assert [_closed(s) for s in own] == [True] * 8 + [False] * connections.PER_ADDRESS
        for i in range(600):
            stack.enter_context(_open(port, f"127.0.1.{1 + i // 6}"))
        for i in range(40):
            stack.enter_context(_health(port, f"127.0.2.{1 + i}"))
        times = [_page_s(server) for _ in range(5)]
        assert max(times) < 2.0, times


def test_a_burst_from_one_address_is_answered_whole(server: Server) -> None:
    """150 requests from one address, each on a new connection opened before any is sent (a
    proxy or a load test): the per-address cap spares connections just opened, so every one is
    answered (closing the idlest at once answered 32)."""
    port = _port(server)
    with ExitStack() as stack:
        socks = [stack.enter_context(_open(port, "127.0.5.1")) for _ in range(150)]
        for s in socks:
            s.sendall(
                b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
        heads = []
        for s in socks:
            s.settimeout(20)
            try:
                heads.append(s.recv(12))
            except OSError as exc:
                heads.append(repr(exc).encode())
    assert heads == [b"HTTP/1.1 200"] * 150, sorted(set(heads))


def test_a_kept_alive_connection_is_closed_when_idle(server: Server) -> None:
    """A client answered once and then silent is closed after ``IDLE_S`` (20 s; the pages
    refresh every 10 s, so a live tab's connections are not idle that long), not 60 s."""
    with _health(_port(server), "127.0.3.1") as s:
        t0 = time.monotonic()
        s.settimeout(connections.IDLE_S + 15)
        try:
            assert s.recv(1) == b""
        except TimeoutError:
            pytest.fail(f"still open after {time.monotonic() - t0:.0f} s idle")
        assert connections.IDLE_S - 1 < time.monotonic() - t0 < connections.IDLE_S + 10


def _ask(port: int, head: bytes) -> bytes:
    """Send ``head`` (ending in Expect: 100-continue) and no body; all the server says until
    it closes (or 10 s pass)."""
    got = b""
    with _open(port) as s:
        s.sendall(head)
        s.settimeout(10)
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            pass
    return got


def test_an_oversized_body_announced_with_expect_is_refused_in_json(server: Server) -> None:
    """The server sent "100 Continue", then read the body as the next headers: 431 in plain
    text for a 2 MB body, nothing at all for a 20 KB one. Now 413 in JSON, no "100 Continue",
    and the connection closed (the body that may follow is not read)."""
    port = _port(server)
    for path, size, extra in (
        ("/_dash-update-component", 2_000_000, b"Content-Type: application/json\r\n"),
        ("/api/v1/interruptions/label", 20_000, f"X-Operator-Token: {OPERATOR}\r\n".encode()),
    ):
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n"
                "Expect: 100-continue\r\n").encode() + extra + b"\r\n"  # fmt: skip
        got = _ask(port, head)
        assert got.startswith(b"HTTP/1.1 413"), (path, got[:200])
        assert b"100 Continue" not in got and b"application/json" in got
        assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"], got


def test_curl_posting_an_oversized_body_gets_413_in_json(server: Server, tmp_path: Path) -> None:
    """curl sends ``Expect: 100-continue`` on its own for a body over 1 MB (the 2 MB one);
    the 20 KB one asks for it as a client may."""
    for path, size, headers in (
        ("/api/v1/interruptions/label", 20_000,
         [f"X-Operator-Token: {OPERATOR}", "Expect: 100-continue"]),
        ("/_dash-update-component", 2_000_000, ["Content-Type: application/json"]),
    ):  # fmt: skip
        body = tmp_path / "body"
        body.write_bytes(b"a" * size)
        out = subprocess.run(
            ["curl", "-sS", "-m", "20", "-v", *(a for h in headers for a in ("-H", h)),
             "--data-binary", f"@{body}", "-w", "\n%{http_code}", server.url + path],  # fmt: skip
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert "Expect: 100-continue" in out.stderr, out.stderr  # curl did ask
        text, code = out.stdout.rsplit("\n", 1)
        assert code == "413" and json.loads(text)["error"], (path, out.stdout, out.stderr[-500:])
