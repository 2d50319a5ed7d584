"""Overview: the fleet and the current run at a glance."""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, callback, dcc, html

from app import data, figures

dash.register_page(__name__, path="/", name="Overview", order=0)

_TIER_NAMES = {"nvme": "NVMe", "pfs": "PFS", "object": "Object store"}


def _card(title: str, value: str, sub: str = "", id_: str = "") -> dbc.Col:
    return dbc.Col(
        dbc.Card(
            dbc.CardBody(
                [
                    html.Div(title, className="text-body-secondary small"),
                    html.Div(value, className="fs-4 fw-semibold", **({"id": id_} if id_ else {})),
                    html.Div(sub, className="small text-body-secondary"),
                ]
            )
        ),
        xs=6,
        md=4,
        xl=2,
    )


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            dbc.Row(id="ov-cards", class_name="g-2 mb-2"),
            dbc.Row(
                [
                    dbc.Col(dcc.Graph(id="ov-fleet", config={"displaylogo": False}), lg=8),
                    dbc.Col(dcc.Graph(id="ov-power", config={"displaylogo": False}), lg=4),
                ],
                class_name="g-2",
            ),
            dbc.Row(
                [
                    dbc.Col(dcc.Graph(id="ov-loss", config={"displaylogo": False}), lg=8),
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
    Output("ov-fleet", "figure"),
    Output("ov-power", "figure"),
    Output("ov-loss", "figure"),
    Output("ov-ckpt", "children"),
    Input("run-select", "value"),
    Input("range-select", "value"),
    Input("refresh", "n_intervals"),
    Input("theme-switch", "value"),
)
def _update(run_id: str | None, preset: str | None, _n: int | None, light: bool | None):  # type: ignore[no-untyped-def]
    template = "plotly_white" if light else "plotly_dark"
    tr = data.time_range(preset)
    if tr is None or run_id is None:
        msg = "No data stored yet: start a replay or the ingest daemon."
        e = figures.empty("Fleet", msg, template=template)
        return [dbc.Alert(msg, color="info")], e, e, e, ""
    fleet = data.fleet_latest()
    s = data.summary(run_id)
    ints = data.interruptions(run_id, tr)
    cards = [
        _card(
            "GPUs reporting",
            f"{fleet['reporting']:,} / {fleet['expected']:,}",
            f"{fleet['failed']:,} silent · {fleet.get('degraded', 0)} degraded",
            "ov-gpus",
        ),
        _card(
            "Fleet utilization",
            f"{(fleet.get('util_avg') or 0):.1f} %",
            f"hottest GPU {(fleet.get('temp_max') or 0):.0f} °C",
        ),
        _card("GPU power", f"{(fleet.get('power_w') or 0) / 1000:,.1f} kW", "all GPUs, latest"),
        _card("Step", f"{s['steps']:,}", f"loss {s['last_loss']}", "ov-step"),
        _card(
            "ETTR",
            f"{(s['ettr'] or 0) * 100:.1f} %",
            f"MFU {(s['mfu'] or 0) * 100:.1f} %",
            "ov-ettr",
        ),
        _card(
            "Interruptions",
            f"{s['interruptions']['unexpected']} + {s['interruptions']['planned']}",
            f"unexpected + planned · MTBF {s['mtbf_hours'] or '–'} h",
            "ov-ints",
        ),
    ]
    series = data.fleet_series(tr)
    ages = data.checkpoint_ages(run_id, tr.end)
    ck = (
        dbc.Card(
            dbc.CardBody(
                [
                    html.H6("Last checkpoint per tier", className="mb-2"),
                    html.Table(
                        [
                            html.Thead(html.Tr([html.Th("Tier"), html.Th("Age"), html.Th("Step")])),
                            html.Tbody(
                                [
                                    html.Tr(
                                        [
                                            html.Td(_TIER_NAMES.get(r.tier, r.tier)),
                                            html.Td(_fmt_age(r.age_s)),
                                            html.Td(f"{r.step:,}"),
                                        ]
                                    )
                                    for r in ages.itertuples()
                                ]
                            ),
                        ],
                        className="table table-sm mb-0",
                        id="ov-ckpt-table",
                    ),
                ]
            )
        )
        if not ages.empty
        else dbc.Alert("No checkpoint completed yet in this run.", color="secondary")
    )
    return (
        cards,
        figures.fleet_timeline(series, ints, template),
        figures.power_series(series, template),
        figures.loss_curve(data.train_series(run_id, tr), template),
        ck,
    )
