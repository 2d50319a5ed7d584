"""The Overview's data: fleet series and latest figures, the run's cards, alerts, targets."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from app.data.services import alert_rules, bound, store
from app.data.training import loss_series as loss_series  # the Overview's loss chart
from app.data.view import run_undated as run_undated  # the alert panel asks it too
from app.data.view import time_range
from telemetry import queries
from telemetry.collect.logs.settings import NAMES as SETTING_NAMES  # vocabulary re-export
from telemetry.metrics import alert_rules as alerting_rules
from telemetry.metrics import goodput as good
from telemetry.metrics.summary import run_summary
from telemetry.queries import TimeRange, run_time
from telemetry.queries import overview as overq
from telemetry.queries import run_settings as settingsq
from telemetry.queries import targets as targetq

fleet_series = bound(overq.fleet_series)
fleet_latest = bound(overq.fleet_latest)


def without_gpus(run_id: str | None, series: pd.DataFrame) -> dict[str, int | None] | None:
    """What the run's logs say of its size (``run_shape``) when the view has no GPU telemetry
    to show (#57, 2): none in the range, and none in the store or the run has ended (a live
    run whose exporters all went silent keeps its "0 reporting" and its alert). None when
    there are GPUs to show, or no run."""
    if run_id is None or not series.empty:
        return None
    if overq.gpu_telemetry(store()) and not run_ended(run_id):
        return None
    return overq.run_shape(store(), run_id)


def hottest_gpus(limit: int = 8) -> pd.DataFrame:
    return overq.hottest_gpus(store(), limit)


def interruption_marks(run_id: str | None, tr: TimeRange | None = None) -> pd.DataFrame:
    """The interruptions in ``tr`` with what a chart marks them with (``MARK_COLUMNS``)."""
    return queries.interruptions(store(), run_id, tr, queries.MARK_COLUMNS)


def recent_interruptions(run_id: str, hours: float = 24.0) -> int | None:
    """How many of the run's dated interruptions came in the ``hours`` before the end of its
    data, whatever range is shown (the card counts what the alert beside it counts); None when
    no stored line gives a time, or none of the run's (unknown, not 0: the store's time is
    other runs')."""
    base = time_range("all", run_id)
    if base is None or run_undated(run_id):
        return None
    window = TimeRange(base.end - timedelta(hours=hours), base.end)
    ints = queries.interruptions(store(), run_id, window, queries.MARK_COLUMNS)
    return alerting_rules.recent_interruptions(ints, base.end, hours)


checkpoint_ages = bound(overq.checkpoint_ages)
undated_interruptions = bound(overq.undated_interruptions)


def run_ended(run_id: str | None) -> bool:
    """Whether the run's time is over (``run_time.has_ended``): its ages count from its end,
    and its alerts are its history."""
    return run_id is not None and run_time.has_ended(store(), run_id)


def summary(run_id: str) -> dict[str, Any]:
    """The run's figures the Overview's cards show (``run_summary`` without its detail)."""
    return run_summary(store(), run_id, detail=False)


def goodput(run_id: str) -> dict[str, Any] | None:
    """The run's goodput block (``telemetry.metrics.goodput``) over its whole span."""
    return good.goodput(store(), run_id, detail=False)


top_badput = good.top_badput


def active_alerts(run_id: str | None, tr: TimeRange, targets_at: datetime) -> pd.DataFrame:
    """Alerts at the end of the range (severity, alert, detail), scrape targets at
    ``targets_at`` (see ``target_time``)."""
    rules = alert_rules()
    return alerting_rules.active_alerts(store(), run_id, tr, targets_at=targets_at, rules=rules)


def target_time(tr: TimeRange, live: bool) -> datetime:
    """When to report target health for a view: its end, or in a live view the newest round."""
    return targetq.report_time(store(), tr.end, live)


def target_health(at: datetime) -> pd.DataFrame | None:
    """Each scrape target's health at ``at``; None for a store that scrapes no target."""
    return targetq.target_health(store(), at) if targetq.has_targets(store()) else None


target_counts = targetq.source_counts


def now_alerts(preset: str | None) -> pd.DataFrame | None:
    """The alerts active now beside an ended run's (its history): the fleet's at the end of
    the store's data; None when no source follows the cluster (imports only: nothing is
    "now")."""
    if not run_time.following(store()):
        return None
    tr = time_range(preset)
    return None if tr is None else active_alerts(None, tr, target_time(tr, live=True))


def run_settings(run_id: str | None) -> pd.DataFrame:
    """The run's settings its logs stated (name, value, origin, lines), in ``SETTING_NAMES``
    order, each value in the order it was first stated."""
    df = settingsq.run_settings(store(), run_id)
    order = {name: i for i, name in enumerate(SETTING_NAMES)}
    return df.assign(_o=[order.get(n, len(order)) for n in df["name"]]).sort_values(
        "_o", kind="stable").drop(columns="_o").reset_index(drop=True)
