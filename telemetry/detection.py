"""An interruption's two detection times (issue 57, 4), one definition for the incident view,
its Markdown, ``summary --json`` and ``telemetry.metrics.recovery``:

- ``failed_at``: when the hardware failed or the failure began: the cause's own line (the
  kernel's XID, the culprit's error, the collective a hang's ranks began waiting in);
- ``noticed_at``: when the job noticed: its first own watchdog, error or teardown line.

Between the last progress (the row's ``ts``) and ``noticed_at`` the run stalled undetected;
``noticed_at - failed_at`` (``wait_s``) is the wait an SRE most wants to cut (a watchdog's
timeout). An inferred row carries both as the logs date them (``derive.inference``); a posted
or replayed record says its stop's time (``ts``) and its detection (``detect_s``). A time no
record dates is None beside the reason (``failed_unknown``, ``noticed_unknown``), never 0."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

INFERRED = "inferred"
UNTIMED = "the stop's time is unknown: no line of its log has a wall-clock time"
NO_FAILED = ("no line dates the failure's start: only the ranks that waited, the teardown or "
             "no failure line at all speak of it, or its lines have no time of their "
             "own")  # fmt: skip
NO_NOTICED = ("no line the job wrote dates its noticing (the kernel's, the flight recorder's "
              "and Slurm's lines are not the job's; a line with no time of its own dates "
              "nothing)")  # fmt: skip
NO_DETECT = "the record does not say when the job noticed (no detect_s)"


def _unknown(v: Any) -> bool:
    return v is None or bool(pd.isna(v))


def _t(v: Any) -> datetime | None:
    return None if v is None or pd.isna(v) else pd.Timestamp(v).to_pydatetime()


def detection(row: Mapping[str, Any]) -> dict[str, Any]:
    """``failed_at``, ``noticed_at`` (datetimes or None), ``failed_unknown`` and
    ``noticed_unknown`` (why each is None; None when known), ``wait_s`` (seconds from the
    failure to the job's noticing, None unless both are known) and ``stall_s`` (from the last
    progress to the job's noticing, None unless both are known) of one stored interruption
    row (``ts``, ``source``, ``detect_s``, ``failed_ts``, ``noticed_ts``)."""
    ts, failed, noticed = _t(row.get("ts")), _t(row.get("failed_ts")), _t(row.get("noticed_ts"))
    inferred = row.get("source") == INFERRED
    detect = row.get("detect_s")
    detect = None if detect is None or pd.isna(detect) else float(detect)
    if ts is None:
        why_f = why_n = UNTIMED
    elif inferred:
        why_f, why_n = NO_FAILED, NO_NOTICED
    else:  # a posted or replayed record: its time is the stop's, its detect_s the noticing
        failed = failed or ts
        noticed = noticed or (None if detect is None else ts + timedelta(seconds=detect))
        why_f, why_n = "", NO_DETECT
    both = failed is not None and noticed is not None
    return {
        "failed_at": failed,
        "failed_unknown": None if failed is not None else why_f,
        "noticed_at": noticed,
        "noticed_unknown": None if noticed is not None else why_n,
        "wait_s": round((noticed - failed).total_seconds(), 3) if both else None,  # type: ignore[operator]
        # (an inferred stop with its steps unknown had no progress before it: no stall to time)
        "stall_s": None if noticed is None or ts is None or (inferred and _unknown(row.get(
            "lost_steps"))) else round(max((noticed - ts).total_seconds(), 0.0), 3),
    }


def as_json(det: Mapping[str, Any]) -> dict[str, Any]:
    """``detection``'s fields with the times as ISO text (``summary --json``)."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in det.items()}
