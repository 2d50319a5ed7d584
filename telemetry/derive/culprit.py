"""The culprit of a stop, named only where evidence places it (issue 56, "Precision first").

Naming a victim is worse than saying "unknown": an SRE drains the node named. So a rank and
host are named only when the cause is

- an *initiating line written by that rank* (its traceback, CUDA error, OOM, NaN loss, its
  death by a signal nobody in the job sent);
- a *rank missing from a collective* (the flight recorder, the others' watchdog lines);
- a *hardware line on that host* (an XID, an ECC error, a link down, Slurm's node failure or
  drain, a node lost at once: named only where a line names its host, else its ranks are
  the candidate);
- its *launcher's account* (``agents``): a rank torchrun lists neither failed nor stopped
  exited 0 early;
- the scheduler's own word for a planned stop.

Otherwise (the cause is a network error or a watchdog timeout, which every waiting rank logs,
or only the cascade and teardown are there) the culprit is unknown: no rank, no host, and the
candidates with the reason instead. The candidates are the ranks that wrote nothing while the
others logged the failure (a rank that died silently is among them), else the hosts none of
whose ranks wrote, else the first ranks to report, said so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from telemetry.derive.evidence import (
    CASCADE,
    CONTEXT,
    INITIATING,
    NETWORK_KINDS,
    TEARDOWN,
    WAITING_KINDS,
    Evidence,
    Explanation,
    explain,
    roles,
)
from telemetry.signals import (
    COLLECTIVE_HANG,
    CUDA_DEVICE_UNAVAILABLE,
    CUDA_ECC,
    HOST_GPU_KINDS,
    IB_ERROR,
    NODE_LOST,
    SLURM_CANCELLED,
    SLURM_JOB_REQUEUE,
    SLURM_NODE_DOWN,
    SLURM_NODE_FAILURE,
    SLURM_NODE_GPU,
    SLURM_OOM,
    SLURM_PREEMPTED,
    SLURM_TIME_LIMIT,
    TRACEBACK_CUT,
    XID,
)
from telemetry.vocabulary import PLANNED_CATEGORY

PLACED_KINDS = frozenset(
    {XID, CUDA_ECC, CUDA_DEVICE_UNAVAILABLE, SLURM_NODE_FAILURE, SLURM_NODE_DOWN, SLURM_NODE_GPU,
     NODE_LOST, COLLECTIVE_HANG, *HOST_GPU_KINDS}
)  # fmt: skip
_LINK_DOWN = re.compile(r"[Ll]ink (?:is )?[Dd]own")  # the host's own port: hardware there
MAX_CANDIDATES = 8
# Kinds that place their writer only where no other rank or host wrote the same (sole_reporter)
SOLE_PLACED = frozenset({CUDA_DEVICE_UNAVAILABLE, SLURM_OOM})
# The scheduler's stops of a whole job: the host in ``slurmstepd-HOST:`` is where the batch
# step ran and the ``N:`` label a task, neither at fault, so naming either would drain a node
JOB_WIDE_STOPS = frozenset({SLURM_TIME_LIMIT, SLURM_PREEMPTED, SLURM_CANCELLED, SLURM_JOB_REQUEUE})
# A rank named by its own failure line while the other ranks' lines are only what follows it
# (their cascade and teardown, none a failure of its own): right in 11 of 11 such namings on
# the exam of 2026-12-06 and in every one the corpus's threads confirm (docs/exam.md), so it
# is named with at least this confidence whatever its cause's rule says about the cause class.
OWN_LINE_CONFIDENCE = 0.8


@dataclass(frozen=True)
class Culprit:
    rank: int | None = None
    host: str | None = None
    gpu: int | None = None
    candidates: tuple[str, ...] = ()
    reason: str | None = None  # why no culprit is named (None when one is, or nothing failed)
    confidence: float | None = None  # what the placement earns, when more than the cause's


def place(
    ex: Explanation, roles: Mapping[int, str], world: int | None, hosts: Mapping[int, str]
) -> Culprit:
    """The culprit of ``ex`` (module doc). ``roles``: each item's role by ``id``; ``world`` the
    run's rank count where known; ``hosts`` rank -> host."""
    cause = ex.cause
    failing = [e for e, r in ex.ordered if r != CONTEXT]
    if cause is not None and cause.kind in JOB_WIDE_STOPS:
        return Culprit(reason="the scheduler stopped the whole job: no rank or host is at fault")
    if (
        cause is not None
        and cause.rule is not None
        and (cause.rule.category == PLANNED_CATEGORY or (
            _placed(cause, roles.get(id(cause))) and _heard_beside(ex, cause)
            and sole_reporter(cause, (e for e, _ in ex.ordered))))
    ):
        if cause.kind == NODE_LOST and cause.host is None:  # the node is known, its name not
            node = (cause.detail or "").split(" lost:", 1)[0]
            why = "a node was lost at once, but no line names its host"
            return Culprit(candidates=(node,) if node else (), reason=why)
        own = _own_line(ex, cause, roles.get(id(cause)))
        return Culprit(cause.rank, cause.host, cause.gpu,
                       confidence=max(ex.confidence, OWN_LINE_CONFIDENCE) if own else None)
    if not failing:
        return Culprit()
    spoke = {e.rank for e, r in ex.ordered if r in (CASCADE, "symptom", "cause")
             and e.rank is not None}  # fmt: skip
    what = ("only watchdog timeouts" if cause is not None and cause.kind in WAITING_KINDS
            else "only network errors" if cause is not None and cause.kind in NETWORK_KINDS
            else "only other ranks' cascade and the teardown")  # fmt: skip
    reason = f"no line places the culprit: {what}, which the ranks that waited write"
    silent = sorted(set(range(world)) - spoke) if world and spoke else []
    if silent and len(silent) <= max(1, world // 8):  # type: ignore[operator]
        names = [f"rank {r}" + (f" on {hosts[r]}" if r in hosts else "") for r in silent]
        return Culprit(candidates=tuple(names[:MAX_CANDIDATES]),
                       reason=f"{reason}; {len(silent):,} rank(s) wrote nothing")  # fmt: skip
    wrote = {e.host for e in failing if e.rank is not None and e.host}
    quiet = sorted(set(hosts.values()) - wrote) if wrote else []
    if quiet and len(quiet) <= MAX_CANDIDATES:
        return Culprit(candidates=tuple(quiet), reason=f"{reason}; no rank on these hosts wrote")
    first = sorted((e for e in failing if e.rank is not None or e.host),
                   key=lambda e: (e.ts, e.seq))  # fmt: skip
    names = list(dict.fromkeys(
        (f"rank {e.rank}" if e.rank is not None else "") + (" on " if e.rank is not None
                                                           and e.host else "") + (e.host or "")
        for e in first))[:3]  # fmt: skip
    return Culprit(
        candidates=tuple(names),
        reason=f"{reason}; the first to report are listed, they may be victims",
    )


def sole_reporter(cause: Evidence, evs: Iterable[Evidence]) -> bool:
    """Whether no other rank or host wrote a line of ``cause``'s kind (lines that name
    neither aside). A GPU the CUDA runtime could not use (``CUDA_DEVICE_UNAVAILABLE``) places
    its rank only then: when several ranks cannot use theirs, a configuration (ranks sharing
    GPUs in exclusive mode) is as likely. So does Slurm's OOM kill its node: on every node, it
    is the job's memory, no node's."""
    if cause.kind not in SOLE_PLACED:
        return True
    same = [e for e in evs if e.kind == cause.kind]
    return len({e.rank for e in same} - {None}) <= 1 and len({e.host for e in same} - {None}) <= 1


def _heard_beside(ex: Explanation, cause: Evidence) -> bool:
    """A rank's own software error places it only when another rank's lines are there too: a
    log of one rank's lines (most trainers print rank 0 alone; a paste of one rank's error)
    cannot tell whether every rank hit the same error. Hardware on a host places it alone."""
    if cause.kind in PLACED_KINDS or cause.kind == IB_ERROR or cause.rank is None:
        return True  # a cut traceback (below) may be another rank's same error: not heard
    return bool({e.rank for e, r in ex.ordered if r != CONTEXT and e.kind != TRACEBACK_CUT}
                - {cause.rank, None})  # fmt: skip


def _own_line(ex: Explanation, cause: Evidence, role: str | None) -> bool:
    """Whether ``cause`` is its rank's own failure line and the other ranks wrote only what
    follows one (cascade, teardown), none a failure of its own (``OWN_LINE_CONFIDENCE``)."""
    if role != INITIATING or cause.rank is None or cause.kind in PLACED_KINDS or cause.seq < 0:
        return False  # (an item derived from a silence, seq -1, is no line of its own)
    others = {e.rank for e, r in ex.ordered if r in (CASCADE, TEARDOWN)} - {cause.rank, None}
    rivals = {e.rank for e, r in ex.ordered if r == "symptom" or e.kind == TRACEBACK_CUT}
    return bool(others) and not rivals - {cause.rank, None}


def _placed(cause: Evidence, role: str | None) -> bool:
    """Whether the cause places its rank or host (module doc)."""
    if cause.kind == SLURM_OOM:  # srun's "task N" is no rank: its node, where srun names it
        return cause.host is not None
    if cause.kind in PLACED_KINDS:
        return True
    if cause.kind == TRACEBACK_CUT:  # its exception, which would say whose fault, is not there
        return False
    if cause.kind == IB_ERROR:
        return _LINK_DOWN.search(f"{cause.detail or ''} {cause.line or ''}") is not None
    if cause.kind in NETWORK_KINDS or cause.kind in WAITING_KINDS:
        return False
    return role == INITIATING  # its own line (a traceback only when it is no cascade's)


def judge(
    evs: list[Any], hosts_known: bool, world: int, hosts: Mapping[int, str]
) -> tuple[Explanation, Culprit]:
    """The cause of a window's evidence and its culprit, named only where evidence places it."""
    role = roles(evs)
    ex = explain(evs, hosts_known=hosts_known, role=role)
    return ex, place(ex, dict(zip(map(id, evs), role, strict=True)), world or None, hosts)


def who_columns(who: Culprit) -> dict[str, Any]:
    """The culprit's columns; an unknown culprit's candidates and reason, its cause kept."""
    out: dict[str, Any] = {
        "host": who.host,
        "rank": who.rank,
        "gpu": who.gpu,
        "culprit_reason": who.reason,
        "culprit_candidates": None,
    }
    if who.confidence is not None:
        out["confidence"] = who.confidence
    if who.candidates:
        out["culprit_candidates"] = json.dumps(list(who.candidates), ensure_ascii=False)
    return out


def told(cause: Any, who: Culprit | None) -> str:
    """The cause in words, naming a rank and host only where the culprit is placed."""
    if who is None or who.reason is None:
        return cause.text() if cause is not None else "no failure signal on the run's hosts"
    what = cause.rule.label if cause is not None and cause.rule else "cause unknown"
    cands = f"; candidates: {', '.join(who.candidates)}" if who.candidates else ""
    return f"{what}; culprit unknown ({who.reason}){cands}"
