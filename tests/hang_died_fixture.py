"""A run that hung and died (issue 57, item 3), imported with the user's commands: 16 ranks on
two nodes print progress every 10 s from step 1 (``first_save``: a checkpoint save logged at
that step, else none), then rank 9 on gpu-b never calls all-reduce #61 and the others wait in
it; the NCCL watchdog takes them down 10 minutes later and Slurm ends the job. Nothing resumes.
The flight-recorder dumps are written in the format PyTorch dumps on a watchdog timeout
(``docs``/STACK.md: the dict ``_dump_fr_trace`` pickles) and imported beside the job's log.

Known by construction: the hang at ``HANG_AT`` (the collective's creation, 15 s after the
last progress at ``LAST``), the job noticing it at ``DETECTED`` (the first watchdog line), the
job's end at ``ENDED``, and 16 GPUs."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timedelta
from pathlib import Path

from tests.conftest import cli

RUN = "hang-16"
RANKS, CULPRIT, STEPS = 16, 9, 60
T0 = datetime(2026, 11, 20, 2, 0, 0)  # step 1
LAST = T0 + timedelta(seconds=10 * (STEPS - 1))  # the last progress (step 60)
HANG_AT = LAST + timedelta(seconds=15)  # the waiting ranks enqueue all-reduce #61
DETECTED = HANG_AT + timedelta(minutes=10)  # NCCL's watchdog: 600,000 ms
ENDED = DETECTED + timedelta(seconds=20)  # Slurm's kill of the job's tasks
HOSTS = ("gpu-a", "gpu-b")  # ranks 0-7 on gpu-a, 8-15 on gpu-b


def _entry(seq: int) -> dict:
    t = T0 + timedelta(seconds=10 * (seq - 1) + 5)
    return {"record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": "nccl:all_reduce", "input_sizes": [[1024]],
            "output_sizes": [[1024]], "input_dtypes": ["Float"], "state": "completed",
            "retired": True, "timeout_ms": 600000,
            "time_created_ns": int((t - datetime(1970, 1, 1)).total_seconds() * 1e9),
            "is_p2p": False, "thread_name": "MainThread",
            "frames": [{"name": "train_step", "filename": "train.py", "line": 77}]}  # fmt: skip


def _dump(rank: int) -> bytes:
    last = STEPS if rank == CULPRIT else STEPS + 1
    status = {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                    "last_completed_collective": STEPS}}  # fmt: skip
    ranks = str(list(range(RANKS)))
    doc = {"version": "2.10", "comm_lib_version": "2.21.5",
           "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
           "pg_status": status, "entries": [_entry(s) for s in range(1, last + 1)]}  # fmt: skip
    return pickle.dumps(doc, protocol=2)


def _log(first_save: int | None) -> str:
    out = []
    for i in range(STEPS):
        t = T0 + timedelta(seconds=10 * i)
        out.append(f"[rank0]:[titan] {t:%Y-%m-%d %H:%M:%S},000 - root - INFO - step: {i + 1}"
                   f"  loss:  7.{i:02d}  memory: 33.12GiB(41.86%)  tps: 6,123")  # fmt: skip
        if first_save is not None and i + 1 == first_save:  # Megatron-LM's save lines
            out.append(f"[{t:%Y-%m-%d %H:%M:%S}] saving checkpoint at iteration {i + 1:>7} "
                       "to /srv/ckpt")  # fmt: skip
            out.append(f"[{t:%Y-%m-%d %H:%M:%S}]   successfully saved checkpoint from "
                       f"iteration {i + 1:>7} to /srv/ckpt")  # fmt: skip
    for r in range(RANKS):
        if r == CULPRIT:
            continue
        out.append(
            f"[rank{r}]:[E{DETECTED:%m%d %H:%M:%S}.{100 + r:06d} ProcessGroupNCCL.cpp:616] "
            f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=61, "
            "OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600012 "
            "milliseconds before timing out."
        )
    out.append(f"[{ENDED:%Y-%m-%d %H:%M:%S}] srun: error: gpu-b: task 1: Killed")
    return "\n".join(out) + "\n"


def build(root: Path, first_save: int | None = None, with_log: bool = True) -> Path:
    """The store ``root/s.duckdb``: the run's record (16 GPUs on two nodes), its job log
    (unless not ``with_log``: a run known from its dumps alone) and its dumps, each imported
    with ``factoryfloor import``."""
    root.mkdir(parents=True, exist_ok=True)
    store = root / "s.duckdb"
    runs = root / "runs.jsonl"
    runs.write_text(json.dumps({"run": RUN, "gpus": RANKS, "nodes": 2,
                                "start": T0.isoformat()}) + "\n")  # fmt: skip
    r = cli("import", "--store", str(store), "--kind", "runs", str(runs))
    assert r.returncode == 0, r.stderr
    dumps = root / "dumps"
    dumps.mkdir(exist_ok=True)
    for rank in range(RANKS):
        (dumps / f"nccl_trace_rank_{rank}").write_bytes(_dump(rank))
    if with_log:
        log = root / "slurm-91234.out"
        log.write_text(_log(first_save))
        r = cli("import", "--store", str(store), "--run", RUN, str(log))
        assert r.returncode == 0, r.stderr
    r = cli("import", "--store", str(store), "--run", RUN, str(dumps) + "/")
    assert r.returncode == 0, r.stderr
    return store
