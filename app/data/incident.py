"""The incident view's data: one interruption told whole (spans, cause, culprit, evidence,
restore, loss and cost), and where to look next (the node's GPUs and the loss curve around
it); without one, the run's interruptions to pick from."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from app.data.services import prices, store
from app.data.view import fragment, parse_time, run_label, time_range
from telemetry import queries
from telemetry.queries import TimeRange
from telemetry.queries import failures as failq

AROUND = timedelta(minutes=30)  # the window the links open around an incident


def incident(run_id: str | None, at: Any) -> dict[str, Any] | None:
    """The interruption of ``run_id`` that began at ``at`` (an ISO time from the URL), or None
    when there is none: its stored row and evidence (``failures.interruption_detail``) and
    ``spans`` (label, start, end: stalled until detected, down until training resumed, the lost
    steps redone), ``run_name``, ``gpus``, ``prices``, ``cost_usd`` (lost GPU-hours at the
    run's price; None when they are unknown), and ``links`` (``gpus``, ``training``: URL
    fragments of the views around it)."""
    when = parse_time(at) if isinstance(at, str) else None
    if not isinstance(run_id, str) or when is None:
        return None
    row = failq.interruption_detail(store(), run_id, when)
    if row is None:
        return None
    start = pd.Timestamp(row["ts"]).to_pydatetime()
    detected = start + timedelta(seconds=float(row.get("detect_s") or 0.0))
    end = row.get("end_ts")
    resumed = (
        pd.Timestamp(end).to_pydatetime()
        if end is not None
        else (detected + timedelta(seconds=float(row["restart_s"])))
        if row.get("restart_s") is not None
        else None
    )
    spans = [("stalled until detected", start, detected)] if detected > start else []
    if resumed is not None:
        spans.append(("down until training resumed", detected, resumed))
        if row.get("rework_s"):
            redo = resumed + timedelta(seconds=float(row["rework_s"]))
            spans.append(("lost steps redone", resumed, redo))
    book = prices(run_id)
    gh = row.get("lost_gpu_hours")
    last = max([s[2] for s in spans] + [start])
    window = {"run": run_id, "range": "custom"}
    window |= {"start": (start - AROUND).isoformat(), "end": (last + AROUND).isoformat()}
    runs = queries.runs(store()).set_index("run_id")
    gpus = runs.at[run_id, "gpus"] if run_id in runs.index else None
    gpus = None if gpus is None or pd.isna(gpus) else gpus
    return {
        **row,
        "spans": spans,
        "detected": detected,
        "resumed": resumed,
        "run_name": run_label(run_id),
        "gpus": None if gpus is None else int(gpus),
        "prices": book,
        "cost_usd": None if gh is None else float(gh) * book.gpu_hour,
        "links": {
            "gpus": fragment(window | ({"node": row["host"]} if row.get("host") else {})),
            "training": fragment(window),
            "run": run_fragment(run_id),
        },
    }


def incidents(run_id: str | None) -> pd.DataFrame:
    """The run's interruptions, newest first (``failures.interruption_list``), each with
    ``at`` (its start as the incident view's URL names it)."""
    tr = time_range("all", run_id) if isinstance(run_id, str) else None
    if tr is None:
        return pd.DataFrame(columns=["ts", "at", "component", "category", "host", "planned"])
    df = failq.interruption_list(store(), run_id, TimeRange(tr.start, tr.end))
    return df.assign(at=[pd.Timestamp(t).isoformat() for t in df["ts"]])


def incident_at(ts: datetime | pd.Timestamp) -> str:
    """How the incident view's URL names an interruption's start (``?at=...``)."""
    return pd.Timestamp(ts).isoformat()


def run_fragment(run_id: str | None) -> str:
    """The URL fragment of the run's whole range (the run's other views)."""
    return fragment({"run": run_id or "", "range": "all"})
