"""Jobs (``telemetry.queries.jobs``): the jobs of a range with their efficiency and problems,
the values the filters offer, one job's GPUs, and a day's jobs as CSV."""

from __future__ import annotations

from typing import Any

import pandas as pd

from app.data.services import bound, store
from telemetry import csv_safe
from telemetry.errors import FactoryFloorError as FactoryFloorError  # for the page
from telemetry.metrics.jobs_export import day_jobs
from telemetry.metrics.jobs_export import day_range as day_range  # a day's range, for the page
from telemetry.queries import TimeRange
from telemetry.queries import jobs as jobsq
from telemetry.queries.jobs import FAILED_WITHIN_MIN as FAILED_WITHIN_MIN  # vocabulary
from telemetry.queries.jobs import IDLE_MINUTES as IDLE_MINUTES  # vocabulary re-export
from telemetry.queries.jobs import MAX_JOBS as MAX_JOBS  # vocabulary re-export
from telemetry.queries.jobs import REQUEUED_TIMES as REQUEUED_TIMES  # vocabulary re-export

FILTERS = ("states", "users", "accounts", "partitions")
MAX_PICKS = 50  # values one filter may hold (a crafted request gets an error, not a query)


def _picked(values: Any) -> tuple[str, ...]:
    if values is None:
        return ()
    if not isinstance(values, list) or len(values) > MAX_PICKS:
        raise FactoryFloorError(f"a job filter holds a list of at most {MAX_PICKS} values")
    return tuple(str(v)[:256] for v in values if v is not None)


def job_filter(tr: TimeRange | None, picks: dict[str, Any]) -> jobsq.JobFilter:
    """The filter the page's controls describe (``picks``: each of ``FILTERS`` a list of
    values, ``name`` text, ``problems`` a flag)."""
    name = picks.get("name") or ""
    return jobsq.JobFilter(
        tr=tr,
        **{f: _picked(picks.get(f)) for f in FILTERS},
        name=str(name).strip(),
        problems_only=bool(picks.get("problems")),
    )


jobs = bound(jobsq.jobs)
options = bound(jobsq.filter_values)


def job_gpus(key: str) -> pd.DataFrame:
    return jobsq.job_gpus(store(), str(key)[:300])


def day_csv(day: str) -> str:
    """The jobs of the UTC day ``day`` (``YYYY-MM-DD``) as CSV text, safe to open in a
    spreadsheet (``telemetry.csv_safe``)."""
    return csv_safe.to_csv(day_jobs(store(), day)) or ""
