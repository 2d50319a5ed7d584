"""The run's settings as its logs stated them (``run_settings``, ``collect.logs.settings``):
each setting's values in the order the log first gave them, with the ``file:line`` of the
first line that said each, so a setting that changed between attempts shows every value."""

from __future__ import annotations

import pandas as pd

from telemetry.store import Store


def run_settings(store: Store, run_id: str | None) -> pd.DataFrame:
    """Columns name, value (as written), origin (its first ``file:line``), lines (how many
    lines stated it); one row per (setting, value), in first-stated order."""
    if not isinstance(run_id, str) or not store.has_table("run_settings"):
        return pd.DataFrame(columns=["name", "value", "origin", "lines"])
    return store.df(
        """SELECT name, value, arg_min(origin, line_no) AS origin, count(*) AS lines
           FROM run_settings WHERE run_id = ?
           GROUP BY name, value ORDER BY min(line_no), name, value""",
        [run_id],
    )
