"""Which host each rank of a run ran on, so a failure or a hang names the node to drain.

What the logs said comes first (table ``rank_hosts``, filled by the log reader): NCCL's
communicator lines (``host:pid:tid [dev] NCCL INFO comm 0x... rank R nranks N``; the
communicator of every rank, the largest ``nranks``, numbers ranks globally), torchrun's failure
summary (``host :`` / ``rank :``), a line that names both (an ``srun --label`` task whose line
carries NCCL's host header). A rank no log placed takes its place in the run's Slurm job's node
list, in order (``srun``/``torchrun`` number nodes so), ``ranks per node`` to a node: as given
with ``import --ranks-per-node N`` (remembered per run, ``run_meta``), else the run's GPUs per
node, else 8. Read here, in the store, because the interruption inference, the flight-recorder
source and the slow-ranks query all ask it, and no source may import ``telemetry.derive``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from telemetry.store.run_meta import given_ranks_per_node

DEFAULT_RANKS_PER_NODE = 8


def ranks_per_node(store: Any, run_id: str) -> int:
    given = given_ranks_per_node(store, run_id)  # remembered by the writer
    if given:
        return given
    shape = store.rows("SELECT gpus, nodes FROM runs WHERE run_id = ?", [run_id])
    if shape and shape[0][0] and shape[0][1]:
        return max(int(shape[0][0]) // int(shape[0][1]), 1)
    return DEFAULT_RANKS_PER_NODE


def _strength(how: str) -> tuple[int, int]:
    if how.startswith("nccl nranks="):
        return 0, -int(how.rpartition("=")[2] or 0)
    return (1, 0) if how == "torchrun summary" else (2, 0)


def logged(store: Any, run_id: str) -> dict[int, str]:
    """Rank -> host as the run's logs said it (the strongest statement per rank)."""
    best: dict[int, tuple[tuple[int, int], str]] = {}
    for rank, host, how in store.rows(
        "SELECT DISTINCT rank, host, how FROM rank_hosts WHERE run_id = ? AND rank IS NOT NULL "
        "ORDER BY ALL",
        [run_id],
    ):
        key = _strength(str(how or ""))
        if rank not in best or key < best[rank][0]:
            best[int(rank)] = (key, str(host))
    return {r: h for r, (_, h) in best.items()}


def job_hosts(store: Any, run_id: str) -> set[str]:
    """The hosts the run's lines were labelled with (pdsh's ``host: ``): its nodes, each of
    which wrote at least a few lines, whether or not a line placed a rank there."""
    rows = store.rows(
        "SELECT DISTINCT host FROM rank_hosts WHERE run_id = ? AND rank IS NULL", [run_id]
    )
    return {str(r[0]) for r in rows}


def from_slurm(store: Any, run_id: str, ranks: Iterable[int]) -> dict[int, str]:
    """Each rank's host by the run's newest Slurm job's node list (module doc). Empty when no
    job of the run names its nodes."""
    rows = store.rows(
        "SELECT hosts FROM slurm_jobs WHERE run_id = ? AND hosts IS NOT NULL AND len(hosts) > 0 "
        "ORDER BY coalesce(start_ts, submit_ts) DESC NULLS LAST LIMIT 1",
        [run_id],
    )
    if not rows:
        return {}
    hosts = list(rows[0][0])
    per = ranks_per_node(store, run_id)
    return {r: hosts[r // per] for r in ranks if 0 <= r // per < len(hosts)}


def rank_hosts(store: Any, run_id: str, ranks: Iterable[int] | None = None) -> dict[int, str]:
    """Rank -> host for ``ranks`` (default: every rank the run's signals name): the logs'
    word, else the Slurm node list's."""
    out = logged(store, run_id)
    if ranks is None:
        ranks = [
            int(r[0])
            for r in store.rows(
                "SELECT DISTINCT rank FROM signals WHERE run_id = ? AND rank IS NOT NULL",
                [run_id],
            )
        ]
    rest = [r for r in ranks if r not in out]
    return out | (from_slurm(store, run_id, rest) if rest else {})
