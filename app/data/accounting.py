"""Cluster accounting per day (``telemetry.queries.accounting``) for the view's days."""

from __future__ import annotations

from datetime import datetime, timedelta

from app.data.services import prices, store
from app.data.view import last_instant
from telemetry.cost import Prices
from telemetry.queries import TimeRange
from telemetry.queries import accounting as acct
from telemetry.queries.accounting import CATEGORIES as CATEGORIES  # vocabulary re-export
from telemetry.queries.accounting import Accounting as Accounting  # type re-export

MAX_DAYS = 31  # a longer view shows its last 31 days


def days_of(tr: TimeRange | None) -> tuple[datetime, int] | None:
    """The UTC days of the view's range (at most ``MAX_DAYS``, ending at its end), or of
    the store's Slurm activity without a range."""
    if tr is None:
        return acct.activity_days(store())
    end = min(tr.end, datetime.utcnow())  # noqa: DTZ003 (naive UTC like the store)
    end = last_instant(tr.start, end)
    first = min(max(tr.start, end - timedelta(days=MAX_DAYS - 1)), end)
    d0 = datetime(first.year, first.month, first.day)
    return d0, (datetime(end.year, end.month, end.day) - d0).days + 1


def cluster_days(tr: TimeRange | None) -> Accounting | None:
    """The view's days, None when the store holds no Slurm job or node event at all (a
    replayed run's GPUs alone would read as idle all day)."""
    if acct.activity_days(store()) is None:
        return None
    span = days_of(tr)
    return None if span is None else acct.accounting(store(), span[0], span[1])


def gpu_hour_price() -> Prices:
    """The cluster's price per GPU-hour: the server's (``--gpu-hour-price``) or the default."""
    return prices(None)
