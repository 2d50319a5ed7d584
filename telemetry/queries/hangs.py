"""Hangs a run's flight-recorder dumps showed (``collect.logs.flight_recorder``): which collective
the ranks diverged on, which ranks never called it, and where each was in the code."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from telemetry.store import Store

COLUMNS = (
    "ts", "process_group", "pg_desc", "seq_id", "op", "input_sizes", "dtypes", "ranks",
    "missing_ranks", "stuck_ranks", "culprit_rank", "culprit_host", "hosts", "culprit_frames",
    "waiting_frames", "mismatched", "story", "source",
)  # fmt: skip


def hangs(store: Store, run_id: str | None, limit: int = 50) -> pd.DataFrame:
    """The run's hangs, oldest first (``COLUMNS``; list columns as lists)."""
    if run_id is None:
        return pd.DataFrame(columns=list(COLUMNS))
    return store.df(
        f"SELECT {', '.join(COLUMNS)} FROM hangs WHERE run_id = ? "
        "ORDER BY ts NULLS LAST, seq_id LIMIT ?",
        [run_id, limit],
    )


def open_hang(
    store: Store, run_id: str, at: datetime, hours: float = 24.0
) -> tuple[str, int | None, str | None] | None:
    """The newest hang of the run's flight-recorder dumps in the ``hours`` before ``at`` after
    which no step was logged (the run has not moved on from it): (its words, the culprit rank,
    its host); None if none. The culprit is the rank the dumps found missing, on the host the
    logs or Slurm placed it."""
    rows = store.rows(
        "SELECT h.culprit_rank, h.culprit_host, h.op, h.seq_id, h.process_group, h.ts "
        "FROM hangs h WHERE h.run_id = ? AND h.ts BETWEEN ? AND ? AND NOT EXISTS ("
        "  SELECT 1 FROM train_metrics m WHERE m.run_id = h.run_id "
        "  AND m.ts > h.ts + INTERVAL 60 SECOND) "
        "ORDER BY h.ts DESC LIMIT 1",
        [run_id, at - timedelta(hours=hours), at],
    )
    if not rows:
        return None
    rank, host, op, seq, pg, ts = rows[0]
    who = (
        "culprit unknown (the dumps found no rank missing)" if rank is None
        else f"rank {rank} on {host}" if host
        else f"rank {rank} (host not known yet: no log or Slurm job places it)"
    )  # fmt: skip
    what = f"{op or 'a collective'} #{seq}" if seq is not None else (op or "a collective")
    words = f"{who} never called {what} of process group {pg or '?'}; flight recorder at " \
        f"{ts:%H:%M:%S} UTC"
    return words, rank, host
