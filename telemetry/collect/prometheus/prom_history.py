"""Per-GPU history older than the store's raw window, read back from Prometheus.

With ``--raw-retention`` the store keeps per-GPU samples for a window and the rollups for
ever (``telemetry.store.retention``). A cluster that already runs Prometheus usually keeps those
series far longer, so when ``serve`` has a ``--prometheus`` source, the GPU drill-down of a
range that starts before the store's horizon reads the missing part of each GPU's series
from the first server that answers: one ``query_range`` per metric, averaged over each
bucket (``avg_over_time``; the last XID by ``max_over_time``) at the bucket the local query
uses, for the node's ``Hostname`` label. The local samples stay the source for what the
store still holds; a server that does not answer leaves the chart with the local part and
the drill-down's note about the horizon, never an error.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pandas as pd

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.collect.prometheus.prom_client import PromClient, PromDown

# The drill-down's columns, and how a bucket of each is summarised.
SERIES = ("util_pct", "temp_c", "power_w", "sm_clock_mhz", "fb_used_mib", "xid_last")
_FIELD = {c.name: c.field for c in SAMPLE_COLUMNS}
_MS = 0.001


def _quoted(value: str) -> str:
    """A PromQL string literal (a host name comes from exporter labels: escape it)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _epoch(t: datetime) -> float:
    return t.replace(tzinfo=UTC).timestamp()


class PromHistory:
    """Reads node series from the servers of a ``--prometheus`` source (first that answers).

    Every frame it returns says how the read went in ``attrs["tsdb"]``: None when a server
    answered, else why none did, so a page tells an unreachable TSDB from a node it has no
    series of, and never draws the missing part as zero."""

    def __init__(self, clients: Sequence[PromClient]) -> None:
        self.clients = list(clients)
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def node_gpu_series(
        self, host: str, start: datetime, end: datetime, bucket_s: int
    ) -> pd.DataFrame:
        """Each GPU of ``host`` from ``start`` to ``end`` (naive UTC), one row per GPU and
        bucket: ts, gpu, and the ``SERIES`` columns (as ``queries.gpus.node_gpu_series``);
        empty when no server has the node or none answers."""
        exprs = {col: _FIELD[col] for col in SERIES}
        return self._first(host, start, end, bucket_s, exprs)

    def node_gpu_field(
        self, host: str, start: datetime, end: datetime, bucket_s: int, field: str, name: str
    ) -> pd.DataFrame:
        """One exporter ``field`` (a DCGM metric name) of each GPU of ``host``, as column
        ``name``: ts, gpu, name, bucket_s (the drill-down's further metric)."""
        return self._first(host, start, end, bucket_s, {name: field})

    def _first(
        self, host: str, start: datetime, end: datetime, bucket_s: int, exprs: dict[str, str]
    ) -> pd.DataFrame:
        step = max(int(bucket_s), 1)
        errors = []
        for client in self.clients:
            try:
                out = self._read(client, host, start, end, step, exprs)
                out.attrs["tsdb"] = None
                return out
            except PromDown as exc:
                errors.append(f"{client.url}: {exc}")
                with self._lock:
                    self.last_error = errors[-1]
        out = _empty(exprs)
        out.attrs["tsdb"] = "; ".join(errors) or "no server configured"
        return out

    def _read(
        self, client: PromClient, host: str, start: datetime, end: datetime, step: int,
        exprs: dict[str, str],
    ) -> pd.DataFrame:  # fmt: skip
        # one query_range per series, all at once: the drill-down waits for the slowest of
        # them, not their sum (six in turn took ~100 ms against VictoriaMetrics here)
        cols = list(exprs)
        with ThreadPoolExecutor(max_workers=len(cols)) as pool:
            parts = pool.map(lambda c: self._one(client, host, start, end, step, c, exprs[c]), cols)
            frames = [f for part in parts for f in part]
        if not frames:
            return _empty(exprs)
        long = pd.concat(frames, ignore_index=True)
        wide = long.pivot(index=["ts", "gpu"], columns="col", values="value").reset_index()
        for col in exprs:
            if col not in wide:
                wide[col] = float("nan")
        wide["bucket_s"] = step
        return wide[["ts", "gpu", *exprs, "bucket_s"]].sort_values(["gpu", "ts"])

    def _one(
        self, client: PromClient, host: str, start: datetime, end: datetime, step: int,
        col: str, field: str,
    ) -> list[pd.DataFrame]:  # fmt: skip
        fn = "max_over_time" if col == "xid_last" else "avg_over_time"
        expr = f"{fn}({field}{{Hostname={_quoted(host)}}}[{step}s])"
        # PromQL stamps a window at its end and takes a sample on that end; the store's
        # bucket [b, b + step) is stamped at its start: evaluated a millisecond before each
        # bucket's end, on the store's bucket grid (``time_bucket``) whatever second the range
        # starts, the window holds the same samples (exporter times are in ms)
        first = _epoch(start) // step * step + step - _MS
        return _frames(client.query_range(expr, first, _epoch(end), step), col, step)


def _frames(series_list: list[dict], col: str, step: int) -> list[pd.DataFrame]:
    """One frame per GPU series of a ``query_range`` answer (ts at the bucket's start)."""
    frames = []
    for series in series_list:
        gpu = series.get("metric", {}).get("gpu")
        if gpu is None or not str(gpu).isdigit():
            continue
        values = series.get("values") or []
        frames.append(
            pd.DataFrame(
                {
                    "ts": pd.to_datetime(
                        [round((float(t) + _MS - step) * 1000) for t, _ in values], unit="ms"
                    ),
                    "gpu": int(gpu),
                    "col": col,
                    "value": pd.to_numeric([v for _, v in values], errors="coerce"),
                }
            )
        )
    return frames


def _empty(exprs: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame(columns=["ts", "gpu", *exprs, "bucket_s"])


def merged_node_series(
    local: pd.DataFrame,
    history: PromHistory | None,
    host: str,
    start: datetime,
    raw_since: datetime | None,
    bucket_s: int,
) -> pd.DataFrame:
    """``local`` (``queries.gpus.node_gpu_series``) with what came before ``raw_since`` read
    from ``history``, when the range starts before it (otherwise ``local`` as it is)."""
    if history is None or raw_since is None or start >= raw_since:
        return local
    return merged(local, history.node_gpu_series(host, start, raw_since, bucket_s), raw_since)


def merged(local: pd.DataFrame, older: pd.DataFrame, raw_since: datetime) -> pd.DataFrame:
    """The store's ``local`` rows after ``older`` (read from the TSDB) up to ``raw_since``;
    the result keeps ``older``'s ``attrs["tsdb"]`` (how the read went)."""
    status = older.attrs.get("tsdb")
    if older.empty:
        out = local.copy()
    else:
        older = older[older["ts"] < raw_since]
        out = pd.concat([older, local], ignore_index=True) if not local.empty else older
        out = out.sort_values(["gpu", "ts"], kind="stable").reset_index(drop=True)
    out.attrs["tsdb"] = status
    return out
