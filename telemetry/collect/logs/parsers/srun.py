"""Slurm: ``srun``'s and ``salloc``'s errors, ``slurmstepd``'s ``CANCELLED AT`` and OOM lines,
slurmctld's signalled tasks, and the job's environment a batch script prints
(``env | grep SLURM``: its nodes and GPUs)."""

from __future__ import annotations

import re

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import NOT_A_FAILURE, Failure, Keyed, LineFormat
from telemetry.hostlist import MAX_HOSTS, count_hosts

_SLURM_ENV = re.compile(r"\b(SLURM_JOB_NODELIST|SLURM_NODELIST|SLURM_JOB_NUM_NODES|SLURM_NNODES"
                        r"|SLURM_GPUS_ON_NODE)=(\S+)")
_CANCEL = re.compile(r"\*\*\* (JOB|STEP) (\S+) ON (\S+) CANCELLED AT (\S+)"
                     r"(?: DUE TO ([A-Z ]+?))?(?:,[^*]*)? \*\*\*")
_DUE = {None: sig.SLURM_CANCELLED, "NODE FAILURE": sig.SLURM_NODE_FAILURE,
        "TIME LIMIT": sig.SLURM_TIME_LIMIT, "PREEMPTION": sig.SLURM_PREEMPTED,
        "JOB REQUEUE": sig.SLURM_JOB_REQUEUE}
_SRUN = re.compile(r"srun: error: ([^\s:]+): (tasks? [^:]+): (.+)")
_SRUN_NODE = re.compile(r"(?:srun|salloc): error: Node failure on (\S+)")
_CTLD_SIGNAL = re.compile(r"_job_complete: (JobId=\d+) WTERMSIG (\d+)")
# slurmstepd's word that the cgroup's OOM killer struck the step (task/cgroup): ``slurmstepd-
# gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes may
# have been killed by the cgroup out-of-memory handler.``, since 21.08 ``Detected 1 oom_kill
# event in StepId=440575.0. Some of the step tasks have been OOM Killed.``, before 20.02
# ``Detected 1 oom-kill event(s) in step 12345.batch cgroup``; srun's ``srun: error: HOST:
# task 0: Out Of Memory`` names the node.
_STEPD_OOM = re.compile(r"(?:slurmstepd-([^\s:]+): )?error: Detected (\d+) oom[-_]kill events?"
                        r"(?:\(s\))? in (?:StepId=|step )([\w.]+?)\.?(?:\s|$)")


def _environment(body: str) -> list[tuple[str, int]]:
    """("nodes", N) and ("gpus_per_node", G) from Slurm's output environment variables
    (``SLURM_JOB_NODELIST=node-[1-4]``); [] when they say neither (no other format's facts
    are looked for on the line)."""
    out = []
    for name, value in _SLURM_ENV.findall(body):
        if name.endswith("NODELIST"):
            if 0 < (n := count_hosts(value)) <= MAX_HOSTS:
                out.append(("nodes", n))
        elif value.isdigit() and int(value) > 0:
            out.append(("gpus_per_node" if name == "SLURM_GPUS_ON_NODE" else "nodes", int(value)))
    return out


def _cancelled(body: str) -> Failure | None:
    if m := _CANCEL.search(body):
        what, job, host, at, due = m.groups()
        kind = _DUE.get(due, sig.SLURM_CANCELLED)
        detail = f"{what} {job} CANCELLED" + (f" DUE TO {due}" if due else "")
        return kind, detail, None, None, host, None, at
    return None


def _signalled(body: str) -> Failure | None:
    """slurmctld's ``_job_complete: JobId=127441 WTERMSIG 9``: teardown, never a cause."""
    if m := _CTLD_SIGNAL.search(body):
        detail = f"{m.group(1)} ended by signal {m.group(2)} (slurmctld)"
        return sig.SLURM_TASK_KILLED, detail, None, None, None, None, None
    return None


def _oom_event(body: str) -> Failure | None:
    if m := _STEPD_OOM.search(body):
        host, n, step = m.groups()
        detail = f"slurmstepd: {n} OOM kill event(s) in step {step} (the cgroup's memory limit)"
        return sig.SLURM_OOM, detail, None, None, host, None, None
    return None


def _srun_error(body: str) -> Failure | tuple[()] | None:
    if "srun: error" not in body and "salloc: error" not in body:
        return None
    if m := _SRUN_NODE.search(body):
        return sig.SLURM_NODE_FAILURE, f"Node failure on {m.group(1)}", None, None, m.group(1), \
            None, None
    if m := _SRUN.search(body):
        detail = f"{m.group(2).strip()}: {m.group(3).strip()}"[: sig.MAX_DETAIL_CHARS]
        if m.group(3).strip() == "Out Of Memory":  # the cgroup's OOM killer, on that node
            return sig.SLURM_OOM, f"srun: {detail}", None, None, m.group(1), None, None
        return sig.SLURM_TASK_KILLED, detail, None, None, m.group(1), None, None
    return NOT_A_FAILURE


FORMAT = LineFormat(
    name="srun",
    prefilter=(
        r"SLURM_(?:JOB_)?NODELIST=|SLURM_(?:JOB_NUM_NODES|NNODES|GPUS_ON_NODE)=",  # job facts
        r"srun: error",
        r"salloc: error: Node failure",  # salloc's word for a node of the allocation lost
        r"_job_complete: JobId=[0-9]+ WTERMSIG",  # slurmctld: the job's tasks were signalled
        r"CANCELLED AT",
        r"Detected [0-9]+ oom[-_]kill event",  # slurmstepd: the cgroup's OOM killer
    ),
    plan=(Keyed(50, "SLURM_", _environment),),
    failures=(Keyed(40, "CANCELLED AT", _cancelled), Keyed(45, "oom", _oom_event),
              Keyed(55, "WTERMSIG", _signalled),
              Keyed(60, "", _srun_error)),
)
