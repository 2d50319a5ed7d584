"""Cluster accounting benchmark: a generated store of 5,000 Slurm jobs over 30 days on 2,048
nodes, and the day accounting (``telemetry.queries.accounting``) over it, cold and warm.

    .venv/bin/python benchmarks/cluster_jobs.py                   # 5,000 jobs, 30 days, 2,048 nodes
    .venv/bin/python benchmarks/cluster_jobs.py --jobs 20000 --keep /tmp/jobs.duckdb

How the store is generated (``build``, seeded, so one seed gives one store): ``nodes`` hosts
``gpu0000``.. with 8 GPUs each (``nodes``/``gpus`` rows, as a collector writes them); ``jobs``
Slurm job records submitted uniformly over the ``days`` and started when their GPUs are free
(a GPU is never given to two jobs at once; a job still waiting at the end is PENDING), sizes
from 1 GPU to 64 nodes (70 % small: 1, 2, 4 or 8 GPUs on one node; the rest 2-64 whole
nodes), lengths from ten minutes to four days (log-uniform), users ``user00``..``user23`` in
six accounts and three partitions, every end state (COMPLETED most, FAILED, CANCELLED, TIMEOUT,
NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, and REQUEUED records followed by the job's next record
under the same id), one job in fifty with no GPU count (its nodes' GPUs count); node events
(a drain with an XID reason, or a down, then back to IDLE hours later) on 1 % of the nodes a
day; and a MAINT reservation of 64 nodes for 8 hours on day 10 plus a non-maintenance one.
Everything goes in through ``Store.append_many``, the store's normal write path.

Printed: the build time and row counts, then the accounting of all the days cold (a fresh
read-only open of the file, nothing cached: what the first page view after a restart costs)
and warm (the same connection again with its result cache dropped), medians of ``--repeat``.
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
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from telemetry.queries.accounting import accounting  # noqa: E402
from telemetry.store import Store  # noqa: E402

START = datetime(2026, 10, 1)
GPUS_PER_NODE = 8
ACCOUNTS = ("pretrain", "research", "eval", "infra", "vision", "speech")
PARTITIONS = ("batch", "interactive", "urgent")
ENDS = (("COMPLETED", 70), ("FAILED", 10), ("CANCELLED", 8), ("TIMEOUT", 4), ("NODE_FAIL", 2),
        ("OUT_OF_MEMORY", 2), ("PREEMPTED", 2), ("REQUEUED", 2))  # fmt: skip
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
        store.append_many({"nodes": node_rows, "gpus": gpu_rows})
        store.append_many({"slurm_jobs": jobs_df, "slurm_nodes": nodes_now,
                           "slurm_node_events": pd.DataFrame(events),
                           "slurm_reservations": resv})  # fmt: skip
    return {"gpus": len(gpu_rows), "slurm_jobs": len(jobs_df), "slurm_node_events": len(events),
            "slurm_reservations": len(resv)}  # fmt: skip


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
        print(f"day accounting, {a.days} days, {a.nodes:,} nodes, {a.jobs:,} jobs:")
        print(
            f"  cold (fresh read-only open, nothing cached): "
            f"{statistics.median(cold(path, a.days) for _ in range(a.repeat)) * 1000:.0f} ms"
        )
        with Store(path, read_only=True) as store:
            asof = START + timedelta(days=a.days)
            accounting(store, START, a.days, asof=asof)

            def warm() -> float:
                store.forget_results()
                t = time.perf_counter()
                accounting(store, START, a.days, asof=asof)
                return time.perf_counter() - t

            print(
                f"  warm (same connection, result cache dropped): "
                f"{statistics.median(warm() for _ in range(a.repeat)) * 1000:.0f} ms"
            )
            day = accounting(store, START, a.days, asof=asof).days
            print(f"  GPU-hours over the {a.days} days: "
                  + ", ".join(f"{c} {day[c].sum():,.0f}" for c in day.columns[1:]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
