"""Prometheus remote_write 1.0 at ``POST /api/v1/write`` on ``serve --accept-ingest``.

An existing Prometheus, Grafana Agent or vmagent forwards its DCGM series with one config line
(README): ``remote_write: [{url: http://dash-host:8050/api/v1/write}]``. The body is a snappy
(block format) compressed protobuf ``WriteRequest`` (``prometheus/prompb``: time series of
labels and (value, timestamp ms) samples); the same token, size limits and JSON errors as the
rest of the ingest API apply, under the protocol's status rules: 2xx stored, 4xx never resent
(bad body), 5xx resent by the sender.

How a request becomes rounds, exactly once, is ``ingest.rw_receiver``'s; this module is the
wire format (``encode``, ``decode``), what a request's samples become as staging rows and which
are refused (``staged_rows``), and the receiver's ``Policy``.
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)

from telemetry.ingest.records import UNSAFE_NAME
from telemetry.ingest.regroup import _naive

CONTENT_TYPE = "application/x-protobuf"
MAX_BODY = 32 * 2**20  # compressed; Prometheus sends ~2,000 samples (~100 KB) per request
MAX_DECODED = 32 * 2**20  # vmagent's largest block is 8 MB; Prometheus's ~0.5 MB
MAX_LABELS_CHARS = 4096  # as the text parser: a series' labels beyond this are refused
MAX_GPU = (1 << 15) - 1  # a GPU index the store's SMALLINT holds (as ``dcgm_rows``' key)
KEEP = re.compile(r"^(?:DCGM_\w*|up|scrape_duration_seconds)$")
# A window is written once the data is an interval plus this past it: a sender's shards each
# send at least every 5 s (Prometheus's batch_send_deadline), so its parts have come by then.
SETTLE_S = 5.0
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TARGET = "remote_write"  # the receiver's own row in the targets table
# Prometheus's staleness marker: a NaN with this bit pattern, sent when a series ends (a target
# gone, Prometheus stopping). It is not a reading: an `up` of it would show the target down.
_STALE_BITS = bytes.fromhex("7ff0000000000002")


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
    """The DCGM and target-health samples of a request as staging rows. Ignored: samples of
    other metrics, and staleness markers. Refused: series with labels that are unnamed, over
    the length limit or carry control or bidirectional-override characters, or a ``gpu``
    label that is not a GPU index (``-1``, ``1e3``, ``32768``, a non-ASCII digit), and samples
    stamped outside ``bounds_ms`` ((oldest, newest) in ms since the epoch)."""
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
            if s.value != s.value and struct.pack(">d", s.value) == _STALE_BITS:
                out.ignored += 1
                continue
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
    gpu = dict(labels).get("gpu")
    if gpu is not None and not (gpu.isascii() and gpu.isdigit() and int(gpu) <= MAX_GPU):
        return f"with a gpu label that is not a GPU index 0..{MAX_GPU:,}"
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
