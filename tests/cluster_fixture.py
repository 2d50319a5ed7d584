"""A bad night on a real cluster, as files: a Megatron-LM job's Slurm output that failed twice
for different causes, the kernel log of the node that lost a GPU, and the checkpoint
directories of two tiers (Megatron layout, real files with the modification times of their
saves, one checkpoint left half-written). Used by the import tests, the UI test and the README
screenshot; nothing here is hand-labelled: the interruptions must be derived from it.

Story (T0 = 2026-03-01 08:00 UTC, 64 GPUs, one step every 2 s, a progress line every 10 steps):
1. steps 1..3400; checkpoints every 500 steps on NVMe, every 1,000 on the PFS. At step 3400
   node-7 loses GPU 3 (XID 79, kernel log); ten minutes later the NCCL watchdog fires and
   srun kills the tasks. The job restarts on a spare and loads iteration 3000 from the PFS
   (node-7's NVMe copy is gone): 400 steps lost.
2. steps 3001..5200; at step 5200 an InfiniBand link on node-3 fails (NET/IB completion
   error, NCCL system error, a traceback). The job restarts and loads iteration 5000 from
   NVMe: 200 steps lost.
3. steps 5001..6000, then a PFS save of iteration 6000 that never finished (no tracker
   update): a failed checkpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

T0 = datetime(2026, 3, 1, 8, 0, 0)
STEP_S = 2.0
LOG_EVERY = 10
RUN = "atlas-70b"


@dataclass(frozen=True)
class Night:
    root: Path
    job_log: Path
    kern_log: Path
    nvme: Path
    pfs: Path

    def import_args(self, store: Path) -> list[str]:
        """The command a user runs after a bad night (issue 13), for this tree."""
        return [
            "import", "--store", str(store), "--run", RUN,
            "--checkpoints", f"nvme={self.nvme}", "--checkpoints", f"pfs={self.pfs}",
            str(self.job_log), str(self.kern_log),
        ]  # fmt: skip


def _stamp(t: datetime) -> str:
    return f"[{t:%Y-%m-%d %H:%M:%S}]"


def _iteration(t: datetime, step: int) -> str:
    loss = 2.0 + 6.0 * (0.999**step)
    return (
        f"{_stamp(t)} iteration {step:>8}/  100000 | consumed samples: {step * 4096:>12} | "
        f"elapsed time per iteration (ms): {STEP_S * 1000:.1f} | learning rate: 3.000E-04 | "
        f"global batch size:  4096 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.912 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def _load(at: datetime, ckpt_root: Path, step: int, took_s: float) -> list[str]:
    """A restart's checkpoint load, as Megatron-LM logs its start and end."""
    done = at + timedelta(seconds=took_s)
    return [
        f"{_stamp(at)} loading checkpoint from {ckpt_root} at iteration {step}",
        f"{_stamp(done)}  successfully loaded checkpoint from {ckpt_root} [ t 1/1, p 1/1 ] "
        f"at iteration {step}",
    ]


def _save(ckpt_root: Path, step: int, at: datetime, complete: bool = True) -> None:
    """A Megatron checkpoint of two tensor-parallel ranks: rank 0's file written 20 s before
    ``at``, rank 1's at ``at`` (file times are all a directory shows of a write's duration)."""
    ts = (at - datetime(1970, 1, 1)).total_seconds()
    for rank, when in ((0, ts - 20), (1, ts)):
        d = ckpt_root / f"iter_{step:07d}" / f"mp_rank_{rank:02d}"
        d.mkdir(parents=True, exist_ok=True)
        f = d / "model_optim_rng.pt"
        f.write_bytes(b"\0" * 4096)
        os.utime(f, (when, when))
    if complete:
        tracker = ckpt_root / "latest_checkpointed_iteration.txt"
        tracker.write_text(f"{step}\n")
        os.utime(tracker, (ts, ts))


def build(root: Path, world: bool = True) -> Night:
    """The night's files under ``root``; without ``world`` the job log does not say how many
    GPUs the job has (its first line is then a plain "starting Megatron-LM")."""
    nvme, pfs = root / "local_nvme" / "ckpt" / RUN, root / "lustre" / "ckpt" / RUN
    nvme.mkdir(parents=True)
    pfs.mkdir(parents=True)
    out: list[str] = [
        "srun: job 81234 queued and waiting for resources",
        # Megatron-LM's arguments.py on rank 0: 8 nodes x 8 GPUs (GPU-hours and cost from it)
        "using world size: 64, data-parallel size: 8, context-parallel size: 1, hierarchical "
        "context-parallel sizes: None, tensor-model-parallel size: 8, pipeline-model-parallel "
        "size: 1"
        if world
        else "starting Megatron-LM",
    ]
    kern: list[str] = []

    def segment(t: datetime, first: int, last: int) -> datetime:
        for step in range(first, last + 1):
            t += timedelta(seconds=STEP_S)
            if step % LOG_EVERY == 0:
                out.append(_iteration(t, step))
            for every, tier_root in ((500, nvme), (1000, pfs)):
                if step % every == 0 and step < 6000:
                    out.append(f"saving checkpoint at iteration {step:>7} to {tier_root}")
                    _save(tier_root, step, t + timedelta(seconds=20))
                    out.append(
                        f"  successfully saved checkpoint from iteration {step:>7} to {tier_root} "
                        "[ t 1/1, p 1/1 ]"
                    )
        return t

    # 1. up to step 3400, then XID 79 on node-7
    t = segment(T0, 1, 3400)
    xid_at = t + timedelta(seconds=30)
    kern += [
        f"{(t - timedelta(hours=1)):%b %e %H:%M:%S} node-7 kernel: [ 9000.1] eth0: link up",
        f"{xid_at:%b %e %H:%M:%S} node-7 kernel: [ 9123.456] NVRM: Xid (PCI:0000:3b:00): 79, "
        "pid=4242, GPU has fallen off the bus.",
    ]
    wd = t + timedelta(minutes=10)
    out += [
        f"{_stamp(wd)} [rank7]:[E ProcessGroupNCCL.cpp:616] [Rank 7] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=91234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
        "srun: error: node-7: task 7: Killed",
        "srun: launching job step 81234.1 on 32 nodes",
    ]
    back = wd + timedelta(minutes=8)
    out += _load(back, pfs, 3000, took_s=40)
    # 2. steps 3001..5200, then an InfiniBand failure on node-3
    t = segment(back + timedelta(seconds=60), 3001, 5200)
    ib = t + timedelta(seconds=15)
    out += [
        f"{_stamp(ib)} node-3:5512:5601 [3] NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.13<48211> with error 12, opcode 0, len 0, vendor err 129",
        f"{_stamp(ib)} node-3:5512:5601 [3] NCCL INFO transport/net.cc:1106 -> 6",
        "Traceback (most recent call last):",
        '  File "pretrain_gpt.py", line 241, in <module>',
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error, NCCL version 2.21.5",
        "srun: error: node-3: task 3: Exited with exit code 1",
    ]
    back = ib + timedelta(minutes=6)
    out += _load(back, nvme, 5000, took_s=15)
    # 3. steps 5001..6000, then a PFS save that never completes
    t = segment(back + timedelta(seconds=30), 5001, 6000)
    out.append(f"saving checkpoint at iteration {6000:>7} to {pfs}")
    _save(pfs, 6000, t + timedelta(seconds=30), complete=False)
    job_log, kern_log = root / "slurm-81234.out", root / "node-7-kern.log"
    job_log.write_text("\n".join(out) + "\n")
    kern_log.write_text("\n".join(kern) + "\n")
    end = (t - datetime(1970, 1, 1)).total_seconds()
    os.utime(job_log, (end, end))
    os.utime(kern_log, (end, end))
    return Night(root, job_log, kern_log, nvme, pfs)


def rotate(night: Night, nvme: int = 3, pfs: int = 2) -> Night:
    """The night after a rotation that kept the newest ``nvme`` and ``pfs`` checkpoint
    directories (Megatron-LM and most trainers keep the last few; the log reports every save)."""
    import shutil

    for tier, keep in ((night.nvme, nvme), (night.pfs, pfs)):
        dirs = sorted(p for p in tier.iterdir() if p.is_dir())
        for d in dirs[:-keep]:
            shutil.rmtree(d)
    return night
