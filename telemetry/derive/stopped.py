"""A job that stopped with no progress lines: one interruption from its failure signals alone.

Stops are otherwise found in a step stream (``inference``). A log pasted from a failure, or a
job that died before it printed progress, has only its failure lines: NCCL's watchdog taking
the process down, a CUDA error, torchrun's ``ChildFailedError`` summary, Slurm killing a task
or its time limit, a kernel XID. When they show the job stopped, that is ONE interruption
(never one per line or rank): at the time of the first initiating line (else of the first
failure line), its cause classified as any other stop's (``evidence.explain``), its steps and
lost work unknown (null, never 0), and a culprit only where the evidence places it: a
hardware line on that host or rank (an XID of the GPU's own, an ECC error, a Slurm node
failure), a rank missing from a collective or left out of its launcher's account (``agents``:
it exited 0 early; a node none of whose ranks any launcher reported was lost), or a line of
its own failure written by that rank beside other ranks' lines that show none (a log of one
rank's lines cannot tell whether every rank hit the same error). Otherwise the culprit is
unknown, and the description lists the candidates (the ranks and hosts whose lines show the
failure, or the lost node's ranks) and why none is named.

A log whose lines carry no wall-clock time at all (older PyTorch's ``[E ProcessGroupNCCL.cpp]``,
a traceback pasted alone, plain ``dmesg``) still shows that the job stopped and why: its
signals (stored with no time) are judged the same way, all at one unknown instant in file
order, and the interruption's time is null ("time unknown"), never a time made up. In a log
where some failure lines have a time and others before them none (an untimed CUDA error or
``srun: error: NODE: task 0: Out Of Memory`` before slurmstepd's timed ``CANCELLED AT``), an
untimed one takes the time of the next timed one in its file: at the latest it happened then.
Left out, it would lose the stop its cause. Pure: frames in, one frame out.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from telemetry.derive.agents import agent_gap
from telemetry.derive.culprit import OWN_LINE_CONFIDENCE, Culprit, sole_reporter, who_columns
from telemetry.derive.evidence import (
    INITIATING,
    TEARDOWN,
    UNKNOWN,
    XID,
    Evidence,
    explain,
    gather,
    is_empty,
    roles,
    to_ns,
)

# The row and evidence helpers every inferred interruption shares (one shape for the store).
from telemetry.derive.inference import SOURCE, _frame, _items, _times
from telemetry.derive.oom import oom_killed
from telemetry.derive.waits import exact_world, killed_alone, missing_rank
from telemetry.signals import (
    COLLECTIVE_HANG,
    CUDA_DEVICE_UNAVAILABLE,
    CUDA_ECC,
    HOST_GPU_KINDS,
    NAN_LOSS,
    NO_OTHER_FAILURES,
    NODE_LOST,
    PLANNED_EXIT,
    SLURM_NODE_DOWN,
    SLURM_NODE_FAILURE,
    SLURM_NODE_GPU,
    SLURM_OOM,
    SRUN_SAW_NO_OTHER_FAILURE,
    TRACEBACK_CUT,
    WORKER_KILLED,
)
from telemetry.vocabulary import PLANNED_CATEGORY

# Causes that do not stop a job by themselves: a NaN loss is logged and training goes on; a
# planned exit is a finished run.
NOT_A_STOP = frozenset({NAN_LOSS, PLANNED_EXIT})
# Lines about a machine, not a process: they place the fault on their host (a driver that
# does not answer NVML there is that machine's, whichever process asked).
HARDWARE = frozenset({XID, CUDA_ECC, CUDA_DEVICE_UNAVAILABLE, SLURM_NODE_FAILURE, SLURM_NODE_DOWN,
                      SLURM_NODE_GPU, *HOST_GPU_KINDS})
MAX_CANDIDATES = 8


def infer_stopped(
    signals: pd.DataFrame | None,
    *,
    run_hosts: set[str] | None = None,
    rank_hosts: Mapping[int, str] | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
    run_id: str | None = None,
    job_hosts: Collection[str] = (),
) -> pd.DataFrame:
    """The one interruption of a run that has failure signals and no step stream (module
    doc), or no rows when its signals do not show that the job stopped. ``nodes``: the job's
    nodes, at least (a rank or node that wrote nothing: ``agents.agent_gap``, with
    ``job_hosts``: the hosts its lines were labelled with)."""
    if is_empty(signals):
        return _frame([])
    timed = signals[signals["ts"].notna()]  # type: ignore[index]
    untimed = timed.empty
    if untimed:  # no line has a time: one unknown instant, file order (module doc)
        timed = _in_file_order(signals).assign(ts=pd.Timestamp(0))  # type: ignore[arg-type]
    elif len(timed) < len(signals):  # type: ignore[arg-type]
        timed = _at_the_latest(signals)  # type: ignore[arg-type]
    ts = to_ns(timed["ts"])
    hosts_of = dict(rank_hosts or {})
    lo, hi = np.array([ts.min()]), np.array([ts.max()])
    evs = gather(timed, None, run_hosts, lo, hi, hosts_of)[0]
    oom_killed(evs)  # who sent a SIGKILL, where the kernel says
    world = max(max(hosts_of, default=-1) + 1, gpus or 0)
    said = roles(evs)
    exact = exact_world(hosts_of, gpus)
    if INITIATING not in said and (w := missing_rank(evs, exact, hosts_of) or agent_gap(
            evs, said, hosts_of, world=world, stated=gpus, nodes=nodes,
            job_hosts=job_hosts) or killed_alone(evs)):  # fmt: skip
        evs.append(w)
    role = dict(zip(map(id, evs), roles(evs), strict=True))
    ex = explain(evs, hosts_known=run_hosts is not None)
    cause = ex.cause if ex.cause is not None and ex.cause.kind not in NOT_A_STOP else None
    if cause is None and TEARDOWN not in role.values():
        return _frame([])  # nothing says the job stopped
    first = [e.ts for e in evs if role[id(e)] == INITIATING]
    start = min(first) if first else ex.first_failure_ns
    if start is None:
        return _frame([])
    rule = cause.rule if cause is not None else None
    placed = cause is not None and _places(cause, evs, role)
    who = _unplaced(cause, evs, role) if not placed else None
    why = "" if who is None else f"; culprit unknown ({who.reason})" + (
        f"; candidates: {', '.join(who.candidates)}" if who.candidates else "")  # fmt: skip
    told = (cause.text() if placed else _what(cause)) if cause is not None else (
        "the launcher or Slurm ended it; no failure line says why")  # fmt: skip
    desc = f"Job stopped with no progress lines in the data: {told}; steps and lost work unknown"
    if untimed:
        desc += "; time unknown (no line of the log gives a wall-clock time)"
    items = _items(ex.ordered, int(hi[0]))
    if untimed:
        items = [{**it, "ts": None} for it in items]
    row = {
        "run_id": run_id,
        "ts": pd.NaT if untimed else pd.Timestamp(int(start)),
        "end_ts": pd.NaT,
        "host": cause.host if placed else None,  # type: ignore[union-attr]
        "rank": cause.rank if placed else None,  # type: ignore[union-attr]
        "gpu": cause.gpu if placed else None,  # type: ignore[union-attr]
        "component": rule.component if rule else UNKNOWN,
        "category": rule.category if rule else UNKNOWN,
        "xid": cause.xid if cause is not None and cause.kind == XID else None,
        "planned": bool(rule and rule.category == PLANNED_CATEGORY),
        "node_lost": ex.node_lost,
        "description": desc + why,
        # the same words as columns, as an inferred stop of a step stream has them (culprit.py):
        # an action's reason and the Incidents page list these, not "none listed"
        "culprit_reason": who.reason if who else None,
        "culprit_candidates": who_columns(who)["culprit_candidates"] if who else None,
        "source": SOURCE,
        # a rank placed by its own line beside other ranks' lines (culprit.OWN_LINE_CONFIDENCE)
        "confidence": max(ex.confidence, OWN_LINE_CONFIDENCE) if placed and cause is not None
        and cause.kind not in HARDWARE and cause.kind != SLURM_OOM and cause.seq >= 0
        else ex.confidence,
        "evidence": json.dumps(items, ensure_ascii=False),
    }
    if not untimed:  # when the failure began and the job noticed (inference's two times)
        row |= _times(ex)
    return _frame([row])


def _in_file_order(signals: pd.DataFrame) -> pd.DataFrame:
    """Signals by their ``file:line`` origin, the line number as a number (``:10`` after
    ``:9``): the only order a log without times gives."""
    origin = signals["origin"].fillna("").astype(str)
    parts = origin.str.rpartition(":")
    line = pd.to_numeric(parts[2], errors="coerce").fillna(0)
    order = pd.DataFrame({"f": parts[0], "n": line}).sort_values(["f", "n"], kind="stable")
    return signals.loc[order.index]


def _at_the_latest(signals: pd.DataFrame) -> pd.DataFrame:
    """The signals with a time, an untimed one given the time of the next timed signal in its
    file (module doc); those after their file's last time stay out."""
    ordered = _in_file_order(signals)
    files = ordered["origin"].fillna("").astype(str).str.rpartition(":")[0]
    ts = ordered["ts"].groupby(files.to_numpy(), sort=False).bfill()
    return ordered.assign(ts=ts)[ts.notna()]


def _places(cause: Evidence, evs: list[Evidence], roles_of: dict[int, str]) -> bool:
    """Whether the cause's own line places the fault on its rank or host (module doc)."""
    role = roles_of[id(cause)]
    if cause.rule is None or cause.rule.category == PLANNED_CATEGORY:
        return False  # a time limit or preemption is nobody's fault
    if cause.kind == SLURM_OOM:  # its node, where srun names it ("task N" is no rank)
        return cause.host is not None and sole_reporter(cause, evs)
    if cause.kind in HARDWARE:  # an XID the application causes (13, 31, 43) is no host's
        return (cause.host is not None or cause.rank is not None) and cause.rule.host_specific \
            and sole_reporter(cause, evs)
    if cause.kind == COLLECTIVE_HANG:
        return cause.rank is not None
    if cause.kind == NODE_LOST:  # the whole node: placed where a line names its host
        return cause.host is not None
    if cause.kind == WORKER_KILLED and SRUN_SAW_NO_OTHER_FAILURE in (cause.detail or ""):
        return cause.host is not None  # srun's only failure: its task's node (waits)
    if role != INITIATING or cause.rank is None or cause.kind == TRACEBACK_CUT:
        return False
    # A rank's own error places it only beside ranks that had none: a log of one rank's lines
    # (most trainers print rank 0 alone) cannot tell whether every rank hit the same error.
    heard = {e.rank for e in evs if e.rank is not None} - {cause.rank}
    rivals = {e.rank for e in evs if roles_of[id(e)] == INITIATING or e.kind == TRACEBACK_CUT}
    rivals -= {cause.rank, None}  # a cut traceback's rank may have failed alike: not a victim
    if cause.kind == WORKER_KILLED and NO_OTHER_FAILURES in (cause.detail or ""):
        return not rivals  # its launcher says no other worker of its node failed
    return bool(heard) and not rivals


def _what(cause: Evidence) -> str:
    """The cause in words without a rank or host (the lines do not place it)."""
    label = cause.rule.label if cause.rule else cause.kind
    return f"{label} ({cause.detail})" if cause.detail else label


def _unplaced(cause: Evidence | None, evs: list[Evidence], role: dict[int, str]) -> Culprit | None:
    """Why no culprit is named, and the candidates: the ranks and hosts of the failure lines
    (None for a planned stop, nobody's fault)."""
    if cause is not None and cause.rule is not None and (
            cause.rule.category == PLANNED_CATEGORY):  # fmt: skip
        return None
    if cause is not None and cause.kind == NODE_LOST:  # the node is known, its name not
        node = (cause.detail or "").split(" lost:", 1)[0]
        return Culprit(candidates=(node,) if node else (),
                       reason="a node was lost at once, but no line names its host")
    failing = [e for e in evs if role[id(e)] != "context"]
    ranks = sorted({e.rank for e in failing if e.rank is not None})
    hosts = sorted({e.host for e in failing if e.host})
    cands = [f"rank {r}" for r in ranks][:MAX_CANDIDATES] + hosts[:MAX_CANDIDATES]
    if cause is not None and role[id(cause)] != INITIATING:
        reason = "its lines are what the ranks that waited or lost a peer print, not the fault"
    else:
        reason = "no line places the fault on one rank or host"
    return Culprit(candidates=tuple(cands), reason=reason)
