"""``factoryfloor jobs``: one UTC day's jobs with their GPU efficiency and problems, as CSV
(``telemetry.queries.jobs.day_jobs``), to a file or standard output; text that a spreadsheet
would run as a formula is neutralised (``telemetry.csv_safe``)."""

from __future__ import annotations

import os
import sys

from app.settings import Settings
from telemetry.errors import FactoryFloorError


def run(s: Settings) -> int:
    from telemetry import csv_safe
    from telemetry.metrics.jobs_export import day_jobs, day_range
    from telemetry.store import open_store

    assert s.store is not None and s.day is not None  # the parser requires them
    day_range(s.day)  # a bad day is an error before the store is opened
    if not os.path.exists(s.store):
        raise FactoryFloorError(f"store {s.store} does not exist")
    with open_store(s.store, read_only=True) as store:
        df = day_jobs(store, s.day)
    if not s.csv or s.csv == "-":
        csv_safe.to_csv(df, sys.stdout)
        return 0
    try:
        csv_safe.to_csv(df, s.csv)
    except OSError as exc:
        raise FactoryFloorError(f"cannot write {s.csv}: {exc.strerror or exc}") from None
    print(f"{len(df)} jobs of {s.day} written to {s.csv}", file=sys.stderr)
    return 0
