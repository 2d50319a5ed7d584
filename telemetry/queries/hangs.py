"""Hangs a run's flight-recorder dumps showed (``collect.logs.flight_recorder``): which collective
the ranks diverged on, which ranks never called it, and where each was in the code."""

from __future__ import annotations

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
