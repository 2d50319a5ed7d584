"""Prometheus remote_write requests into rounds: the receiver behind ``POST /api/v1/write``.

Remote write cuts a scrape into batches of ~2,000 samples across shards, sent in parallel and
resent after a lost reply or a sender's restart, so one target's scrape may come in several
requests, in any order, while the store keeps one row per GPU per round. A 2xx means every
sample of the request is in the store, or in ``remote_write_staging`` (the same transaction
that records its batch id, a digest of the body: a resend of the very same bytes is a
duplicate), from which it reaches the store exactly once, also across a crash:

- Windows are a fixed grid of ``Policy.window_s`` (the scrape interval; never learnt from the
  order requests arrive in). Once the data's own clock is a window plus ``SETTLE_S`` past one,
  its staged rows are *claimed* (one transaction names them with a claim id), written as
  rounds whose batch ids derive from the claim, then unstaged. A crash between any two steps
  is finished on the next promotion: a claimed round already stored is a duplicate.
- A window is cut into rounds by scrape, never merged: Prometheus stamps every sample of one
  scrape of a target with the scrape's time, so each target's k-th scrape in the window goes
  to the window's k-th round. Two scrapes of one target in a window (a sender scraping faster
  than the window) are two rounds, not one overwriting the other.
- Parts that arrive after their window was written (a shard that was retrying, a sender
  resending after its restart, batched differently) are staged and join the window's round:
  the store keeps each (series, time) once and fills what the round lacked, never a loss.
- Samples stamped outside ``[now - max_age, now + max_future]`` of the server's clock are
  refused (counted and named in the reply and in the ``remote_write`` target's health), so a
  1970 or year-2200 timestamp neither reaches the charts nor stalls later windows.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)

from telemetry.errors import DuplicateBatchError, StoreError
from telemetry.ingest.regroup import META, Regrouper, Snapshot, _naive, _target_url
from telemetry.ingest.remote_write import (
    CONTENT_TYPE,
    MAX_BODY,
    SETTLE_S,
    TARGET,
    Policy,
    RemoteWriteError,
    decode,
    staged_rows,
)
from telemetry.ingest.seam import Health, HealthBatch, Round, Written
from telemetry.store import Store

_log = logging.getLogger("factoryfloor.ingest")


class Receiver:
    """Stages requests and promotes complete windows into rounds through ``write`` (the ingest
    service's ``write``: one writer at a time)."""

    def __init__(
        self,
        store: Store,
        write: Callable[[Any], Written],
        policy: Policy | None = None,
        clock: Callable[[], datetime] | None = None,
        ready: Callable[[], None] | None = None,
    ) -> None:
        """``ready()`` raises ValueError when the store cannot take rounds, so such
        a request is refused (409) before it is staged and acknowledged."""
        from telemetry.ingest.daemon import utcnow

        self.store, self.write, self.ready = store, write, ready
        self.policy = policy or Policy()
        self.clock = clock or utcnow
        self.rg = Regrouper()
        self._lock = threading.Lock()
        self.decoding = threading.BoundedSemaphore(self.policy.decoders)
        self._oldest: int | None = None  # the oldest still staged (None: to be read)
        self._warning: str | None = None  # the last refusal, on the receiver's health row
        # the newest sample time staged (ms); after a restart, what the crashed process staged
        self._newest: int | None = store.scalar("SELECT max(ts_ms) FROM remote_write_staging")
        self.counters = {"requests": 0, "duplicates": 0, "samples": 0, "rounds": 0, "refused": 0}

    @property
    def window_ms(self) -> int:
        return max(int(self.policy.window_s * 1000), 1)

    def bounds_ms(self) -> tuple[int, int]:
        """(oldest, newest) sample time accepted now, ms since the epoch."""
        now = self.clock()
        now_ms = int((now if now.tzinfo else now.replace(tzinfo=UTC)).timestamp() * 1000)
        p = self.policy
        return now_ms - int(p.max_age_s * 1000), now_ms + int(p.max_future_s * 1000)

    def accept(self, body: bytes) -> dict[str, Any]:
        """Stage one request (exactly once) and write every window it completes."""
        request_id = "rw-" + hashlib.sha256(body).hexdigest()[:40]
        if not self.decoding.acquire(timeout=self.policy.decode_wait_s):
            raise Busy(f"{self.policy.decoders} remote_write bodies already being decoded")
        try:
            req = decode(body)
            if len(req.timeseries) > self.policy.max_series:
                raise TooLarge(
                    f"{len(req.timeseries):,} series in one request, over the "
                    f"{self.policy.max_series:,} limit (lower the sender's max_samples_per_send)"
                )
            staged = staged_rows(req, request_id, self.bounds_ms())
            del req
        finally:
            self.decoding.release()
        table = staged.table
        if self.ready is not None:
            self.ready()
        with self._lock:
            if staged.refused and not table.num_rows:  # nothing to stage: a 4xx, not stored
                self.counters["refused"] += staged.refused
                self._health(staged.reason())
                raise Refused(staged.reason() or "refused", staged.refused)
            try:
                self._stage(request_id, table)
            except DuplicateBatchError:
                self.counters["duplicates"] += 1
                return {"duplicate": True, "batch_id": request_id}
            self.counters["requests"] += 1
            self.counters["samples"] += table.num_rows
            self.counters["refused"] += staged.refused
            self._health(staged.reason())
            if table.num_rows:
                newest = pa.compute.max(table["ts_ms"]).as_py()
                self._newest = max(self._newest or newest, newest)
            rounds = self._promote_due()
        reply = {
            "duplicate": False,
            "batch_id": request_id,
            "samples": table.num_rows,
            "ignored": staged.ignored,
            "refused": staged.refused,
            "rounds": rounds,
        }
        if staged.refused:
            reply["refused_reason"] = staged.reason()
        return reply

    def _stage(self, request_id: str, table: pa.Table) -> None:
        with self.store.transaction(["remote_write_staging", "ingest_batches"]) as con:
            if con.execute(
                "SELECT 1 FROM ingest_batches WHERE batch_id = ?", [request_id]
            ).fetchone():
                raise DuplicateBatchError(request_id, None)
            con.register("_staged", table)
            con.execute("INSERT INTO remote_write_staging SELECT * FROM _staged")
            con.unregister("_staged")
            con.execute(
                "INSERT INTO ingest_batches VALUES "
                "(?, current_timestamp::TIMESTAMP, 'remote_write', ?)",
                [request_id, table.num_rows],
            )

    def _promote_due(self) -> int:
        """The rounds the data has completed, written; a failure to write them is logged and
        shown on the receiver's health row, and does not fail the request: its samples are
        staged, and the next promotion tries again."""
        if not self._due():
            return 0
        try:
            return self.promote()
        except Exception as exc:  # noqa: BLE001 (staged data stays; the error is shown)
            why = f"staged rounds not written yet: {type(exc).__name__}: {str(exc)[:300]}"
            _log.warning("remote_write: %s", why)
            self._health(why)
            return 0

    def _health(self, warning: str | None) -> None:
        """The receiver's row in the targets table: up, with the last refusal while requests
        keep having some; written when that changes, not on every request."""
        if warning == self._warning:
            return
        self._warning = warning
        now = self.clock()
        health = Health(TARGET, True, warning, last_success=now, rejected=self.counters["refused"])
        try:
            self.write(HealthBatch(now, [health]))
        except StoreError:  # the samples are staged: a health row is not worth failing for
            self._warning = None

    def _due(self) -> bool:
        """Whether the data has moved far enough past the oldest staged window (kept in memory,
        so most requests cost one insert, not a scan of the staging table)."""
        if self._oldest is None:
            self._oldest = self.store.scalar("SELECT min(ts_ms) FROM remote_write_staging")
        if self._oldest is None or self._newest is None:
            return False
        w = self.window_ms
        return self._newest >= self._oldest // w * w + 2 * w + SETTLE_S * 1000  # as ``promote``

    def promote(self, flush: bool = False) -> int:
        """Write every staged window the data has moved a window past (all with ``flush``),
        after finishing any claimed before a crash. The rounds written."""
        self._oldest = None  # read again after this promotion
        written = sum(self._write_claim(c) for (c,) in self.store.rows(
            "SELECT DISTINCT claim FROM remote_write_staging WHERE claim IS NOT NULL ORDER BY 1"
        ))  # fmt: skip
        newest = self.store.scalar("SELECT max(ts_ms) FROM remote_write_staging")
        if newest is None:
            return written
        w = self.window_ms
        limit = newest + w if flush else newest - w - int(SETTLE_S * 1000)
        starts = self.store.rows(
            "SELECT DISTINCT ts_ms // ? * ? AS w FROM remote_write_staging "
            "WHERE ts_ms // ? * ? <= ? - ? ORDER BY w",
            [w, w, w, w, limit, w],
        )
        for (start,) in starts:
            claim = self._claim(int(start))
            if claim is not None:
                written += self._write_claim(claim)
        return written

    def _claim(self, start: int) -> str | None:
        """Name the window's staged rows (those no claim holds yet) with a claim id derived
        from them, in one transaction. None: nothing to claim."""
        end = start + self.window_ms
        requests = self.store.rows(
            "SELECT DISTINCT request FROM remote_write_staging "
            "WHERE ts_ms >= ? AND ts_ms < ? AND claim IS NULL ORDER BY 1",
            [start, end],
        )
        if not requests:
            return None
        ids = ",".join(r[0] for r in requests)
        claim = "rw-round-" + hashlib.sha256(f"{start}:{ids}".encode()).hexdigest()[:32]
        with self.store.transaction(["remote_write_staging"]) as con:
            con.execute(
                "UPDATE remote_write_staging SET claim = ? "
                "WHERE ts_ms >= ? AND ts_ms < ? AND claim IS NULL",
                [claim, start, end],
            )
        return claim

    def _write_claim(self, claim: str) -> int:
        """Write a claim's rows as one round per scrape of its targets, then unstage them.
        Raises ``StoreError`` when the store refuses a round (the rows stay staged)."""
        rows = self.store.rows(
            "SELECT instance, ts_ms, name, labels, value, dense_rank() OVER "
            "(PARTITION BY instance ORDER BY ts_ms) AS k FROM remote_write_staging "
            "WHERE claim = ? ORDER BY k, ts_ms",
            [claim],
        )
        stored = self._stored_scrapes(int(rows[0][1])) if rows else {}
        rounds: dict[str, list[tuple[Any, ...]]] = {}
        stamp: dict[str, datetime] = {}
        joined: set[tuple[datetime, str, str, str]] = set()
        urls: dict[str, str] = {}
        for row in rows:  # a scrape of a target stored in this window joins its round
            url = urls.get(row[0]) or urls.setdefault(row[0], _target_url(row[0]))
            times = stored.get(url, [])
            i = bisect.bisect_left([_ms(t) for t in times], int(row[1]))
            series = (times[i], row[0], row[2], row[3]) if i < len(times) else None
            if series is not None and series not in joined:  # (two scrapes of one: one)
                joined.add(series)
                key = f"s{_ms(times[i])}"
                stamp[key] = times[i]
                rounds.setdefault(key, []).append(row)
            else:
                rounds.setdefault(str(row[5]), []).append(row)
        for k, part in rounds.items():
            written = self.write(self._round(part, f"{claim}-{k}", stamp.get(k)))
            if not written.ok:
                raise StoreError(f"remote_write round not stored: {written.error}")
        with self.store.transaction(["remote_write_staging"]) as con:
            con.execute("DELETE FROM remote_write_staging WHERE claim = ?", [claim])
        self.counters["rounds"] += len(rounds)
        return len(rounds)

    def _stored_scrapes(self, ts_ms: int) -> dict[str, list[datetime]]:
        """Per target (its URL, as ``Regrouper.fetches`` names it), the times of the rounds
        already holding one of its scrapes in the window of ``ts_ms``, oldest first. A round
        is stamped with the latest of its targets' scrapes, so a target's scrape was stored
        in the first of its rounds at or after its own time: a resend, however batched, joins
        that round, and the store leaves out what it holds already (``telemetry.store.once``).
        A target with nothing stored in the window makes rounds of its own, as before."""
        start = ts_ms // self.window_ms * self.window_ms
        out: dict[str, list[datetime]] = {}
        for target, ts in self.store.rows(
            "SELECT target, ts FROM targets WHERE ts >= ? AND ts < ? ORDER BY ts",
            [_naive(start / 1000.0), _naive((start + self.window_ms) / 1000.0)],
        ):
            out.setdefault(target, []).append(ts)
        return out

    def _round(
        self, rows: list[tuple[Any, ...]], batch_id: str, at: datetime | None = None
    ) -> Round:
        """One scrape of each target (rows of instance, ts_ms, name, labels, value) as a round
        stamped with the latest of their times, or ``at``: a target's scrape already stored
        in a round (a resend, batched otherwise) joins that round, so the store keeps each
        (series, time) once and fills what the round lacked (``telemetry.store.once``)."""
        snap = Snapshot(samples=len(rows))
        for _, _, name, labels, value, _ in rows:
            if name in META:
                self.rg.meta(snap, name, dict(_labels(labels)), value)
        lines: dict[tuple[str, str], str] = {}  # a sample resent in another request: once
        for _, _, name, labels, value, _ in rows:
            if name not in META:
                inst, head = self.rg.prefix(name, _labels(labels))
                lines[(inst, head)] = head + repr(value)
        for (inst, _), line in lines.items():
            snap.lines.setdefault(inst, []).append(line)
        ts = at or _naive(max(r[1] for r in rows) / 1000.0)
        fetches = self.rg.fetches(snap, {})
        return Round(ts, fetches, self.window_ms / 1000.0, batch_id, once=at is not None)


class Busy(Exception):
    """Every decoding slot stayed taken: the sender should retry (503)."""


class Refused(ValueError):
    """Every sample of a request was refused (400, with why)."""

    def __init__(self, reason: str, samples: int) -> None:
        super().__init__(reason)
        self.samples = samples


class TooLarge(Exception):
    """A request over a per-request bound (413: the sender must send smaller batches)."""


def _ms(t: datetime) -> int:
    return round(t.replace(tzinfo=UTC).timestamp() * 1000)


@lru_cache(maxsize=1 << 16)
def _labels(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in json.loads(text))


_receivers: dict[int, Receiver] = {}
_receivers_lock = threading.Lock()


def receiver(service: Any) -> Receiver:
    """The receiver of an ingest service (made on first use, with the service's
    ``rw_policy`` and clock)."""
    with _receivers_lock:
        rec = _receivers.get(id(service))
        if rec is None:
            policy = getattr(service, "rw_policy", None)
            clock = getattr(service, "clock", None)
            ready = getattr(service, "ready_for_rounds", None)
            rec = Receiver(service.store, service.write, policy, clock, ready)
            _receivers[id(service)] = rec
        return rec


def resume(service: Any) -> int:
    """At start: finish what a stopped or killed server left staged (claimed rounds, and the
    windows its data had already moved past). The rounds written."""
    rec = receiver(service)
    with rec._lock:
        return rec.promote()


def flush(service: Any) -> int:
    """Write every window still staged for ``service`` (at shutdown: the last windows would
    otherwise wait, invisible, for the next request after a restart). The rounds written."""
    with _receivers_lock:
        rec = _receivers.get(id(service))
    if rec is None:
        return 0
    with rec._lock:
        return rec.promote(flush=True)


def add_route(bp: Any, writable: Callable[[], Any], body: Callable[[int], bytes]) -> None:
    """``POST /write`` on the ingest API's blueprint (its token check and errors apply)."""
    from flask import Response, request

    from telemetry.ingest.http import ApiError, _json

    @bp.post("/write")
    def remote_write() -> Response:
        svc = writable()
        ctype = (request.content_type or "").split(";", 1)[0].strip().lower()
        if ctype != CONTENT_TYPE:
            raise ApiError(415, f"Content-Type must be {CONTENT_TYPE} (remote_write 1.0)")
        if request.headers.get("Content-Encoding", "").lower() != "snappy":
            raise ApiError(415, "Content-Encoding must be snappy (remote_write 1.0)")
        data = body(MAX_BODY)
        try:
            reply = receiver(svc).accept(data)
        except RemoteWriteError as exc:
            raise ApiError(400, str(exc)) from None
        except Refused as exc:
            raise ApiError(400, str(exc), refused=exc.samples) from None
        except TooLarge as exc:
            raise ApiError(413, str(exc)) from None
        except Busy as exc:  # 5xx: Prometheus retries, with backoff
            raise ApiError(503, f"{exc}; retry", retry_after_s=5) from None
        except ValueError as exc:  # the store holds replayed data
            raise ApiError(409, str(exc)) from None
        except StoreError as exc:
            raise ApiError(507, str(exc)) from None
        return _json(200, reply)
