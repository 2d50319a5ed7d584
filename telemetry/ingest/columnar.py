"""Training metrics given column-wise, already typed, validated by the records policy at array
speed.

A log reader (``textlogs``) produces a million progress points from a 1 GiB job log, each
already a datetime, an int and floats. ``records.validate`` checks them one field of one record
at a time (about 6 µs a record); here each rule of ``records`` runs once per column over the
whole batch: the same fields, types, ranges, finiteness, time bounds and "at least one metric"
rule, the same reasons for the same rejected rows (tests compare both on the same input). Only
``train_metrics`` comes this way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from telemetry.ingest.records import (
    _F32,
    _FLOAT32_MAX,
    _INT_RANGE,
    EARLIEST,
    FUTURE_SLACK,
    METRICS,
    SCHEMAS,
    Rejection,
    Validated,
    _Bad,
    _row,
    _show,
)

KIND = "train_metrics"


def _day(t: np.datetime64, minutes: bool = False) -> str:
    return f"{pd.Timestamp(t):%Y-%m-%d %H:%M}" if minutes else f"{pd.Timestamp(t):%Y-%m-%d}"


def validate_columns(
    columns: Mapping[str, Sequence[Any]], now: datetime | None = None
) -> Validated:
    """Validate ``train_metrics`` records given as columns of equal length (``run``, ``ts`` as
    datetimes or None, ``step`` and the metrics as numbers or None); like
    ``records.validate`` on the same records. A column of another type, or a text run, is
    checked row by row by ``records`` itself."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    n = len(next(iter(columns.values()), []))
    reason: list[str | None] = [None] * n
    refused = np.zeros(n, bool)
    out: dict[str, np.ndarray] = {}

    def reject(mask: np.ndarray, why: Any) -> None:
        for i in np.flatnonzero(mask):
            if reason[i] is None:
                reason[i] = why(int(i))
                refused[i] = True

    runs = np.array(columns.get("run", [None] * n), dtype=object)
    for value in set(runs.tolist()):  # one run per file: its text checked once, by the policy
        try:
            _row(KIND, {"run": value, "step": 0, "loss": 0.0}, now)
        except _Bad as exc:
            reject(runs == value if value is not None else np.equal(runs, None),
                   lambda i, m=str(exc): m)
    for f in SCHEMAS[KIND][1:]:
        raw = columns.get(f.name)
        if raw is None:
            out[f.column] = np.full(n, np.nan if f.kind == "num" else None, dtype=object)
            continue
        if f.kind == "ts":
            ts = pd.to_datetime(pd.Series(raw, dtype=object), errors="coerce").to_numpy(
                "datetime64[us]")  # fmt: skip
            early = ~np.isnat(ts) & (ts < np.datetime64(EARLIEST, "us"))
            late = ~np.isnat(ts) & (ts > np.datetime64(now + FUTURE_SLACK, "us"))
            reject(early, lambda i, t=ts: f"ts {_day(t[i])} is before {EARLIEST:%Y}")
            reject(late, lambda i, t=ts: f"ts {_day(t[i], True)} is more than a day in the future")
            out["ts"] = np.where(np.isnat(ts), np.datetime64(now, "us"), ts)
            continue
        nm = f.name
        given = np.array(raw, dtype=object)
        missing = np.equal(given, None)
        v = np.where(missing, np.nan, given).astype(np.float64)
        if f.required:
            reject(missing, lambda i, nm=nm: f"missing required field {nm!r}")
        have = ~missing
        reject(have & ~np.isfinite(v),
               lambda i, nm=nm, x=v: f"{nm} is {float(x[i])}; it must be a finite number")
        ok = have & np.isfinite(v)
        limit = _INT_RANGE.get(f.type)
        if limit is not None:
            reject(ok & (v != np.floor(v)),
                   lambda i, nm=nm, r=raw: f"{nm} must be an integer, got {_show(r[i])}")
            reject(ok & (np.abs(v) >= float(limit + 1)),
                   lambda i, nm=nm, x=v: f"{nm} {int(x[i])} is out of range")
        elif f.type == _F32:
            reject(ok & (np.abs(v) > _FLOAT32_MAX),
                   lambda i, nm=nm, x=v: f"{nm} {float(x[i]):g} is out of range")
        if f.lo is not None or f.hi is not None:
            lo = -np.inf if f.lo is None else f.lo
            hi = np.inf if f.hi is None else f.hi
            bounds = f">= {f.lo:g}" if f.hi is None else f"between {f.lo:g} and {f.hi:g}"
            reject(ok & ((v < lo) | (v > hi)),
                   lambda i, nm=nm, b=bounds, r=raw: f"{nm} must be {b}, got {_show(r[i])}")
        out[f.column] = v if limit is None else np.array(raw, dtype=object)  # ints exact
    metrics = [out[m] for m in METRICS]
    none = np.logical_and.reduce([np.isnan(m) for m in metrics]) if n else np.zeros(0, bool)
    reject(none, lambda i: f"no metric: give loss or one of {', '.join(METRICS[1:])}")
    keep = ~refused
    table = {"run_id": pa.array(runs[keep], pa.string())}
    for f in SCHEMAS[KIND][1:]:
        col = out[f.column][keep]
        if f.column == "ts":
            table["ts"] = pa.array(col, f.type)
        elif _INT_RANGE.get(f.type) is not None:  # ints as given (NaN: not given)
            ints = pa.array(col.tolist(), f.type, from_pandas=True)
            table[f.column] = ints.fill_null(0) if f.column == "attempt" else ints
        else:
            col = col.astype(float)
            arr = pa.array(col, pa.float64(), mask=np.isnan(col))
            table[f.column] = arr.cast(f.type)
    frame = pa.table(table).to_pandas(types_mapper=pd.ArrowDtype)
    rejected = [Rejection(i, r) for i, r in enumerate(reason) if r is not None]
    return Validated(KIND, frame, rejected, {})
