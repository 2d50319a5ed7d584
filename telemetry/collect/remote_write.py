"""Prometheus remote_write 1.0 at ``POST /api/v1/write`` on ``serve --accept-ingest``.

An existing Prometheus, Grafana Agent or vmagent forwards its DCGM series with one config line
(README): ``remote_write: [{url: http://dash-host:8050/api/v1/write}]``. The body is a snappy
(block format) compressed protobuf ``WriteRequest`` (``prometheus/prompb``: time series of
labels and (value, timestamp ms) samples); the same token, size limits and JSON errors as the
rest of the ingest API apply, under the protocol's status rules: 2xx stored, 4xx never resent
(bad body), 5xx resent by the sender.

Remote write cuts a scrape into batches of ~2,000 samples across shards, so one GPU's series
of one scrape may come in several requests, while the store keeps one row per GPU per round.
So a request is first staged, durably and exactly once: its samples go to
``remote_write_staging`` in the transaction that records its batch id, a digest of the body
(the sender resends the very same bytes after a lost reply, so a resend is a duplicate). Once
the data's own clock is an interval past a window (one scrape interval, learnt from the ``up``
series), the window's samples are regrouped per ``instance`` into exporter pages and written
as one ``Round`` through the ingest service, like a direct scrape, then taken out of staging.
The round's batch id names the window and the requests it was built from, so a crash between
writing and unstaging writes nothing twice; samples that arrive after their window was written
(a shard that was retrying) make a round of their own, never a loss.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)

from telemetry.collect.prom_source import META, Regrouper, Snapshot, _naive
from telemetry.collect.seam import Round
from telemetry.errors import DuplicateBatchError
from telemetry.store import Store

CONTENT_TYPE = "application/x-protobuf"
MAX_BODY = 32 * 2**20  # compressed; Prometheus sends ~2,000 samples (~100 KB) per request
MAX_DECODED = 256 * 2**20
MAX_LABELS_CHARS = 4096  # as the text parser: a series' labels beyond this are refused
KEEP = re.compile(r"^(?:DCGM_\w*|up|scrape_duration_seconds)$")
DEFAULT_WINDOW_S = 15.0
# A window is written once the data is an interval plus this past it: a sender's shards each
# send at least every 5 s (Prometheus's batch_send_deadline), so its parts have come by then.
SETTLE_S = 5.0
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STAGING_SQL = """CREATE TABLE IF NOT EXISTS remote_write_staging (
  request VARCHAR, ts_ms BIGINT, instance VARCHAR, name VARCHAR, labels VARCHAR, value DOUBLE)"""


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


def staged_rows(req: Any, request_id: str) -> tuple[pa.Table, int, int]:
    """The DCGM and target-health samples of a request as staging rows, and how many samples
    were ignored (other metrics) or refused (labels without a name, over the length limit)."""
    cols: dict[str, list[Any]] = {k: [] for k in ("ts_ms", "instance", "name", "labels", "value")}
    ignored = refused = 0
    for ts in req.timeseries:
        labels = sorted((lab.name, lab.value) for lab in ts.labels)
        d = dict(labels)
        name = d.pop("__name__", "")
        if not KEEP.match(name):
            ignored += len(ts.samples)
            continue
        rest = [(k, v) for k, v in labels if k != "__name__"]
        text = json.dumps(rest, separators=(",", ":"))
        if len(text) > MAX_LABELS_CHARS or not all(_LABEL.fullmatch(k) for k, _ in rest):
            refused += len(ts.samples)
            continue
        for s in ts.samples:
            cols["ts_ms"].append(s.timestamp)
            cols["instance"].append(d.get("instance", ""))
            cols["name"].append(name)
            cols["labels"].append(text)
            cols["value"].append(s.value)
    n = len(cols["ts_ms"])
    table = pa.table(
        {
            "request": pa.array([request_id] * n, pa.string()),
            "ts_ms": pa.array(cols["ts_ms"], pa.int64()),
            "instance": pa.array(cols["instance"], pa.string()),
            "name": pa.array(cols["name"], pa.string()),
            "labels": pa.array(cols["labels"], pa.string()),
            "value": pa.array(cols["value"], pa.float64()),
        }
    )
    return table, ignored, refused


class Receiver:
    """Stages requests and promotes complete windows into rounds through ``write`` (the ingest
    service's ``write``: one writer at a time)."""

    def __init__(self, store: Store, write: Callable[[Round], Any]) -> None:
        self.store, self.write = store, write
        self.rg = Regrouper()
        self.window_s: float | None = None
        self._lock = threading.Lock()
        self._newest: int | None = None  # the newest sample time staged (ms)
        self._oldest: int | None = None  # the oldest still staged (None: to be read)
        with store.transaction() as con:
            con.execute(STAGING_SQL)
        self.counters = {"requests": 0, "duplicates": 0, "samples": 0, "rounds": 0}

    def accept(self, body: bytes) -> dict[str, Any]:
        """Stage one request (exactly once) and write every window it completes."""
        request_id = "rw-" + hashlib.sha256(body).hexdigest()[:40]
        req = decode(body)
        table, ignored, refused = staged_rows(req, request_id)
        with self._lock:
            try:
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
            except DuplicateBatchError:
                self.counters["duplicates"] += 1
                return {"duplicate": True, "batch_id": request_id}
            self.counters["requests"] += 1
            self.counters["samples"] += table.num_rows
            if table.num_rows:
                newest = pa.compute.max(table["ts_ms"]).as_py()
                self._newest = max(self._newest or newest, newest)
            rounds = self.promote() if self._due() else 0
        return {
            "duplicate": False,
            "batch_id": request_id,
            "samples": table.num_rows,
            "ignored": ignored,
            "refused": refused,
            "rounds": rounds,
        }

    def _due(self) -> bool:
        """Whether the data has moved far enough past the oldest staged window (kept in memory,
        so most requests cost one insert, not a scan of the staging table)."""
        if self._oldest is None:
            self._oldest = self.store.scalar("SELECT min(ts_ms) FROM remote_write_staging")
        if self._oldest is None or self._newest is None:
            return False
        window_ms = int(self._window_s() * 1000)
        return self._newest >= self._oldest // window_ms * window_ms + window_ms + SETTLE_S * 1000

    def promote(self, flush: bool = False) -> int:
        """Write every staged window the data has moved an interval past (all with ``flush``)."""
        newest = self.store.scalar("SELECT max(ts_ms) FROM remote_write_staging")
        self._oldest = None  # read again after this promotion
        if newest is None:
            return 0
        window_ms = int(self._window_s() * 1000)
        limit = newest + window_ms if flush else newest - window_ms - int(SETTLE_S * 1000)
        starts = self.store.rows(
            "SELECT DISTINCT ts_ms // ? * ? AS w FROM remote_write_staging "
            "WHERE ts_ms // ? * ? + ? <= ? ORDER BY w",
            [window_ms, window_ms, window_ms, window_ms, window_ms, limit],
        )
        for (start,) in starts:
            self._promote_window(int(start), window_ms)
        return len(starts)

    def _window_s(self) -> float:
        """The scrape interval, from the spacing of each target's staged ``up`` samples."""
        if self.window_s is None:
            gaps = self.store.rows(
                "SELECT median(d) FROM (SELECT ts_ms - lag(ts_ms) OVER "
                "(PARTITION BY instance ORDER BY ts_ms) AS d FROM remote_write_staging "
                "WHERE name = 'up') WHERE d > 0"
            )
            if gaps and gaps[0][0]:
                self.window_s = max(float(gaps[0][0]) / 1000.0, 0.001)
        return self.window_s or DEFAULT_WINDOW_S

    def _promote_window(self, start: int, window_ms: int) -> None:
        rows = self.store.rows(
            "SELECT request, ts_ms, name, labels, value FROM remote_write_staging "
            "WHERE ts_ms >= ? AND ts_ms < ? ORDER BY ts_ms",
            [start, start + window_ms],
        )
        requests = sorted({r[0] for r in rows})
        snap = Snapshot(samples=len(rows))
        latest = max(r[1] for r in rows)
        meta = [r for r in rows if r[2] in META]
        for _, _, name, labels, value in meta:
            self.rg.meta(snap, name, dict(_labels(labels)), value)
        lines: dict[tuple[str, str], str] = {}  # a series' last sample in the window wins
        for _, _, name, labels, value in rows:
            if name not in META:
                inst, head = self.rg.prefix(name, _labels(labels))
                lines[(inst, head)] = head + repr(value)
        for (inst, _), line in lines.items():
            snap.lines.setdefault(inst, []).append(line)
        ts = _naive(latest / 1000.0)
        digest = hashlib.sha256(f"{start}:{','.join(requests)}".encode()).hexdigest()[:32]
        fetches = self.rg.fetches(snap, {})
        self.write(Round(ts, fetches, window_ms / 1000.0, f"rw-round-{digest}"))
        with self.store.transaction(["remote_write_staging"]) as con:
            con.execute(
                "DELETE FROM remote_write_staging WHERE ts_ms >= ? AND ts_ms < ? "
                "AND request IN (SELECT unnest(?::VARCHAR[]))",
                [start, start + window_ms, requests],
            )
        self.counters["rounds"] += 1


@lru_cache(maxsize=1 << 16)
def _labels(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in json.loads(text))


_receivers: dict[int, Receiver] = {}
_receivers_lock = threading.Lock()


def receiver(service: Any) -> Receiver:
    """The receiver of an ingest service (made on the first request)."""
    with _receivers_lock:
        rec = _receivers.get(id(service))
        if rec is None:
            rec = _receivers[id(service)] = Receiver(service.store, service.write)
        return rec


def flush(service: Any) -> int:
    """Write every window still staged for ``service`` (at shutdown: the last windows would
    otherwise wait, invisible, for the next request after a restart). The windows written."""
    with _receivers_lock:
        rec = _receivers.get(id(service))
    return rec.promote(flush=True) if rec is not None else 0


def add_route(bp: Any, writable: Callable[[], Any], body: Callable[[int], bytes]) -> None:
    """``POST /write`` on the ingest API's blueprint (its token check and errors apply)."""
    from flask import Response, request

    from telemetry.collect.http_api import ApiError, _json
    from telemetry.errors import StoreError

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
        except ValueError as exc:  # the store holds replayed data
            raise ApiError(409, str(exc)) from None
        except StoreError as exc:
            raise ApiError(507, str(exc)) from None
        return _json(200, reply)

