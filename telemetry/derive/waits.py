"""Which rank the others waited for, from their watchdog lines alone; and which node was lost
at once, from the silence of its ranks (``lost_node``); and which host's task srun saw killed
when nothing else failed (``killed_alone``).

When a rank never reaches a collective, every other rank's ProcessGroupNCCL watchdog times out
on the same work and says which (``[rank3]:[E218 ...] [Rank 3] Watchdog caught collective
operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, ..., Timeout(ms)=600000) ran for
600060 milliseconds before timing out.``). The rank that did not is the one they waited for.
Only said when the world is known (NCCL's communicator lines or the run's GPU count), most
ranks' lines are there (at least half, so a log that prints rank 0 alone names nobody) and few
are missing (``MAX_MISSING_SHARE`` of the world, at least one): then the missing rank is a
*rank missing from a collective*, an initiating item the cascade of timeouts is set aside for.
The flight recorder (``collect.logs.flight_recorder``) says the same from the dumps, and more.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

from telemetry.derive.evidence import CAUSES, KILLED_BY_SIGKILL, Evidence
from telemetry.signals import (
    COLLECTIVE_HANG,
    NCCL_TIMEOUT,
    NODE_LOST,
    SLURM_CANCELLED,
    SLURM_TASK_KILLED,
    SRUN_SAW_NO_OTHER_FAILURE,
    WORKER_KILLED,
)

MAX_MISSING_SHARE = 1 / 8
_WORK = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)")
_RAN = re.compile(r"ran for (\d+) milliseconds")


def exact_world(hosts: Mapping[int, str], stated: int | None) -> int | None:
    """The job's rank count where it is known, not only bounded: as a line states it (the
    trainer's world size, NCCL's nRanks), else the ranks placed when they are every rank from 0
    up (a torchrun summary of them all). A paste of rank 1's lines says only that there are two
    ranks at least: rank 0 is no rank "missing" from its collective (deepspeed#6705)."""
    if stated:
        return stated
    top = max(hosts, default=-1) + 1
    return top if top and len(hosts) == top else None


def missing_rank(
    evs: list[Evidence], world: int | None, hosts: Mapping[int, str]
) -> Evidence | None:
    """The rank the timed-out ranks of ``evs`` waited for, as a ``collective_hang`` item at
    the time they entered the collective; None when the lines do not say (module doc)."""
    if not world or world < 2:
        return None
    waited: dict[tuple[int, str], dict[int, Evidence]] = defaultdict(dict)
    for e in evs:
        if e.kind != NCCL_TIMEOUT or e.rank is None or not 0 <= e.rank < world:
            continue
        m = _WORK.search(e.line or "") or _WORK.search(e.detail or "")
        if m:
            waited[(int(m.group(1)), m.group(2))].setdefault(e.rank, e)
    if not waited:
        return None
    (seq, op), by_rank = max(waited.items(), key=lambda kv: (len(kv[1]), -kv[0][0]))
    missing = sorted(set(range(world)) - set(by_rank))
    if len(by_rank) * 2 < world or not 1 <= len(missing) <= max(1, int(world * MAX_MISSING_SHARE)):
        return None
    first = min(by_rank.values(), key=lambda e: (e.ts, e.seq))
    ran = _RAN.search(first.line or "")
    entered = first.ts - int(ran.group(1)) * 1_000_000 if ran else first.ts
    culprit = missing[0]
    others = f" (and {', '.join(map(str, missing[1:]))})" if len(missing) > 1 else ""
    detail = (
        f"rank {culprit}{others} never completed {op} #{seq}; {len(by_rank):,} of {world:,} "
        "ranks timed out waiting for it (their watchdog lines)"
    )
    return Evidence(entered, COLLECTIVE_HANG, hosts.get(culprit), None, None, first.origin,
                    first.line, detail, CAUSES[COLLECTIVE_HANG], culprit, -1)  # fmt: skip


_SLURM = "slurm_"
_TASK = re.compile(r"(tasks? [^:]+): (.*)")  # srun's error detail: "task 1: Killed"
_SPOKE = ("cascade", "initiating")


def lost_node(
    evs: list[Evidence], roles: list[str], world: int | None, hosts: Mapping[int, str]
) -> Evidence | None:
    """A node lost at once: its ranks and its agent gone, so only the other hosts' ranks log
    their peers gone. Said when no line initiates (the caller checks) and either Slurm names
    the node (``srun: error: NODE: task N: Killed``) while nothing else on it wrote a line, or
    the run's every rank is placed and exactly the ranks of one host wrote nothing while every
    other rank logged the cascade. A ``node_lost`` item on that host (no rank: the whole node)."""
    spoke = [e for e, r in zip(evs, roles, strict=True) if r in _SPOKE]
    if not spoke:
        return None
    active = {e.host for e in evs if e.host and not e.kind.startswith(_SLURM)}
    active |= _held_a_survivor(evs)
    killed = [e for e in evs if e.kind == SLURM_TASK_KILLED and e.host and e.host not in active
              and "Killed" in (e.detail or e.line or "")]  # fmt: skip
    named = {e.host for e in killed}
    if len(named) == 1:
        first = min(killed, key=lambda e: (e.ts, e.seq))
        return _lost(first.host, min(e.ts for e in spoke), first, "Slurm killed its task and "
                     "no rank or agent on it wrote a line; the other hosts' ranks lost their "
                     "peers")  # fmt: skip
    if not world or any(r not in hosts for r in range(world)) or len(set(hosts.values())) < 2:
        return None
    said = {e.rank for e in spoke if e.rank is not None}
    silent = {h for h in set(hosts.values())
              if not any(hosts[r] == h and r in said for r in range(world))}  # fmt: skip
    if len(silent) != 1:
        return None
    (host,) = silent
    if any(r not in said for r in range(world) if hosts[r] != host):
        return None
    first = min(spoke, key=lambda e: (e.ts, e.seq))
    return _lost(host, first.ts, first, "every rank of it fell silent at once while every other "
                 "rank logged its peers gone")  # fmt: skip


def killed_alone(evs: list[Evidence]) -> Evidence | None:
    """srun's ``srun: error: NODE: task N: Killed`` on one node as the only failure in the
    lines: no rank's error, no other task's exit (``Exited with exit code 1``: srun kills the
    rest after a task fails), no cancellation, time limit or node failure. That node's task
    died of SIGKILL, sender unknown, as a torchrun summary entry with no other failures says
    of a rank: a ``worker_killed`` item on that host (its rank unknown). None otherwise."""
    failing = [e for e in evs if e.failing]
    if not failing or any(e.kind == SLURM_CANCELLED for e in evs) or any(
            e.kind != SLURM_TASK_KILLED or e.host is None for e in failing):  # fmt: skip
        return None
    said = [_TASK.match(e.detail or "") for e in failing]
    if any(m is None or m.group(2).strip() != "Killed" for m in said):
        return None
    if len({e.host for e in failing}) != 1:
        return None
    first = min(failing, key=lambda e: (e.ts, e.seq))
    detail = f"srun: {first.detail} (SIGKILL); {SRUN_SAW_NO_OTHER_FAILURE}"
    return Evidence(first.ts, WORKER_KILLED, first.host, None, None, first.origin, first.line,
                    detail, KILLED_BY_SIGKILL, None, -1)  # fmt: skip


def _held_a_survivor(evs: list[Evidence]) -> set[str]:
    """The nodes srun names for a task besides the ones it says were killed there (``srun:
    error: vm: task 1: Killed``, then ``srun: error: vm: task 0: Exited with exit code 1``):
    a task of that node outlived the kill, so the node was not lost. Several tasks share a
    node when a job runs more tasks than nodes (the tests' one-node Slurm ran both agents of
    a "2-node" job on node vm, and vm was named the lost node though task 0 lived on it)."""
    tasks: dict[str, set[str]] = defaultdict(set)
    killed: dict[str, set[str]] = defaultdict(set)
    for e in evs:
        if e.kind == SLURM_TASK_KILLED and e.host and (m := _TASK.match(e.detail or "")):
            tasks[e.host].add(m.group(1))
            if "Killed" in m.group(2):
                killed[e.host].add(m.group(1))
    return {h for h, ts in tasks.items() if ts - killed[h]}


def _lost(host: str, ts: int, seen: Evidence, why: str) -> Evidence:
    return Evidence(ts, NODE_LOST, host, None, None, seen.origin, seen.line,
                    f"{host} lost: {why}", CAUSES[NODE_LOST], None, -1)  # fmt: skip
