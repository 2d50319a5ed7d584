"""Page part for cluster accounting (``telemetry.queries.accounting``), on the GPUs page beside
the Slurm node states: where the cluster's GPU-hours went each day of the view (allocated,
idle, down, planned down), as ``sreport cluster utilization`` reports CPU time; the newest
day's figures in one line, a stacked day chart whose hover splits allocated by account, and
the accounts' and users' GPU-hours over the days shown. Says plainly when nothing is stored."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
import pandas as pd
from dash import Output, callback, dcc, html

from app import figures
from app.data import accounting as data
from app.data.view import money, template, view_range
from app.figures.accounting import PARTS, TITLE, day_chart, gpu_hours
from app.ui import graph_config, guarded, lazy, seen_input, table, unseen, view_inputs

SPLIT_COLUMNS = {
    "who": "Account / user",
    "gpu_hours": "Allocated GPU-hours",
    "share": "Share of allocated (%)",
    "usd": "Cost (USD)",
}
NOTHING = ("No Slurm jobs stored: the cluster's accounting needs `factoryfloor import --slurm` "
           "(or `ingest --slurm`) beside the GPU collector.")  # fmt: skip


def card() -> html.Div:
    """The GPUs page's accounting section (at its bottom: drawn when scrolled near)."""
    return lazy("accounting", _card())


def _card() -> dbc.Card:
    return dbc.Card(
        dbc.CardBody(
            [
                html.H6("Cluster GPU-hours per day", className="mb-1"),
                html.Div(id="accounting-summary", className="small mb-2"),
                dcc.Graph(
                    id="accounting-chart",
                    figure=figures.PLACEHOLDER,
                    config=graph_config("accounting"),
                ),
                dbc.Row(
                    [
                        dbc.Col(html.Div(id="accounting-accounts"), lg=6),
                        dbc.Col(html.Div(id="accounting-users"), lg=6),
                    ],
                    class_name="g-2",
                ),
            ]
        ),  # fmt: skip
        class_name="mb-2",
        id="accounting",
    )


def summary_line(days: pd.DataFrame, gpu_hour: float, price: str) -> str:
    """The newest day of the view: its reported GPU-hours and where they went."""
    d = days.iloc[-1]
    rep = float(d["reported"])
    parts = [
        f"{name} {gpu_hours(d[col])} GPU-h" + (f" ({d[col] / rep:.0%})" if rep else "")
        for col, (name, _) in PARTS.items()
    ]
    return (f"Newest day {d['day']:%Y-%m-%d} (UTC): {gpu_hours(rep)} GPU-h reported; "
            + ", ".join(parts) + f". Idle {money(d['idle'] * gpu_hour)}, allocated "
            f"{money(d['allocated'] * gpu_hour)} {price}.")  # fmt: skip


def split_frame(split: pd.DataFrame, col: str, gpu_hour: float) -> pd.DataFrame:
    """Allocated GPU-hours over the days shown per account (or user), largest first, with
    their share and cost; three decimals while every figure is under 10 (a test cluster)."""
    by = split.groupby(col, as_index=False)["gpu_hours"].sum().rename(columns={col: "who"})
    total = by["gpu_hours"].sum()
    by["share"] = (by["gpu_hours"] / total * 100).round(1) if total else 0.0
    by["usd"] = (by["gpu_hours"] * gpu_hour).round(0)
    by["gpu_hours"] = by["gpu_hours"].round(1 if by["gpu_hours"].max() >= 10 else 3)
    return by.sort_values("gpu_hours", ascending=False)


@callback(
    Output("accounting-summary", "children"),
    Output("accounting-chart", "figure"),
    Output("accounting-accounts", "children"),
    Output("accounting-users", "children"),
    *view_inputs(),
    seen_input("accounting"),
    prevent_initial_call=True,
)
@guarded("alert", "figure", "alert", "alert")
def _accounting(view: dict[str, Any] | None, _n: int | None, theme: str | None, seen: Any):  # type: ignore[no-untyped-def]
    unseen(seen)
    tpl = template(theme)
    a = data.cluster_days(view_range(view))
    if a is None or a.days.empty or not (a.days["reported"].sum() or len(a.accounts)):
        return (dbc.Alert(NOTHING, color="info"),
                figures.empty(TITLE, "Nothing stored for these days", template=tpl),
                None, None)  # fmt: skip
    price = data.gpu_hour_price()
    return (
        summary_line(a.days, price.gpu_hour, price.per_gpu_hour()),
        day_chart(a.days, a.accounts, tpl),
        *(
            table(f"accounting-{col}s-table", split_frame(df, col, price.gpu_hour),
                  {**SPLIT_COLUMNS, "who": col.capitalize()}) if not df.empty else None
            for col, df in (("account", a.accounts), ("user", a.users))
        ),
    )  # fmt: skip
