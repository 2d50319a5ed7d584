"""The generated cluster the cluster benchmarks run on (``cluster_jobs.py``: day accounting;
``jobs_page.py``: the Jobs page): one seed gives one store.

How it is generated (``build``): ``nodes`` hosts ``gpu0000``.. with 8 GPUs each (``nodes``/
``gpus`` rows, as a collector writes them); ``jobs`` Slurm job records submitted uniformly over
the ``days`` and started when their GPUs are free (a GPU is never given to two jobs at once; a
job still waiting at the end is PENDING, one still running is RUNNING at the last poll), sizes
from 1 GPU to 64 nodes (70 % small: 1, 2, 4 or 8 GPUs on one node; the rest 2-64 whole
nodes), lengths from ten minutes to four days (log-uniform), users ``user00``..``user23`` in
six accounts and three partitions, every end state (COMPLETED most, FAILED, CANCELLED,
TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, and REQUEUED records followed by the job's next
record under the same id), one job in fifty with no GPU count (its nodes' GPUs count); node
events (a drain with an XID reason, or a down, then back to IDLE hours later) on 1 % of the
nodes a day; a MAINT reservation of 64 nodes for 8 hours on day 10 plus a non-maintenance one.
Those go in through ``Store.append_many``, the store's normal write path.

The GPUs' figures are the per-GPU rollups a 30-day scrape at a 300 s interval leaves (hours,
6 hours and days; no raw samples, which neither page reads): per GPU-hour a utilization drawn
from a hash of the GPU and the hour (one GPU-hour in five idle at 1 %, else 0-99 %, whatever
job holds it: the figures are not a model of the jobs), power 150 W + 5 W per utilization
point, memory 800 MiB per point, the energy counter's use and the idle-sample counts; the
6-hour and day levels summed from the hours in SQL. Last, the finished jobs' figures are kept
(``telemetry.derive.job_figures.keep``), as the ingest's rollup refresh keeps them.
"""

from __future__ import annotations

import math
import os
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from telemetry.derive import job_figures  # noqa: E402
from telemetry.store import Store  # noqa: E402

START = datetime(2026, 10, 1)
GPUS_PER_NODE = 8
ACCOUNTS = ("pretrain", "research", "eval", "infra", "vision", "speech")
PARTITIONS = ("batch", "interactive", "urgent")
ENDS = (("COMPLETED", 70), ("FAILED", 10), ("CANCELLED", 8), ("TIMEOUT", 4), ("NODE_FAIL", 2),
        ("OUT_OF_MEMORY", 2), ("PREEMPTED", 2), ("REQUEUED", 2))  # fmt: skip
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


GPU_COLUMNS = ["gpu_id", "node_id", "host", "gpu", "uuid", "model", "pci_bus_id", "device",
               "driver_version", "mig_profile", "mig_instance", "namespace", "pod", "container",
               "hpc_job"]  # fmt: skip


def host(i: int) -> str:
    return f"gpu{i:04d}"


def _size(rng: random.Random, nodes: int) -> tuple[int, int]:
    """(node count, GPUs): mostly one node, a few up to 64 whole nodes."""
    if rng.random() < 0.7:
        return 1, rng.choice((1, 2, 4, 8))
    n = min(nodes, rng.choice((2, 4, 8, 16, 32, 64)))
    return n, n * GPUS_PER_NODE


def build(store_path: str, jobs: int = 5000, days: int = 30, nodes: int = 2048,
          seed: int = 0) -> dict[str, int]:  # fmt: skip
    """Write the generated cluster (module doc) into a new store at ``store_path``; the row
    count of each table written."""
    rng = random.Random(seed)
    end = START + timedelta(days=days)
    node_rows = pd.DataFrame({"node_id": range(nodes), "host": [host(i) for i in range(nodes)],
                              "rack": [f"r{i // 32:03d}" for i in range(nodes)],
                              "role": "compute"})  # fmt: skip
    gpu_rows = pd.DataFrame(
        [
            (n * GPUS_PER_NODE + g, n, host(n), g)
            for n in range(nodes)
            for g in range(GPUS_PER_NODE)
        ],
        columns=GPU_COLUMNS[:4],
    ).reindex(columns=GPU_COLUMNS)
    states, weights = zip(*ENDS, strict=True)
    rows: list[dict[str, object]] = []
    free = [[START] * GPUS_PER_NODE for _ in range(nodes)]  # each GPU free from this time
    submits = sorted(START + timedelta(seconds=rng.uniform(0, days * 86400)) for _ in range(jobs))
    for i, submit in enumerate(submits):
        n, gpus = _size(rng, nodes)
        if i % 50 == 0:  # no GPU count: the job holds its nodes whole
            gpus = n * GPUS_PER_NODE
        per = gpus // n
        first = rng.randrange(0, nodes - n + 1)
        block = range(first, first + n)
        user = rng.randrange(24)
        record = {
            "cluster": "bench", "job_id_raw": 1000 + i, "job_id": str(1000 + i),
            "name": f"job-{i % 211}", "user_name": f"user{user:02d}",
            "account": ACCOUNTS[user % len(ACCOUNTS)], "partition": rng.choice(PARTITIONS),
            "nodelist": f"gpu[{first:04d}-{first + n - 1:04d}]",
            "hosts": [host(k) for k in block], "gpus": None if i % 50 == 0 else gpus,
        }  # fmt: skip
        # scheduled as Slurm would: when ``per`` GPUs of every node of the block are free
        ready = max(sorted(free[k])[per - 1] for k in block)
        start, requeue = max(submit + timedelta(seconds=rng.uniform(5, 600)), ready), 0
        if start >= end:  # still waiting when the window ends
            rows.append({**record, "requeue": 0, "state": "PENDING", "submit_ts": submit,
                         "polled_ts": end, "nodelist": None, "hosts": []})  # fmt: skip
            continue
        while True:
            length = timedelta(seconds=math.exp(rng.uniform(math.log(600), math.log(345600))))
            state = rng.choices(states, weights)[0]
            stop = start + length if start + length < end else None
            rows.append({**record, "requeue": requeue, "state": state if stop else "RUNNING",
                         "exit_code": 1 if state == "FAILED" else 0, "submit_ts": submit,
                         "start_ts": start, "end_ts": stop, "polled_ts": end})  # fmt: skip
            if state != "REQUEUED" or stop is None or requeue >= 3:
                break
            start, requeue = stop + timedelta(seconds=rng.uniform(60, 900)), requeue + 1
        for k in block:  # its GPUs busy until its last record ends
            free[k].sort()
            free[k][:per] = [stop or end] * per
    jobs_df = pd.DataFrame(rows)
    jobs_df["gpus"] = pd.array(jobs_df["gpus"], dtype="Int64")
    events = []
    for d in range(days):
        for k in rng.sample(range(nodes), max(1, nodes // 100)):
            t = START + timedelta(days=d, seconds=rng.uniform(0, 86400))
            bad = rng.choice([("IDLE+DRAIN", "XID 79 GPU fell off the bus"),
                              ("MIXED+DRAIN", "XID 48 double-bit ECC"),
                              ("DOWN", "Not responding")])  # fmt: skip
            back = t + timedelta(hours=rng.uniform(1, 30))
            events.append({"ts": t, "host": host(k), "state": bad[0], "reason": bad[1],
                           "reason_user": "root", "reason_ts": t, "polled_ts": t})  # fmt: skip
            if back < end:
                events.append({"ts": back, "host": host(k), "state": "IDLE", "polled_ts": back})
    maint_start = START + timedelta(days=min(10, days - 1), hours=6)
    resv = pd.DataFrame([
        {"name": "rack-maint", "nodes": [host(k) for k in range(min(64, nodes))],
         "start_ts": maint_start, "end_ts": maint_start + timedelta(hours=8),
         "flags": "MAINT,IGNORE_JOBS", "users": "root", "polled_ts": maint_start},
        {"name": "eval-hold", "nodes": [host(k) for k in range(max(0, nodes - 16), nodes)],
         "start_ts": START, "end_ts": end, "flags": "FLEX", "accounts": "eval",
         "polled_ts": START},
    ])  # fmt: skip
    nodes_now = pd.DataFrame({"host": [host(i) for i in range(nodes)], "state": "IDLE",
                              "gpus": GPUS_PER_NODE, "polled_ts": end})  # fmt: skip
    if os.path.exists(store_path):
        os.unlink(store_path)
    with Store(store_path) as store:
        store.set_meta({"sample_interval_s": "300", "gpu_day_mark": end.isoformat(sep=" ")})
        store.append_many({"nodes": node_rows, "gpus": gpu_rows})
        with store.transaction() as con:
            con.execute(_ROLLUP_SQL, [nodes * GPUS_PER_NODE, START, end])
            for level in (21600, 86400):
                con.execute(_UP_SQL.format(table=f"gpu_rollup_{level}", level=level))
        store.append_many({"slurm_jobs": jobs_df, "slurm_nodes": nodes_now,
                           "slurm_node_events": pd.DataFrame(events),
                           "slurm_reservations": resv})  # fmt: skip
        kept = job_figures.keep(store)
        rollup = store.scalar("SELECT count(*) FROM gpu_rollup")
    return {"gpus": len(gpu_rows), "slurm_jobs": len(jobs_df), "slurm_node_events": len(events),
            "slurm_reservations": len(resv), "per-GPU rollup rows": rollup,
            "jobs with kept figures": kept}  # fmt: skip
