"""Jobs as exported: one UTC day's jobs (``factoryfloor jobs``, the Jobs page's "Download
CSV") and the recent jobs of ``summary --json``, from ``telemetry.queries.jobs``' rows.

``summary --json``'s ``jobs`` is bounded: the jobs that ran in the last ``days`` (7 unless
``--jobs-days`` says) of the store's data, newest first, at most ``MAX_SUMMARY_JOBS``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.errors import FactoryFloorError
from telemetry.queries import TimeRange, data_extent
from telemetry.queries.jobs import JobFilter, jobs, newest_job_time
from telemetry.store import Store


def day_range(day: str) -> TimeRange:
    """The UTC day ``YYYY-MM-DD`` as a time range; a clear error for anything else."""
    try:
        start = datetime.strptime(day, "%Y-%m-%d")
    except ValueError:
        raise FactoryFloorError(f"not a day: {day!r} (expected YYYY-MM-DD)") from None
    return TimeRange(start, start + timedelta(days=1) - timedelta(microseconds=1))


# One line per job in the CSV and in ``summary --json``'s ``jobs``: (column, name)
EXPORT = {
    "job_id": "job_id", "name": "name", "user": "user", "account": "account",
    "partition": "partition", "state": "state", "start": "start", "end": "end",
    "nodes": "nodes", "nodelist": "nodelist", "gpus": "gpus", "alloc_gpu_hours": "gpu_hours",
    "used_gpu_hours": "used_gpu_hours", "used_dcp_gpu_hours": "used_dcp_gpu_hours",
    "idle_gpu_hours": "idle_gpu_hours", "util_pct": "util_pct", "mem_peak_mib": "mem_peak_mib",
    "power_w": "power_w", "energy_kwh": "energy_kwh", "energy_basis": "energy_basis",
    "exit_code": "exit_code", "requeues": "requeues", "source": "source",
    "attribution": "attribution",
    "problems": "problems",
}  # fmt: skip


def export_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``jobs``' rows as exported (``EXPORT``): times as ISO text, figures rounded to 3
    decimals, problems joined by "; "."""
    out = df[list(EXPORT)].rename(columns=EXPORT).copy()
    for col in ("start", "end"):
        out[col] = out[col].map(lambda t: None if pd.isna(t) else t.isoformat())
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = out[col].round(3)
    out["problems"] = out["problems"].map("; ".join)
    return out


def day_jobs(store: Store, day: str) -> pd.DataFrame:
    """Every job that ran during the UTC day ``day`` (``YYYY-MM-DD``), newest first, with its
    efficiency over its whole time (``jobs``), as exported (``export_frame``)."""
    return export_frame(jobs(store, JobFilter(tr=day_range(day)), limit=MAX_DAY_JOBS))


MAX_DAY_JOBS = 100_000  # a day's CSV lists every job of the day


MAX_SUMMARY_JOBS = 10_000  # summary --json lists at most this many jobs (newest first)
SUMMARY = ("job_id", "name", "user", "account", "partition", "state", "start", "end", "nodes",
           "nodelist", "gpus", "gpu_hours", "used_gpu_hours", "used_dcp_gpu_hours",
           "idle_gpu_hours", "energy_kwh", "source")  # fmt: skip


def recent_jobs(store: Store, days: float) -> list[dict[str, Any]]:
    """The jobs that ran in the last ``days`` of the store's data (to its newest sample, metric
    or scrape), newest first, at most ``MAX_SUMMARY_JOBS``, as ``summary --json`` lists them:
    ``SUMMARY``'s fields and ``problems`` (a list of texts)."""
    if days <= 0:
        raise FactoryFloorError(f"--jobs-days must be positive, not {days}")
    ext = data_extent(store)
    newest = newest_job_time(store)
    ends = [t for t in (ext.end if ext else None, newest) if t is not None]
    if not ends:
        return []
    end = max(ends)
    df = jobs(store, JobFilter(tr=TimeRange(end - timedelta(days=days), end)), MAX_SUMMARY_JOBS)
    out = export_frame(df)
    rows = out[list(SUMMARY)].astype(object).where(out[list(SUMMARY)].notna(), None)
    records = rows.to_dict("records")
    for rec, problems_ in zip(records, df["problems"].tolist(), strict=True):
        rec["problems"] = problems_
    return records
