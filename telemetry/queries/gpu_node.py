"""Queries of the GPUs page's drill-down beyond its four charts: one more per-GPU metric picked
from a list (the memory clock, kept only as an extra field of scraped stores, framebuffer, HBM
temperature, real utilization and the profiling fields behind it, PCIe and NVLink traffic)
and what runs on each GPU of the node (job, pod, namespace, container).

Kept beside ``telemetry.queries.gpus`` (the fleet views and the four charts) so that module
stays within its size; the bucketing is the same (``gpus.nice_bucket``). Metric keys select
among fixed SQL fragments here; an unknown key raises ``ValueError``.
"""

from __future__ import annotations

import pandas as pd

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.queries import TimeRange
from telemetry.queries.gpu_rollup import node_series_level
from telemetry.queries.gpus import NODE_POINTS, WHOLE_BUCKETS_SQL, nice_bucket, whole_buckets
from telemetry.store import Store
from telemetry.store.rollups import gpu_table
from telemetry.utilization import NVLINK_RATE_SQL, REAL_SQL

# key -> (column of the result, label, unit, the gpu_samples column, or None for the value of
# its EXTRA_FIELDS field in gpu_samples_extra, or REAL). The first is what an unknown pick falls
# back to.
REAL = "real"  # not a column: real utilization's expression over the sample's columns
NVLINK = "nvlink"  # not a column: the rate of the NVLink counter between a GPU's samples
NODE_METRICS: dict[str, tuple[str, str, str, str | None]] = {
    "mem_clock": ("mem_clock_mhz", "Memory clock", "MHz", None),
    "fb": ("fb_used_mib", "Framebuffer used", "MiB", "fb_used_mib"),
    "mem_temp": ("mem_temp_c", "HBM temperature", "°C", "mem_temp_c"),
    "real": ("real_pct", "Real utilization", "%", REAL),  # ``telemetry.utilization``
    "sm_active": ("sm_active", "SM active", "ratio", "sm_active"),
    "tensor": ("tensor_active", "Tensor pipe active", "ratio", "tensor_active"),
    "dram": ("dram_active", "DRAM active", "ratio", "dram_active"),
    "pcie_rx": ("pcie_rx_bps", "PCIe received", "B/s", "pcie_rx_bps"),
    "pcie_tx": ("pcie_tx_bps", "PCIe sent", "B/s", "pcie_tx_bps"),
    "nvlink": ("nvlink_bps", "NVLink traffic", "B/s", NVLINK),  # the counter's rate
}
# Metrics the per-GPU rollup keeps (its column): long ranges read its buckets, as the
# drill-down's four charts do (``gpu_rollup.node_series_level``), not every raw sample.
ROLLED_METRICS = {
    "fb": "fb_used_avg",
    "mem_temp": "mem_temp_avg",
    "real": "real_avg",
    "sm_active": "sm_active_avg",
    "tensor": "tensor_avg",
    "dram": "dram_avg",
    "nvlink": "nvlink_bps",
}
_ROLLED_SQL = """SELECT time_bucket(to_seconds(?), s.ts) AS ts, g.gpu,
  sum(s.{c} * s.samples) / sum(s.samples) AS {name}, ? AS bucket_s
FROM {table} s JOIN gpus g USING (gpu_id)
WHERE {whole} AND s.{c} IS NOT NULL AND s.gpu_id IN (
    SELECT gpu_id FROM gpus JOIN nodes USING (node_id) WHERE nodes.host = ?)
GROUP BY ALL ORDER BY g.gpu, 1"""
# Fields without a column of their own (extras), kept from dcgm-exporter scrapes only; and the
# PCIe rates, extras in stores written before they had columns (read there when the column has
# nothing for the node).
EXTRA_FIELDS = {
    "mem_clock": "DCGM_FI_DEV_MEM_CLOCK",
    "pcie_rx": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "pcie_tx": "DCGM_FI_PROF_PCIE_TX_BYTES",
}


def node_gpu_metric(
    store: Store, host: str, tr: TimeRange, key: str, max_points: int = NODE_POINTS
) -> pd.DataFrame:
    """One more metric (``NODE_METRICS``) of each GPU of one node, bucketed like
    ``gpus.node_gpu_series`` (from ``gpu_rollup`` where a level fits the bucket and keeps the
    metric, each bucket the range touches taken whole): ts, gpu, the metric's column, bucket_s.
    Empty when the node has no such samples in the range (a replay keeps no memory clock or
    PCIe rate: only scraped stores have them)."""
    if key not in NODE_METRICS:
        raise ValueError(f"unknown node metric {key!r}; use one of {sorted(NODE_METRICS)}")
    name, _, _, column = NODE_METRICS[key]
    bucket = nice_bucket(store, tr, max_points)
    level = node_series_level(store, tr, bucket) if key in ROLLED_METRICS else None
    whole = whole_buckets(bucket, tr)
    if level is not None:  # weighted by the samples of the buckets that had the metric
        return store.df(
            _ROLLED_SQL.format(
                table=gpu_table(level), c=ROLLED_METRICS[key], name=name, whole=WHOLE_BUCKETS_SQL
            ),
            [bucket, bucket, *whole, str(host)[:200]],
        )
    source, value, where = "gpu_samples", f"s.{column}", f"s.{column} IS NOT NULL"
    params = whole
    extra = ("gpu_samples_extra", "s.value", "s.field = ?", [*params, EXTRA_FIELDS.get(key)])
    if column == REAL:
        value, where = REAL_SQL, f"{REAL_SQL} IS NOT NULL"
    if column == NVLINK:  # the rate needs each GPU's sample before the range too
        source = f"""(SELECT ts, gpu_id, {NVLINK_RATE_SQL} AS nv FROM gpu_samples
                      WHERE ts >= time_bucket(to_seconds(?), ?::TIMESTAMP) - to_seconds(?)
                        AND ts < time_bucket(to_seconds(?), ?::TIMESTAMP) + to_seconds(?)
                        AND nvlink_bytes IS NOT NULL
                      WINDOW w AS (PARTITION BY gpu_id ORDER BY ts))"""
        value, where = "s.nv", "s.nv IS NOT NULL"
        before = 2 * int(store.sample_interval_s()) + 1
        params = [*whole[:2], before, *whole[2:], *whole]
    tries = [extra] if column is None else [(source, value, where, params)]
    if column is not None and key in EXTRA_FIELDS:  # stores from before the column had extras
        tries.append(extra)
    for source, value, where, params in tries:
        df = store.df(
            f"""SELECT time_bucket(to_seconds(?), s.ts) AS ts, g.gpu, avg({value}) AS {name},
                       ? AS bucket_s
                FROM {source} s JOIN gpus g USING (gpu_id)
                WHERE {WHOLE_BUCKETS_SQL} AND {where} AND s.gpu_id IN (
                  SELECT gpu_id FROM gpus JOIN nodes USING (node_id) WHERE nodes.host = ?)
                GROUP BY ALL ORDER BY g.gpu, 1""",
            [bucket, bucket, *params, str(host)[:200]],
        )
        if not df.empty:
            break
    return df


def node_workload(store: Store, host: str) -> pd.DataFrame:
    """What runs on each GPU of one node, as last scraped (the exporter's attribution labels,
    else the targets file's; a replay's GPUs carry their run as the job): gpu, mig_profile,
    mig_instance, hpc_job, pod, namespace, container (None: not reported). Empty for an
    unknown node."""
    return store.df(
        """SELECT g.gpu, g.mig_profile, g.mig_instance, g.hpc_job, g.pod, g.namespace,
                  g.container
           FROM gpus g JOIN nodes n USING (node_id) WHERE n.host = ?
           ORDER BY g.gpu, try_cast(g.mig_instance AS INTEGER) NULLS FIRST""",
        [str(host)[:200]],
    )


def exporter_field(key: str) -> str | None:
    """The dcgm-exporter metric a TSDB holds for further metric ``key`` (what the drill-down
    reads back from it once the store's raw samples expired); None for a metric computed
    from several fields or between samples (real utilization, the NVLink rate)."""
    column = NODE_METRICS[key][3] if key in NODE_METRICS else None
    if column is None:
        return EXTRA_FIELDS.get(key)
    return next((c.field for c in SAMPLE_COLUMNS if c.name == column), None)
