"""The Overview's alert lists: each alert with its detail (those about an interruption linked
to its incident view), and for a run that has ended, what is active now apart from what the run
raised, its history (#57, 2: an "XID 79 seen in the last 24 h" sat beside "Run finished" on a
run that ended weeks before)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import dash_bootstrap_components as dbc
from dash import dcc, html

_SEVERITY_COLOUR = {"critical": "danger", "warning": "warning", "info": "info"}
NOTHING_FOLLOWED = "Nothing is followed (imports and replays only): no alert can be active now."


INCIDENT_ALERTS = ("RunStopped", "RestartLoop")  # alerts about an interruption: linked to it


def alert_list(df: Any, incident: str | None = None, id_: str = "ov-alert-list") -> html.Div:
    """The alerts, those about an interruption with a link to its incident view."""
    if df.empty:
        return dbc.Alert(
            "All clear: no alert at the end of this range.",
            color="success",
            class_name="small mb-0",
        )
    return html.Div(
        [
            dbc.Alert(
                [html.Strong(r.alert), html.Br(), html.Span(r.detail, className="small")]
                + (
                    [html.Br(), dcc.Link("Open the incident", href=incident, className="small")]
                    if incident and str(r.key).partition(":")[0] in INCIDENT_ALERTS
                    else []
                ),
                color=_SEVERITY_COLOUR.get(r.severity, "secondary"),
                class_name="py-1 mb-1",
            )
            for r in df.head(12).itertuples()
        ],
        id=id_,
    )


def history(now: Any, listed: html.Div, end: datetime) -> html.Div:
    """An ended run's alerts: "Active now" (``now``, the fleet's at the store's end; None when
    no source follows the cluster) above "In this run" (``listed``, at the run's ``end``)."""
    return html.Div([
        html.Div("Active now", className="small fw-bold"),
        alert_list(now, id_="ov-alerts-now") if now is not None else dbc.Alert(
            NOTHING_FOLLOWED, color="secondary", class_name="small mb-1", id="ov-alerts-now"),
        html.Div(f"In this run, to its end ({end:%Y-%m-%d %H:%M} UTC)",
                 className="small fw-bold mt-2"),
        listed,
    ])  # fmt: skip
