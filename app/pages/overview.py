"""Overview: the fleet and the current run at a glance."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, callback, html

from app import data, figures
from app.ui import TIMECHART, card, guarded, time_graph

dash.register_page(__name__, path="/", name="Overview", order=0)

_TIER_NAMES = {"nvme": "NVMe", "pfs": "PFS", "object": "Object store"}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            dbc.Row(id="ov-cards", class_name="g-2 mb-2"),
            dbc.Row(
                [
                    dbc.Col(time_graph("ov-fleet"), lg=8),
                    dbc.Col(time_graph("ov-power"), lg=4),
                ],
                class_name="g-2",
            ),
            dbc.Row(
                [
                    dbc.Col(time_graph("ov-loss"), lg=8),
                    dbc.Col(html.Div(id="ov-ckpt"), lg=4),
                ],
                class_name="g-2",
            ),
        ]
    )


def _fmt_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@callback(
    Output("ov-cards", "children"),
    Output({"type": TIMECHART, "id": "ov-fleet"}, "figure"),
    Output({"type": TIMECHART, "id": "ov-power"}, "figure"),
    Output({"type": TIMECHART, "id": "ov-loss"}, "figure"),
    Output("ov-ckpt", "children"),
    Input("view", "data"),
    Input("refresh", "n_intervals"),
    Input("theme-store", "data"),
)
@guarded("alert", "figure", "figure", "figure", "alert")
def _update(view: dict[str, Any] | None, _n: int | None, theme: str | None):  # type: ignore[no-untyped-def]
    tpl = data.template(theme)
    tr = data.view_range(view)
    run_id = (view or {}).get("run")
    if tr is None or run_id is None:
        msg = "No data stored yet: start a replay or the ingest daemon."
        e = figures.empty("Fleet", msg, template=tpl)
        return [dbc.Alert(msg, color="info")], e, e, e, ""
    fleet = data.fleet_latest()
    s = data.summary(run_id)
    ints = data.interruptions(run_id, tr)
    i = s["interruptions"]
    cards = [
        card(
            "GPUs reporting",
            f"{fleet['reporting']:,} / {fleet['expected']:,}",
            f"{fleet['failed']:,} silent · {fleet.get('degraded', 0)} degraded",
            "ov-gpus",
        ),
        card(
            "Fleet utilization",
            f"{(fleet.get('util_avg') or 0):.1f} %",
            f"hottest GPU {(fleet.get('temp_max') or 0):.0f} °C",
        ),
        card("GPU power", f"{(fleet.get('power_w') or 0) / 1000:,.1f} kW", "all GPUs, latest"),
        card("Step", f"{s['steps']:,}", f"loss {s['last_loss']}", "ov-step"),
        card(
            "ETTR",
            f"{(s['ettr'] or 0) * 100:.1f} %",
            f"MFU {(s['mfu'] or 0) * 100:.1f} %",
            "ov-ettr",
        ),
        card(
            "Interruptions",
            f"{i['unexpected']} + {i['planned']}",
            f"unexpected + planned · MTBF {s['mtbf_hours'] or '–'} h",
            "ov-ints",
        ),
    ]
    series = data.fleet_series(tr)
    ages = data.checkpoint_ages(run_id, tr.end)
    rows = [
        html.Tr(
            [
                html.Td(_TIER_NAMES.get(r.tier, r.tier)),
                html.Td(_fmt_age(r.age_s)),
                html.Td(f"{r.step:,}"),
            ]
        )
        for r in ages.itertuples()
    ]
    ck = (
        dbc.Card(
            dbc.CardBody(
                [
                    html.H6("Last checkpoint per tier", className="mb-2"),
                    html.Table(
                        [
                            html.Thead(html.Tr([html.Th("Tier"), html.Th("Age"), html.Th("Step")])),
                            html.Tbody(rows),
                        ],
                        className="table table-sm mb-0",
                        id="ov-ckpt-table",
                    ),
                ]
            )
        )
        if rows
        else dbc.Alert("No checkpoint completed yet in this run.", color="secondary")
    )
    rev = data.revision(view)
    return (
        cards,
        figures.fleet_timeline(series, ints, tpl).update_layout(uirevision=rev),
        figures.power_series(series, tpl).update_layout(uirevision=rev),
        figures.loss_curve(data.train_series(run_id, tr), tpl).update_layout(uirevision=rev),
        ck,
    )
