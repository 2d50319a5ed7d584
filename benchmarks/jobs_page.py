"""Jobs page benchmark: its callbacks cold over a generated store of 5,000 Slurm jobs in 30
days on 2,048 nodes (16,384 GPUs) with per-GPU rollups (``cluster_store.build``: its
docstring says how it is generated; the accounting benchmark runs on the same store).

    .venv/bin/python benchmarks/jobs_page.py                                 # build in a temp dir
    .venv/bin/python benchmarks/jobs_page.py --keep /tmp/jobs-bench.duckdb   # build once, reuse

Timed, each callback of the Jobs page (the page's default view, the last day of the store; one
account; problems only; the whole 30 days; a node's name in the filter, with the node's Slurm
state and findings above its jobs; a selected job's GPUs; the filter options), median
and p95 of ``--repeat``, two ways:

- **cold**, the dashboard benchmark's rule (issue #16): a new store version, no query result
  kept (``Store.forget_results`` before each call), the server's open store and its DuckDB
  buffers as in use; what the first viewer after a write waits for. Target p95 <= 100 ms.
- **first after open**: a fresh read-only open of the file each time, nothing cached in
  DuckDB either; what the first view after a restart costs.

Beside them, the same-run baseline (issue #40): a fixed DuckDB scan and GROUP BY of the
store's newest day of hourly per-GPU rows in a fresh connection (``baseline.ROLLUP_SCAN_SQL``),
and each figure's ratio to it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import baseline  # noqa: E402
from benchmarks.cluster_store import START, build  # noqa: E402
from benchmarks.timing import cold, p50_p95  # noqa: E402
from telemetry.queries import TimeRange  # noqa: E402
from telemetry.store import Store  # noqa: E402


def _fresh(path: str, fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, p95) ms of ``fn`` on a fresh read-only open each time."""
    from app.data import services

    times = []
    for _ in range(repeat):
        with Store(path, read_only=True) as store:
            services.bind(services.Services(store=store))
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
    return p50_p95(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--keep", help="store path: built once, reused when it exists")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    path = args.keep or os.path.join(tmp, "jobs.duckdb")
    if not os.path.exists(path):
        t = time.perf_counter()
        counts = build(path, args.jobs, args.days, args.nodes)
        print(f"built {path} in {time.perf_counter() - t:.1f} s: "
              + ", ".join(f"{v:,} {k}" for k, v in counts.items()))  # fmt: skip
    from app.main import create_app

    with Store(path, read_only=True) as store:  # the pages register with an app
        create_app(store)
    from app.data import services
    from app.pages import jobs as page  # what the callbacks call (replies not kept)
    from telemetry.queries import jobs as jq

    end = START + timedelta(days=args.days)
    # explicit windows: the store has rollups but no raw samples, so no "last 24 h" of its own
    day = {"range": "custom", "start": f"{end - timedelta(days=1):%Y-%m-%dT%H:%M:%S}",
           "end": f"{end:%Y-%m-%dT%H:%M:%S}"}  # fmt: skip
    month = {"range": "custom", "start": f"{START:%Y-%m-%dT%H:%M:%S}",
             "end": f"{end:%Y-%m-%dT%H:%M:%S}"}  # fmt: skip
    with Store(path, read_only=True) as store:
        last = jq.list_jobs(store, jq.JobFilter(TimeRange(end - timedelta(days=1), end)), None)
        running = last[last["state"] == "RUNNING"]
        key = (running if not running.empty else last)["key"].iloc[0]
        node = store.scalar(  # the node drained most often: the node panel has most to say
            "SELECT host FROM slurm_node_events GROUP BY host ORDER BY count(*) DESC, host LIMIT 1"
        ) or "gpu0000"
        print(f"rows: {store.scalar('SELECT count(*) FROM slurm_jobs'):,} Slurm job records, "
              f"{store.scalar('SELECT count(*) FROM gpu_rollup'):,} per-GPU rollup rows; "
              f"the last day lists {len(last)} jobs ({len(running)} running, "
              f"{int(last['kept'].sum())} with kept figures)")  # fmt: skip
    cases = {
        "filter options": lambda: page.options_for(month),
        "grid, last day": lambda: page.grid_for(day, {}),
        "grid, last day, one account": lambda: page.grid_for(day, {"accounts": ["research"]}),
        "grid, last day, problems only": lambda: page.grid_for(day, {"problems": True}),
        "grid, 30 days (newest 500)": lambda: page.grid_for(month, {}),
        f"grid, 30 days, node {node} and its state": lambda: page.grid_for(month, {"name": node}),
        f"selected job's GPUs ({key})": lambda: page.detail_for(key),
    }
    scan = baseline.duckdb_scan(path, 5, baseline.ROLLUP_SCAN_SQL)["p50"] * 1000
    print(
        f"baseline: DuckDB scan + GROUP BY of the newest day's hourly per-GPU rows, fresh "
        f"connection: {scan:.1f} ms (p50)"
    )
    print(
        f"{args.repeat} runs each, ms; cold = new store version (results forgotten), store "
        "open; first = a fresh read-only open"
    )
    print(
        f"  {'callback':44s} {'cold p50':>8} {'cold p95':>8} {'/scan':>6} "
        f"{'first p50':>9} {'first p95':>9} {'/scan':>6}"
    )
    with Store(path, read_only=True) as store:
        services.bind(services.Services(store=store))
        colds = {name: cold(store, fn, args.repeat) for name, fn in cases.items()}
    for name, fn in cases.items():
        (cm, cp), (fm, fp) = colds[name], _fresh(path, fn, args.repeat)
        print(
            f"  {name:44s} {cm:8.1f} {cp:8.1f} {cp / scan:6.2f} "
            f"{fm:9.1f} {fp:9.1f} {fp / scan:6.2f}"
        )


if __name__ == "__main__":
    main()
