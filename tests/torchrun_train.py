"""A small real training job for ``tests/torchrun_job.py`` (torchrun, gloo, the CPU). It writes
only its own progress and checkpoint lines, in Megatron-LM's format: every rank its restore
(``loading checkpoint from ... at iteration N``, as each rank of a Megatron job does), the last
rank its iteration lines, rank 0 its saves. Everything else is the real software's: tracebacks,
torchrun's summaries, gloo's errors. ``FAIL`` picks what rank ``FAIL_RANK`` does at iteration
``FAIL_AT`` of the first attempt (no checkpoint yet at start): ``raise``, ``kill`` (SIGKILL, as
the OOM killer does), ``segv``, ``hang`` (never calls the next collective) or ``node`` (its
agent and every rank of its node are killed at once)."""

import os
import signal
import sys
import time
from datetime import datetime, timedelta

import torch
import torch.distributed as dist

CKPT = sys.argv[1]
FAIL, FAIL_RANK = os.environ.get("FAIL", ""), int(os.environ.get("FAIL_RANK", "-1"))
FAIL_AT, ITERS = int(os.environ.get("FAIL_AT", "12")), int(os.environ.get("ITERS", "20"))
STEP_S, SAVE_EVERY = 0.25, 5


def stamp() -> str:
    return f"[{datetime.now():%Y-%m-%d %H:%M:%S}]"


def say(text: str) -> None:
    print(text, flush=True)


def lose_node() -> None:
    """SIGKILL this node's agent and every worker it started, then this rank."""
    agent = os.getppid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == agent and int(pid) != os.getpid():
            os.kill(int(pid), signal.SIGKILL)
    os.kill(agent, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def fail() -> None:
    if FAIL == "raise":
        raise RuntimeError("shape mismatch in the attention mask: [4, 128] vs [4, 256]")
    if FAIL == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAIL == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if FAIL == "hang":
        time.sleep(3600)
    if FAIL == "node":
        lose_node()


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    start = 0
    latest = os.path.join(CKPT, "latest")
    if os.path.exists(latest):
        with open(latest) as fh:
            start = int(fh.read())
        say(f"{stamp()} loading checkpoint from {CKPT} at iteration {start}")
        say(
            f"{stamp()}  successfully loaded checkpoint from {CKPT} [ t 1/1, p 1/1 ] at "
            f"iteration {start}"
        )
    t = torch.ones(64)
    for it in range(start + 1, ITERS + 1):
        if rank == FAIL_RANK and it == FAIL_AT and start == 0:
            fail()
        tick = time.monotonic()
        dist.all_reduce(t)
        time.sleep(max(STEP_S - (time.monotonic() - tick), 0))
        if rank == world - 1:
            say(
                f"{stamp()} iteration {it:>8}/{ITERS:>8} | consumed samples: {it * 32:>12} | "
                f"elapsed time per iteration (ms): {STEP_S * 1000:.1f} | learning rate: "
                f"3.000E-04 | global batch size:    32 | lm loss: {2 + 6 * 0.9**it:.6E} | "
                "loss scale: 1.0 | number of skipped iterations:   0 | number of nan "
                "iterations:   0 |"
            )
        if it % SAVE_EVERY == 0:
            dist.barrier()
            if rank == 0:
                say(f"{stamp()} saving checkpoint at iteration {it:>7} to {CKPT}")
                with open(latest + ".tmp", "w") as fh:
                    fh.write(str(it))
                os.replace(latest + ".tmp", latest)
                say(f"{stamp()}   successfully saved checkpoint from iteration {it:>7} to {CKPT}")
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
