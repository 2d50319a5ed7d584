"""Cluster accounting benchmark: the day accounting (``telemetry.queries.accounting``) of a
generated store of 5,000 Slurm jobs over 30 days on 2,048 nodes, cold and warm.

    .venv/bin/python benchmarks/cluster_jobs.py                   # 5,000 jobs, 30 days, 2,048 nodes
    .venv/bin/python benchmarks/cluster_jobs.py --jobs 20000 --keep /tmp/jobs.duckdb

The store is ``cluster_store.build``'s (its docstring says how it is generated; the Jobs page
benchmark runs on the same one). Printed: the build time and row counts, then the accounting
of all the days cold (a fresh read-only open of the file, nothing cached: what the first page
view after a restart costs) and warm (the same connection again with its result cache
dropped), medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import baseline  # noqa: E402
from benchmarks.cluster_store import START, build  # noqa: E402
from telemetry.queries.accounting import accounting  # noqa: E402
from telemetry.store import Store  # noqa: E402


def cold(path: str, days: int) -> float:
    t0 = time.perf_counter()
    with Store(path, read_only=True) as store:
        accounting(store, START, days, asof=START + timedelta(days=days))
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", metavar="PATH", help="build the store here and keep it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = a.keep or str(Path(tmp) / "jobs.duckdb")
        t0 = time.perf_counter()
        counts = build(path, a.jobs, a.days, a.nodes, a.seed)
        print(f"built in {time.perf_counter() - t0:.1f} s: "
              + ", ".join(f"{v:,} {k}" for k, v in counts.items()))  # fmt: skip
        scan = baseline.duckdb_scan(path, 5, baseline.ROLLUP_SCAN_SQL)["p50"] * 1000
        print(f"baseline (same run): DuckDB scan + GROUP BY of the newest day's hourly per-GPU "
              f"rows, fresh connection: {scan:.1f} ms")  # fmt: skip
        print(f"day accounting, {a.days} days, {a.nodes:,} nodes, {a.jobs:,} jobs:")
        ms = statistics.median(cold(path, a.days) for _ in range(a.repeat)) * 1000
        print(f"  cold (fresh read-only open, nothing cached): {ms:.0f} ms = "
              f"{ms / scan:.1f} x scan")  # fmt: skip
        with Store(path, read_only=True) as store:
            asof = START + timedelta(days=a.days)
            accounting(store, START, a.days, asof=asof)

            def warm() -> float:
                store.forget_results()
                t = time.perf_counter()
                accounting(store, START, a.days, asof=asof)
                return time.perf_counter() - t

            ms = statistics.median(warm() for _ in range(a.repeat)) * 1000
            print(f"  warm (same connection, result cache dropped): {ms:.0f} ms = "
                  f"{ms / scan:.1f} x scan")  # fmt: skip
            day = accounting(store, START, a.days, asof=asof).days
            print(f"  GPU-hours over the {a.days} days: "
                  + ", ".join(f"{c} {day[c].sum():,.0f}" for c in day.columns[1:]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
