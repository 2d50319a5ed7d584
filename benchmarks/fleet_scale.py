"""Store size and panel times at 16,384 GPUs x 15 s x 54 days with raw retention, measured on
parts and extrapolated (``benchmarks/prometheus.py --fleet``; importable on its own).

Nobody can replay 5.1 G samples on two cores, so the figure is built from what can be measured:

1. **A slice**: llama3-405b (2,048 nodes x 8 H100) replayed at 15 s for ``hours``. Every table
   is copied on its own into an empty DuckDB file to measure its bytes per row as DuckDB stores
   it; rows over 54 days follow from the schedule (raw tables: GPUs x ticks over the retention
   window; rollups: one row per GPU, node or fleet per bucket, for all 54 days). Expiring one
   hour of raw samples is timed on the slice too.
2. **The panels**: a rollup bucket of 5 min or more holds the same rows whatever the raw
   interval, so the 7-day panels and the day of one node are timed on the full llama3-405b
   store (54 days, 5-min samples: its raw rows per day are the 15 s store's 5-min per-GPU
   rollup rows per day, with more columns: an upper bound). The newest-round panel reads raw
   rows and is timed on the 15 s slice.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from telemetry.queries import TimeRange  # noqa: E402
from telemetry.queries.gpu_rollup import gpus_below_per_hour  # noqa: E402
from telemetry.queries.gpus import heatmap, node_gpu_series  # noqa: E402
from telemetry.queries.overview import fleet_series, hottest_gpus  # noqa: E402
from telemetry.store import Store  # noqa: E402
from telemetry.store.retention import expire  # noqa: E402

GPUS, NODES, INTERVAL_S, DAYS = 16_384, 2_048, 15, 54
TABLES = ("gpu_samples", "node_tick", "gpu_rollup", "node_rollup", "fleet_rollup")


def replay(path: Path, scenario: str, interval: float | None, hours: float | None) -> float:
    """Replay ``scenario`` into a new store at ``path`` (ending now); wall seconds."""
    args = [sys.executable, "-m", "app.cli", "replay", "--scenario", scenario,
            "--store", str(path), "--no-progress"]  # fmt: skip
    if interval:
        args += ["--interval", str(interval)]
    if hours:
        start = datetime.utcnow().replace(microsecond=0) - timedelta(hours=hours)
        args += ["--days", str(hours / 24), "--start", start.isoformat()]
    t0 = time.perf_counter()
    subprocess.run(args, cwd=ROOT, check=True)
    return time.perf_counter() - t0


def table_bytes(store: Path, tmp: Path) -> dict[str, tuple[int, float]]:
    """Rows and bytes per row of each table as DuckDB stores it: the table copied alone into a
    fresh file once and three times over (UNION ALL), the difference divided by the added rows,
    so that a small table's fixed block overhead does not count as per-row cost."""
    import duckdb

    out = {}
    for table in TABLES:
        sizes = []
        for copies in (1, 3):
            one = tmp / f"{table}-{copies}.duckdb"
            con = duckdb.connect(str(one))
            con.execute(f"ATTACH '{store}' AS src (READ_ONLY)")
            union = " UNION ALL ".join([f"SELECT * FROM src.{table}"] * copies)
            con.execute(f"CREATE TABLE t AS {union}")  # table names fixed above
            rows = con.execute(f"SELECT count(*) FROM src.{table}").fetchone()[0]
            con.execute("DETACH src")
            con.execute("CHECKPOINT")
            con.close()
            sizes.append(one.stat().st_size)
            one.unlink()
        out[table] = (int(rows), (sizes[1] - sizes[0]) / (2 * rows) if rows else 0.0)
    return out


def rows_at_scale(retention_days: float) -> dict[str, float]:
    """Rows of each table at 16,384 GPUs x 15 s after 54 days, raw kept ``retention_days``."""
    ticks = 86_400 / INTERVAL_S
    per_day = {
        "gpu_samples": GPUS * ticks,
        "node_tick": NODES * ticks,
        "gpu_rollup": GPUS * (86_400 / 300 + 24),
        "node_rollup": NODES * (1_440 + 288 + 24 + 4),
        "fleet_rollup": 1_440 + 288 + 24 + 4,
    }
    raw = ("gpu_samples", "node_tick")
    return {t: n * (min(retention_days, DAYS) if t in raw else DAYS) for t, n in per_day.items()}


def timed(fn: Callable[[], object], store: Store, repeat: int) -> float:
    """Median seconds of ``fn`` with the store's result cache emptied before each call."""
    times = []
    fn()  # the store's first statements (its tables, its meta), as a server has run them
    for _ in range(repeat):
        # a cold cache, as after every round (bumping the store's version no longer emptied
        # it: results are kept by the tables they read, and the medians read 0.0 ms)
        store.forget_results()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def panels(store: Store, repeat: int) -> dict[str, float]:
    end = store.scalar("SELECT max(ts) FROM gpu_samples")
    host = store.scalar("SELECT host FROM nodes WHERE role = 'job' ORDER BY node_id LIMIT 1")
    week = TimeRange(end - timedelta(days=7), end)
    day = TimeRange(end - timedelta(days=1), end)
    calls: dict[str, Callable[[], object]] = {
        "fleet average utilization, 7 d": lambda: fleet_series(store, week, 1500),
        "per-node heatmap, 7 d": lambda: heatmap(store, week, "util"),
        "one node's 8 GPUs, 24 h": lambda: node_gpu_series(store, host, day),
        "top-10 hottest GPUs (newest round)": lambda: hottest_gpus(store, 10),
        "GPUs under 80 % per hour, 7 d": lambda: gpus_below_per_hour(store, week),
    }
    return {name: timed(fn, store, repeat) for name, fn in calls.items()}


def report(tmp: Path, hours: float, retention_days: float, long_store: Path | None,
           repeat: int, with_panels: bool = True) -> str:  # fmt: skip
    lines = []
    slice_ = tmp / "slice.duckdb"
    took = replay(slice_, "llama3-405b", INTERVAL_S, hours)
    sizes = table_bytes(slice_, tmp)
    samples = sizes["gpu_samples"][0]
    lines.append(
        f"slice: llama3-405b at {INTERVAL_S} s for {hours:g} h: {samples:,} GPU samples "
        f"replayed and rolled up in {took:.0f} s ({samples / took:,.0f} samples/s)"
    )
    with Store(str(slice_)) as s:
        newest = timed(lambda: hottest_gpus(s, 10), s, repeat)
        t0 = time.perf_counter()
        gone = expire(s, timedelta(hours=hours - 1))
        cut = time.perf_counter() - t0
    lines.append(f"expiry of the oldest hour ({gone.total:,} raw rows): {cut:.2f} s")
    scale = rows_at_scale(retention_days)
    lines += [
        f"\n| table at {GPUS:,} GPUs x {INTERVAL_S} s x {DAYS} d, raw kept {retention_days:g} d "
        "| bytes/row (slice) | rows | size |",
        "|---|---|---|---|",
    ]
    total = 0.0
    for table in TABLES:
        per_row = sizes[table][1]
        size = per_row * scale[table]
        total += size
        lines.append(f"| {table} | {per_row:.2f} | {scale[table] / 1e6:,.1f} M | "
                     f"{size / 2**30:,.1f} GiB |")  # fmt: skip
    no_ret = sum(sizes[t][1] * n for t, n in rows_at_scale(DAYS).items())
    lines.append(f"| **store** | | | **{total / 2**30:,.1f} GiB** (without retention: "
                 f"{no_ret / 2**30:,.0f} GiB) |")  # fmt: skip
    if not with_panels:  # the size alone (``--fleet --no-panels``)
        return "\n".join(lines)
    if long_store is None:
        long_store = tmp / "llama.duckdb"
        took = replay(long_store, "llama3-405b", None, None)
        lines.append(f"\nllama3-405b, 54 d at 300 s, replayed in {took:.0f} s")
    with Store(str(long_store), read_only=True) as s:
        times = panels(s, repeat)
    times["top-10 hottest GPUs (newest round)"] = newest
    lines += ["\n| panel at 16,384 GPUs | Factory Floor (cold) | measured on |", "|---|---|---|"]
    for name, sec in times.items():
        where = "15 s slice" if "newest" in name else "llama3-405b 54 d store (rollups)"
        if "node's" in name:
            where = "llama3-405b 54 d store (a day of 5-min rows per GPU)"
        lines.append(f"| {name} | {sec * 1000:,.1f} ms | {where} |")
    return "\n".join(lines)
