"""The app's data adapter: the only bridge from callbacks to ``telemetry`` queries.

``create_app`` binds the store once; pages call these functions and never see SQL or DuckDB.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

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


_on_bind: list[Callable[[], None]] = []


def on_bind(hook: Callable[[], None]) -> None:
    """Run ``hook`` whenever another store is bound (caches of the old store's data)."""
    _on_bind.append(hook)


def bind(store: Store) -> None:
    global _store
    old, _store = _store, store
    if store is not old:  # after the swap: whatever is computed from here on is of the new store
        for hook in _on_bind:
            hook()


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


def run_label(run_id: str) -> str:
    df = runs()
    names = dict(zip(df["run_id"], df["name"], strict=True))
    return str(names.get(run_id, run_id))


def extent() -> TimeRange | None:
    return queries.data_extent(store())


_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?$")


def parse_time(text: str | None) -> datetime | None:
    """An ISO time from a URL or a chart (``2026-01-05 10:00:00.123``), or None for anything
    else (steps or token counts from a non-time axis, hostile strings)."""
    if (
        not isinstance(text, str)
        or not text
        or len(text) > 40
        or not _ISO.match(str(text).replace("Z", ""))
    ):
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "")).replace(tzinfo=None)
    except ValueError:
        return None


# -- callback inputs: what a browser sends, or what a crafted POST may send instead ----------
MAX_ID = 256


def clean_view(view: Any) -> dict[str, Any]:
    """The shared view reduced to what it may hold: a run id string, a known range preset (or
    ``custom``) and start/end strings. Anything else (wrong types, unknown presets, huge
    strings) is dropped, so a crafted callback payload reaches no query."""
    if not isinstance(view, dict):
        return {}
    out: dict[str, Any] = {}
    run = view.get("run")
    if isinstance(run, str) and 0 < len(run) <= MAX_ID:
        out["run"] = run
    rng = view.get("range")
    out["range"] = rng if isinstance(rng, str) and (rng in PRESETS or rng == "custom") else "all"
    for key in ("start", "end"):
        v = view.get(key)
        if isinstance(v, str) and len(v) <= 40:
            out[key] = v
    node = view.get("node")
    if isinstance(node, str) and 0 < len(node) <= MAX_ID:
        out["node"] = node
    return out


def fragment(view: Any) -> str:
    """The URL fragment of a view (``#run=…&range=24h`` or ``#run=…&from=…&to=…``, plus
    ``&node=…`` when the GPUs page drills into a node), so a link reproduces it."""
    v = clean_view(view)
    params = {"run": v.get("run") or ""}
    if v.get("range") == "custom":
        params |= {"from": v.get("start") or "", "to": v.get("end") or ""}
    else:
        params["range"] = v.get("range") or "all"
    if v.get("node"):
        params["node"] = v["node"]
    return "#" + urlencode(params)


def run_of(view: Any) -> str | None:
    """The view's run if the store has it (a stale link or a crafted payload may name another)."""
    run = clean_view(view).get("run")
    return run if run is not None and run in set(runs()["run_id"]) else None


def number(value: Any) -> float | None:
    """A finite number from an input, or None (empty, text, bool, NaN, ±inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def mapping(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def table_row(cell: Any, rows: Any) -> dict[str, Any] | None:
    """The row a DataTable's ``active_cell`` points at in its viewport, or None."""
    if not isinstance(cell, dict) or not isinstance(rows, list):
        return None
    i = cell.get("row")
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(rows):
        return None
    return rows[i] if isinstance(rows[i], dict) else None


def view_range(view: dict[str, Any] | None) -> TimeRange | None:
    """The time range a shared view describes: a zoomed window, or a preset ending at the
    newest data. None when the store holds nothing yet."""
    view = clean_view(view)
    if view.get("range") == "custom":
        start, end = parse_time(view.get("start")), parse_time(view.get("end"))
        if start is not None and end is not None and start < end:
            return TimeRange(start, end)
    return time_range(view.get("range"))


def revision(view: dict[str, Any] | None) -> str:
    """Plotly ``uirevision``: the same while only live data changes (legend toggles survive a
    refresh), new when the run or the chosen range changes."""
    v = clean_view(view)
    return f"{v.get('run')}|{v.get('range')}|{v.get('start')}|{v.get('end')}"


def template(theme: str | None) -> str:
    return "plotly_white" if theme == "light" else "plotly_dark"


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
