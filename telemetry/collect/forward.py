"""Forwarding scrape rounds from an ingest daemon to the server that owns the store.

The forwarder is a ``BatchSink`` for scrape rounds (``write``: what the daemon's loop calls).
``Forwarder.submit`` spools a round (durably, before anything is sent); a sender thread
delivers the spool oldest first to ``POST /api/v1/scrape`` with the batch id in ``X-Batch-Id``
and removes a batch only once the server has answered that it is stored (or was already
stored). What the server answers decides what happens to a batch:

* 200: stored, or a duplicate of one stored before: removed from the spool;
* 400, 413, 415, 422: the server will never accept these bytes: moved to ``spool/rejected``
  with a warning, so it cannot block the batches behind it (nothing is deleted);
* anything else (no connection, timeout, 401/403, 5xx, 503 read-only): kept, retried with
  backoff; the scrape loop goes on spooling meanwhile.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from http.client import HTTPException

from telemetry.collect.scrape import USER_AGENT, Fetch
from telemetry.collect.seam import Batch, Round, Written
from telemetry.collect.spool import Spool, Spooled
from telemetry.collect.wire import CONTENT_TYPE, encode_round

PERMANENT = {400, 413, 415, 422}
SCRAPE_PATH = "/api/v1/scrape"


class Forwarder:
    accepts = (Round,)

    def __init__(
        self,
        server: str,
        spool: Spool,
        token: str | None = None,
        timeout_s: float = 30.0,
        log: Callable[[str], None] = print,
    ) -> None:
        self.url = server.rstrip("/") + SCRAPE_PATH
        self.spool = spool
        self.token = token
        self.timeout_s = timeout_s
        self.log = log
        self.delivered = 0
        self.duplicates = 0
        self.rejected = 0
        self.dropped = 0  # rounds not spooled because the spool was full
        self.failing_since: float | None = None
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the scrape loop's side --------------------------------------------------------------
    def write(self, batch: Batch) -> Written:
        """Spool a round for delivery (the sink side of the seam); not ok when the spool is
        full and the round was dropped."""
        if not isinstance(batch, Round):
            raise TypeError(f"the forwarder carries scrape rounds, not {type(batch).__name__}")
        kept = self.submit(batch.ts, batch.fetches, batch.interval_s)
        up = sum(f.error is None for f in batch.fetches)
        line = f"round {batch.ts.isoformat()} {'spooled' if kept else 'DROPPED'}: "
        line += f"{up}/{len(batch.fetches)} targets up; {self.delivered} rounds delivered"
        if self.failing_since is not None:
            line += f", {len(self.spool.pending())} waiting (server: {self.last_error})"
        return Written(ok=kept, line=line, error=None if kept else "spool full: round dropped")

    def submit(self, ts: datetime, fetches: list[Fetch], interval_s: float) -> bool:
        """Spool one round for delivery; False (and a warning) when the spool is full."""
        item = self.spool.put(encode_round(ts, fetches, interval_s))
        if item is None:
            self.dropped += 1
            self.log(
                f"WARNING: spool {self.spool.dir} is full ({self.spool.used_bytes / 2**20:,.0f} "
                f"of {self.spool.max_bytes / 2**20:,.0f} MiB, server unreachable: "
                f"{self.last_error}); the round at {ts:%H:%M:%S} is NOT kept "
                f"({self.dropped} rounds dropped so far)"
            )
            return False
        self._wake.set()
        return True

    # -- delivery ----------------------------------------------------------------------------
    def send(self, item: Spooled) -> str:
        """Deliver one spooled batch: 'stored', 'duplicate', 'rejected' or 'retry'."""
        headers = {
            "Content-Type": CONTENT_TYPE,
            "Content-Encoding": "gzip",
            "X-Batch-Id": item.batch_id,
            "User-Agent": USER_AGENT,
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            body = item.read()
        except FileNotFoundError:
            return "duplicate"  # acknowledged meanwhile
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                reply = json.loads(resp.read() or b"{}")
            return "duplicate" if isinstance(reply, dict) and reply.get("duplicate") else "stored"
        except urllib.error.HTTPError as exc:
            reason = _reason(exc)
            if exc.code in PERMANENT:
                dest = self.spool.reject(item)
                self.rejected += 1
                self.log(f"WARNING: server refused batch {item.batch_id} ({reason}); kept {dest}")
                return "rejected"
            self._failed(reason)
            return "retry"
        except (TimeoutError, urllib.error.URLError, HTTPException, OSError, ValueError) as exc:
            self._failed(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
            return "retry"

    def _failed(self, reason: str) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            self.log(
                f"server {self.url} not taking rounds ({reason}); spooling to {self.spool.dir}"
            )
        self.last_error = reason

    def drain(self, deadline: float | None = None) -> bool:
        """Send spooled batches oldest first until the spool is empty (True) or a send fails
        or ``deadline`` (monotonic) passes (False)."""
        for item in self.spool.pending():
            if self._stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
            result = self.send(item)
            if result == "retry":
                return False
            if result in ("stored", "duplicate"):
                self.spool.ack(item)
                self.delivered += result == "stored"
                self.duplicates += result == "duplicate"
            if self.failing_since is not None:
                self.log(
                    f"server {self.url} taking rounds again after "
                    f"{time.monotonic() - self.failing_since:,.0f} s; delivering the spool"
                )
                self.failing_since = None
                self.last_error = None
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="forwarder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                delivered = self.drain()
            except Exception as exc:  # a spool file vanished, a disk error: never die silently
                self._failed(f"delivery error: {type(exc).__name__}: {exc}")
                self.log(f"WARNING: {self.last_error}; retrying in {backoff:.0f} s")
                delivered = False
            if delivered:
                backoff = 1.0
                self._wake.wait(5.0)
            else:
                self._wake.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            self._wake.clear()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(exc.read() or b"{}").get("error")
    except (ValueError, OSError, AttributeError):
        detail = None
    return f"HTTP {exc.code}" + (f": {detail}" if detail else f" {exc.reason}")
