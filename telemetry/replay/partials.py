"""What a replay window hands the store for its rollups, computed from its NumPy arrays:
per-(tick, node) sums (``node_tick``, which every node and fleet rollup is built from) and its
whole per-GPU rollup buckets (``gpu_buckets``).

The store builds per-GPU buckets (``gpu_rollup``, ``telemetry.store.rollups``) from every raw
sample: over a backfill that GROUP BY of ~20 columns cost the writer thread as long as the
insert itself, while the synthesis thread, which already holds each window's values as arrays,
sat idle half the time. So a replay window hands over, with its samples, the per-GPU rows of
every bucket it holds whole (no tick of the bucket in another window; the source cuts windows
at bucket boundaries, so that is every bucket but where a live replay stops mid-bucket). The
store keeps a bucket whose rows account for every sample in it and rebuilds any other from the
samples (``rollups``), so a bucket a scrape also wrote into is never left short. The
arithmetic follows the store's SQL: values as stored (float32), real utilization in float32 in
``REAL_SQL``'s order, means in float64; tests compare the rows with the SQL's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from telemetry.store.rollups import GPU_AVG, GPU_BUSY_AVG, GPU_COUNT, GPU_MAX, GPU_MIN
from telemetry.utilization import real_np
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT


def arrow(a: np.ndarray, type_: pa.DataType | None = None) -> pa.Array:
    """Zero-copy NumPy -> Arrow for a contiguous numeric array without nulls (``pa.array``
    validates and copies, which cost a third of the synthesis time)."""
    a = np.ascontiguousarray(a)
    return pa.Array.from_buffers(
        type_ or pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)]
    )


def node_tick(ts: np.ndarray, v: dict[str, np.ndarray], keep: np.ndarray, n_nodes: int) -> pa.Table:
    """Per-(tick, node) sums, mins and maxes of a window's samples (``node_tick``): ``ts`` its
    k tick times, ``v`` the (k, GPUs) arrays by column, GPUs numbered node by node with the
    same count on each of the ``n_nodes``; the same numbers as the store's SQL."""
    k = len(ts)
    gpn = keep.shape[1] // n_nodes
    ones = np.ones(gpn, dtype=np.float32)

    def per_node(name: str, how: str) -> np.ndarray:
        a = np.asarray(v[name], dtype=np.float32).reshape(k, n_nodes, gpn)
        if how == "sum":  # a BLAS product is ~7x faster than sum(axis=2) on 8-wide rows
            return (a @ ones).astype(np.float64)
        out = a[..., 0].copy()
        op = np.minimum if how == "min" else np.maximum
        for i in range(1, gpn):
            op(out, a[..., i], out=out)
        return out

    v = {**v, "real": real_np(v["sm_active"], v["sm_occupancy"])}
    node_keep = keep.reshape(k, n_nodes, gpn)[:, :, 0]
    cols = {
        "ts": np.repeat(ts, n_nodes).reshape(k, n_nodes),
        "node_id": np.broadcast_to(np.arange(n_nodes, dtype=np.int32), (k, n_nodes)),
        "n": np.full((k, n_nodes), gpn, dtype=np.int32),
        "util_s": per_node("util_pct", "sum"),
        "util_min": per_node("util_pct", "min"),
        "temp_s": per_node("temp_c", "sum"),
        "temp_max": per_node("temp_c", "max"),
        "mem_temp_max": per_node("mem_temp_c", "max"),
        # sums of milliwatts and of 3-decimal ratios (the replay's precision, ``synth``) are
        # exact in 3 decimals: rounded there, the float32 sum's noise goes, and a DOUBLE of 3
        # decimals packs to under half the bytes (DuckDB's ALP, instead of ALPRD)
        "power_s": np.round(per_node("power_w", "sum"), 3),
        "fb_s": per_node("fb_used_mib", "sum"),
        "clock_s": per_node("sm_clock_mhz", "sum"),
        "clock_min": per_node("sm_clock_mhz", "min"),
        "tensor_s": np.round(per_node("tensor_active", "sum"), 3),
        "real_s": per_node("real", "sum"),
    }
    out = {}
    for name, arr in cols.items():
        arr = np.asarray(arr)[node_keep]
        if name in ("util_min", "temp_max", "mem_temp_max", "clock_min"):
            arr = arr.astype(np.float32)
        out[name] = arrow(arr.view(np.int64), pa.timestamp("us")) if name == "ts" else arrow(arr)
    return pa.table(out)


def gpu_buckets(
    ts_us: np.ndarray,
    values: dict[str, np.ndarray],
    keep: np.ndarray,
    levels: list[int],
    before_us: int | None = None,
    after_us: int | None = None,
) -> pa.Table | None:
    """The rows of each bucket of ``levels`` (seconds, finest first, each a multiple of the
    one before) that the window holds whole: ``ts_us`` are its k tick times (microseconds since
    the epoch, ascending), ``before_us``/``after_us`` the ticks just outside it (None at the
    run's ends), ``values`` the (k, GPUs) arrays by sample column and ``keep`` which samples
    are stored (a node in repair is silent). Every column of ``rollups.GPU_AVG`` etc. that the
    arrays hold (the others NULL); a GPU without a sample in a bucket has no row. None when no
    bucket is whole. The finest level is summed from the ticks, each coarser one from the
    level below's sums (a bucket whole at a level is whole at every finer one)."""
    whole = _whole(ts_us, levels[0], before_us, after_us)
    if not whole.any():  # a live replay's one-tick windows
        return None
    if not whole.all():
        ts_us, keep = ts_us[whole], keep[whole]
        values = {name: np.asarray(a)[whole] for name, a in values.items()}
    sums, bucket = _tick_sums(ts_us, values, keep, levels[0])
    parts, unit = [_table(sums, bucket, levels[0])], levels[0]
    for level in levels[1:]:
        inside = _whole(bucket * (unit * 1_000_000), level, before_us, after_us)
        if not inside.any():
            break
        coarse = bucket[inside] // (level // unit)
        starts = np.flatnonzero(np.r_[True, coarse[1:] != coarse[:-1]])
        sums = {k: _REDUCE[_kind(k)].reduceat(a[inside], starts, axis=0) for k, a in sums.items()}
        bucket, unit = coarse[starts], level
        parts.append(_table(sums, bucket, level))
    return pa.concat_tables(parts)


# How a sum of each kind is carried from a level to the next: added, or its max or min kept.
_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def _kind(key: str) -> str:
    return key.split(":", 1)[0]


def _whole(ts_us: np.ndarray, level_s: int, before_us: int | None, after_us: int | None) -> Any:
    """Which times lie in buckets of ``level_s`` that the window holds whole: not in the
    bucket of a tick just outside it."""
    span = level_s * 1_000_000
    whole = np.ones(len(ts_us), dtype=bool)
    for edge in (before_us, after_us):
        if edge is not None:
            whole &= ts_us // span != edge // span
    return whole


def _tick_sums(
    ts_us: np.ndarray, values: dict[str, np.ndarray], keep: np.ndarray, level_s: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per (bucket of ``level_s``, GPU) sums of the ticks, keyed "kind:name" ("sum:n" the
    samples, "sum:util_pct", "max:temp_c", "sum:_busy" ...), and the buckets (numbers of
    ``level_s`` since the epoch). Values as stored (float32, the energy counter float64),
    judged busy, idle and hot as the store's SQL judges a sample."""
    got = {name: np.asarray(a, dtype=np.float32) for name, a in values.items()}
    if "energy_mj" in values:  # a counter: DOUBLE in the store
        got["energy_mj"] = np.asarray(values["energy_mj"], dtype=np.float64)
    effective = got["util_pct"]  # coalesce(_real, util_pct), as the SQL judges a sample
    if "sm_active" in got and "sm_occupancy" in got:
        got["_real"] = real_np(got["sm_active"], got["sm_occupancy"])
        effective = np.where(np.isnan(got["_real"]), effective, got["_real"])
    flags = {
        "_busy": (effective >= BUSY_PCT) & keep,
        "_idle": (effective < IDLE_PCT) & keep,
        "_hot": (got["temp_c"] >= HOT_C) & keep,
    }
    bucket = ts_us // (level_s * 1_000_000)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    every = bool(keep.all())

    def add(a: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is not None or not every:
            a = np.where(keep if mask is None else mask, a, 0)
        return np.add.reduceat(a, starts, axis=0, dtype=np.float64)

    def extreme(a: np.ndarray, op: np.ufunc, fill: float) -> np.ndarray:
        return op.reduceat(a if every else np.where(keep, a, fill), starts, axis=0)

    sums = {"sum:n": np.add.reduceat(keep, starts, axis=0, dtype=np.int64)}
    for _, name in GPU_AVG:
        if name in got:
            sums[f"sum:{name}"] = add(got[name])
    for kind, cols, fill in (("max", GPU_MAX, -np.inf), ("min", GPU_MIN, np.inf)):
        for _, name in cols:
            if name in got:
                sums[f"{kind}:{name}"] = extreme(got[name], _REDUCE[kind], fill)
    for _, flag in GPU_COUNT:
        sums[f"sum:{flag}"] = np.add.reduceat(flags[flag], starts, axis=0, dtype=np.int64)
    for _, name in GPU_BUSY_AVG:
        sums[f"sum:busy {name}"] = add(got[name], flags["_busy"])
    return sums, bucket[starts]


def _table(sums: dict[str, np.ndarray], bucket: np.ndarray, level_s: int) -> pa.Table:
    """The rows of buckets of ``level_s`` from their sums; ``bucket`` in numbers of
    ``level_s`` since the epoch."""
    n, gpus = sums["sum:n"], sums["sum:n"].shape[1]
    rows = n.ravel() > 0
    n_rows = int(rows.sum())
    out = {
        "bucket_s": pa.array(np.full(n_rows, level_s, dtype=np.int32)),
        "ts": pa.array(np.repeat(bucket * level_s * 1_000_000, gpus)[rows], pa.timestamp("us")),
        "gpu_id": pa.array(np.tile(np.arange(gpus, dtype=np.int32), len(bucket))[rows]),
        "samples": pa.array(n.ravel()[rows].astype(np.int32)),
    }

    def put(col: str, a: np.ndarray | None) -> None:
        if a is None:
            out[col] = pa.nulls(n_rows, pa.float64())
        else:
            flat = a.ravel()[rows]
            out[col] = pa.array(flat, from_pandas=flat.dtype.kind == "f")  # NaN -> NULL

    busy = sums["sum:_busy"]
    with np.errstate(invalid="ignore", divide="ignore"):
        for col, name in GPU_AVG:
            put(col, sums[f"sum:{name}"] / n if f"sum:{name}" in sums else None)
        for kind, cols in (("max", GPU_MAX), ("min", GPU_MIN)):
            for col, name in cols:
                put(col, sums.get(f"{kind}:{name}"))
        for col, flag in GPU_COUNT:
            put(col, sums[f"sum:{flag}"].astype(np.int32))
        for col, name in GPU_BUSY_AVG:
            put(col, np.where(busy > 0, sums[f"sum:busy {name}"] / busy, np.nan))
    return pa.table(out)
