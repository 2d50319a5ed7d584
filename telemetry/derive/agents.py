"""Which rank or node left a job without a line of its own, from what its launchers say.

torchrun gives each agent (node) a contiguous block of global ranks (``rank - local_rank`` is
the block's first rank) and, when a worker fails, prints a summary listing EVERY worker of
its own that did not exit 0: those that failed and those it then stopped (``exitcode : -15
... (SIGTERM)``). So, once the blocks are known, two silences are placed:

- a rank inside a reporting agent's block that its summary does not list and that wrote no
  line of the failure left with exit code 0 before the others failed (``WORKER_LEFT``): the
  others lost their peer in a collective because of it (a loop that ended early);
- a whole block no agent reported, none of whose ranks wrote a line, while the other ranks
  logged their peers gone: that node and its agent were lost at once (``NODE_LOST``), its host
  named only where a line placed one of its ranks there, or where the job's hosts are known
  from its lines' labels (pdsh's ``host: ``), exactly one per node: then the one host no agent
  reported and that wrote no line of the failure is the lost node (issue 56: "when every rank
  of one host falls silent at once, the answer is that host").

The blocks are known only when the summaries fix the ranks per node: every agent's local
ranks give a lower bound (the largest + 1), the world over the agents seen an upper one, and
they must agree (the nodes the log shows, ``srun --label``'s tasks, count as agents seen);
every block must start at a multiple of it. Otherwise nothing is said.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Mapping

from telemetry.derive.evidence import CASCADE, CAUSES, INITIATING, Evidence
from telemetry.signals import NODE_LOST, WORKER_EXIT, WORKER_KILLED, WORKER_LEFT

_LOCAL = re.compile(r"rank (\d+) \(local rank (\d+)\)")


def _blocks(
    evs: list[Evidence], world: int, stated: int | None, nodes: int | None
) -> tuple[int, dict[int, str], set[int], int] | None:
    """(ranks per node, block start -> its agent's host, the ranks the summaries list, the
    world), or None when the summaries do not fix them (module doc)."""
    base: dict[int, str] = {}
    listed: set[int] = set()
    top = 0
    for e in evs:
        m = _LOCAL.search(e.detail or "") if e.kind in (WORKER_EXIT, WORKER_KILLED) else None
        if m is None or e.host is None:
            continue
        rank, local = int(m.group(1)), int(m.group(2))
        if base.setdefault(rank - local, e.host) != e.host:
            return None  # two agents claim one block: not torchrun's layout
        listed.add(rank)
        top = max(top, local + 1)
    if not base or top < 2 or any(b % top for b in base) or len(set(base.values())) < len(base):
        return None
    # at most: the gap between two agents' blocks, the stated world over the nodes seen
    caps = [b - a for a, b in itertools.pairwise(sorted(base))]
    if stated:
        caps.append(stated // max(len(base), nodes or 0))
    if not caps or min(caps) != top:
        return None
    world = stated or max(world, max(base) + top, (nodes or 0) * top)
    return (top, base, listed, world) if world >= max(base) + top else None


def agent_gap(
    evs: list[Evidence],
    roles: list[str],
    hosts: Mapping[int, str],
    *,
    world: int,
    stated: int | None = None,
    nodes: int | None = None,
    job_hosts: Collection[str] = (),
) -> Evidence | None:
    """A rank that left early or a node lost at once (module doc), as an initiating item;
    None when the launchers' summaries do not place one. ``world``: the ranks known to exist;
    ``stated``: the world size a line states; ``nodes``: the job's nodes as the log shows
    them, at least (``srun --label`` tasks running torchrun); ``job_hosts``: the hosts its
    lines were labelled with (``store.ranks.job_hosts``). The caller checks that no line
    initiates."""
    spoke_items = [e for e, r in zip(evs, roles, strict=True) if r in (CASCADE, INITIATING)]
    spoke = {e.rank for e in spoke_items if e.rank is not None}
    if (got := _blocks(evs, world, stated, nodes)) is None:
        return None
    per, base, listed, world = got
    orphans = [r for r in range(world) if r - r % per not in base]
    quiet = [r for r in range(world) if r not in spoke and r not in listed and r not in orphans]
    # when the failure began: the first rank's line, else (its lines untimed) the summaries'
    first = min(spoke_items or [e for e in evs if e.failing], key=lambda e: (e.ts, e.seq))
    if not orphans and len(quiet) == 1:
        (rank,) = quiet
        host = base[rank - rank % per]
        why = ("its launcher lists it neither failed nor stopped: it exited with code 0 while "
               "the others were in a collective, which then lost their peer")  # fmt: skip
        return _item(WORKER_LEFT, first, host, rank, why)
    if quiet or spoke & set(orphans) or len(orphans) != per:
        return None
    named = {hosts[r] for r in orphans if r in hosts}
    host = named.pop() if len(named) == 1 and not named & set(base.values()) else None
    by_label = ""
    if host is None and not named:
        host = _unreported(set(job_hosts), base, world // per, {e.host for e in spoke_items})
        by_label = f"; {host} is the one host of the job (by its lines' labels) that no " \
            "agent reported and that wrote nothing of the failure" if host else ""
    what = f"ranks {orphans[0]}-{orphans[-1]}"
    return _item(NODE_LOST, first, host, None,
                 f"{host or f'the node of {what}'} lost: no agent reported {what} and none of "
                 f"them wrote a line, while every other rank lost its peers{by_label}")  # fmt: skip


def _unreported(job_hosts: set[str], base: Mapping[int, str], nodes: int,
                spoke: set[str | None]) -> str | None:  # fmt: skip
    """The one host of the job that no agent reported and that wrote no line of the failure,
    when the job's labelled hosts are exactly its nodes; else None."""
    rest = job_hosts - set(base.values())
    if len(job_hosts) != nodes or len(rest) != 1 or rest & spoke:
        return None
    return rest.pop()


def _item(kind: str, seen: Evidence, host: str | None, rank: int | None, detail: str) -> Evidence:
    return Evidence(seen.ts, kind, host, None, None, seen.origin, seen.line, detail,
                    CAUSES[kind], rank, -1)  # fmt: skip
