"""Real utilization and workload classes at fleet scale, cold, beside the GPU_UTIL views they
extend (the same-run baseline).

    .venv/bin/python benchmarks/workload.py --store llama.duckdb   # a llama3-405b replay
    .venv/bin/python benchmarks/workload.py                        # replays one first (~4 min)
    .venv/bin/python benchmarks/workload.py --json FILE            # and its figures as JSON

Each figure is the median of ``--repeat`` calls with the store's result cache emptied before
each (as after every scrape round). Pairs: the real-utilization heatmap vs the GPU_UTIL one;
GPUs under 80 % per hour on the real basis vs the same query counting GPU_UTIL; and the
class chart (every GPU-interval classified) and its basis, which have no GPU_UTIL twin, against
the fleet utilization series (the cheapest panel) for scale. ``--json FILE`` writes the printed
figures (``benchmarks/figures.py``; the GPU_UTIL twins and the fleet series as ``baseline_``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import figures  # noqa: E402
from benchmarks.dashboard import build  # noqa: E402
from benchmarks.fleet_scale import timed  # noqa: E402
from telemetry.queries import TimeRange, workload  # noqa: E402
from telemetry.queries.gpu_rollup import gpus_below_per_hour  # noqa: E402
from telemetry.queries.gpus import heatmap  # noqa: E402
from telemetry.queries.overview import fleet_series  # noqa: E402
from telemetry.store import Store  # noqa: E402


def _util_below(store: Store, tr: TimeRange) -> object:
    """GPUs under 80 % per hour by GPU_UTIL alone: the query before real utilization."""
    return store.df(
        """SELECT ts, count(util_avg) AS gpus, count(*) FILTER (WHERE util_avg < 80) AS below
           FROM gpu_rollup JOIN gpus USING (gpu_id) JOIN nodes n USING (node_id)
           WHERE bucket_s = 3600 AND ts >= ? AND ts <= ? AND n.role = 'job'
           GROUP BY ts ORDER BY ts""",
        [tr.start, tr.end],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="a llama3-405b store (a temporary one replayed if omitted)")
    ap.add_argument("--repeat", type=int, default=5)
    figures.add_argument(ap)
    args = ap.parse_args()
    if args.store:
        figures.write(args.json, report(Store(args.store, read_only=True), args.store, args.repeat))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "llama.duckdb")
        build(path, "llama3-405b", None)
        figs = report(Store(path, read_only=True), path, args.repeat)
    figures.write(args.json, figs)


def report(store: Store, name: str, repeat: int) -> dict[str, float]:
    """Measure and print; the printed figures by name (``benchmarks/figures.py``)."""
    gpus = store.scalar("SELECT count(*) FROM gpus")
    end = store.scalar("SELECT max(ts) FROM gpu_samples")
    start = store.scalar("SELECT min(ts) FROM gpu_samples")
    week, day = TimeRange(end - timedelta(days=7), end), TimeRange(end - timedelta(days=1), end)
    whole, hours = TimeRange(start, end), TimeRange(end - timedelta(hours=4), end)
    pairs: list[tuple[str, str, Callable[[], object], Callable[[], object]]] = [
        (
            "heatmap 7 d: real vs GPU_UTIL",
            "heatmap_7d",
            lambda: heatmap(store, week, "real"),
            lambda: heatmap(store, week, "util"),
        ),
        (
            "under 80 % per hour 7 d: real vs GPU_UTIL",
            "under_80_pct_per_hour_7d",
            lambda: gpus_below_per_hour(store, week),
            lambda: _util_below(store, week),
        ),
    ]
    alone: list[tuple[str, str, Callable[[], object]]] = [
        (
            "workload classes 4 h (raw, NVLink rate window)",
            "workload_classes_4h",
            lambda: workload.classes(store, hours),
        ),
        ("workload classes 24 h", "workload_classes_24h", lambda: workload.classes(store, day)),
        ("workload classes 7 d", "workload_classes_7d", lambda: workload.classes(store, week)),
        (
            f"workload classes {whole.seconds / 86400:.0f} d",
            "workload_classes_whole",
            lambda: workload.classes(store, whole),
        ),
        ("utilization basis 7 d", "utilization_basis_7d", lambda: workload.basis(store, week)),
    ]
    fleet = timed(lambda: fleet_series(store, week, 1500), store, repeat)
    print(f"store {name}: {gpus:,} GPUs, {start:%Y-%m-%d} .. {end:%Y-%m-%d}; cold medians")
    figs = {"store_gpus": gpus, "store_days": whole.seconds / 86400}
    for name, key, new, old in pairs:
        a, b = timed(new, store, repeat), timed(old, store, repeat)
        print(f"  {name:<46} {a * 1000:8.1f} ms vs {b * 1000:8.1f} ms   x{a / b:.2f}")
        figs |= {f"{key}_real_ms": a * 1000, f"baseline_{key}_gpu_util_ms": b * 1000}
        figs[f"ratio_{key}_real_gpu_util"] = a / b
    for name, key, fn in alone:
        a = timed(fn, store, repeat)
        print(f"  {name:<46} {a * 1000:8.1f} ms   ({a / fleet:.1f}x the fleet series, 7 d)")
        figs |= {f"{key}_ms": a * 1000, f"ratio_{key}_fleet_series_7d": a / fleet}
    print(f"  {'fleet utilization series 7 d (scale)':<46} {fleet * 1000:8.1f} ms")
    figs["baseline_fleet_series_7d_ms"] = fleet * 1000
    step = {
        k: workload.interval_s(store, tr) for k, tr in (("7d", week), ("24h", day), ("4h", hours))
    }
    print("  classes: interval", step["7d"], "s at 7 d;", step["24h"], "s at 24 h;",
          step["4h"], "s at 4 h")  # fmt: skip
    return figs | {f"classes_interval_{k}_s": v for k, v in step.items()}


if __name__ == "__main__":
    main()
