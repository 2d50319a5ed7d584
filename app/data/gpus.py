"""The GPUs page's data: heatmaps, distributions, outliers, workload classes, and a node's
drill-down (from the store, its rollups or Prometheus once raw samples expired)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from app.data.services import bound, services, store
from telemetry.metrics.alert_rules import LOW_UTIL_PCT as LOW_UTIL_PCT  # vocabulary re-export
from telemetry.queries import TimeRange, gpu_rollup
from telemetry.queries import failures as failq
from telemetry.queries import gpu_node as nodeq
from telemetry.queries import gpus as gpuq
from telemetry.queries import outliers as outq
from telemetry.queries import workload as workq
from telemetry.queries.gpu_node import NODE_METRICS
from telemetry.vocabulary import HOT_C, IDLE_PCT

gpu_metric = gpuq.metric


def gpu_threshold(key: str) -> float | None:
    """The operating threshold of a GPU metric (hot, idle) to mark on its charts, if any."""
    return {"temp": HOT_C, "util": IDLE_PCT, "real": IDLE_PCT}.get(key)


gpu_heatmap = bound(gpuq.heatmap)
culprits = bound(failq.culprits)
gpu_distribution = bound(gpuq.distribution)




def gpus_below(tr: TimeRange) -> pd.DataFrame:
    return gpu_rollup.gpus_below(store(), tr, LOW_UTIL_PCT)


util_basis = bound(workq.basis)
workload_classes = bound(workq.classes)
gpu_outliers = bound(outq.outliers)
outlier_reasons = outq.reason_counts
worst_node = bound(outq.worst_node)
node_info = bound(gpuq.node_info)


def node_gpu_series(host: str, tr: TimeRange) -> pd.DataFrame:
    """The node's GPUs over the range. Before the raw-retention horizon: from the per-GPU
    rollups when the bucket fits one, else from the TSDB when ``serve`` reads one
    (``Services.history``; ``attrs["tsdb"]`` says why it did not answer), else in buckets
    no finer than the finest per-GPU rollup."""
    from telemetry.collect.prometheus.prom_history import merged_node_series

    s = store()
    expired = s.raw_since()
    if expired is None or tr.start >= expired:
        return gpuq.node_gpu_series(s, host, tr)
    bucket = gpuq.nice_bucket(s, tr, gpuq.NODE_POINTS)
    if services().history is not None and gpu_rollup.node_series_level(s, tr, bucket) is None:
        local = gpuq.node_gpu_series(s, host, tr)
        return merged_node_series(local, services().history, host, tr.start, expired, bucket)
    finest = s.gpu_rollup_levels()
    return gpuq.node_gpu_series(s, host, tr, min_bucket=finest[0] if finest else 0)


def expired_note(tr: TimeRange, series: pd.DataFrame | None) -> str:
    """What the drill-down says when its range starts before the raw-retention horizon (""
    otherwise): which per-GPU lines are there and where they come from."""
    s = store()
    expired = s.raw_since()
    if expired is None or tr.start >= expired:
        return ""
    head = f"per-GPU samples before {expired:%Y-%m-%d %H:%M} UTC have expired (raw retention): "
    bucket = int(series["bucket_s"].iloc[0]) if series is not None and len(series) else 0
    if bucket and gpu_rollup.node_series_level(s, tr, bucket) is not None:
        return head + "these lines are the per-GPU averages kept in the rollups"
    down = tsdb_down(series)
    if down:
        return head + down
    if services().history is not None:
        return head + f"read from {history_source()} instead"
    return head + "the heatmap keeps this node's averages from the rollups"


def tsdb_down(series: pd.DataFrame | None) -> str | None:
    """What to say when the TSDB holding the expired per-GPU series did not answer (None when
    it did, or was not asked): the lines before the horizon are unknown, not zero."""
    error = None if series is None else series.attrs.get("tsdb")
    if not error:
        return None
    return f"the TSDB did not answer ({error}), so the GPUs' lines before then are not shown"


def history_source() -> str | None:
    """The server the drill-down reads expired per-GPU series from, if any."""
    history = services().history
    return None if history is None else ", ".join(c.url for c in history.clients)


def node_metric(key: Any) -> tuple[str, str, str, str]:
    """(key, column, label, unit) of a further drill-down metric; the first for an unknown key."""
    key = key if isinstance(key, str) and key in NODE_METRICS else next(iter(NODE_METRICS))
    return (key, *NODE_METRICS[key][:3])


def node_more(host: str, tr: TimeRange, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The drill-down's further metric ``key`` of the node's GPUs (before the raw-retention
    horizon read back from the TSDB where no per-GPU rollup serves it), and what runs on them."""
    s = store()
    df = nodeq.node_gpu_metric(s, host, tr, key)
    expired, history = s.raw_since(), services().history
    field = nodeq.exporter_field(key)
    if expired is not None and tr.start < expired and history is not None and field:
        bucket = gpuq.nice_bucket(s, tr, gpuq.NODE_POINTS)
        rolled = key in nodeq.ROLLED_METRICS and gpu_rollup.node_series_level(s, tr, bucket)
        if not rolled:
            from telemetry.collect.prometheus.prom_history import merged

            column = NODE_METRICS[key][0]
            older = history.node_gpu_field(host, tr.start, expired, bucket, field, column)
            df = merged(df, older, expired)
    return df, nodeq.node_workload(s, host)
