"""Training: loss curves with every interruption, restore and checkpoint marked; throughput."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import dash
import dash_bootstrap_components as dbc
import pandas as pd
from dash import (
    ClientsideFunction,
    Input,
    Output,
    State,
    callback,
    clientside_callback,
    ctx,
    dcc,
    html,
    no_update,
)
from dash.exceptions import PreventUpdate

from app.data import training as data
from app.data.services import together
from app.data.view import (
    mapping,
    number,
    parse_time,
    revision,
    run_label,
    run_of,
    run_options,
    template,
    view_range,
)
from app.figures import empty
from app.figures import training as fig
from app.ui import TIMECHART, guarded, table, time_graph, view_inputs

dash.register_page(__name__, path="/training", name="Training", order=1)

SPIKE_COLUMNS = {
    "ts": "Time (UTC)",
    "step": "Step",
    "loss": "Peak loss",
    "baseline": "Baseline loss",
    "jump_pct": "Jump (%)",
    "attempt": "Attempt",
}


def _controls() -> dbc.Row:
    return dbc.Row(
        [
            dbc.Col(
                [
                    html.Label("X axis", className="small text-body-secondary"),
                    dbc.RadioItems(
                        id="tr-x",
                        value="step",
                        inline=True,
                        options=[
                            {"label": "Step", "value": "step"},
                            {"label": "Tokens", "value": "tokens"},
                            {"label": "Wall clock", "value": "time"},
                        ],
                    ),
                ],
                md=3,
            ),
            dbc.Col(
                [
                    html.Label("Smoothing (EMA weight)", className="small text-body-secondary"),
                    dcc.Slider(
                        id="tr-smooth",
                        min=0,
                        max=0.99,
                        step=0.01,
                        value=0.6,
                        marks={0: "0", 0.6: "0.6", 0.99: "0.99"},
                        tooltip={"placement": "bottom"},
                    ),
                ],
                md=3,
            ),
            dbc.Col(
                [
                    html.Label("Scale", className="small text-body-secondary"),
                    dbc.Switch(id="tr-log", label="Log loss axis", value=True),
                ],
                md=2,
            ),
            dbc.Col(
                [
                    html.Label("Overlay runs", className="small text-body-secondary"),
                    dcc.Dropdown(id="tr-runs", multi=True, placeholder="the selected run"),
                ],
                md=4,
            ),
        ],
        class_name="g-2 mb-2 align-items-end",
    )


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            _controls(),
            time_graph("tr-loss"),
            time_graph("tr-throughput"),
            dbc.Row(
                [
                    dbc.Col(
                        [
                            html.H6("Loss spikes (click one to zoom to it)", className="mt-2"),
                            html.Div(id="tr-spikes"),
                        ],
                        lg=12,
                    ),
                ]
            ),
        ]
    )


@callback(Output("tr-runs", "options"), Input("view", "data"))
def _run_options(_view: dict[str, Any] | None) -> list[dict[str, str]]:
    return run_options()


@callback(
    Output({"type": TIMECHART, "id": "tr-loss"}, "figure"),
    Output({"type": TIMECHART, "id": "tr-throughput"}, "figure"),
    Output("tr-spikes", "children"),
    *view_inputs(),
    Input("tr-x", "value"),
    Input("tr-smooth", "value"),
    Input("tr-log", "value"),
    Input("tr-runs", "value"),
)
@guarded("figure", "figure", "alert")
def _update(view, _n, theme, axis, smoothing, log_y, overlay):  # type: ignore[no-untyped-def]
    tpl = template(theme)
    tr = view_range(view)
    if tr is None or not run_of(view):
        e = empty("Training", "No training metrics stored yet", template=tpl)
        return e, e, ""
    run = view["run"]
    series, events, marks, spikes = together(
        lambda: data.overlay_series(run, tr, overlay, axis),
        lambda: data.run_events(run, tr),
        lambda: data.checkpoint_marks(run, tr),
        lambda: data.loss_spikes(run, tr),
    )
    runs = {run_label(r): df for r, df in series.items()}
    span = fig.shared_x_range(runs, axis)  # both charts over the same steps, one above the other
    loss = fig.loss_figure(
        runs,
        axis,
        float(smoothing or 0),
        bool(log_y),
        events,
        marks,
        data.tokens_per_step(run),
        tpl,
        x_range=span,
    )
    thr = fig.throughput_figure(
        series.get(run, pd.DataFrame()), axis, tpl, run_label(run), x_range=span
    )
    rev = f"{revision(view)}|{axis}"
    spikes_view = (
        table(
            "tr-spike-table",
            _spike_rows(spikes),
            SPIKE_COLUMNS,
            row_id=["step", "attempt"],
            clickable=True,
        )
        if not spikes.empty
        else dbc.Alert("No loss spikes in this range.", color="secondary", class_name="small")
    )
    return (loss.update_layout(uirevision=rev), thr.update_layout(uirevision=rev), spikes_view)


def _spike_rows(spikes: pd.DataFrame) -> pd.DataFrame:
    out = spikes.astype({"loss": float, "baseline": float, "jump_pct": float})
    out = out.round({"loss": 4, "baseline": 4, "jump_pct": 1})
    out["ts"] = out["ts"].dt.strftime("%Y-%m-%d %H:%M:%S")
    return out


def _step_zoom(relayout: Any) -> tuple[float, float] | None:
    """(lo, hi) of a zoom on a Step or Tokens axis (numbers, not times), else None."""
    if not isinstance(relayout, dict):
        return None
    span = relayout.get("xaxis.range") or [relayout.get("xaxis.range[0]"),
                                          relayout.get("xaxis.range[1]")]  # fmt: skip
    if not isinstance(span, list | tuple) or len(span) != 2:
        return None
    lo, hi = (number(v) if not isinstance(v, str) or parse_time(v) is None else None
              for v in span)  # fmt: skip
    return (lo, hi) if lo is not None and hi is not None and lo < hi else None


@callback(
    Output("url", "hash", allow_duplicate=True),
    Input("zoom-relayouts", "data"),
    Input("tr-x", "value"),  # an Input: Dash keys duplicate outputs by inputs (the shell's)
    State("view", "data"),
    prevent_initial_call=True,
)
def _zoom_steps(relayouts, axis, view):  # type: ignore[no-untyped-def]
    """A drag-zoom on the Step (or Tokens) axis: the time those steps took, into the URL as
    the view's range, so Live does not snap it back and a shared link shows it (#37). Time
    zooms are the shell's (``_zoom_to_url``); a reset returns to the whole run there too."""
    run = run_of(view)
    events = relayouts.get("relayouts") if isinstance(relayouts, dict) else None
    if "zoom-relayouts" not in ctx.triggered_prop_ids.values():  # an axis change alone: none
        raise PreventUpdate
    if axis not in ("step", "tokens") or not run or not isinstance(events, list):
        raise PreventUpdate
    zooms = [z for e in events if (z := _step_zoom(e)) is not None]
    if not zooms:
        raise PreventUpdate
    tr = data.time_of_steps(run, axis, *zooms[0])
    if tr is None:
        raise PreventUpdate
    return "#" + urlencode({"run": run, "from": tr.start.isoformat(), "to": tr.end.isoformat()})


# The spike clicked reaches the server through the shell's "spike-pick" store, set in the
# browser (assets/36-grid-pick.js says why).
clientside_callback(
    ClientsideFunction("ff", "pickedRow"),
    Output("spike-pick", "data"),
    Input("tr-spike-table", "cellClicked"),
    State("tr-spike-table", "rowData"),
    prevent_initial_call=True,
)


@callback(
    Output("url", "hash", allow_duplicate=True),
    Input("spike-pick", "data"),
    State("view", "data"),
    prevent_initial_call=True,
)
def _zoom_to_spike(pick, view):  # type: ignore[no-untyped-def]
    """A click on a spike narrows the shared range to an hour around it (via the URL, so the
    shell handles it like any other navigation and back returns to the previous view)."""
    ts = (mapping((mapping(pick) or {}).get("row")) or {}).get("ts")
    if ts is None:
        raise PreventUpdate
    at = parse_time(str(ts))
    if at is None:
        return no_update
    lo, hi = at - timedelta(minutes=30), at + timedelta(minutes=30)
    return "#" + urlencode(
        {"run": run_of(view) or "", "from": lo.isoformat(), "to": hi.isoformat()}
    )
