"""Exporters that misbehave in every way we know of, over real HTTP on 127.0.0.1: one round
over all of them ends within the timeout plus a little, the good targets are stored and every
bad one is down with a reason a person can act on."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from telemetry.collect.dcgm import scrape
from telemetry.collect.dcgm.scrape import MAX_BODY_BYTES, scrape_round
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Target
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES, cli, free_port

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

TIMEOUT_S = 1.0
HUGE_BYTES = 100 * 1024 * 1024
DEFAULT_TEXT = (DCGM_FIXTURES / "default_h100.txt").read_text()
LOGIN_PAGE = b"<!doctype html><html><body><form action=/login>Sign in</form></body></html>\n"


def _host_text(host: str) -> bytes:
    """The default fixture scrape as node ``host`` reports it."""
    return DEFAULT_TEXT.replace("dgx-h100-017", host).encode()


class FaultyExporter(http.server.BaseHTTPRequestHandler):
    """One route per fault. Every response closes its connection; a handler that dribbles
    stops when the client has gone (a failed write) or after ``GIVE_UP_S``."""

    protocol_version = "HTTP/1.1"  # chunked bodies need it
    GIVE_UP_S = 15.0
    huge_sent: dict[str, int] = {}  # route -> body bytes the server managed to send

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.close_connection = True
        route = self.ROUTES.get(self.path.split("?", 1)[0])
        if route is None:
            self._reply(404, b"no such page\n", "text/plain")
            return
        try:
            route(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scraper gave up on us, as it should

    # -- helpers ---------------------------------------------------------------------------
    def _head(self, status: int, ctype: str | None, **headers: str) -> None:
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.send_header("Connection", "close")
        self.end_headers()

    def _reply(self, status: int, body: bytes, ctype: str | None = "text/plain") -> None:
        self._head(status, ctype, Content_Length=str(len(body)))
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _for_a_while(self) -> Iterator[None]:
        end = time.monotonic() + self.GIVE_UP_S
        while time.monotonic() < end:
            yield

    # -- good ------------------------------------------------------------------------------
    def good(self) -> None:
        self._reply(200, _host_text("good-plain"), "text/plain; version=0.0.4; charset=utf-8")

    def good_chunked(self) -> None:
        body = _host_text("good-chunked")
        self._head(200, "text/plain; version=0.0.4", Transfer_Encoding="chunked")
        for i in range(0, len(body), 4096):
            self._chunk(body[i : i + 4096])
        self.wfile.write(b"0\r\n\r\n")

    def moved(self) -> None:
        self._head(302, None, Location="/good-redirected", Content_Length="0")

    def good_redirected(self) -> None:
        self._reply(200, _host_text("good-redirected"), "text/plain; version=0.0.4")

    # -- slow ------------------------------------------------------------------------------
    def dribble(self) -> None:  # a full Content-Length, one byte every 0.2 s
        body = _host_text("dribble")
        self._head(200, "text/plain", Content_Length=str(len(body)))
        for i, _ in zip(range(len(body)), self._for_a_while(), strict=False):
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
            time.sleep(0.2)

    def stall_chunked(self) -> None:  # headers at once, then a small chunk every 0.3 s
        self._head(200, "text/plain", Transfer_Encoding="chunked")
        for _ in self._for_a_while():
            self._chunk(b"# still here\n")
            time.sleep(0.3)

    def dribble_headers(self) -> None:  # the status line and headers, a byte at a time
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + b"X-Pad: a\r\n" * 1000
        for i, _ in zip(range(len(head)), self._for_a_while(), strict=False):
            self.wfile.write(head[i : i + 1])
            self.wfile.flush()
            time.sleep(0.1)

    # -- broken ----------------------------------------------------------------------------
    def error(self) -> None:
        self._reply(500, b"exporter crashed\n")

    def truncated(self) -> None:  # declares more than it sends
        body = _host_text("truncated")
        self._head(200, "text/plain", Content_Length=str(len(body)))
        self.wfile.write(body[: len(body) // 2])

    def truncated_chunked(self) -> None:  # chunks, then the connection closes mid-body
        self._head(200, "text/plain", Transfer_Encoding="chunked")
        self._chunk(_host_text("truncated-chunked")[:4096])

    def drop_mid_body(self) -> None:  # no Content-Length: the body ends where the socket does
        self._head(200, "text/plain")
        body = _host_text("drop-mid-body")
        self.wfile.write(body[: len(body) // 2 + 7])  # mid-line

    def drop(self) -> None:  # reads the request, then hangs up without a word
        self.connection.shutdown(socket.SHUT_RDWR)

    def huge(self) -> None:  # 100 MB, chunked, no declared length
        self._head(200, "text/plain", Transfer_Encoding="chunked")
        self._send_huge("huge", self._chunk)

    def huge_declared(self) -> None:  # 100 MB with an honest Content-Length
        self._head(200, "text/plain", Content_Length=str(HUGE_BYTES))
        self._send_huge("huge-declared", self.wfile.write)

    def _send_huge(self, name: str, write: Callable[[bytes], object]) -> None:
        line = b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="huge"} 40\n'
        block = line * (65536 // len(line))
        self.huge_sent[name] = 0
        while self.huge_sent[name] < HUGE_BYTES:
            write(block)
            self.huge_sent[name] += len(block)

    def garbage(self) -> None:
        self._reply(200, os.urandom(8192), "text/plain")

    def html(self) -> None:  # a proxy's login page where the exporter should be
        self._reply(200, LOGIN_PAGE, "text/html; charset=utf-8")

    def prose(self) -> None:  # text/plain, valid UTF-8, but not the exposition format
        self._reply(200, b"exporter starting up\nplease wait ...\n", "text/plain")

    def loop(self) -> None:
        self._head(301, None, Location="/loop-back", Content_Length="0")

    def loop_back(self) -> None:
        self._head(301, None, Location="/loop", Content_Length="0")

    ROUTES: dict[str, Callable[[FaultyExporter], None]] = {
        "/good": good,
        "/good-chunked": good_chunked,
        "/moved": moved,
        "/good-redirected": good_redirected,
        "/dribble": dribble,
        "/stall-chunked": stall_chunked,
        "/dribble-headers": dribble_headers,
        "/error": error,
        "/truncated": truncated,
        "/truncated-chunked": truncated_chunked,
        "/drop-mid-body": drop_mid_body,
        "/drop": drop,
        "/huge": huge,
        "/huge-declared": huge_declared,
        "/garbage": garbage,
        "/html": html,
        "/prose": prose,
        "/loop": loop,
        "/loop-back": loop_back,
    }


GOOD = ["/good", "/good-chunked", "/moved"]
# target -> words its error must contain (lower case)
BAD = {
    "/dribble": ["timed out", "body"],
    "/stall-chunked": ["timed out", "body"],
    "/dribble-headers": ["timed out", "response"],
    "/error": ["http 500"],
    "/truncated": ["truncated", "of"],
    "/truncated-chunked": ["truncated", "4,096 bytes"],
    "/drop-mid-body": ["truncated", "mid-line"],
    "/drop": ["closed", "before"],
    "/huge": ["larger than", f"{MAX_BODY_BYTES:,}"],
    "/huge-declared": ["larger than", "content-length"],
    "/garbage": ["not prometheus text", "utf-8"],
    "/html": ["not prometheus text", "content type text/html"],
    "/prose": ["no gpu samples", "2 lines rejected"],
    "/loop": ["redirect loop"],
    "/missing": ["http 404"],
    "hung": ["timed out", "response"],
    "refused": ["refused"],
    "dns": ["resolve", "no-such-exporter.invalid"],
}


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs when a round connects all at once


@pytest.fixture(scope="module")
def faulty() -> Iterator[dict[str, str]]:
    """Every fault as a target URL: routes of one ``FaultyExporter`` server, a socket that
    accepts connections but never answers, a port nobody listens on and a name that does not
    resolve (``.invalid`` is reserved for that, RFC 2606)."""
    server = Server(("127.0.0.1", 0), FaultyExporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hung = socket.create_server(("127.0.0.1", 0), backlog=16)  # the kernel completes the
    # handshake; nobody ever reads the request
    base = f"http://127.0.0.1:{server.server_address[1]}"
    urls = {p: base + p for p in [*GOOD, *BAD] if p.startswith("/")}
    urls["hung"] = f"http://127.0.0.1:{hung.getsockname()[1]}/metrics"
    urls["refused"] = f"http://127.0.0.1:{free_port()}/metrics"
    urls["dns"] = "http://no-such-exporter.invalid:9400/metrics"
    yield urls
    hung.close()
    server.shutdown()
    server.server_close()


def test_one_round_over_every_fault_ends_on_time(tmp_path: Path, faulty: dict[str, str]) -> None:
    targets = [Target(faulty[k]) for k in [*GOOD, *BAD]]
    t0 = time.monotonic()
    fetches = scrape_round(targets, TIMEOUT_S)
    elapsed_s = time.monotonic() - t0
    print(f"round over {len(targets)} targets: {elapsed_s:.2f} s")
    # Each slow exporter would keep a per-read timeout alive for many seconds; the fetch
    # deadline ends them all at the timeout, concurrently.
    assert elapsed_s < TIMEOUT_S + 1.0
    by = {f.target.url: f for f in fetches}
    for k in ["/error", "/missing", "refused", "dns", "/loop", "/html", "/garbage"]:
        assert by[faulty[k]].duration_s < 0.5 * TIMEOUT_S, k  # failures that need no waiting
    for k in ["/dribble", "/stall-chunked", "hung"]:
        assert 0.9 * TIMEOUT_S < by[faulty[k]].duration_s < TIMEOUT_S + 0.5, k
    assert FaultyExporter.huge_sent["huge"] < 3 * MAX_BODY_BYTES  # cut off, not read to the end

    with Store(str(tmp_path / "faults.duckdb")) as store:
        report = StoreSink(store).write(datetime(2026, 3, 1, 12), fetches)
        health = {
            t: (up, err) for t, up, err in store.rows("SELECT target, up, error FROM targets")
        }
        hosts = {h for (h,) in store.rows("SELECT DISTINCT host FROM gpus")}
    assert hosts == {"good-plain", "good-chunked", "good-redirected"}
    assert (report.up, report.samples) == (3, 24)
    for k in GOOD:
        assert health[faulty[k]] == (True, None), k
    for k, words in BAD.items():
        up, err = health[faulty[k]]
        assert not up and err, k
        for w in words:
            assert w in err.lower(), f"{k}: {w!r} not in {err!r}"


def test_a_body_over_the_limit_is_cut_at_the_limit(faulty: dict[str, str]) -> None:
    from telemetry.collect.dcgm.scrape import fetch

    f = fetch(Target(faulty["/huge"]), 5.0, max_bytes=1_000_000)
    assert f.text is None and "larger than 1,000,000 bytes" in (f.error or "")
    ok = fetch(Target(faulty["/good-chunked"]), 5.0, max_bytes=len(_host_text("good-chunked")))
    assert ok.error is None and ok.text == _host_text("good-chunked").decode()


def test_more_targets_than_workers_still_end_on_time(faulty: dict[str, str]) -> None:
    # Two workers, both held by hung exporters until the deadline: the target queued behind
    # them is reported as not scraped rather than making the round late.
    targets = [Target(faulty["hung"]), Target(faulty["/dribble"]), Target(faulty["/good"])]
    t0 = time.monotonic()
    fetches = scrape_round(targets, TIMEOUT_S, workers=2)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.0
    assert [f.error is not None and f.error.split(" ")[0] for f in fetches] == [
        "timed",
        "timed",
        "not",
    ]
    assert "ran out before its turn" in (fetches[2].error or "")


def test_hung_exporters_get_threads_of_their_own(faulty: dict[str, str]) -> None:
    # More hung exporters than the threads a round starts with: each gets a thread beside it
    # once it is slow, so the answering ones are still fetched at once, not after the deadline.
    hung = [Target(faulty["hung"]) for _ in range(scrape.QUICK_WORKERS + 4)]
    good = [Target(faulty["/good"]) for _ in range(20)]
    t0 = time.monotonic()
    fetches = scrape_round(hung + good, TIMEOUT_S)
    assert time.monotonic() - t0 < TIMEOUT_S + 1.0
    assert all(f.error and f.error.startswith("timed out") for f in fetches[: len(hung)])
    assert all(f.error is None and f.text for f in fetches[len(hung) :])


def test_ingest_once_over_every_fault_exits_promptly(
    tmp_path: Path, faulty: dict[str, str]
) -> None:
    args = [a for k in [*GOOD, *BAD] for a in ("--target", faulty[k])]
    store = tmp_path / "cli.duckdb"
    t0 = time.monotonic()
    r = cli("ingest", "--store", str(store), "--once", "--timeout", "1", *args, timeout=60)
    elapsed_s = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert f"stored: 3/{len(GOOD) + len(BAD)} targets up, 24 GPU samples" in r.stderr
    # Interpreter start, imports and the store take a few seconds on a busy machine; a
    # round that waited for the slow exporters would take 15 s (their give-up time).
    assert elapsed_s < 10, elapsed_s
    with Store(str(store), read_only=True) as s:
        down = dict(s.rows("SELECT target, error FROM targets WHERE NOT up"))
    assert "timed out" in down[faulty["/dribble"]]
    assert "content type text/html" in down[faulty["/html"]]
