"""Forwarding scrape rounds from an ingest daemon to the server that owns the store.

The forwarder is a ``BatchSink`` for scrape rounds (``write``: what the daemon's loop calls).
``Forwarder.submit`` spools a round (durably, before anything is sent); a sender thread
delivers the spool oldest first to ``POST /api/v1/scrape`` with the batch id in ``X-Batch-Id``
and removes a batch only once the server has answered that it is stored (or was already
stored). What the server answers decides what happens to a batch:

* 200: stored, or a duplicate of one stored before: removed from the spool;
* 413 for a round too large once decompressed (the server's bound may be lower than this
  forwarder's): split per target group into parts within the bound the server names, the parts
  spooled (under ids derived from the batch's, so a split repeated after a crash re-sends the
  same ids, which the server stores once) and the batch removed;
* 400, 413, 415, 422: the server will never accept these bytes: moved to ``spool/rejected``
  with a warning, so it cannot block the batches behind it (nothing is deleted);
* anything else (no connection, timeout, 401/403, 429, 5xx, 503 read-only): kept, retried
  with backoff (at least the server's Retry-After); the scrape loop goes on spooling meanwhile.

A round that would decode to more than ``max_round_bytes`` is split the same way before it is
spooled: an oversized round is stored in parts, never refused whole.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime
from http.client import HTTPException

from telemetry.ingest.seam import Batch, Round, Written
from telemetry.ingest.spool import Spool, Spooled
from telemetry.ingest.targets import USER_AGENT, Fetch
from telemetry.ingest.wire import (
    CONTENT_TYPE,
    MAX_DECODED_BYTES,
    WireError,
    decode_round,
    encode_parts,
)

PERMANENT = {400, 413, 415, 422}
SCRAPE_PATH = "/api/v1/scrape"


class Forwarder:
    accepts = (Round,)
    describes = "forwarding to --server"  # what a refused source is told (seam.check_fits)

    def __init__(
        self,
        server: str,
        spool: Spool,
        token: str | None = None,
        timeout_s: float = 30.0,
        log: Callable[[str], None] = print,
        max_round_bytes: int = MAX_DECODED_BYTES,
    ) -> None:
        self.url = server.rstrip("/") + SCRAPE_PATH
        self.spool = spool
        self.token = token
        self.timeout_s = timeout_s
        self.log = log
        self.max_round_bytes = max_round_bytes
        self.split = 0  # rounds stored in parts (split here or on the server's 413)
        self.retry_after_s = 0.0  # the server's last Retry-After
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
        """Spool one round for delivery (in parts when it is over ``max_round_bytes``); False
        (and a warning) when the spool is full and the round, or a part of it, is not kept."""
        parts = encode_parts(ts, fetches, interval_s, self.max_round_bytes)
        self.split += len(parts) > 1
        kept = sum(self.spool.put(p) is not None for p in parts)
        if kept < len(parts):
            self.dropped += 1
            what = f"{len(parts) - kept} of its {len(parts)} parts are" if kept else "is"
            self.log(
                f"WARNING: spool {self.spool.dir} is full ({self.spool.used_bytes / 2**20:,.0f} "
                f"of {self.spool.max_bytes / 2**20:,.0f} MiB, server unreachable: "
                f"{self.last_error}); the round at {ts:%H:%M:%S} {what} NOT kept "
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
            reply = _reply(exc)
            reason = f"HTTP {exc.code}" + (
                f": {reply['error']}" if reply.get("error") else f" {exc.reason}"
            )
            bound = reply.get("max_decoded_bytes")
            if exc.code == 413 and isinstance(bound, int):
                split = self._split(item, body, bound)
                if split is not None:
                    return "split" if split else "retry"
            if exc.code in PERMANENT:
                dest = self.spool.reject(item)
                self.rejected += 1
                self.log(f"WARNING: server refused batch {item.batch_id} ({reason}); kept {dest}")
                return "rejected"
            self._failed(reason, exc.headers.get("Retry-After"))
            return "retry"
        except (TimeoutError, urllib.error.URLError, HTTPException, OSError, ValueError) as exc:
            self._failed(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
            return "retry"

    def _split(self, item: Spooled, body: bytes, bound: int) -> bool | None:
        """Re-spool a round the server found too large as parts within ``bound``, then drop
        it (True); None when it cannot be split (one target alone is over the bound); False
        when the spool has no room for the parts: the round stays, to be split again later
        (the parts spooled so far have the same ids then, and are stored once)."""
        try:
            ts, interval, fetches = decode_round(body, max(bound, len(body) * 1100))
        except WireError:
            return None
        parts = encode_parts(ts, fetches, interval, bound)
        if len(parts) < 2:
            return None
        for n, part in enumerate(parts, 1):
            if self.spool.put(part, _part_id(item.batch_id, n, len(parts))) is None:
                self._failed(f"spool full while splitting batch {item.batch_id}")
                return False
        self.spool.ack(item)
        self.split += 1
        self.log(
            f"server bound {bound:,} bytes once decompressed: batch {item.batch_id} split "
            f"into {len(parts)} parts per target group"
        )
        return True

    def _failed(self, reason: str, retry_after: str | None = None) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            self.log(
                f"server {self.url} not taking rounds ({reason}); spooling to {self.spool.dir}"
            )
        self.last_error = reason
        self.retry_after_s = float(retry_after) if (retry_after or "").isdigit() else 0.0

    def drain(self, deadline: float | None = None) -> bool:
        """Send spooled batches oldest first until the spool is empty (True) or a send fails
        or ``deadline`` (monotonic) passes (False)."""
        for item in self.spool.pending():
            if self._stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
            result = self.send(item)
            if result == "retry":
                return False
            if result == "split":  # its parts are at the end of the spool: a new pass
                return self.drain(deadline)
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
                self._wake.wait(max(backoff, min(self.retry_after_s, 300.0)))
                backoff = min(backoff * 2, 30.0)
            self._wake.clear()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


def _reply(exc: urllib.error.HTTPError) -> dict[str, object]:
    try:
        reply = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return {}
    return reply if isinstance(reply, dict) else {}


_PARTS = uuid.UUID("6f1c3a52-3f0e-4d0b-9a57-5b3c1f7e2d10")  # names the parts' ids


def _part_id(batch_id: str, n: int, of: int) -> str:
    """Part ``n`` of ``of``'s batch id: a UUID derived from the batch's, so a split repeated
    after a crash spools the same ids, which the server stores once."""
    return str(uuid.uuid5(_PARTS, f"{batch_id}/{n}/{of}"))
