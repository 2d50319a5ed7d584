"""Operators' writes over HTTP: corrections of an interruption's cause (also from the Failures
page) and silences of delivered alerts (``telemetry.alerting``).

``serve --operator-token-file FILE`` (or ``FACTORYFLOOR_OPERATOR_TOKEN``) allows corrections;
without it the dashboard stays read-only. The token is separate from the dashboard's access
token: people who may look are not all people who may relabel.

``POST /api/v1/interruptions/label`` with ``X-Operator-Token: <operator token>`` (a header of
its own: ``Authorization`` carries the dashboard's access token when one is set) and a
JSON body ``{"run": ..., "ts": ISO time of the interruption, "component": ..., "category":
optional, "by": who}``. Replies: 200 with the stored label; 403 without corrections enabled
or with a missing or wrong token (nothing is changed); 400/404 for a body that is not such an
object, an unknown component or category, or no interruption at that time; 409 on a store
opened read-only; 429 with Retry-After while the write cap's corrections are in flight.

``POST /api/v1/goodput/exclusions``, the same header and rules, body ``{"run": ..., "start":
ISO, "end": ISO, "reason": "maintenance", "by": who}``: a window the run's goodput leaves out
of its wall time (at most 31 days; 404 for an unknown run).

``POST /api/v1/alerts/silences``, the same header and rules, body ``{"matchers": {"alertname":
"GpuHot"}, "duration": "2h", "comment": ..., "by": who}``: alerts whose labels equal every
matcher go to no receiver until the silence ends (at most 30 days). The reply carries its
``id``; ``POST /api/v1/alerts/silences/end`` with ``{"id": ...}`` ends it early (404 if no
silence in force has that id).

``POST /api/v1/alerts/ack``, the same header and rules, body ``{"fingerprint": ..., "by":
who}``: acknowledges a firing alert (its fingerprint as its notifications carry it); who and
when are kept with its history (``telemetry.alert_history``). 404 when no alert with that
fingerprint fires, 409 when someone already acknowledged it (the first stands).
"""

from __future__ import annotations

import hmac
import json
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, request

from telemetry.derive import derive
from telemetry.errors import StoreError
from telemetry.ingest.http import ApiError, WriteGate
from telemetry.store import Store

MAX_LABEL_BODY = 16 * 1024
MAX_LABEL_TEXT = 256
FORBIDDEN_OFF = (
    "corrections are disabled: this server was started without an operator token "
    "(serve --operator-token-file FILE)"
)
FORBIDDEN_TOKEN = "operator token missing or wrong; nothing was changed"


def operator_ok(given: str | None, expected: str | None) -> bool:
    """Whether ``given`` is the operator token (constant-time); never with none configured."""
    if not expected or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def _reply(status: int, body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, default=str), status, mimetype="application/json")


def apply_label(store: Store, body: Any) -> tuple[int, dict[str, Any]]:
    """Validate and store one correction; (HTTP status, JSON reply)."""
    if not isinstance(body, dict):
        return 400, {"error": "body must be a JSON object with run, ts and component"}
    run, ts, comp = body.get("run"), body.get("ts"), body.get("component")
    cat, by = body.get("category"), body.get("by") or "operator"
    if not all(isinstance(v, str) and v for v in (run, ts, comp)):
        return 400, {"error": "run, ts and component must be non-empty strings"}
    if (cat is not None and not isinstance(cat, str)) or not isinstance(by, str):
        return 400, {"error": "category and by must be strings"}
    if not all(_storable(v) for v in (run, ts, comp, cat or "", by)):
        return 400, {"error": "run, ts, component, category and by must be printable text"}
    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return 400, {"error": f"ts is not an ISO-8601 time: {ts[:40]!r}"}
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    try:
        label = derive.relabel(store, run, when, comp, cat, by)
    except derive.LabelError as exc:
        return (404 if "no interruption" in str(exc) else 400), {"error": str(exc)}
    except StoreError as exc:
        return 409, {"error": str(exc)}
    return 200, {"label": label}


def _storable(v: str) -> bool:
    """Text a store column can hold and a person can read: at most ``MAX_LABEL_TEXT``
    characters, UTF-8 (no lone surrogate from a JSON escape), no control characters."""
    if len(v) > MAX_LABEL_TEXT or any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def make_label_blueprint(
    store: Store, operator_token: str | None, gate: WriteGate | None = None
) -> Blueprint:
    """The corrections endpoint; ``gate`` caps the corrections in flight (its own when none
    is shared)."""
    bp = Blueprint("factoryfloor_labels", __name__)
    gate = gate or WriteGate(4)

    def operator_post(apply: Any) -> Response:
        """The checks every operator write shares, then ``apply(body)`` -> (status, reply)."""
        if not operator_token:
            return _reply(403, {"error": FORBIDDEN_OFF})
        if not operator_ok(request.headers.get("X-Operator-Token"), operator_token):
            return _reply(403, {"error": FORBIDDEN_TOKEN})
        length = request.content_length
        if length is None:
            return _reply(411, {"error": "Content-Length required"})
        if length > MAX_LABEL_BODY:
            return _reply(413, {"error": f"body over {MAX_LABEL_BODY} bytes"})
        try:
            gate.acquire()
        except ApiError as exc:
            resp = _reply(exc.status, {"error": exc.reason})
            resp.headers["Retry-After"] = str(exc.retry_after_s)
            return resp
        try:
            try:
                body = json.loads(request.get_data(cache=False).decode("utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError):
                return _reply(400, {"error": "body is not UTF-8 JSON"})
            status, reply = apply(body)
            return _reply(status, reply)
        finally:
            gate.release()

    @bp.post("/api/v1/interruptions/label")
    def label() -> Response:
        return operator_post(lambda body: apply_label(store, body))

    @bp.post("/api/v1/goodput/exclusions")
    def exclusion() -> Response:
        return operator_post(lambda body: apply_exclusion(store, body))

    @bp.post("/api/v1/alerts/silences")
    def silence() -> Response:
        return operator_post(lambda body: apply_silence(store, body))

    @bp.post("/api/v1/alerts/silences/end")
    def end_silence() -> Response:
        return operator_post(lambda body: apply_end_silence(store, body))

    @bp.post("/api/v1/alerts/ack")
    def ack() -> Response:
        return operator_post(lambda body: apply_ack(store, body))

    return bp


def apply_silence(store: Store, body: Any) -> tuple[int, dict[str, Any]]:
    """Validate and store one silence: ``{"matchers": {label: value}, "duration": "2h",
    "comment": ..., "by": who}``; (HTTP status, JSON reply)."""
    from telemetry.alerting import add_silence, parse_duration

    if not isinstance(body, dict) or not isinstance(body.get("matchers"), dict):
        return 400, {"error": "body must be a JSON object with matchers {label: value}"}
    comment, by = body.get("comment") or "", body.get("by") or "operator"
    if not all(isinstance(v, str) and _storable(v) for v in (comment, by)):
        return 400, {"error": "comment and by must be printable text"}
    matchers = body["matchers"]
    if not all(isinstance(v, str) and _storable(v) for v in [*matchers, *matchers.values()]):
        return 400, {"error": "matchers must map label names to values, both printable text"}
    try:
        duration = parse_duration(body.get("duration", "2h"), "duration")
        s = add_silence(store, matchers, duration, by, comment)
    except ValueError as exc:
        return 400, {"error": str(exc)}
    except StoreError as exc:
        return 409, {"error": str(exc)}
    return 200, {"silence": {"id": s.id, "matchers": s.matchers, "ends_at": s.ends_at.isoformat()}}


def apply_end_silence(store: Store, body: Any) -> tuple[int, dict[str, Any]]:
    """End one silence now: ``{"id": ...}`` as the silence's creation returned it."""
    from telemetry.alerting import end_silence

    sid = body.get("id") if isinstance(body, dict) else None
    if not isinstance(sid, str) or not sid or not _storable(sid):
        return 400, {"error": "body must be a JSON object with the silence's id"}
    try:
        ended = end_silence(store, sid)
    except StoreError as exc:
        return 409, {"error": str(exc)}
    return (200, {"ended": sid}) if ended else (404, {"error": "no silence in force has that id"})


def apply_ack(store: Store, body: Any) -> tuple[int, dict[str, Any]]:
    """Acknowledge one firing alert: ``{"fingerprint": ..., "by": who}`` (the fingerprint its
    notifications carry); who and when are kept with its history."""
    from telemetry.alert_history import AckError, acknowledge

    if not isinstance(body, dict):
        return 400, {"error": "body must be a JSON object with the alert's fingerprint and by"}
    fp, by = body.get("fingerprint"), body.get("by") or "operator"
    if not all(isinstance(v, str) and v and _storable(v) for v in (fp, by)):
        return 400, {"error": "fingerprint and by must be printable text"}
    try:
        e = acknowledge(store, fp, by)
    except AckError as exc:
        return exc.status, {"error": str(exc)}
    except StoreError as exc:
        return 409, {"error": str(exc)}
    return 200, {"ack": {"fingerprint": e.fingerprint, "labels": e.labels, "by": e.acked_by,
                         "at": e.acked_at.isoformat() if e.acked_at else None,
                         "first_seen": e.first_seen.isoformat()}}  # fmt: skip


MAX_EXCLUSION_DAYS = 31  # a maintenance window longer than a month is a mistake


def apply_exclusion(store: Store, body: Any) -> tuple[int, dict[str, Any]]:
    """Store one window a run's goodput leaves out (maintenance, an agreed stop): ``{"run":
    ..., "start": ISO, "end": ISO, "reason": ..., "by": who}``; (HTTP status, JSON reply)."""
    if not isinstance(body, dict):
        return 400, {"error": "body must be a JSON object with run, start, end and reason"}
    run, reason, by = body.get("run"), body.get("reason") or "", body.get("by") or "operator"
    if not all(isinstance(v, str) and _storable(v) for v in (run, reason, by)) or not run:
        return 400, {"error": "run, reason and by must be printable text (run not empty)"}
    times = []
    for key in ("start", "end"):
        text = body.get(key)
        try:
            t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            return 400, {"error": f"{key} is not an ISO-8601 time: {str(text)[:40]!r}"}
        times.append(t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t)
    start, end = times
    if not start < end or (end - start).days > MAX_EXCLUSION_DAYS:
        return 400, {"error": f"end must be after start, at most {MAX_EXCLUSION_DAYS} days on"}
    if not store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [run]):
        return 404, {"error": f"no run {run[:80]!r} in this store"}
    now = datetime.now(UTC).replace(tzinfo=None)
    try:
        with store.transaction(["goodput_exclusions"]) as con:
            con.execute(
                "INSERT INTO goodput_exclusions VALUES (?, ?, ?, ?, ?, ?)",
                [run, start, end, reason, by, now],
            )
    except StoreError as exc:
        return 409, {"error": str(exc)}
    return 200, {"exclusion": {"run": run, "start": start.isoformat(), "end": end.isoformat(),
                               "reason": reason, "by": by}}  # fmt: skip
