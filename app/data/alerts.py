"""Alert delivery and silences, as the Overview shows and changes them."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from app.data.services import refused, services, store
from telemetry import alert_history as history
from telemetry import label_api


def delivers_alerts() -> bool:
    """Whether this server delivers alerts (``serve --alerts``)."""
    return services().alerts is not None


def alert_delivery() -> dict[str, Any] | None:
    """How alert delivery goes (None: this server delivers none): each receiver's status,
    the alerts firing and silenced at the last evaluation, and an evaluation error if any."""
    if services().alerts is None:
        return None
    d = services().alerts.dispatcher
    return {
        "receivers": d.status(),
        "firing": len(d.firing),
        "silenced": len(d.silenced),
        "evaluated_at": d.evaluated_at,
        "error": services().alerts.error,
    }


def firing_alerts() -> list[tuple[str, dict[str, str]]]:
    """(what to call it, its labels) of each alert firing at the last evaluation."""
    if services().alerts is None:
        return []
    firing = list(services().alerts.dispatcher.firing.values())
    return [
        (
            f"{f.alert.summary} ("
            + ", ".join(f"{k}={v}" for k, v in f.alert.labels.items() if k != "severity")
            + ")",
            {k: v for k, v in f.alert.labels.items() if k != "severity"},
        )
        for f in firing
    ]


def silences() -> list[Any]:
    """The silences in force (``alerting.Silence``)."""
    from telemetry.alerting import active_silences

    return active_silences(store())


def end_silence(silence_id: Any, token: Any) -> tuple[int, str]:
    """End the silence picked on the page: (status, message)."""
    if denied := refused(token):
        return denied
    if not isinstance(silence_id, str) or not silence_id:
        return 400, "Pick a silence to end first."
    status, reply = label_api.apply_end_silence(store(), {"id": silence_id})
    if status != 200:
        return status, f"{status}: {reply['error']}"
    return 200, "Ended: its alerts are delivered again from the next evaluation."


def silence(alert: Any, duration: Any, by: Any, token: Any) -> tuple[int, str]:
    """Silence the alert picked on the page (its labels as JSON): (status, message)."""
    if denied := refused(token):
        return denied
    try:
        matchers = json.loads(alert) if isinstance(alert, str) else None
    except ValueError:
        matchers = None
    if not isinstance(matchers, dict) or not matchers:
        return 400, "Pick a firing alert first."
    body = {
        "matchers": matchers,
        "duration": duration if isinstance(duration, str) else "4h",
        "by": by if isinstance(by, str) and by else "operator",
        "comment": "from the page",
    }
    status, reply = label_api.apply_silence(store(), body)
    if status != 200:
        return status, f"{status}: {reply['error']}"
    ends = reply["silence"]["ends_at"][:16].replace("T", " ")
    return 200, f"Silenced until {ends} UTC: it goes to no receiver until then."


def alert_episodes(run_id: Any, tr: Any, live: bool) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(firing now, resolved in the range ``tr``: until now in a live view) of this server's
    delivered alerts, the fleet's and ``run_id``'s, each with when it was first seen, resolved
    and acknowledged (``alert_history.frame``); None when this server delivers no alerts (what
    fires now is then not known here)."""
    if services().alerts is None:
        return None
    s, run = store(), run_id if isinstance(run_id, str) else None
    firing = history.frame(history.for_view(history.open_episodes(s), run))
    gone = history.frame(history.resolved(s, run, tr.start, None if live else tr.end))
    return firing, gone


def ack_choices() -> list[tuple[str, str]]:
    """(what to call it, its fingerprint) of each firing alert nobody has acknowledged."""
    if services().alerts is None:
        return []
    return [
        (e.summary + " (" + ", ".join(f"{k}={v}" for k, v in e.labels.items()
                                      if k != "severity") + ")", e.fingerprint)
        for e in history.open_episodes(store())
        if e.acked_by is None
    ]  # fmt: skip


def acknowledge(fingerprint: Any, by: Any, token: Any) -> tuple[int, str]:
    """Acknowledge the alert picked on the page: (status, message)."""
    if denied := refused(token):
        return denied
    if not isinstance(fingerprint, str) or not fingerprint:
        return 400, "Pick a firing alert to acknowledge first."
    body = {"fingerprint": fingerprint, "by": by if isinstance(by, str) and by else "operator"}
    status, reply = label_api.apply_ack(store(), body)
    if status != 200:
        return status, f"{status}: {reply['error']}"
    return 200, f"Acknowledged by {reply['ack']['by']} at {reply['ack']['at'][11:16]} UTC."
