"""What follows a write, registered in one place: ``STEPS``.

Some stored rows are computed from others: the node and fleet rollups from the GPU samples, the
runs and signals the Slurm tables give, the figures of finished jobs, the hosts of a hang's
ranks, the interruptions inferred from a run's evidence. Each is a step here, with the writes it
follows. The store writer (``ingest.writer.StoreWriter``) runs them, in this order, after the
write that calls for them; nothing else triggers them (a replay's windows go through the writer
too). Four kinds of write call for steps (``After.what``):

- ``ROUND``: a scrape round stored at ``ts``; its rollup buckets (a late round pulls its own
  back in; the per-GPU hours follow every 5 minutes) and the jobs it may have ended.
- ``REST``: batches stopped after rounds (``StoreWriter.finish``): every level brought up to
  the last round, and the jobs ended since.
- ``WINDOWS``: the replay engine's windows settled up to ``ts`` (None: all), between windows
  and at its end (``ingest.seam.Settle``): the rollups up to there.
- ``EVIDENCE``: a ``Derive`` batch after a source's evidence of ``runs`` (None: every run).
  Live derivation stays incremental: only those runs are derived again, and a run whose
  inferred rows did not change writes nothing (``derive.derive``).

How to add a step: a function ``(store, after)`` in the module that computes the rows (it reads
the store and writes its rows, in one transaction where they must change together), and one
line in ``STEPS`` naming the writes it follows, placed after the steps whose rows it reads.
Goodput's operator exclusions and the interruption labels need no step: goodput reads the
exclusions as it computes, and the interruptions step applies the labels at each derivation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from telemetry.store import Store

ROUND, REST, WINDOWS, EVIDENCE = "round", "rest", "windows", "evidence"


@dataclass(frozen=True)
class After:
    """The write the steps follow: ``what`` (above), its time, the runs its evidence is of."""

    what: str
    ts: datetime | None = None
    runs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Step:
    name: str
    follows: frozenset[str]
    run: Callable[[Store, After], Any]


def _rollups(store: Store, after: After) -> None:
    if after.what == ROUND:  # a late round pulls its buckets back in; per-GPU hours every 5 min
        store.refresh_rollups(since=after.ts, lazy=True)
    else:
        store.refresh_rollups(until=after.ts)


def _slurm(store: Store, after: After) -> None:
    from telemetry.store import slurm_store

    slurm_store.refresh(store)  # the Slurm tables' jobs and node events into runs and signals


def _job_figures(store: Store, after: After) -> int:
    from telemetry.derive import job_figures

    return job_figures.keep(store, since=after.ts if after.what == ROUND else None)


def _hangs(store: Store, after: After) -> int:
    from telemetry.derive.derive import place_unplaced

    return place_unplaced(store, after.runs)


def _interruptions(store: Store, after: After) -> list[Any]:
    from telemetry.derive.derive import derive

    return derive(store, after.runs)


STEPS: tuple[Step, ...] = (
    Step("rollups", frozenset({ROUND, REST, WINDOWS}), _rollups),
    Step("slurm", frozenset({EVIDENCE}), _slurm),
    Step("job figures", frozenset({ROUND, REST, EVIDENCE}), _job_figures),
    Step("hangs", frozenset({EVIDENCE}), _hangs),
    Step("interruptions", frozenset({EVIDENCE}), _interruptions),
)


def run(store: Store, after: After) -> dict[str, Any]:
    """Run the steps that follow ``after``, in order; each one's result by its name. Raises
    what a step raises: the steps after it are not run (the next write runs them again)."""
    return {s.name: s.run(store, after) for s in STEPS if after.what in s.follows}
