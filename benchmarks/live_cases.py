"""The live benchmark's cases (``benchmarks/live_culprit.py``), each a ``live_rig.Job``:

- the culprit exam's REAL multi-node ``torchrun`` jobs on the CPU (``exam_jobs.py``), their
  first failing launch only (the job is tearing down when the alert must come); the exam's
  Slurm cases under the tests' real Slurm (``exam_slurm.py``); the restart loop's four failing
  launches, timed to its ``RestartLoop`` alert from the failure that made it a loop;
- ``cascade``: a 16,384-rank Megatron job log (``tests/cascade_fixture.py``) written at a job's
  pace: progress, the culprit's CUDA OOM traceback, every other rank's cascade spread over
  ``spread_s``, no restart;
- ``hang16k``: the same job's progress, then one rank never reaches all-reduce #61: ten minutes
  later (the log's clock) every other rank's NCCL watchdog times out on it (four lines each, as
  ProcessGroupNCCL writes them) over the first 4/5 of ``spread_s``, then each aborts and srun
  tears down. Timed from the first rank's watchdog line. No flight-recorder dumps at this
  scale: the log's watchdog lines alone must name the rank.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from benchmarks.exam_jobs import Case, _attempt, attempts, free_port, hosts, prepare
from benchmarks.exam_score import host_unknowable
from benchmarks.live_rig import Job, Want, Watch
from tests import cascade_fixture as cf

# the first line a failure writes: a traceback, torchrun's record of a dead worker, gloo's error
# on a survivor (a SIGKILLed or segfaulted rank writes nothing of its own), Slurm's end of a job
INITIATING = re.compile(
    r"Traceback|exitcode|Signal \d+|SIG[A-Z]+|Connection (closed|reset)|ChildFailedError|"
    r"CUDA out of memory|CANCELLED AT|DUE TO"
)
TIMEOUT = re.compile(r"[Tt]imed out|[Tt]imeout|watchdog")
CAUSE = {"time_limit": "time limit", "preempt": "preempt"}  # no culprit: the cause is the answer


def _thread(target: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def _step_of(line: str) -> int | None:
    """The step of a progress line in any of the exam's formats (the baseline's step)."""
    m = re.search(r"iteration\s+(\d+)/|\bstep:\s*(\d+)|global_step[= ](\d+)|'step': (\d+)", line)
    return int(next(x for x in m.groups() if x)) if m else None


def _progress(w: Watch) -> tuple[float, int] | None:
    for t, ln in list(w.seen):
        if (step := _step_of(ln)) is not None and step >= 2:
            return t, step
    return None


def _fault_t(tdir: Path) -> float | None:
    """The injected fault's time by the job's own record, on this process's monotonic clock
    (a slow rank writes no line when it slows)."""
    ts = [e["t"] for f in tdir.glob("*.jsonl") for x in f.read_text().splitlines()
          if (e := json.loads(x))["ev"] == "fault"]  # fmt: skip
    return min(ts) - time.time() + time.monotonic() if ts else None


def exam_job(case: Case, tmp: Path, slurm: object | None = None) -> tuple[Job, Path]:
    """The exam's case, live: its failing launch(es) write into the followed directory."""
    g = prepare(case, tmp)
    logs = g.dir / "logs"
    logs.mkdir()
    g.log = logs / "slurm-4242.out"
    starts: list[float] = []  # when each launch began (the restart loop's clock)

    def run() -> None:
        if case.slurm:
            from benchmarks.exam_slurm import generate_slurm

            generate_slurm(case, tmp, slurm, g, again=case.slurm == "preempt")  # type: ignore[arg-type]
            return
        for n, kind in enumerate(attempts(case)[: case.failing_attempts], start=1):
            starts.append(time.monotonic())
            _attempt(case, g, n, kind, free_port())

    def clock(w: Watch, answered: float) -> float | None:
        if case.kind == "hang":  # the first rank's timeout, or the first dump, whichever first
            line = w.first(lambda ln: bool(TIMEOUT.search(ln)))
            dumps = [p.stat().st_mtime for p in g.fr.iterdir()] if g.fr.exists() else []
            dump = (min(dumps) - time.time() + time.monotonic()) if dumps else None
            return min((t for t in (line, dump) if t is not None), default=None)
        if case.kind == "slow":
            return _fault_t(g.dir / "truth")
        after = max((s for s in starts if s <= answered), default=0.0)  # the loop's last launch
        return w.first(lambda ln: bool(INITIATING.search(ln)), after=after)

    names = hosts(case)
    if case.slurm in CAUSE:
        want = Want(None, None, cause=CAUSE[case.slurm])
    elif case.kind == "slow":  # no stop: the straggler reports' rank, alerted as slow
        want = Want(case.culprit, names[case.culprit // case.nproc], alerts=("RankSlow",))
    elif host_unknowable(case):  # nothing names the lost node's host: "unknown" is right,
        want = Want(None, None, cause="node lost")  # a host named is wrong (exam_score)
    elif case.failing_attempts > 1:
        want = Want(case.culprit, names[case.culprit // case.nproc], alerts=("RestartLoop",))
    else:
        rank = None if case.kind == "node_lost" else case.culprit
        want = Want(rank, names[case.culprit // case.nproc])
    wait = 900 if case.slurm else 240 * case.failing_attempts
    job = Job(case.name, _kind(case), case.ranks, "exam-" + case.name, want,
              lambda _log: _thread(run), clock, _progress, wait, fr=g.fr)  # fmt: skip
    return job, logs


def _kind(case: Case) -> str:
    if case.slurm in CAUSE:
        return case.slurm
    return "restart_loop" if case.failing_attempts > 1 else case.kind


def _megatron_head(tmp: Path, nodes: int, per_node: int, culprit: int, steps: int,
                   silent_s: float) -> list[str]:  # fmt: skip
    """The 16,384-rank job's lines up to its last progress (NCCL's placement lines, Megatron's
    iterations), its clock set so that its last progress was ``silent_s`` ago."""
    cf.T0 = datetime.utcnow().replace(microsecond=0) - timedelta(
        seconds=steps * cf.STEP_S + silent_s
    )
    full = cf.build(tmp / "whole.log", nodes=nodes, per_node=per_node, culprit=culprit,
                    first_steps=steps, ckpt_step=steps // 2)  # fmt: skip
    lines = full.read_text().splitlines()
    full.unlink()
    return lines[: next(i for i, ln in enumerate(lines) if "Traceback" in ln)]


def _writer(head: list[str], tail: list[str], spread_s: float, pause_s: float = 5.0):  # noqa: ANN202
    """Write ``head``, then its last line alone (the baseline's), then ``tail`` in 200 writes
    over ``spread_s``."""

    def write(log: Path) -> None:
        with open(log, "a") as fh:
            fh.write("\n".join(head[:-1]) + "\n")
            fh.flush()
            time.sleep(3)
            fh.write(head[-1] + "\n")
            fh.flush()
            time.sleep(pause_s)
            per = max(len(tail) // 200, 1)
            for i in range(0, len(tail), per):
                fh.write("\n".join(tail[i : i + per]) + "\n")
                fh.flush()
                time.sleep(spread_s / 200)

    return lambda log: _thread(lambda: write(log))


def _last_step(head: list[str]) -> int:
    return max(int(m.group(1)) for ln in head if (m := re.search(r"iteration\s+(\d+)", ln)))


def cascade_job(tmp: Path, nodes: int, per_node: int, culprit: int, spread_s: float) -> Job:
    steps = 200
    cf.T0 = datetime.utcnow().replace(microsecond=0) - timedelta(seconds=steps * cf.STEP_S)
    full = cf.build(tmp / "whole.log", nodes=nodes, per_node=per_node, culprit=culprit,
                    first_steps=steps, ckpt_step=100)  # fmt: skip
    lines = full.read_text().splitlines()
    first_fail = next(i for i, ln in enumerate(lines) if "Traceback" in ln)
    end = next(i for i, ln in enumerate(lines) if "loading checkpoint" in ln)
    head, cascade = lines[:first_fail], lines[first_fail:end]  # no restart: still tearing down
    return _scale_job("cascade", "crash", nodes * per_node, culprit, per_node, head, cascade,
                      spread_s, lambda ln: "Traceback" in ln)  # fmt: skip


def _scale_job(name: str, kind: str, world: int, culprit: int, per_node: int,
               head: list[str], tail: list[str], spread_s: float,
               starts: Callable[[str], bool]) -> Job:  # fmt: skip
    last, marker = _last_step(head), head[-1]
    return Job(name, kind, world, cf.RUN, Want(culprit, cf.host(culprit // per_node)),
               _writer(head, tail, spread_s), lambda w, _at: w.first(starts),
               lambda w: next(((t, last) for t, ln in list(w.seen) if ln == marker), None),
               spread_s + 90)  # fmt: skip


def _watchdog_lines(rank: int, per_node: int, t: datetime) -> list[str]:
    """What a waiting rank's ProcessGroupNCCL writes when all-reduce #61 times out (PyTorch
    2.4's ``ProcessGroupNCCL.cpp``), with ``srun --label`` and torchrun's tee prefix."""
    node, local = divmod(rank, per_node)
    pre = f"{node}: [default{local}]:[rank{rank}]:[{cf._glog('E', t)} ProcessGroupNCCL.cpp:"
    return [
        f"{pre}616] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL("
        "SeqNum=61, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran "
        "for 600012 milliseconds before timing out.",
        f"{pre}1537] [PG 0 Rank {rank}] Timeout at NCCL work: 61, last enqueued NCCL work: 61, "
        "last completed NCCL work: 60.",
        f"{pre}577] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        f"{pre}583] [Rank {rank}] To avoid data inconsistency, we are taking the entire "
        "process down.",
    ]


def hang16k_job(tmp: Path, nodes: int, per_node: int, culprit: int, spread_s: float) -> Job:
    """A 16,384-rank hang: see the module's docstring. The ranks' watchdog lines come in the
    order their timers fire (shuffled, seeded), then each rank's abort, then the teardown."""
    head = _megatron_head(tmp, nodes, per_node, culprit, steps=200, silent_s=600)
    world = nodes * per_node
    fired = datetime.utcnow()
    order = [r for r in range(world) if r != culprit]
    random.Random(61).shuffle(order)
    tail: list[str] = []
    for i, r in enumerate(order):
        tail += _watchdog_lines(r, per_node, fired + timedelta(seconds=0.8 * spread_s * i / world))
    for r in order:
        node, local = divmod(r, per_node)
        tail.append(f"{node}: [default{local}]:terminate called after throwing an instance of "
                    "'c10::DistBackendError'")  # fmt: skip
    for node in range(nodes):
        tail.append(f"srun: error: {cf.host(node)}: task {node}: Aborted (core dumped)")
    return _scale_job("hang16k", "hang", world, culprit, per_node, head, tail, spread_s,
                      lambda ln: "Watchdog caught" in ln)  # fmt: skip
