"""A small store of known jobs over known GPU samples, for the Jobs queries, page and CLI.

Four nodes of two GPUs, one sample a minute for four hours from 2026-03-01 00:00, each GPU at
a constant utilization, power and memory (so every figure can be worked out by hand):

======  ===========  ======  ===========  ==========================================
node    utilization  power   memory used  what runs on it
======  ===========  ======  ===========  ==========================================
n0      80 %, 80 %   400 W   10,000 MiB   slurm 100 (00:00-01:00), slurm 105
n1      50 %, 0 %    300 W   20,000 MiB   slurm 101 (labelled on GPU 0 only), slurm 105
n2      0 %, 0 %     100 W   1,000 MiB    slurm 102 (FAILED after 5 min, requeued twice),
                                          slurm 104 (idle for an hour)
n3      30 %, 30 %   200 W   5,000 MiB    pod research/eval-7 (samples 02:00-04:00 only)
======  ===========  ======  ===========  ==========================================

Slurm 103 ran on n9, a node without samples; slurm 105 on n0 and n1 for the four hours.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from telemetry.store import Store

T0 = datetime(2026, 3, 1)
NODES = {  # host: (util of GPU 0, util of GPU 1, power W, memory MiB, minutes sampled)
    "n0": (80.0, 80.0, 400.0, 10_000.0, (0, 240)),
    "n1": (50.0, 0.0, 300.0, 20_000.0, (0, 240)),
    "n2": (0.0, 0.0, 100.0, 1_000.0, (0, 240)),
    "n3": (30.0, 30.0, 200.0, 5_000.0, (120, 240)),
}


def _gpus() -> pd.DataFrame:
    rows = []
    for n, host in enumerate(NODES):
        for g in range(2):
            rows.append({
                "gpu_id": 2 * n + g, "node_id": n, "host": host, "gpu": g,
                "uuid": f"GPU-{host}-{g}", "model": "NVIDIA H100 80GB HBM3", "pci_bus_id": "",
                "device": f"nvidia{g}", "driver_version": "550", "mig_profile": None,
                "mig_instance": None,
                "namespace": "research" if host == "n3" else None,
                "pod": "eval-7" if host == "n3" else None, "container": None,
                "hpc_job": "101" if (host, g) == ("n1", 0) else None,
            })  # fmt: skip
    return pd.DataFrame(rows).astype({"gpu_id": "int32", "node_id": "int32", "gpu": "int16"})


def _samples() -> pd.DataFrame:
    rows = []
    for n, (u0, u1, power, mem, (first, last)) in enumerate(NODES.values()):
        for m in range(first, last):
            for g, util in enumerate((u0, u1)):
                rows.append({
                    "ts": T0 + timedelta(minutes=m), "gpu_id": 2 * n + g, "util_pct": util,
                    "temp_c": 50.0, "mem_temp_c": 50.0, "power_w": power,
                    "sm_clock_mhz": 1980.0, "fb_used_mib": mem, "fb_free_mib": 80_000.0 - mem,
                    "tensor_active": 0.0, "energy_mj": power * 60_000.0 * (m + 1),
                    "xid_last": 0.0,
                })  # fmt: skip
    return pd.DataFrame(rows).astype({"gpu_id": "int32"})


def job(job: int, hosts: list[str], start_min: int, end_min: int | None, state: str,
         requeue: int = 0, **kw: object) -> dict[str, object]:  # fmt: skip
    return {
        "cluster": "c1", "job_id_raw": job, "requeue": requeue, "job_id": str(job),
        "array_job_id": None, "array_task_id": None, "name": kw.get("name", f"job-{job}"),
        "user_name": kw.get("user", "alice"), "partition": kw.get("partition", "gpu"),
        "nodelist": ",".join(hosts), "hosts": hosts, "state": state, "reason": None,
        "exit_code": kw.get("exit_code", 0), "exit_signal": None,
        "submit_ts": T0 + timedelta(minutes=start_min),
        "start_ts": T0 + timedelta(minutes=start_min),
        "end_ts": None if end_min is None else T0 + timedelta(minutes=end_min),
        "run_id": kw.get("run_id"), "run_source": None, "polled_ts": T0 + timedelta(hours=4),
        # a job's allocated GPUs as Slurm counts them (AllocTRES gres/gpu): here whole nodes
        "account": kw.get("account", "ml"), "gpus": kw.get("gpus", 2 * len(hosts)),
    }  # fmt: skip


JOBS = [
    job(100, ["n0"], 0, 60, "COMPLETED", name="train-small"),
    job(101, ["n1"], 60, 180, "COMPLETED", gpus=1, user="bob", account="infra"),
    job(102, ["n2"], 0, 5, "REQUEUED", requeue=0),
    job(102, ["n2"], 0, 5, "REQUEUED", requeue=1),
    job(102, ["n2"], 0, 5, "FAILED", requeue=2, exit_code=1, name="crashy"),
    job(103, ["n9"], 30, 90, "CANCELLED", partition="debug"),
    job(104, ["n2"], 10, 70, "COMPLETED", name="idler", user="bob", account="infra"),
    job(105, ["n0", "n1"], 0, 240, "COMPLETED", name="train-big"),
]


def insert_jobs(store: Store, jobs: list[dict[str, object]]) -> None:
    """Slurm job records (``job``'s rows) written as the collector writes them."""
    cols = [r[0] for r in store.rows(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'slurm_jobs' "
        "ORDER BY column_index")]  # fmt: skip
    frame = pd.DataFrame(jobs)[cols]  # noqa: F841 (read by DuckDB by name)
    with store.transaction(["slurm_jobs"]) as con:
        con.execute("INSERT INTO slurm_jobs SELECT * FROM frame")


def build_jobs_store(path: Path) -> Path:
    """The store described above, rolled up."""
    with Store(str(path)) as store:
        store.set_meta({"sample_interval_s": "60"})
        store.append("gpus", _gpus())
        store.append("gpu_samples", _samples())
        store.refresh_rollups()
        insert_jobs(store, JOBS)
    return path
