"""What a run's importer said about it, kept in ``meta`` for every later derivation: the
checkpoint roots given with ``--checkpoints TIER=PATH`` (the restores are judged against them)
and the ranks per node given with ``--ranks-per-node N`` (how its ranks sit on its Slurm
nodes). The store writer remembers them with a ``Derive`` batch; ``telemetry.derive`` reads
them. Here, not in ``derive``, so that the writer stores a batch without importing the engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from telemetry.vocabulary import TIERS

_ROOTS_KEY = "tier_roots:"  # meta key prefix: the tier roots of a run, JSON {tier: [paths]}
_RANKS_KEY = "ranks_per_node:"  # meta key prefix: ranks per node given for a run


def remember_tier_roots(store: Any, run_id: str, roots: Mapping[str, Sequence[str]]) -> None:
    """Add the checkpoint roots given for a run (``--checkpoints TIER=PATH``) to those kept."""
    have = tier_roots(store, run_id)
    for tier, paths in roots.items():
        have[tier] = sorted({*have.get(tier, []), *paths})
    store.set_meta({_ROOTS_KEY + run_id: json.dumps(have, sort_keys=True)})


def tier_roots(store: Any, run_id: str) -> dict[str, list[str]]:
    text = store.meta().get(_ROOTS_KEY + run_id)
    roots = json.loads(text) if text else {}
    return {t: list(roots[t]) for t in TIERS if t in roots}


def remember_ranks_per_node(store: Any, run_id: str, n: int) -> None:
    store.set_meta({_RANKS_KEY + run_id: str(int(n))})


def given_ranks_per_node(store: Any, run_id: str) -> int | None:
    """The ranks per node given for the run, None when none was."""
    given = store.meta().get(_RANKS_KEY + run_id)
    return max(int(given), 1) if given else None
