"""Prometheus remote_write 1.0 at ``POST /api/v1/write`` on ``serve --accept-ingest``.

An existing Prometheus, Grafana Agent or vmagent forwards its DCGM series with one config line
(README): ``remote_write: [{url: http://dash-host:8050/api/v1/write}]``. The body is a snappy
(block format) compressed protobuf ``WriteRequest`` (``prometheus/prompb``: time series of
labels and (value, timestamp ms) samples); the same token, size limits and JSON errors as the
rest of the ingest API apply, under the protocol's status rules: 2xx stored, 4xx never resent
(bad body), 5xx resent by the sender.

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
- Parts that arrive after their window was written (a shard that was retrying) are staged and
  make a round of their own, never a loss.
- Samples stamped outside ``[now - max_age, now + max_future]`` of the server's clock are
  refused (counted and named in the reply and in the ``remote_write`` target's health), so a
  1970 or year-2200 timestamp neither reaches the charts nor stalls later windows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)

from telemetry.collect.prom_source import META, Regrouper, Snapshot, _naive
from telemetry.collect.records import UNSAFE_NAME
from telemetry.collect.seam import Health, HealthBatch, Round, Written
from telemetry.errors import DuplicateBatchError, StoreError
from telemetry.store import Store

CONTENT_TYPE = "application/x-protobuf"
MAX_BODY = 32 * 2**20  # compressed; Prometheus sends ~2,000 samples (~100 KB) per request
MAX_DECODED = 32 * 2**20  # vmagent's largest block is 8 MB; Prometheus's ~0.5 MB
MAX_LABELS_CHARS = 4096  # as the text parser: a series' labels beyond this are refused
KEEP = re.compile(r"^(?:DCGM_\w*|up|scrape_duration_seconds)$")
# A window is written once the data is an interval plus this past it: a sender's shards each
# send at least every 5 s (Prometheus's batch_send_deadline), so its parts have come by then.
SETTLE_S = 5.0
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STAGING_SQL = """CREATE TABLE IF NOT EXISTS remote_write_staging (
  request VARCHAR, ts_ms BIGINT, instance VARCHAR, name VARCHAR, labels VARCHAR, value DOUBLE,
  claim VARCHAR)"""
TARGET = "remote_write"  # the receiver's own row in the targets table
_log = logging.getLogger("factoryfloor.ingest")


@dataclass(frozen=True)
class Policy:
    """What the receiver accepts. ``window_s``: the senders' scrape interval, the grid rounds
    are cut on; ``max_age_s`` / ``max_future_s``: how far a sample's time may lie behind or
    ahead of the server's clock; ``max_series``: series per request (Prometheus sends at most
    ``max_samples_per_send``, 2,000 by default); ``decode_wait_s``: how long a request waits for
    one of ``decoders`` slots before a 503 (bounded memory under a flood)."""

    window_s: float = 15.0
    max_age_s: float = 7 * 86400.0
    max_future_s: float = 600.0
    max_series: int = 50_000  # vmagent sends at most 10,000 rows a block
    decoders: int = 2
    decode_wait_s: float = 20.0


class RemoteWriteError(ValueError):
    """A body that is not a remote_write request, with the reason in words."""


@lru_cache(maxsize=1)
def _write_request() -> Any:
    """``prometheus.WriteRequest`` (the fields a 1.0 receiver reads) built without protoc."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="factoryfloor_prompb.proto", package="ffprompb", syntax="proto3"
    )
    for name, fields in (
        ("Label", (("name", 1, f.TYPE_STRING, None), ("value", 2, f.TYPE_STRING, None))),
        ("Sample", (("value", 1, f.TYPE_DOUBLE, None), ("timestamp", 2, f.TYPE_INT64, None))),
        ("TimeSeries", (("labels", 1, f.TYPE_MESSAGE, "Label"),
                        ("samples", 2, f.TYPE_MESSAGE, "Sample"))),  # fmt: skip
        ("WriteRequest", (("timeseries", 1, f.TYPE_MESSAGE, "TimeSeries"),)),
    ):
        msg = fdp.message_type.add(name=name)
        for fname, number, kind, ref in fields:
            msg.field.add(
                name=fname,
                number=number,
                type=kind,
                label=f.LABEL_REPEATED if ref else f.LABEL_OPTIONAL,
                type_name=f".ffprompb.{ref}" if ref else None,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ffprompb.WriteRequest"))


def encode(series: list[tuple[dict[str, str], list[tuple[float, int]]]]) -> bytes:
    """A snappy'd ``WriteRequest`` of (labels, [(value, timestamp ms)]) (tests, benchmarks)."""
    import cramjam

    req = _write_request()()
    for labels, samples in series:
        ts = req.timeseries.add()
        for k in sorted(labels):
            ts.labels.add(name=k, value=labels[k])
        for v, t in samples:
            ts.samples.add(value=v, timestamp=t)
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))


def decode(body: bytes) -> Any:
    """The ``WriteRequest`` in a body; ``RemoteWriteError`` saying why it is not one."""
    import cramjam
    from google.protobuf.message import DecodeError

    size, shift = 0, 0
    for i, byte in enumerate(body[:10]):  # snappy's block header: the decoded length, varint
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
        if i == 9:
            raise RemoteWriteError("body is not snappy-compressed (bad length header)")
    if size > MAX_DECODED:
        raise RemoteWriteError(f"body decodes to {size:,} bytes, over the {MAX_DECODED:,} limit")
    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise RemoteWriteError(f"body is not snappy-compressed ({exc})") from None
    req = _write_request()()
    try:
        req.ParseFromString(raw)
    except DecodeError as exc:
        raise RemoteWriteError(f"body is not a remote_write WriteRequest ({exc})") from None
    return req


@dataclass
class Staged:
    """A request's samples as staging rows, and what was left out of them, with why."""

    table: pa.Table
    ignored: int = 0  # samples of other metrics
    refused: int = 0  # samples refused (``reasons`` says why, per kind)
    reasons: Counter[str] = field(default_factory=Counter)

    def reason(self) -> str | None:
        """The refusals in one line, most frequent first (None: none)."""
        if not self.refused:
            return None
        parts = [f"{n:,} {why}" for why, n in self.reasons.most_common()]
        return f"{self.refused:,} sample(s) refused: " + "; ".join(parts)


def staged_rows(req: Any, request_id: str, bounds_ms: tuple[int, int] | None = None) -> Staged:
    """The DCGM and target-health samples of a request as staging rows; samples of other
    metrics are ignored, and refused: series with labels that are unnamed, over the length
    limit or carry control or bidirectional-override characters, and samples stamped outside
    ``bounds_ms`` ((oldest, newest) in ms since the epoch)."""
    cols: dict[str, list[Any]] = {k: [] for k in ("ts_ms", "instance", "name", "labels", "value")}
    out = Staged(pa.table({}))
    lo, hi = bounds_ms or (-(2**62), 2**62)
    for ts in req.timeseries:
        labels = sorted((lab.name, lab.value) for lab in ts.labels)
        d = dict(labels)
        name = d.pop("__name__", "")
        if not KEEP.match(name):
            out.ignored += len(ts.samples)
            continue
        why = _series_refusal(labels)
        if why is not None:
            out.refused += len(ts.samples)
            out.reasons[why] += len(ts.samples)
            continue
        text = json.dumps([(k, v) for k, v in labels if k != "__name__"], separators=(",", ":"))
        for s in ts.samples:
            if not lo <= s.timestamp <= hi:
                out.refused += 1
                out.reasons[_time_refusal(s.timestamp, lo, hi)] += 1
                continue
            cols["ts_ms"].append(s.timestamp)
            cols["instance"].append(d.get("instance", ""))
            cols["name"].append(name)
            cols["labels"].append(text)
            cols["value"].append(s.value)
    n = len(cols["ts_ms"])
    out.table = pa.table(
        {
            "request": pa.array([request_id] * n, pa.string()),
            "ts_ms": pa.array(cols["ts_ms"], pa.int64()),
            "instance": pa.array(cols["instance"], pa.string()),
            "name": pa.array(cols["name"], pa.string()),
            "labels": pa.array(cols["labels"], pa.string()),
            "value": pa.array(cols["value"], pa.float64()),
            "claim": pa.nulls(n, pa.string()),
        }
    )
    return out


def _series_refusal(labels: list[tuple[str, str]]) -> str | None:
    if not all(_LABEL.fullmatch(k) for k, _ in labels):
        return "with a label name that is not [A-Za-z_][A-Za-z0-9_]*"
    if sum(len(k) + len(v) + 6 for k, v in labels) > MAX_LABELS_CHARS:
        return f"with labels over {MAX_LABELS_CHARS:,} characters"
    if any(UNSAFE_NAME.search(v) for _, v in labels):
        return "with a control or bidirectional-override character in a label value"
    return None


def _time_refusal(ts_ms: int, lo: int, hi: int) -> str:
    side = "before" if ts_ms < lo else "after"
    return (
        f"stamped {_iso(ts_ms)}, {side} the accepted window "
        f"{_iso(lo)} .. {_iso(hi)} (the server's clock; --rw-max-age, --rw-max-future)"
    )


def _iso(ts_ms: int) -> str:
    try:
        return _naive(ts_ms / 1000.0).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{ts_ms} ms"


class Receiver:
    """Stages requests and promotes complete windows into rounds through ``write`` (the ingest
    service's ``write``: one writer at a time)."""

    def __init__(
        self,
        store: Store,
        write: Callable[[Any], Written],
        policy: Policy | None = None,
        clock: Callable[[], datetime] | None = None,
        ready: Callable[[float], None] | None = None,
    ) -> None:
        """``ready(interval_s)`` raises ValueError when the store cannot take rounds, so such
        a request is refused (409) before it is staged and acknowledged."""
        from telemetry.collect.daemon import utcnow

        self.store, self.write, self.ready = store, write, ready
        self.policy = policy or Policy()
        self.clock = clock or utcnow
        self.rg = Regrouper()
        self._lock = threading.Lock()
        self.decoding = threading.BoundedSemaphore(self.policy.decoders)
        self._oldest: int | None = None  # the oldest still staged (None: to be read)
        self._warning: str | None = None  # the last refusal, on the receiver's health row
        with store.transaction() as con:
            con.execute(STAGING_SQL)
            con.execute("ALTER TABLE remote_write_staging ADD COLUMN IF NOT EXISTS claim VARCHAR")
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
            self.ready(self.window_ms / 1000.0)
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
        rounds: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows:
            rounds.setdefault(int(row[5]), []).append(row)
        for k, part in rounds.items():
            written = self.write(self._round(part, f"{claim}-{k}"))
            if not written.ok:
                raise StoreError(f"remote_write round not stored: {written.error}")
        with self.store.transaction(["remote_write_staging"]) as con:
            con.execute("DELETE FROM remote_write_staging WHERE claim = ?", [claim])
        self.counters["rounds"] += len(rounds)
        return len(rounds)

    def _round(self, rows: list[tuple[Any, ...]], batch_id: str) -> Round:
        """One scrape of each target (rows of instance, ts_ms, name, labels, value) as a round
        stamped with the latest of their times."""
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
        ts = _naive(max(r[1] for r in rows) / 1000.0)
        return Round(ts, self.rg.fetches(snap, {}), self.window_ms / 1000.0, batch_id)


class Busy(Exception):
    """Every decoding slot stayed taken: the sender should retry (503)."""


class Refused(ValueError):
    """Every sample of a request was refused (400, with why)."""

    def __init__(self, reason: str, samples: int) -> None:
        super().__init__(reason)
        self.samples = samples


class TooLarge(Exception):
    """A request over a per-request bound (413: the sender must send smaller batches)."""


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

    from telemetry.collect.http_api import ApiError, _json

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
