"""The Failures page's data: MTBF, taxonomy, XIDs, bad nodes, hangs, and interruptions one by
one with their evidence and operators' corrections of their causes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from app.data.services import bound, refused, store  # for the page
from app.data.services import corrections_allowed as corrections_allowed
from telemetry import label_api
from telemetry.derive import derive
from telemetry.queries import TimeRange
from telemetry.queries import failures as failq
from telemetry.queries import hangs as hangq
from telemetry.queries import xid_sources as xidq
from telemetry.queries.xid_sources import NO_XID_SOURCE as NO_XID_SOURCE


def taxonomy_key(by: Any) -> str:
    """A grouping of the interruption taxonomy from an input: ``component`` unless it names
    another known one."""
    return by if isinstance(by, str) and by in failq.TAXONOMY_KEYS else "component"


failure_summary = bound(failq.reliability)
taxonomy = bound(failq.taxonomy)
failure_timeline = bound(failq.timeline)
xid_table = bound(failq.xid_table)
xid_sources = bound(xidq.xid_sources)  # none: an XID count is unknown, not 0
lemons = bound(failq.lemons)


def hangs(run_id: str | None) -> list[dict[str, Any]]:
    """The run's hangs from flight-recorder dumps (``queries.hangs``), as row dicts."""
    return list(hangq.hangs(store(), run_id).to_dict("records"))


def label_choices() -> tuple[dict[str, str], list[str]]:
    """Components (-> their category) and categories an operator may choose."""
    return derive.components(), derive.categories()


# The key's time of an interruption no line dates (``queries.failures``: listed in every range)
TIME_UNKNOWN = "time unknown"


def interruption_list(run_id: str | None, tr: TimeRange) -> pd.DataFrame:
    """Interruptions in the range, newest first (those of a time unknown last), each with a
    ``key`` naming it in the browser."""
    df = failq.interruption_list(store(), run_id, tr)
    keys = [
        f"{r}|{TIME_UNKNOWN if pd.isna(t) else pd.Timestamp(t).isoformat()}"
        for r, t in zip(df["run_id"], df["ts"], strict=True)
    ]
    return df.assign(key=keys)


def _parse_key(key: Any) -> tuple[str, datetime | None] | None:
    if not isinstance(key, str) or "|" not in key or len(key) > 600:
        return None
    run, _, ts = key.rpartition("|")
    if ts == TIME_UNKNOWN:
        return run, None
    try:
        return run, datetime.fromisoformat(ts)
    except ValueError:
        return None


def interruption_detail(key: Any) -> dict[str, Any] | None:
    """The interruption a ``key`` names, with its evidence; None for a key naming none."""
    parsed = _parse_key(key)
    return None if parsed is None else failq.interruption_detail(store(), *parsed)


def relabel(key: Any, component: Any, category: Any, by: Any, token: Any) -> tuple[int, str]:
    """Store a correction from the page: (HTTP-like status, message for the person)."""
    if denied := refused(token):
        return denied
    parsed = _parse_key(key)
    if parsed is None:
        return 400, "Choose an interruption in the table first."
    if parsed[1] is None:  # a correction names its interruption by its start (label_api)
        return 400, "Not saved: a correction names its interruption by its time, unknown here."
    body = {"run": parsed[0], "ts": parsed[1].isoformat(), "component": component}
    body |= {"category": category or None, "by": by if isinstance(by, str) and by else None}
    status, reply = label_api.apply_label(store(), body)
    if status != 200:
        return status, f"{status}: {reply['error']}"
    lab = reply["label"]
    return 200, f"Saved: {lab['component']} ({lab['category']}), by {lab['by']}."
