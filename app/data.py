"""The app's data adapter: the only bridge from callbacks to ``telemetry`` queries.

``create_app`` binds the store once; pages call these functions and never see SQL or DuckDB.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry import queries
from telemetry.queries import TimeRange
from telemetry.store import Store
from telemetry.summary import run_summary

_store: Store | None = None

PRESETS: dict[str, float | None] = {  # seconds before the newest data; None = everything
    "1h": 3600.0,
    "6h": 6 * 3600.0,
    "24h": 86400.0,
    "7d": 7 * 86400.0,
    "all": None,
}


def bind(store: Store) -> None:
    global _store
    _store = store


def store() -> Store:
    if _store is None:
        raise RuntimeError("the dashboard is not bound to a store (use app.main.create_app)")
    return _store


def is_simulated() -> bool:
    return store().meta().get("simulated") == "true"


def scenario_description() -> str:
    return store().meta().get("scenario_description", "")


def runs() -> pd.DataFrame:
    return queries.runs(store())


def extent() -> TimeRange | None:
    return queries.data_extent(store())


def time_range(preset: str | None) -> TimeRange | None:
    """The preset range ending at the newest stored data (not the wall clock: replays and
    backfills have their own time)."""
    ext = extent()
    if ext is None:
        return None
    span = PRESETS.get(preset or "all")
    start = ext.start if span is None else max(ext.start, ext.end - timedelta(seconds=span))
    return TimeRange(start, ext.end)


def fleet_series(tr: TimeRange) -> pd.DataFrame:
    return queries.fleet_series(store(), tr)


def fleet_latest() -> dict[str, Any]:
    return queries.fleet_latest(store())


def hottest_gpus(limit: int = 8) -> pd.DataFrame:
    return queries.hottest_gpus(store(), limit)


def train_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return queries.train_series(store(), run_id, tr)


def interruptions(run_id: str | None, tr: TimeRange | None = None) -> pd.DataFrame:
    return queries.interruptions(store(), run_id, tr)


def checkpoint_ages(run_id: str, now: datetime) -> pd.DataFrame:
    return queries.checkpoint_ages(store(), run_id, now)


def summary(run_id: str) -> dict[str, Any]:
    return run_summary(store(), run_id)
