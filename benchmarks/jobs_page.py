"""Jobs page benchmark: its callbacks cold over a store of 5,000 Slurm jobs in 30 days on
2,048 nodes (16,384 GPUs) with per-GPU rollups.

    .venv/bin/python benchmarks/jobs_page.py                          # build in a temp dir
    .venv/bin/python benchmarks/jobs_page.py --keep /tmp/jobs-bench.duckdb   # build once, reuse

How the store is generated (``build``, seeded): hosts ``gpu0000``.. with 8 GPUs each; a 300 s
sample interval, so the per-GPU levels are hours, 6 hours and days (the 5-minute level is
finer than the samples), written directly as rollup rows (utilization, power, memory, the
energy counter's hourly use and the idle-sample counts, random per GPU-hour: 11.8 M hourly
rows, 2 M 6-hour and 0.5 M day rows, as a 30-day scrape of 16,384 GPUs leaves them; no raw
samples, which the Jobs page never reads); ``jobs`` Slurm records (start uniform over the days,
80 % on one node with 1, 2, 4 or 8 GPUs, else 2-64 whole nodes, log-uniform lengths from 2
minutes to 2 days, 24 users in 6 accounts, 3 partitions, the usual end states, one job in
fifty requeued twice and one in fifty without a GPU count).

Timed (median and p95 of ``--repeat``, each on a fresh read-only open of the file: nothing
cached, what the first view after a restart costs): each callback of the Jobs page with the
page's default view (the last day of the store), a filtered view (one account), the whole 30
days, a selected job's GPUs, and the filter options.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from telemetry.queries import TimeRange  # noqa: E402
from telemetry.store import Store  # noqa: E402

START = datetime(2026, 10, 1)
GPN = 8
ACCOUNTS = ("pretrain", "research", "eval", "infra", "vision", "speech")
PARTITIONS = ("batch", "interactive", "urgent")
ENDS = (("COMPLETED", 70), ("FAILED", 10), ("CANCELLED", 8), ("TIMEOUT", 4), ("NODE_FAIL", 2),
        ("OUT_OF_MEMORY", 2), ("PREEMPTED", 2), ("RUNNING", 2))  # fmt: skip

_ROLLUP_SQL = """INSERT INTO gpu_rollup_3600 BY NAME
SELECT 3600 AS bucket_s, ts, gpu_id, 12 AS samples, u AS util_avg, 50 AS temp_avg,
  150 + 5 * u AS power_w, 1980 AS sm_clock_avg, 800 * u AS fb_used_avg, u * 0.9 AS real_avg,
  u * 0.9 AS sm_active_avg, (150 + 5 * u) * 3.6e6 AS energy_mj_used,
  CASE WHEN u < 5 THEN 12 ELSE 0 END AS idle_n
FROM (SELECT ts, gpu_id, CASE WHEN hash(gpu_id, ts) % 5 = 0 THEN 1 ELSE
        (hash(ts, gpu_id) % 100)::FLOAT END AS u
      FROM range(0, ?) g(gpu_id),
           (SELECT unnest(generate_series(?::TIMESTAMP, ?::TIMESTAMP - INTERVAL 1 hour,
                                          INTERVAL 1 hour)) AS ts))"""

_UP_SQL = """INSERT INTO {table} BY NAME
SELECT {level} AS bucket_s, time_bucket(to_seconds({level}), ts) AS ts, gpu_id,
  sum(samples) AS samples, sum(util_avg * samples) / sum(samples) AS util_avg,
  avg(temp_avg) AS temp_avg, sum(power_w * samples) / sum(samples) AS power_w,
  avg(sm_clock_avg) AS sm_clock_avg, max(fb_used_avg) AS fb_used_avg,
  sum(real_avg * samples) / sum(samples) AS real_avg,
  sum(sm_active_avg * samples) / sum(samples) AS sm_active_avg, sum(idle_n) AS idle_n
FROM gpu_rollup_3600 GROUP BY ALL"""


def _jobs(rng: random.Random, jobs: int, days: int, nodes: int) -> pd.DataFrame:
    rows = []
    end_all = START + timedelta(days=days)
    states = [s for s, w in ENDS for _ in range(w)]
    for i in range(jobs):
        start = START + timedelta(seconds=rng.uniform(0, days * 86400))
        length = timedelta(seconds=math.exp(rng.uniform(math.log(120), math.log(2 * 86400))))
        n, gpus = (
            (1, rng.choice((1, 2, 4, 8)))
            if rng.random() < 0.8
            else ((k := min(nodes, rng.choice((2, 4, 8, 16, 32, 64)))), k * GPN)
        )
        first = rng.randrange(nodes - n + 1)
        hosts = [f"gpu{h:04d}" for h in range(first, first + n)]
        state = rng.choice(states)
        end = min(start + length, end_all)
        user = rng.randrange(24)
        requeues = 2 if i % 50 == 7 else 0
        for rq in range(requeues + 1):
            rows.append({
                "cluster": "bench", "job_id_raw": 500000 + i, "requeue": rq,
                "job_id": str(500000 + i), "array_job_id": None, "array_task_id": None,
                "name": f"{rng.choice(('train', 'eval', 'sweep', 'debug'))}-{i % 97}",
                "user_name": f"user{user:02d}", "partition": PARTITIONS[i % 3],
                "nodelist": f"gpu[{first:04d}-{first + n - 1:04d}]", "hosts": hosts,
                "state": "REQUEUED" if rq < requeues else state, "reason": None,
                "exit_code": 1 if state == "FAILED" else 0, "exit_signal": None,
                "submit_ts": start, "start_ts": start,
                "end_ts": None if state == "RUNNING" and rq == requeues else end,
                "run_id": None, "run_source": None, "polled_ts": end_all,
                "account": ACCOUNTS[user % 6], "gpus": None if i % 50 == 3 else gpus,
            })  # fmt: skip
    return pd.DataFrame(rows)


def build(path: str, jobs: int = 5000, days: int = 30, nodes: int = 2048, seed: int = 0) -> None:
    """Write the generated cluster (module doc) into a new store at ``path``."""
    rng = random.Random(seed)
    end = START + timedelta(days=days)
    with Store(path) as store:
        store.set_meta({"sample_interval_s": "300", "gpu_day_mark": end.isoformat(sep=" ")})
        with store.transaction() as con:
            con.execute("INSERT INTO nodes SELECT i, printf('gpu%04d', i), NULL, 'compute' "
                        "FROM range(0, ?) t(i)", [nodes])  # fmt: skip
            con.execute(
                "INSERT INTO gpus (gpu_id, node_id, host, gpu, model) SELECT i * 8 + g, i, "
                "printf('gpu%04d', i), g, 'NVIDIA H100 80GB HBM3' FROM range(0, ?) t(i), "
                "range(0, 8) u(g)", [nodes],
            )  # fmt: skip
            con.execute(_ROLLUP_SQL, [nodes * GPN, START, end])
            for level in (21600, 86400):
                con.execute(_UP_SQL.format(table=f"gpu_rollup_{level}", level=level))
            frame = _jobs(rng, jobs, days, nodes)
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'slurm_jobs' "
                "ORDER BY column_index").fetchall()]  # fmt: skip
            frame = frame[cols]  # noqa: F841 (read by DuckDB by name)
            con.execute("INSERT INTO slurm_jobs SELECT * FROM frame")


def _time(path: str, fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, p95) ms of ``fn`` on a fresh read-only open each time."""
    from app.data import services

    times = []
    for _ in range(repeat):
        with Store(path, read_only=True) as store:
            services.bind(services.Services(store=store))
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]


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
        build(path, args.jobs, args.days, args.nodes)
        print(f"built {path} in {time.perf_counter() - t:.1f} s")
    from app.main import create_app

    with Store(path, read_only=True) as store:  # the pages register with an app
        create_app(store)
    from app.pages import jobs as page  # what the callbacks call (replies not kept)

    end = START + timedelta(days=args.days)
    # explicit windows: the store has rollups but no raw samples, so no "last 24 h" of its own
    day = {"range": "custom", "start": f"{end - timedelta(days=1):%Y-%m-%dT%H:%M:%S}",
           "end": f"{end:%Y-%m-%dT%H:%M:%S}"}  # fmt: skip
    month = {"range": "custom", "start": f"{START:%Y-%m-%dT%H:%M:%S}",
             "end": f"{end:%Y-%m-%dT%H:%M:%S}"}  # fmt: skip
    with Store(path, read_only=True) as store:
        from telemetry.queries import jobs as jq

        one = jq.list_jobs(store, jq.JobFilter(TimeRange(end - timedelta(days=1), end)), 1)
        key = one["key"].iloc[0]
        print("rows:", store.scalar("SELECT count(*) FROM slurm_jobs"), "jobs,",
              store.scalar("SELECT count(*) FROM gpu_rollup"), "per-GPU rollup rows")  # fmt: skip
    cases = {
        "filter options": lambda: page.options_for(month),
        "grid, last day": lambda: page.grid_for(day, {}),
        "grid, last day, one account": lambda: page.grid_for(day, {"accounts": ["research"]}),
        "grid, last day, problems only": lambda: page.grid_for(day, {"problems": True}),
        "grid, 30 days (newest 500)": lambda: page.grid_for(month, {}),
        "selected job's GPUs": lambda: page.detail_for(key),
    }
    print(f"cold, {args.repeat} fresh opens each: median / p95 ms")
    for name, fn in cases.items():
        med, p95 = _time(path, fn, args.repeat)
        print(f"  {name:32s} {med:7.1f} {p95:7.1f}")


if __name__ == "__main__":
    main()
