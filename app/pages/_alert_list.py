"""The Overview's alert lists: each alert with its detail (those about an interruption linked
to its incident view), and for a run that has ended, what is active now apart from what the run
raised, its history (#57, 2: an "XID 79 seen in the last 24 h" sat beside "Run finished" on a
run that ended weeks before). Where this server delivers alerts, "Active now" is what its last
evaluation found firing and "Resolved in this range" what ended in the view's range, each with
its first-seen and resolved time and who acknowledged it when (#58, 5)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import dash_bootstrap_components as dbc
import pandas as pd
from dash import dcc, html

from app.data.incident import incidents, run_fragment
from app.pages._interruptions import incident_href

_SEVERITY_COLOUR = {"critical": "danger", "warning": "warning", "info": "info"}
NOTHING_FOLLOWED = "Nothing is followed (imports and replays only): no alert can be active now."


INCIDENT_ALERTS = ("RunStopped", "RestartLoop")  # alerts about an interruption: linked to it


def alert_list(
    df: Any,
    incident: str | None = None,
    id_: str = "ov-alert-list",
    clear: str = "All clear: no alert at the end of this range.",
    colour: str | None = None,
) -> html.Div:
    """The alerts, those about an interruption with a link to its incident view, and, for
    delivered ones (``first_seen`` in ``df``), when each began and who acknowledged it;
    ``colour``: one for all (resolved ones), else each its severity's."""
    if df.empty:
        return dbc.Alert(clear, color="success", class_name="small mb-0", id=id_)
    return html.Div(
        [
            dbc.Alert(
                [html.Strong(r.alert), html.Br(), html.Span(r.detail, className="small")]
                + _since(r)
                + (
                    [html.Br(), dcc.Link("Open the incident", href=incident, className="small")]
                    if incident and str(r.key).partition(":")[0] in INCIDENT_ALERTS
                    else []
                ),
                color=colour or _SEVERITY_COLOUR.get(r.severity, "secondary"),
                class_name="py-1 mb-1",
            )
            for r in df.head(12).itertuples()
        ],
        id=id_,
    )


def _when(t: Any) -> str:
    return f"{t:%Y-%m-%d %H:%M} UTC"


def _acked(r: Any) -> str:
    if r.acked_by is None or r.acked_at is None or r.acked_at != r.acked_at:
        return "not acknowledged"
    return f"acknowledged by {r.acked_by} at {_when(r.acked_at)}"


def _since(r: Any) -> list[Any]:
    """A delivered alert's history line: first seen, resolved, acknowledged (by whom, when)."""
    first = getattr(r, "first_seen", None)
    if first is None or first != first:  # not a delivered alert (or NaT)
        return []
    ended = getattr(r, "resolved_at", None)
    said = f"First seen {_when(first)}"
    if ended is not None and ended == ended:
        said += f", resolved {_when(ended)}"
    return [html.Br(), html.Span(f"{said}; {_acked(r)}", className="small ff-alert-since")]


def history(
    now: Any,
    listed: html.Div | None,
    end: datetime,
    resolved: Any = None,
    now_list: html.Div | None = None,
    listed_title: str = "In this run, to its end",
) -> html.Div:
    """The alerts beside each other: "Active now" (``now``, the fleet's at the store's end, or
    ``now_list`` drawn already; None when nothing says what is active now), "In this run"
    (``listed``, an ended run's at its ``end``; None for a live run; ``listed_title`` for a
    live run's at the end of a past range) and "Resolved in this
    range" (``resolved``, delivered alerts that ended in the view's range; None when this
    server delivers none)."""
    if now_list is not None:
        active = now_list
    elif now is not None:
        active = alert_list(now, id_="ov-alerts-now")
    else:
        active = dbc.Alert(
            NOTHING_FOLLOWED, color="secondary", class_name="small mb-1", id="ov-alerts-now"
        )
    parts = [html.Div("Active now", className="small fw-bold"), active]
    if listed is not None:
        parts += [
            html.Div(f"{listed_title} ({end:%Y-%m-%d %H:%M} UTC)", className="small fw-bold mt-2"),
            listed,
        ]
    if resolved is not None:
        parts += [
            html.Div("Resolved in this range", className="small fw-bold mt-2"),
            alert_list(
                resolved,
                id_="ov-alerts-resolved",
                colour="secondary",
                clear="No delivered alert resolved in this range.",
            ),
        ]
    return html.Div(parts)  # fmt: skip


def incident_link(run_id: str | None, *lists: pd.DataFrame) -> str | None:
    """The run's newest incident view (what a stop or loop alert is about) where an alert
    listed is about an interruption; None when none is, or the run has no interruption."""
    about = run_id is not None and any(
        df["key"].str.split(":").str[0].isin(INCIDENT_ALERTS).any() for df in lists if not df.empty
    )
    if not about or run_id is None:
        return None
    df = incidents(run_id)
    return None if df.empty else incident_href(df["at"].iloc[0], run_fragment(run_id))


def delivery_text(state: dict[str, Any]) -> list[Any]:
    """One line per receiver: delivered when, or failing how; then what was evaluated."""
    out: list[Any] = [html.Strong("Delivery")]
    for r in state["receivers"]:
        if r.attempt > 1 or (r.last_error and (r.last_ok is None or r.last_error_at > r.last_ok)):
            what = f"failing: {r.last_error}" + (
                f" (attempt {r.attempt}, retrying)" if r.attempt > 1 else ""
            )
            cls = "text-danger"
        elif r.last_ok is not None:
            what, cls = f"delivered {r.last_ok:%H:%M:%S} UTC ({r.sent} sent)", "text-success"
        else:
            what, cls = "nothing sent yet", ""
        extra = f", {r.dropped} dropped" if r.dropped else ""
        out += [html.Br(), html.Span(f"{r.name} ({r.kind}): {what}{extra}", className=cls)]
    at = state["evaluated_at"]
    summary = f"{state['firing']} firing, {state['silenced']} silenced" + (
        f", evaluated {at:%H:%M:%S} UTC" if at else ", not evaluated yet"
    )
    if state["error"]:
        summary += f"; evaluation failed: {state['error']}"
    return [*out, html.Br(), html.Span(summary)]
