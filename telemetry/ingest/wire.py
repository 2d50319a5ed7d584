"""The forwarding format: one scrape round as a gzip'd JSON document, from daemon to server.

The daemon forwards what it fetched (each target's exposition text or the reason it is down)
rather than parsed rows: the server owns the store, so it alone knows which GPUs are new and
which XIDs changed, and the text compresses about tenfold. The same bytes are what the daemon
keeps in its spool, so a spooled round is delivered exactly as it would have been live.

``decode_round`` is the server's gate: it bounds the decompressed size and checks every field's
type, raising ``WireError`` (a reason in words, answered with HTTP 400) for anything else.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from datetime import datetime, timedelta
from typing import Any

from telemetry.ingest.targets import Fetch, Target, normalise

FORMAT = "factoryfloor-round/1"
CONTENT_TYPE = "application/vnd.factoryfloor.round+json"
MAX_DECODED_BYTES = 256 * 1024 * 1024  # twice a 2,048-node round of default counters (~130 MB)
MAX_FETCHES = 65_536
MAX_TEXT_FIELD = 4096  # error strings and label values
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class WireError(ValueError):
    """A forwarded round that cannot be accepted, with the reason."""


class RoundTooLarge(WireError):
    """A round over the decoded-size bound: the sender should split it per target group."""


def encode_round(ts: datetime, fetches: list[Fetch], interval_s: float) -> bytes:
    return _encode(ts, [_dumps(_item(f)) for f in fetches], interval_s)


def encode_parts(
    ts: datetime, fetches: list[Fetch], interval_s: float, max_bytes: int = MAX_DECODED_BYTES
) -> list[bytes]:
    """The round as one body, or, when it would decode to more than ``max_bytes``, as several
    rounds of the same time, each a group of whole targets that decodes within the bound (a
    target's text is never cut). Each part is a round of its own on the wire (its own batch
    id, stored exactly once); the sink takes parts of one time as one round. A single target
    over the bound makes a part of its own, which the server refuses with a reason."""
    items = [_dumps(_item(f)) for f in fetches]
    room = max_bytes - len(_dumps(_doc(ts, interval_s, "")))
    groups: list[list[str]] = [[]]
    size = 0
    for it in items:
        n = len(it.encode()) + 1  # and its comma
        if groups[-1] and size + n > room:
            groups.append([])
            size = 0
        groups[-1].append(it)
        size += n
    return [_encode(ts, g, interval_s) for g in groups]


def _item(f: Fetch) -> dict[str, Any]:
    return {
        "url": f.target.url,
        "labels": f.target.labels,
        "text": f.text,
        "error": f.error,
        "duration_s": f.duration_s,
        "status": f.status,
    }


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def _doc(ts: datetime, interval_s: float, fetches: str) -> dict[str, Any]:
    return {"format": FORMAT, "ts": ts.isoformat(), "interval_s": interval_s, "fetches": fetches}


def _encode(ts: datetime, items: list[str], interval_s: float) -> bytes:
    """The document with ``items`` (each a fetch's JSON) spliced in as its fetches list."""
    head = _dumps(_doc(ts, interval_s, ""))
    assert head.endswith(',"fetches":""}')
    text = head[: -len('""}')] + "[" + ",".join(items) + "]}"
    return gzip.compress(text.encode(), compresslevel=3)


def _gunzip(body: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=31)  # gzip framing only
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise WireError(f"body is not gzip data ({exc})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise RoundTooLarge(
            f"round larger than {limit:,} bytes once decompressed; split it per target group"
        )
    if not d.eof:
        raise WireError("gzip data is truncated")
    return out


def _text(v: Any, what: str, limit: int | None = MAX_TEXT_FIELD) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise WireError(f"{what} must be a string or null")
    if limit is not None and len(v) > limit:
        raise WireError(f"{what} is longer than {limit} characters")
    # JSON's "\udcff" escapes decode to lone surrogates, which no store column can hold: the
    # round would fail in the sink, again on every retry. The daemon never sends them (it
    # decodes bodies with errors="replace"). isascii() is O(1), so ASCII text costs nothing.
    if not v.isascii() and _SURROGATE.search(v):
        raise WireError(f"{what} is not valid Unicode text (a lone surrogate)")
    return v


def decode_round(
    body: bytes, max_bytes: int = MAX_DECODED_BYTES, now: datetime | None = None
) -> tuple[datetime, float, list[Fetch]]:
    """(round time, scrape interval, fetches) of a forwarded round; ``WireError`` says what is
    wrong."""
    raw = _gunzip(body, max_bytes)
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"round is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise WireError(f"not a {FORMAT} document")
    try:
        ts = datetime.fromisoformat(str(doc.get("ts")))
    except ValueError:
        raise WireError("ts is not an ISO-8601 time") from None
    if ts.tzinfo is not None:
        raise WireError("ts must be UTC without an offset, as the daemon writes it")
    now = now or datetime.utcnow()
    if not (now - timedelta(days=366) <= ts <= now + timedelta(hours=1)):
        raise WireError(f"ts {ts.isoformat()} is more than a year old or in the future")
    interval = doc.get("interval_s")
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not 0.1 <= interval <= 86400
    ):
        raise WireError("interval_s must be a number of seconds between 0.1 and 86400")
    items = doc.get("fetches")
    if not isinstance(items, list) or len(items) > MAX_FETCHES:
        raise WireError(f"fetches must be a list of at most {MAX_FETCHES} targets")
    fetches = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise WireError(f"fetch {i} is not an object")
        try:
            url = normalise(_text(it.get("url"), f"fetch {i} url") or "")
        except ValueError as exc:
            raise WireError(f"fetch {i}: {exc}") from None
        labels = it.get("labels") or {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= MAX_TEXT_FIELD
            for k, v in labels.items()
        ):
            raise WireError(f"fetch {i} labels must map strings to strings")
        text = _text(it.get("text"), f"fetch {i} text", limit=None)
        error = _text(it.get("error"), f"fetch {i} error")
        if (text is None) == (error is None):
            raise WireError(f"fetch {i} must have exactly one of text and error")
        dur = it.get("duration_s")
        if isinstance(dur, bool) or not isinstance(dur, int | float) or not math.isfinite(dur):
            raise WireError(f"fetch {i} duration_s must be a number")
        status = it.get("status")
        if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
            raise WireError(f"fetch {i} status must be an integer or null")
        fetches.append(Fetch(Target(url, labels), text, error, max(0.0, float(dur)), status))
    return ts, float(interval), fetches
