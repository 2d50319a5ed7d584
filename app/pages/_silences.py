"""The Overview's alert silences: pick a firing alert, a duration, give your name and the
operator token, and it goes to no receiver until the silence ends (``telemetry.alerting``); and
acknowledgements: pick a firing alert, and your name and when are kept with its history
(``telemetry.alert_history``).
Shown only where this server delivers alerts (``serve --alerts``) and takes operator writes
(``--operator-token-file``); the same check as the HTTP API, so a wrong token changes nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, dcc, html

from app.data import alerts as data
from app.data.services import corrections_allowed
from app.ui import guarded, operator_token_input, view_inputs

log = logging.getLogger("factoryfloor.app")
DURATIONS = [("1 hour", "1h"), ("4 hours", "4h"), ("1 day", "1d"), ("7 days", "7d")]


def form() -> html.Div:
    shown = data.delivers_alerts() and corrections_allowed()
    return html.Div(
        [
            html.H6("Silence an alert", className="mt-3 mb-1"),
            dcc.Dropdown(id="ov-silence-alert", placeholder="Firing alert", className="mb-1"),
            dbc.Row(
                [
                    dbc.Col(
                        dbc.Select(
                            id="ov-silence-for",
                            options=[{"label": t, "value": v} for t, v in DURATIONS],
                            value="4h",
                            size="sm",
                        )
                    ),
                    dbc.Col(dbc.Input(id="ov-silence-by", placeholder="Your name", size="sm")),
                ],
                class_name="g-1 mb-1",
            ),
            dbc.Row(
                [
                    dbc.Col(operator_token_input("ov-silence-token")),
                    dbc.Col(dbc.Button("Silence", id="ov-silence-save", size="sm"), width="auto"),
                ],
                class_name="g-1",
            ),
            html.Div(id="ov-silence-msg", className="small mt-1", role="status"),
            html.Div(id="ov-silence-list", className="small mt-1"),
            dbc.Row(
                [
                    dbc.Col(dcc.Dropdown(id="ov-silence-end-pick", placeholder="Silence in force")),
                    dbc.Col(
                        dbc.Button(
                            "End silence", id="ov-silence-end", size="sm", color="secondary"
                        ),
                        width="auto",
                    ),
                ],
                class_name="g-1 mt-1",
            ),
            html.Div(id="ov-silence-end-msg", className="small mt-1", role="status"),
            html.H6("Acknowledge an alert", className="mt-3 mb-1"),
            html.Div(
                "With your name and the operator token above: who and when are kept with "
                "the alert's history.",
                className="small text-muted mb-1",
            ),
            dbc.Row(
                [
                    dbc.Col(dcc.Dropdown(id="ov-ack-alert", placeholder="Firing alert")),
                    dbc.Col(dbc.Button("Acknowledge", id="ov-ack-save", size="sm"), width="auto"),
                ],
                class_name="g-1",
            ),
            html.Div(id="ov-ack-msg", className="small mt-1", role="status"),
        ],
        id="ov-silence-form",
        style=None if shown else {"display": "none"},
    )


@callback(
    Output("ov-silence-alert", "options"),
    Output("ov-silence-list", "children"),
    Output("ov-silence-end-pick", "options"),
    Output("ov-ack-alert", "options"),
    *view_inputs(themed=False),
    Input("ov-silence-msg", "children"),
    Input("ov-silence-end-msg", "children"),
    Input("ov-ack-msg", "children"),
)
@guarded("alert", "alert", "alert", "alert", remember=False)  # firing alerts change unwritten
def _options(_view: Any, _n: int | None, _msg: Any, _ended: Any, _acked: Any):  # type: ignore[no-untyped-def]
    if not data.delivers_alerts():
        return [], "", [], []
    options = [
        {"label": label, "value": json.dumps(matchers, sort_keys=True)}
        for label, matchers in data.firing_alerts()
    ]
    active = data.silences()
    listed = [
        html.Div(
            f"Silenced until {s.ends_at:%Y-%m-%d %H:%M} UTC: "
            + ", ".join(f"{k}={v}" for k, v in s.matchers.items())
            + f" (by {s.created_by})"
        )
        for s in active
    ]
    ends = [
        {"label": ", ".join(f"{k}={v}" for k, v in x.matchers.items()), "value": x.id}
        for x in active
        if x.id
    ]
    acks = [{"label": label, "value": fp} for label, fp in data.ack_choices()]
    return options, listed, ends, acks


@callback(
    Output("ov-ack-msg", "children"),
    Input("ov-ack-save", "n_clicks"),
    State("ov-ack-alert", "value"),
    State("ov-silence-by", "value"),
    State("ov-silence-token", "value"),
    prevent_initial_call=True,
)
def _ack(_clicks: Any, fingerprint: Any, by: Any, token: Any) -> Any:
    try:
        status, msg = data.acknowledge(fingerprint, by, token)
    except Exception as exc:  # shown, never a traceback in the browser
        log.error("acknowledging an alert failed: %s", exc)
        return dbc.Alert(f"Not acknowledged: {type(exc).__name__}", color="danger")
    return dbc.Alert(msg, color="success" if status == 200 else "danger", class_name="py-1 mb-0")


@callback(
    Output("ov-silence-end-msg", "children"),
    Input("ov-silence-end", "n_clicks"),
    State("ov-silence-end-pick", "value"),
    State("ov-silence-token", "value"),
    prevent_initial_call=True,
)
def _end(_clicks: Any, silence_id: Any, token: Any) -> Any:
    try:
        status, msg = data.end_silence(silence_id, token)
    except Exception as exc:  # shown, never a traceback in the browser
        log.error("ending a silence failed: %s", exc)
        return dbc.Alert(f"Not ended: {type(exc).__name__}", color="danger")
    return dbc.Alert(msg, color="success" if status == 200 else "danger", class_name="py-1 mb-0")


@callback(
    Output("ov-silence-msg", "children"),
    Input("ov-silence-save", "n_clicks"),
    State("ov-silence-alert", "value"),
    State("ov-silence-for", "value"),
    State("ov-silence-by", "value"),
    State("ov-silence-token", "value"),
    prevent_initial_call=True,
)
def _save(_clicks: Any, alert: Any, duration: Any, by: Any, token: Any) -> Any:
    try:
        status, msg = data.silence(alert, duration, by, token)
    except Exception as exc:  # shown, never a traceback in the browser
        log.error("silence failed: %s", exc)
        return dbc.Alert(f"Not saved: {type(exc).__name__}", color="danger")
    return dbc.Alert(msg, color="success" if status == 200 else "danger", class_name="py-1 mb-0")
