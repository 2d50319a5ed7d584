"""The server as a hostile or careless client meets it, over real sockets: a production WSGI
server whose workers slow clients cannot hold, requests cut off when they take too long to
arrive, a Host header that must name this server (DNS rebinding), oversized headers answered in
JSON, and input the ingest API must refuse with a reason."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from telemetry import env
from telemetry.ingest.remote_write import encode
from telemetry.store import Store
from tests.conftest import Server, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

RW = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}


def call(
    srv: Server, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(
        srv.url + path, body, headers or {}, method="POST" if body is not None else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def rw_body(host: str, ago_s: float = 600) -> bytes:
    ts = int(datetime.now(UTC).timestamp() * 1000 - ago_s * 1000)
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": host,
              "instance": "n1:9400", "job": "dcgm"}  # fmt: skip
    return encode([(labels, [(50.0, ts)])])


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setenv(env.REQUEST_READ_S, "8")
    srv = start_server(
        ["serve", "--store", str(tmp_path / "s.duckdb"), "--accept-ingest",
         "--allowed-host", "dash.example.org"],  # fmt: skip
        tmp_path / "serve.log",
    )
    yield srv
    srv.stop()


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _dribble(port: int, head: bytes, stop: threading.Event, out: list[bytes]) -> None:
    """Send ``head`` a byte at a time, one a second, until ``stop``; keep what comes back."""
    _dribble_on(socket.create_connection(("127.0.0.1", port), timeout=60), head, stop, out)


def test_slow_clients_hold_no_worker_and_are_cut_off(server: Server) -> None:
    """Eight clients sending a remote_write body at a byte a second, and forty sending their
    headers so: a real post is still stored at once (Werkzeug's server gave each a thread and
    answered real posts 429), the server's threads do not grow with them, and each is cut off
    once its request has taken longer than the read limit (8 s here) to arrive."""
    port = int(server.url.rsplit(":", 1)[1])
    pid = server.proc.pid
    before = _threads(pid)
    stop = threading.Event()
    outs: list[list[bytes]] = []
    body_head = (
        b"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf"
        b"\r\nContent-Encoding: snappy\r\nContent-Length: 5000\r\n\r\n"
    )
    drippers = []
    for i in range(48):
        out: list[bytes] = []
        outs.append(out)
        if i < 8:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(body_head)  # headers whole, then the body a byte a second
            head = b"x" * 5000
            t = threading.Thread(target=_dribble_on, args=(s, head, stop, out), daemon=True)
        else:
            head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"y" * 5000
            t = threading.Thread(target=_dribble, args=(port, head, stop, out), daemon=True)
        t.start()
        drippers.append(t)
    try:
        time.sleep(2)
        t0 = time.monotonic()
        status, _, reply = call(server, "/api/v1/write", rw_body("n1"), RW)
        assert status == 200 and json.loads(reply)["samples"] == 1, reply
        assert time.monotonic() - t0 < 5
        assert _threads(pid) <= before + 2, (before, _threads(pid))
        deadline = time.monotonic() + 30  # read limit 8 s, looked for every 5 s
        while time.monotonic() < deadline and not all(outs):
            time.sleep(0.5)
        assert all(outs), f"{sum(not o for o in outs)} slow clients still connected"
    finally:
        stop.set()
    assert call(server, "/api/v1/health")[0] == 200


def _dribble_on(s: socket.socket, rest: bytes, stop: threading.Event, out: list[bytes]) -> None:
    with s:
        s.settimeout(0.05)
        for i in range(len(rest)):
            if stop.is_set():
                return
            try:
                s.sendall(rest[i : i + 1])
                got = s.recv(4096)
            except TimeoutError:
                stop.wait(1.0)
                continue
            except OSError:
                out.append(b"<closed>")
                return
            out.append(got or b"<closed>")
            return


def test_served_by_a_production_server(server: Server) -> None:
    status, headers, _ = call(server, "/")
    assert status == 200
    assert "werkzeug" not in headers.get("Server", "").lower()
    assert headers.get("Server") == "factoryfloor"  # waitress, as app.wsgi configures it


def test_a_foreign_host_name_is_refused(server: Server, tmp_path: Path) -> None:
    """DNS rebinding: a page on evil.example re-resolved to 127.0.0.1 sends Host: evil.example.
    With no token (the loopback default) it used to be served and its records stored."""
    record = json.dumps({"run": "rebound", "step": 1, "loss": 2.0}).encode()
    headers = {"Content-Type": "application/json", "Host": "evil.example"}
    status, _, reply = call(server, "/api/v1/metrics", record, headers)
    assert status == 421 and "--allowed-host" in json.loads(reply)["error"]
    status, _, _ = call(server, "/", headers={"Host": "evil.example:8050"})
    assert status == 421
    for host in ("127.0.0.1", "localhost", "dash.example.org", "[::1]:8050"):
        assert call(server, "/api/v1/health", headers={"Host": host})[0] == 200, host
    server.stop()
    with Store(str(tmp_path / "s.duckdb"), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM runs WHERE run_id = 'rebound'") == 0


def test_hostile_input_is_refused_with_a_reason(server: Server) -> None:
    """A 200 KB header (JSON, not an HTML page), a 5,000-digit integer (400, not 500),
    bidirectional overrides in run ids and hostnames, and CR, LF and NUL in remote_write
    hostnames."""
    status, headers, reply = call(server, "/api/v1/health", headers={"X-Big": "a" * 200_000})
    assert status == 431 and headers["Content-Type"].startswith("application/json")
    assert "headers" in json.loads(reply)["error"]
    json_h = {"Content-Type": "application/json"}
    status, _, reply = call(server, "/api/v1/metrics", b'{"run": "r", "step": ' + b"9" * 5000
                            + b', "loss": 1.0}', json_h)  # fmt: skip
    assert status == 400 and "digits" in json.loads(reply)["error"]
    for record, endpoint in (
        ({"run": "run-\u202egnp.exe", "step": 1, "loss": 1.0}, "/api/v1/metrics"),
        ({"run": "r", "ts": "2026-11-01T00:00:00Z", "host": "node\u2066-7",
          "component": "gpu"}, "/api/v1/interruptions"),  # fmt: skip
    ):
        status, _, reply = call(server, endpoint, json.dumps(record).encode(), json_h)
        assert status == 422, reply
        assert "bidirectional" in json.loads(reply)["rejected"][0]["reason"]
    for bad in ("n1\r\nX-Injected: 1", "n1\nn2", "n1\x00"):
        status, _, reply = call(server, "/api/v1/write", rw_body(bad), RW)
        assert status == 400 and "control" in json.loads(reply)["error"], (bad, reply)


def test_a_request_over_the_series_cap_is_refused_whole(server: Server) -> None:
    """One request of 1.45 M series once cost 55 s of CPU and 2.3 GB: a request over the cap
    (50,000 series; Prometheus sends 2,000 samples a request) is refused with 413 and why, and
    the server goes on storing."""
    ts = int(datetime.now(UTC).timestamp() * 1000) - 60_000
    many = [
        ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": str(i % 8), "Hostname": f"n{i // 8}",
          "instance": f"n{i // 8}:9400", "job": "dcgm"}, [(40.0, ts)])  # fmt: skip
        for i in range(50_001)
    ]
    status, _, reply = call(server, "/api/v1/write", encode(many), RW)
    assert status == 413 and "50,001 series" in json.loads(reply)["error"], reply
    assert call(server, "/api/v1/write", rw_body("n1"), RW)[0] == 200
