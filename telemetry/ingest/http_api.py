"""The server's HTTP ingest API: forwarded scrape rounds, training metrics and run events.

Mounted on the dashboard's Flask server by ``factoryfloor serve --accept-ingest`` (the process
that owns the store). Endpoints (all JSON replies; errors are ``{"error": reason}`` with a 4xx
or 5xx status):

``POST /api/v1/scrape``
    One scrape round from an ingest daemon (``telemetry.ingest.wire``): gzip'd JSON with
    ``Content-Type: application/vnd.factoryfloor.round+json``, ``Content-Encoding: gzip`` and
    ``X-Batch-Id``. A batch id already stored is answered ``{"duplicate": true}`` and not
    stored again.
``POST /api/v1/metrics`` · ``/api/v1/interruptions`` · ``/api/v1/checkpoints`` · ``/api/v1/runs``
    ``Content-Type: application/json``; a record object or a list of them (schemas in the
    README). Valid records are stored, each rejected one is listed with its index and reason;
    if none is valid the reply is 422. An optional ``X-Batch-Id`` makes a retry safe.
``GET /api/v1/health``
    Whether the store accepts writes, and the ingest counters.

With a token configured every request needs ``Authorization: Bearer <token>`` (401 otherwise).
Bodies must declare their length and stay under the endpoint's limit (411, 413); JSON must be
UTF-8 and nested no deeper than any record needs (400). At most ``Limits.max_writes`` writes
are in flight at once; one more is answered 429 with ``Retry-After`` (a 503 carries one too).
A round over the decoded bound is answered 413 with ``max_decoded_bytes``: the forwarder then
stores it in parts per target group (``wire.encode_parts``) instead of losing it. Every error
is a short JSON reason, never a traceback; the log gets one line per kind of failure, a few
times a minute at most (``LogThrottle``).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from dataclasses import replace
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, request
from werkzeug.exceptions import HTTPException

from telemetry.errors import StoreError
from telemetry.ingest.daemon import Clock, utcnow
from telemetry.ingest.http import ApiError, Limits, LogThrottle, WriteGate, _json
from telemetry.ingest.posted import PostedRecords
from telemetry.ingest.records import RecordReport
from telemetry.ingest.seam import Batch, HealthBatch, Records, Round, Written
from telemetry.ingest.sink import RoundReport
from telemetry.ingest.targets import Fetch
from telemetry.ingest.wire import (
    CONTENT_TYPE,
    RoundTooLarge,
    WireError,
    decode_round,
)
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store

BUSY_RETRY_S = 5  # Retry-After of a 503 while both decoding slots are taken
READ_ONLY_RETRY_S = 300  # ... and of a 503 from a server whose store is read-only
_BATCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
RECORD_ENDPOINTS = {
    "metrics": "train_metrics",
    "interruptions": "interruptions",
    "checkpoints": "checkpoints",
    "runs": "runs",
}


class IngestService:
    """Everything that writes into the server's store goes through here, one writer at a time:
    forwarded rounds, the server's own collection loop, and posted records. A ``BatchSink``
    (``write``) around the store writer, plus the HTTP endpoints' replies."""

    accepts = StoreWriter.accepts

    def __init__(
        self,
        store: Store,
        into_replay: bool = False,
        clock: Clock = utcnow,
        limits: Limits | None = None,
        rw_policy: Any = None,
    ) -> None:
        self.store = store
        self.rw_policy = rw_policy  # remote_write's ``Policy`` (None: its defaults)
        self.limits = limits or Limits()
        self.gate = WriteGate(self.limits.max_writes, self.limits.retry_after_s)
        self.writer = StoreWriter(store, into_replay=into_replay)
        self.posted = PostedRecords()  # the source posted records are, with their health
        self.clock = clock
        self._lock = threading.Lock()
        self.counters = {"rounds": 0, "duplicates": 0, "records": 0, "rejected_records": 0}
        self.decoding = threading.BoundedSemaphore(2)  # rounds in memory at once (see scrape)

    def write(self, batch: Batch) -> Written:
        """One batch into the store (the sink side of the seam), counted; a stored round's
        line is the server's short one."""
        with self._lock:
            written = self.writer.write(batch)
        if isinstance(batch, Round):
            self.counters["duplicates" if written.duplicate else "rounds"] += 1
            if isinstance(rep := written.report, RoundReport):
                line = f"scrape: {rep.up}/{rep.targets} targets up, {rep.samples:,} GPU samples"
                return replace(written, line=line)
        elif isinstance(batch, Records) and isinstance(rep := written.report, RecordReport):
            self.counters["records"] += rep.stored
            self.counters["rejected_records"] += len(rep.rejected)
        return written

    def ready_for_rounds(self) -> None:
        """ValueError now if the store cannot take scrape rounds (it holds a replay), before a
        caller acknowledges data it could never store."""
        with self._lock:
            self.writer.round_sink()

    def finish(self) -> None:
        """At shutdown, after the collection loops stopped: ``StoreWriter.finish``."""
        with self._lock:
            self.writer.finish()

    def write_round(
        self, ts: datetime, fetches: list[Fetch], interval_s: float, batch_id: str | None = None
    ) -> dict[str, Any]:
        if batch_id is not None and self.seen(batch_id):
            self.counters["duplicates"] += 1
            return {"duplicate": True, "batch_id": batch_id}
        written = self.write(Round(ts, fetches, interval_s, batch_id))
        rep = written.report
        if written.duplicate or not isinstance(rep, RoundReport):
            return {"duplicate": True, "batch_id": batch_id}
        return {
            "duplicate": False,
            "batch_id": batch_id,
            "targets": rep.targets,
            "up": rep.up,
            "samples": rep.samples,
            "xid_events": rep.xid_events,
            "rejected_lines": rep.rejected_lines,
        }

    def write_records(
        self, kind: str, records: list[Any], batch_id: str | None = None
    ) -> dict[str, Any]:
        batch = self.posted.batch(kind, records, batch_id)
        written = self.write(batch)
        now = self.clock()
        self.posted.settle(now, batch, written)
        try:  # the records are stored: their health row is not worth failing the reply for
            self.write(HealthBatch(now, self.posted.health_of(batch.target)))
        except StoreError as exc:
            logging.getLogger("factoryfloor.ingest").warning("health row not stored: %s", exc)
        rep = written.report
        assert isinstance(rep, RecordReport)  # records are stored or raise
        return {
            "stored": rep.stored,
            "duplicate": rep.duplicate,
            "rejected": [{"index": r.index, "reason": r.reason} for r in rep.rejected],
            "ignored_fields": rep.ignored_fields,
            "runs_created": rep.runs_created,
        }

    def seen(self, batch_id: str) -> bool:
        return bool(
            self.store.scalar("SELECT count(*) FROM ingest_batches WHERE batch_id = ?", [batch_id])
        )


def _declared(limit: int) -> int:
    """The body's declared length: 411 without one, 413 over ``limit`` (nothing read yet)."""
    length = request.content_length
    if length is None:
        raise ApiError(411, "the request must declare its Content-Length")
    if length > limit:
        raise ApiError(413, f"body of {length:,} bytes is over this endpoint's {limit:,}")
    return length


def _body(limit: int) -> bytes:
    length = _declared(limit)
    data = request.get_data(cache=False)
    if len(data) != length:
        raise ApiError(400, f"body is {len(data):,} bytes, Content-Length said {length:,}")
    return data


def _json_doc(data: bytes) -> Any:
    """A record body parsed, or ``ApiError(400)`` saying why not. JSON is UTF-8 (RFC 8259), so
    other encodings are refused rather than guessed; a body nested thousands deep would
    otherwise end in Python's RecursionError, a 500."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"body is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"body is not JSON ({exc})") from None
    except RecursionError:
        raise ApiError(400, "body is not JSON this server accepts (nested too deeply)") from None
    except ValueError as exc:  # an integer of thousands of digits (Python's int limit)
        raise ApiError(400, f"body is not JSON this server accepts ({exc})") from None


def _round(data: bytes, max_decoded: int) -> tuple[datetime, float, list[Fetch]]:
    """A forwarded round decoded, or ``ApiError`` with ``decode_round``'s reason: 413 (and the
    bound, so the forwarder can split it per target group) for a round too large once
    decompressed, 400 for anything else."""
    try:
        return decode_round(data, max_decoded)
    except RoundTooLarge as exc:
        raise ApiError(413, str(exc), max_decoded_bytes=max_decoded) from None
    except WireError as exc:
        raise ApiError(400, str(exc)) from None
    except RecursionError:
        raise ApiError(400, "round JSON is nested too deeply") from None


def _batch_id(required: bool) -> str | None:
    bid = request.headers.get("X-Batch-Id")
    if bid is None:
        if required:
            raise ApiError(400, "X-Batch-Id header missing (it makes redelivery safe)")
        return None
    if not _BATCH_ID.match(bid):
        raise ApiError(400, "X-Batch-Id must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return bid


def _media_type() -> str:
    return (request.content_type or "").split(";", 1)[0].strip().lower()


def make_blueprint(
    service: IngestService | None, token: str | None = None, accept: bool = True
) -> Blueprint:
    """The ingest API. Without ``accept`` (or a ``service``: the store is read-only in this
    process) every write is answered 503 with how to enable ingest."""
    bp = Blueprint("ingest_api", __name__, url_prefix="/api/v1")
    limits = service.limits if service is not None else Limits()
    throttle = LogThrottle(logging.getLogger("factoryfloor.ingest"))

    @bp.before_request
    def _auth() -> Response | None:
        if token is None:
            return None
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return _json(401, {"error": "missing or wrong token (Authorization: Bearer ...)"})
        return None

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return _json(exc.status, {"error": exc.reason, **exc.extra}, exc.retry_after_s)

    @bp.errorhandler(Exception)
    def _internal(exc: Exception) -> Response:  # a bug: say so in JSON, log the traceback once
        if isinstance(exc, HTTPException):  # Flask's own 404/405/413...
            return _json(exc.code or 500, {"error": exc.description or exc.name})
        kind = type(exc).__name__
        throttle(logging.ERROR, kind, f"ingest API error on {request.path}: {kind}", exc)
        return _json(500, {"error": f"internal error ({kind}); see the server log"})

    def _writable() -> IngestService:
        if service is None or not accept:
            raise ApiError(
                503,
                "this server opened its store read-only; start `factoryfloor serve` with "
                "--accept-ingest to accept writes",
                retry_after_s=READ_ONLY_RETRY_S,
            )
        return service

    @bp.get("/health")
    def health() -> Response:
        return _json(
            200,
            {
                "ok": True,
                "accepts_ingest": service is not None and accept,
                **(service.counters if service is not None else {}),
                **(service.store.cache_stats() if service is not None else {}),
            },
        )

    @bp.post("/scrape")
    def scrape() -> Response:
        svc = _writable()
        bid = _batch_id(required=True)
        if _media_type() != CONTENT_TYPE:
            raise ApiError(415, f"Content-Type must be {CONTENT_TYPE}")
        if request.headers.get("Content-Encoding", "").lower() != "gzip":
            raise ApiError(415, "Content-Encoding must be gzip")
        _declared(limits.round_body)
        if svc.seen(bid):  # a redelivery: answered before its body is read
            svc.counters["duplicates"] += 1
            return _json(200, {"duplicate": True, "batch_id": bid})
        svc.gate.acquire()
        try:
            if not svc.decoding.acquire(timeout=30):  # bounded memory: a few rounds at a time
                raise ApiError(503, "busy storing other rounds; retry", BUSY_RETRY_S)
            # The slot is held until the round is written, not just decoded: a decoded round
            # that waits for the write lock holds its memory too, and any number could pile up.
            try:
                ts, interval, fetches = _round(_body(limits.round_body), limits.round_decoded)
                return _json(200, svc.write_round(ts, fetches, interval, bid))
            except ValueError as exc:  # e.g. the store holds replayed data
                raise ApiError(409, str(exc)) from None
            except StoreError as exc:
                raise ApiError(507, str(exc)) from None
            finally:
                svc.decoding.release()
        finally:
            svc.gate.release()

    def records(endpoint: str) -> Response:
        svc = _writable()
        bid = _batch_id(required=False)
        if _media_type() != "application/json":
            raise ApiError(415, "Content-Type must be application/json")
        _declared(limits.json_body)
        svc.gate.acquire()
        try:
            doc = _json_doc(_body(limits.json_body))
            items = doc if isinstance(doc, list) else [doc]
            if not items:
                raise ApiError(422, "no records in the body")
            try:
                rep = svc.write_records(RECORD_ENDPOINTS[endpoint], items, bid)
            except StoreError as exc:
                raise ApiError(507, str(exc)) from None
        finally:
            svc.gate.release()
        if not rep["duplicate"] and rep["stored"] == 0:
            return _json(422, {"error": "no valid records", **rep})
        return _json(200, rep)

    for name in RECORD_ENDPOINTS:
        bp.add_url_rule(
            f"/{name}", f"post_{name}", lambda name=name: records(name), methods=["POST"]
        )

    from telemetry.ingest.rw_receiver import add_route  # Prometheus remote_write 1.0

    add_route(bp, _writable, _body)
    methods = {"health": "GET", "scrape": "POST", **dict.fromkeys(RECORD_ENDPOINTS, "POST")}
    methods["write"] = "POST"

    @bp.route("/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    def elsewhere(rest: str) -> Response:
        """Any other path or method under /api/v1/ gets a reason in JSON. Without this the
        dashboard's catch-all page route answers it: a 200 HTML page to ``GET /api/v1/metrics``,
        a bare HTML 405 to a POST to a misspelt endpoint."""
        if rest in methods:
            resp = _json(405, {"error": f"/api/v1/{rest} takes {methods[rest]} only"})
            resp.headers["Allow"] = methods[rest]
            return resp
        known = ", ".join(f"{m} /api/v1/{e}" for e, m in methods.items())
        raise ApiError(404, f"no endpoint /api/v1/{rest[:100]}; there are {known}")

    return bp
