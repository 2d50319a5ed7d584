"""The exam's jobs under the test suite's real Slurm (``tests/slurm_fixture.py``, one node):
``sbatch`` runs ``srun --label -n NODES``, each task one torchrun agent in its own UTS and
mount namespace with its own hostname (/work/shared/STACK.md), so the job's log carries srun's
real ``0: `` labels and Slurm's own lines. Cases (``Case.slurm``):

- ``srun``: a rank fails as ``Case.kind`` says; the job is submitted again (a requeue) and
  resumes from its checkpoint;
- ``nodes``: the same, each agent on a Slurm node of its own (the cluster's ``nodes``, named
  as the case's hosts, ``SlurmCluster(nodes=slurm_nodes(cases))``) and under that node's name,
  as on a real cluster: Slurm's own lines (``srun: error: NODE: task 1: Killed``) then name
  the node a task ran on;
- ``time_limit``: ``sbatch -t 1``; Slurm ends the job at its limit (``DUE TO TIME LIMIT``),
  then it is submitted again and finishes;
- ``preempt``: a job of the higher-priority partition needs the node, Slurm cancels this one
  (``DUE TO PREEMPTION``, the fixture's ``PreemptMode=CANCEL``), then it is requeued.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

from benchmarks import exam_jobs as jobs
from benchmarks.exam_jobs import Case, Generated
from tests.slurm_fixture import NODES_PARTITION, SlurmCluster, wait_for

JOB_S = 900  # the longest a launch may take on a loaded machine


FAILS = ("srun", "nodes")  # the modes in which a rank fails as the case says


def slurm_nodes(cases: list[Case]) -> tuple[str, ...]:
    """The Slurm nodes the ``nodes`` cases run on: their hosts (``SlurmCluster.nodes``)."""
    return tuple(sorted({h for c in cases if c.slurm == "nodes" for h in jobs.hosts(c)}))


def _script(case: Case, g: Generated, attempt: int, port: int) -> Path:
    """The batch script: one srun task per node, the task's hostname by its SLURM_PROCID, or
    (``nodes``) the Slurm node's own name."""
    names = " ".join(jobs.hosts(case))
    node = jobs.agent_command(case, g, attempt, port, '"$1"')
    inner = f"set -- {names}; shift $SLURM_PROCID; {node}"
    if case.slurm == "nodes":
        inner = f'set -- "$SLURMD_NODENAME"; {node}'
    task = f"exec unshare --uts --mount sh -c {shlex.quote(inner)}"
    f = g.dir / f"job{attempt}.sh"
    f.write_text(f"#!/bin/bash\nsrun --label -n {case.nnodes} bash -c {shlex.quote(task)}\n")
    return f


def _progress(g: Generated, attempt: int) -> int:
    steps = [0]
    for f in (g.dir / "truth").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e["attempt"] == attempt and e["ev"] == "progress":
                steps.append(e["step"])
    return max(steps)


# A time-limited attempt's step: at 0.3 s, 200 steps ended before Slurm's 1-minute limit on a
# quiet machine (the live benchmark's time_limit then saw the run finish, no stop)
LIMITED_STEP_S = 0.6


def _submit(cl: SlurmCluster, case: Case, g: Generated, attempt: int, *opts: str) -> str:
    env = jobs.job_env(
        case, g, attempt, case.kind if case.slurm in FAILS and attempt == 1 else "none"
    )
    env["SLURM_CONF"] = str(cl.conf)
    if case.slurm == "time_limit" and attempt == 1:  # its 200 steps outlast the 1-minute limit
        env["EXAM_STEP_S"] = str(max(case.step_s, LIMITED_STEP_S))  # on a quiet machine too
    where = ["-N", "1", "-n", str(case.nnodes), "--exclusive", "--mem=3500M"]
    if case.slurm == "nodes":  # one task on each node of the partition of the case's hosts
        where = ["-p", NODES_PARTITION, "-w", ",".join(jobs.hosts(case)), "-N",
                 str(case.nnodes), "--ntasks-per-node", "1", "--mem=1800M"]  # fmt: skip
    p = subprocess.run(
        ["sbatch", "--parsable", "-J", f"exam-{case.name}", *where, "-o", str(g.log),
         "--open-mode=append", *opts, str(_script(case, g, attempt, jobs.free_port()))],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return p.stdout.strip().split(";")[0]


def generate_slurm(
    case: Case, root: Path, cl: SlurmCluster, g: Generated | None = None, again: bool = True
) -> Generated:
    """The case's job under Slurm, then (``again``) submitted once more, as a requeue; into
    ``g`` when given (prepared, its log where a live benchmark follows it)."""
    g = g or jobs.prepare(case, root)
    t0 = time.monotonic()
    ends = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL")
    limit = ["-t", "1"] if case.slurm == "time_limit" else []
    job = _submit(cl, case, g, 1, *limit)
    if case.slurm == "preempt":
        wait_for("steps past the first checkpoint", lambda: _progress(g, 1) > case.save_every,
                 JOB_S, 1)  # fmt: skip
        urgent = cl.sbatch("-J", "exam-urgent", "-p", "urgent", "--exclusive", "--wrap", "sleep 2")
        cl.wait_state(job, ("PREEMPTED", "CANCELLED"), 120)
        cl.wait_state(urgent, ("COMPLETED",), 120)
    cl.wait_state(job, ends, JOB_S)
    if again:
        cl.wait_state(_submit(cl, case, g, 2), ends, JOB_S)
    return jobs.finish(g, t0)
