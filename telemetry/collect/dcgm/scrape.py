"""Scraping dcgm-exporter targets: target lists (CLI or Prometheus ``file_sd``) and one round.

A round fetches every target concurrently with a timeout and a body size limit; a dead, hung,
slow, failing, truncated, oversized or non-Prometheus target yields a ``Fetch`` with ``error``
set and never delays the others beyond the timeout.

Bodies may come gzip'd (we ask, as Prometheus does; proxies answer so): inflated as they arrive,
never past the size limit, so a gzip bomb is a target down, not memory exhausted.

The timeout is a deadline for the whole fetch, not per socket operation: ``urllib``'s timeout
restarts at every read, so an exporter sending a byte every half second kept a fetch (and the
round) alive for as long as it liked. Here ``http.client`` reads through a socket wrapper that
gives each receive only the time left.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from telemetry.collect.dcgm.httpbody import Down as _Down
from telemetry.collect.dcgm.httpbody import Inflater as _Inflater
from telemetry.ingest.targets import USER_AGENT, Fetch, Target, normalise

MAX_BODY_BYTES = 16 * 1024 * 1024  # one node's page is ~60 KB; larger bodies are refused
SCRAPE_INTERVAL_S = 15.0  # seconds between rounds, unless configured (the one definition)
SCRAPE_TIMEOUT_S = 5.0  # what one round may take per target, unless configured
MAX_REDIRECTS = 5
ROUND_GRACE_S = 0.5  # how long past its timeout a round waits for fetches that overran it
QUICK_WORKERS = 8  # threads a round fetches answering exporters with (see ``scrape_round``)
SLOW_FETCH_S = 0.25  # a fetch running longer than this gets another thread started beside it
_WATCH_S = 0.05  # how often a round looks for slow fetches
_READ_BYTES = 65536
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_PROMETHEUS_TYPES = frozenset({"text/plain", "application/openmetrics-text"})
_GZIP = frozenset({"gzip", "x-gzip"})
_IDENTITY = frozenset({"identity", ""})
_HEADERS = {
    "User-Agent": USER_AGENT,
    "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",  # the text format, not protobuf
    "Accept-Encoding": "gzip",  # as Prometheus asks; an identity answer is as welcome
    "Connection": "close",
}


def read_json_or_yaml(path: str) -> Any:
    """A config file's document: JSON, or YAML when it is not JSON (file_sd files and scrape
    configs are often YAML). ValueError names the file when it is neither."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        import yaml  # a declared dependency

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: neither JSON nor YAML ({exc})") from None


def load_targets(path: str) -> list[Target]:
    """Targets from a Prometheus ``file_sd`` file (JSON, or YAML when it is not JSON):
    ``[{"targets": ["host:9400", ...], "labels": {...}}]``. Raises ValueError naming the
    problem for a file that does not have that shape."""
    groups = read_json_or_yaml(path)
    if not isinstance(groups, list):
        raise ValueError(f"{path}: expected a list of target groups")
    out: list[Target] = []
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or not isinstance(g.get("targets"), list):
            raise ValueError(f"{path}: group {i} has no 'targets' list")
        labels = g.get("labels") or {}
        if not isinstance(labels, dict):
            raise ValueError(f"{path}: group {i} 'labels' is not a mapping")
        for t in g["targets"]:
            out.append(Target(normalise(str(t)), {str(k): str(v) for k, v in labels.items()}))
    return out


class TargetsFile:
    """A ``file_sd`` file re-read when its modification time changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mtime = -1.0
        self._targets: list[Target] = []

    @property
    def last_good(self) -> list[Target]:
        """The targets of the last successful read (empty before the first)."""
        return self._targets

    def targets(self) -> list[Target]:
        mtime = os.stat(self.path).st_mtime
        if mtime != self._mtime:
            self._targets = load_targets(self.path)
            self._mtime = mtime
        return self._targets


class _DeadlineReader(io.RawIOBase):
    """A socket's receive side that gives each read only the time left before ``deadline``
    (``time.monotonic()``), so many slow reads cannot add up past it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left_s = self._deadline - time.monotonic()
        if left_s <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left_s)
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What ``http.client`` needs of a socket (``sendall``, ``makefile``), bound to a deadline.
    ``close`` is left to ``fetch``, which owns the real socket."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(max(self._deadline - time.monotonic(), 1e-3))
        self._sock.sendall(data)  # the timeout bounds the whole call (Python >= 3.5)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline), 65536)

    def close(self) -> None:
        pass


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A TCP connection to the first address of ``host`` that accepts before the deadline
    (``socket.create_connection`` would give every address the whole timeout)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise _Down(f"cannot resolve host name {host!r} ({exc.strerror})") from None
    errors: list[str] = []
    for family, kind, proto, _name, address in infos:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            break
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left_s)
            sock.connect(address)
            return sock
        except TimeoutError:
            sock.close()
            errors.append(f"{address[0]}: no answer")
        except OSError as exc:
            sock.close()
            errors.append(f"{address[0]}: {exc.strerror or exc}")
    if not errors or errors[-1].endswith("no answer"):
        raise TimeoutError("connecting")
    if all("refused" in e for e in errors):
        raise _Down(f"connection refused ({host}:{port})")
    raise _Down(f"cannot connect to {host}:{port} ({'; '.join(errors)})")


def _connection(url: str, deadline: float) -> tuple[http.client.HTTPConnection, socket.socket]:
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host, port = parts.hostname or "", parts.port or (443 if https else 80)
    sock = _connect(host, port, deadline)
    if https:
        sock.settimeout(max(deadline - time.monotonic(), 1e-3))
        try:  # the handshake's timeout is one deadline for the whole handshake
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    conn = http.client.HTTPConnection(host, port)
    conn.sock = _DeadlineSocket(sock, deadline)  # type: ignore[assignment]
    return conn, sock


@dataclass
class _Progress:
    """Where a fetch is, for the words of a timeout."""

    phase: str = "connecting"
    received_bytes: int = 0

    def __str__(self) -> str:
        if self.phase == "reading the body":
            return f"{self.phase} ({self.received_bytes:,} bytes received)"
        return self.phase


def fetch(
    target: Target,
    timeout_s: float,
    max_bytes: int = MAX_BODY_BYTES,
    *,
    deadline: float | None = None,
) -> Fetch:
    """GET one target within ``timeout_s`` seconds in all (connecting, every read, redirects),
    or by ``deadline`` (a ``time.monotonic()`` instant, a round's) when that comes first.

    Never raises: every failure becomes ``Fetch.error``, in words. A body over ``max_bytes``
    is refused without reading past the limit; a body that is not Prometheus text (another
    content type, not UTF-8) is refused. The one wait no deadline can cut short is name
    resolution (``getaddrinfo``), which ``scrape_round`` does not wait for."""
    t0 = time.monotonic()
    end = t0 + timeout_s if deadline is None else min(deadline, t0 + timeout_s)
    progress = _Progress()
    try:
        status, text = _get(target.url, end, max_bytes, progress)
        return Fetch(target, text, None, time.monotonic() - t0, status)
    except _Down as exc:
        return Fetch(target, None, str(exc)[:300], time.monotonic() - t0, exc.status)
    except Exception as exc:  # this is where one bad target stops, whatever it did
        error = _reason(exc, progress, time.monotonic() - t0)
        return Fetch(target, None, error[:300], time.monotonic() - t0)


def _reason(exc: Exception, progress: _Progress, elapsed_s: float) -> str:
    """The words for a failure that is not a ``_Down``."""
    if isinstance(exc, TimeoutError):
        return f"timed out after {elapsed_s:.1f} s {progress}"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed before a response"
    if isinstance(exc, http.client.IncompleteRead):
        return f"truncated body (connection closed after {progress.received_bytes:,} bytes)"
    if isinstance(exc, http.client.BadStatusLine):
        return f"not an HTTP response (first line {str(exc.line)[:60]!r})"
    if isinstance(exc, ConnectionResetError):
        return f"connection reset {progress}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    return f"{type(exc).__name__}: {exc}"


def _get(url: str, deadline: float, max_bytes: int, progress: _Progress) -> tuple[int, str]:
    """Status and text of ``url``, following up to ``MAX_REDIRECTS`` redirects."""
    seen = [url]
    while True:
        status, location, text = _get_once(url, deadline, max_bytes, progress)
        if location is None:
            return status, text
        url = urljoin(url, location)
        if url in seen:
            raise _Down(f"redirect loop ({' -> '.join(urlsplit(u).path for u in seen)})", status)
        if len(seen) > MAX_REDIRECTS:
            raise _Down(f"more than {MAX_REDIRECTS} redirects", status)
        if urlsplit(url).scheme not in ("http", "https"):
            raise _Down(f"redirected to a non-http(s) address {url[:80]!r}", status)
        seen.append(url)


def _get_once(
    url: str, deadline: float, max_bytes: int, progress: _Progress
) -> tuple[int, str | None, str]:
    """One GET: (status, redirect location or None, text)."""
    progress.phase = "connecting"
    conn, sock = _connection(url, deadline)
    try:
        progress.phase = "waiting for the response"
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", path, headers=_HEADERS)
        resp = conn.getresponse()
        location = resp.getheader("Location")
        if resp.status in _REDIRECTS and location:
            return resp.status, location, ""
        if not 200 <= resp.status < 300:
            raise _Down(f"HTTP {resp.status} {str(resp.reason)[:80]}", resp.status)
        declared, gzipped = _check_head(resp, max_bytes)
        progress.phase, progress.received_bytes = "reading the body", 0
        inflate = _Inflater(max_bytes, resp.status) if gzipped else None
        body = _read_body(resp, max_bytes, progress, inflate)
        if declared is not None and progress.received_bytes < declared:
            got = progress.received_bytes
            raise _Down(f"truncated body ({got:,} of {declared:,} bytes)", resp.status)
        if inflate is not None:
            body = inflate.finish()
        elif declared is None and not resp.chunked and body and not body.endswith(b"\n"):
            raise _Down(
                f"truncated body (connection closed mid-line after {len(body):,} bytes, "
                "no Content-Length)",
                resp.status,
            )
        return resp.status, None, _text(body, resp.status)
    finally:
        sock.close()


def _check_head(resp: http.client.HTTPResponse, max_bytes: int) -> tuple[int | None, bool]:
    """The declared body length and whether the body is gzip'd; raises ``_Down`` for a body
    we will not read."""
    ctype = (resp.getheader("Content-Type") or "").split(";", 1)[0].strip().lower()
    if ctype and ctype not in _PROMETHEUS_TYPES:
        raise _Down(f"not Prometheus text: content type {ctype[:60]}", resp.status)
    encoding = (resp.getheader("Content-Encoding") or "").strip().lower()
    if encoding not in _GZIP and encoding not in _IDENTITY:
        raise _Down(f"not Prometheus text: content encoding {encoding[:30]}", resp.status)
    length = resp.getheader("Content-Length")
    declared = int(length) if length and length.strip().isdigit() and not resp.chunked else None
    if declared is not None and declared > max_bytes:
        raise _Down(
            f"body larger than {max_bytes:,} bytes (Content-Length {declared:,})", resp.status
        )
    return declared, encoding in _GZIP


def _read_body(
    resp: http.client.HTTPResponse,
    max_bytes: int,
    progress: _Progress,
    inflate: _Inflater | None = None,
) -> bytes:
    """The body, read a buffer at a time (``read1``: one receive each, so the deadline is
    checked between them); stops as soon as it is over ``max_bytes``. A gzip'd body goes to
    ``inflate`` instead."""
    body = bytearray()
    while chunk := resp.read1(_READ_BYTES):
        progress.received_bytes += len(chunk)
        if progress.received_bytes > max_bytes:
            raise _Down(f"body larger than {max_bytes:,} bytes", resp.status)
        if inflate is not None:
            inflate.feed(chunk)
        else:
            body += chunk
    return bytes(body)


def _text(body: bytes, status: int) -> str:
    """The body as text. A stray invalid byte (say in one label value) becomes U+FFFD and the
    parser judges that line; a body mostly not UTF-8 is not Prometheus text at all."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        text = body.decode("utf-8", errors="replace")
    invalid = text.count("\ufffd")
    if invalid * 100 > len(body):
        raise _Down(
            f"not Prometheus text: not UTF-8 ({invalid:,} invalid sequences in "
            f"{len(body):,} bytes)",
            status,
        )
    return text


def scrape_round(
    targets: list[Target],
    timeout_s: float = SCRAPE_TIMEOUT_S,
    workers: int = 64,
    max_bytes: int = MAX_BODY_BYTES,
) -> list[Fetch]:
    """Fetch every target concurrently (at most ``workers`` at a time); results in target
    order. Returns within ``timeout_s`` plus ``ROUND_GRACE_S`` whatever the targets do: every
    fetch shares the round's deadline, and a fetch still stuck after it (name resolution)
    is reported as timed out and left to finish on its own (daemon threads: it cannot hold
    the process up either). A target whose turn comes after the deadline (more targets than
    workers, the earlier ones slow) is down as not scraped.

    A round starts ``QUICK_WORKERS`` threads and adds one beside each fetch that has run
    longer than ``SLOW_FETCH_S`` (a hung or slow exporter), up to ``workers``: answering
    exporters are fetched by a few threads (64 runnable threads spent a third of the round's
    CPU taking turns at the interpreter), and slow ones still wait side by side."""
    if not targets:
        return []
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    results: list[Fetch | None] = [None] * len(targets)
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(targets)):
        todo.put(i)
    left = [len(targets)]
    lock, all_done = threading.Lock(), threading.Event()
    since: list[float | None] = []  # per thread: when its fetch in progress started

    def work(me: int) -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                since[me] = None
                return
            since[me] = time.monotonic()
            results[i] = _fetch_in_round(targets[i], timeout_s, deadline, max_bytes, workers)
            since[me] = None
            with lock:
                left[0] -= 1
                if not left[0]:
                    all_done.set()

    def add(threads: int) -> None:
        for _ in range(max(0, min(threads, workers - len(since), todo.qsize()))):
            since.append(None)
            threading.Thread(
                target=work, args=(len(since) - 1,), name="scrape", daemon=True
            ).start()

    add(QUICK_WORKERS)
    end = t0 + timeout_s + ROUND_GRACE_S
    while not all_done.wait(min(_WATCH_S, max(end - time.monotonic(), 0.0))):
        now = time.monotonic()
        if now >= end:
            break
        slow = sum(1 for s in list(since) if s is not None and now - s > SLOW_FETCH_S)
        add(QUICK_WORKERS + slow - len(since))
    stuck = f"timed out after {timeout_s:g} s (the fetch did not return; name resolution?)"
    return [
        r or Fetch(t, None, stuck, time.monotonic() - t0)
        for t, r in zip(targets, list(results), strict=True)
    ]


def _fetch_in_round(
    target: Target, timeout_s: float, deadline: float, max_bytes: int, workers: int
) -> Fetch:
    if time.monotonic() >= deadline:
        why = (
            f"not scraped: the round's {timeout_s:g} s ran out before its turn ({workers} workers)"
        )
        return Fetch(target, None, why, 0.0)
    return fetch(target, timeout_s, max_bytes, deadline=deadline)
