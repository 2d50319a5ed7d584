"""Failures: what interrupted the run, how often, what it cost, and which nodes keep failing."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, callback, dcc, html

from app import figures
from app.data import failures as data
from app.data.services import prices, together
from app.data.view import (
    LLAMA3_MTBF_H,
    counted_range,
    fragment,
    money,
    revision,
    run_of,
    template,
    unset_text,
    view_range,
)
from app.figures import failures as ffig
from app.figures.units import fmt_duration, fmt_gpu_hours
from app.pages import _hangs, _interruptions, _slurm
from app.pages._interruptions import incident_href
from app.ui import TIMECHART, card, graph, guarded, table, time_graph, view_inputs

dash.register_page(__name__, path="/failures", name="Failures", order=3)

NO_DATA = "No data stored yet: start a replay or the ingest daemon."

TAX_COLUMNS = {
    "category": "Category",
    "key": "Component",
    "count": "Run (n)",
    "pct": "Run (%)",
    "lost_gpu_hours": "Lost (GPU-h)",
    "ref_count": "Llama 3 (n)",
    "ref_pct": "Llama 3 (% of 419)",
    "ref_pct_printed": "Printed (%)",
}
XID_COLUMNS = {
    "xid": "XID",
    "mnemonic": "Mnemonic",
    "meaning": "Meaning",
    "action": "NVIDIA recommended action",
    "hint": "Operator hint",
    "fatal": "Fatal",
    "count": "Count",
    "gpus": "GPUs",
    "hosts": "Hosts",
    "last_ts": "Last seen (UTC)",
}
LEMON_COLUMNS = {
    "rank": "#",
    "host": "Host",
    "rack": "Rack",
    "unexpected": "Unexpected",
    "xids": "XIDs",
    "lost_gpu_hours": "Lost (GPU-h)",
    "downtime_min": "Downtime (min)",
    "last_failure": "Last failure (UTC)",
    "components": "Components",
    "health": "Health rules broken",
}


def _section(title: str, body: Any, id_: str) -> dbc.Card:
    return dbc.Card(
        dbc.CardBody([html.H6(title, className="mb-2"), html.Div(body, id=id_)]),
        class_name="h-100",
    )


def layout(**_query: str) -> html.Div:
    by = dbc.RadioItems(
        id="fail-by",
        options=[
            {"label": "By component", "value": "component"},
            {"label": "By category", "value": "category"},
        ],
        value="component",
        inline=True,
        class_name="small mb-1",
    )
    return html.Div(
        [
            dbc.Row(id="fail-cards", class_name="g-2 mb-2"),
            _hangs.section(),
            html.Div(
                [html.Span("Group by", className="small text-body-secondary me-2"), by],
                className="d-flex align-items-center",
            ),
            time_graph("fail-timeline"),
            _interruptions.section(),
            dbc.Row(
                [
                    dbc.Col(graph("fail-taxonomy"), lg=6),
                    dbc.Col(_section("Interruption taxonomy (counts)", "", "fail-tax"), lg=6),
                ],
                class_name="g-2 mb-2",
            ),
            dbc.Row(
                [
                    # One above the other: each has 9-10 columns to show whole, and side by
                    # side (from 1,400 px) the XID table ran 150-200 px past its card on
                    # 1,440-1,536 px laptops (tests/ui/test_fit.py)
                    dbc.Col(_section("XIDs in this range, decoded", "", "fail-xid"), width=12),
                    dbc.Col(_section('Bad-node ("lemon") ranking', "", "fail-lemon"), width=12),
                ],
                class_name="g-2 mb-2",
            ),
            _slurm.events_card(),
            dcc.Markdown(
                f"Reference: *{ffig.REF_SOURCE}*. MTBF = wall hours of the run in the range / "
                "unexpected interruptions; downtime = detection + restart; lost GPU-hours = "
                "GPUs x (downtime + recomputation of rolled-back steps).",
                className="small text-body-secondary mt-2",
            ),
        ]
    )


def _cards(r: dict[str, Any], xid: pd.DataFrame, book: Any, sources: list[str]) -> list[dbc.Col]:
    mtbf = r["mtbf_hours"]
    return [
        card(
            "Interruptions",
            f"{r['unexpected']} + {r['planned']}",
            "unexpected + planned"
            + (f" ({r['time_unknown']} at a time unknown)" if r["time_unknown"] else "")
            + " · Llama 3: 419 + 47 in 54 d",
            "fail-count",
        ),
        card(
            "MTBF",
            "–" if mtbf is None else fmt_duration(mtbf * 3600),
            f"{_span(r['wall_hours'])} wall / {r['unexpected']} unexpected · "
            f"Llama 3: {LLAMA3_MTBF_H:.1f} h",
            "fail-mtbf",
        ),
        card(
            "Downtime",
            _span(r["downtime_hours"]),
            f"detection + restart · +{_span(r['rework_hours'])} recompute",
            "fail-downtime",
        ),
        card(
            "Lost GPU-hours",
            fmt_gpu_hours(r["lost_gpu_hours"]),
            ("steps rolled back – (not known)" if r["lost_steps"] is None
             else f"{r['lost_steps']:,} steps rolled back") + " · "
            + (
                f"{fmt_gpu_hours(r['planned_gpu_hours'])} of them in planned stops · "
                if r["lost_gpu_hours"] is not None and r["planned"]
                else ""
            )
            + (
                "cost –"
                if r["lost_gpu_hours"] is None
                else f"≈ {money(r['lost_gpu_hours'] * book.gpu_hour)} " + book.per_gpu_hour()
            ),
            "fail-lostgh",
        ),
        _recovery_card(r),
        _xid_card(xid, sources),
    ]


def _xid_card(xid: pd.DataFrame, sources: list[str]) -> dbc.Col:
    """XIDs in the range; "–" with why where no stored source reports XIDs for it (no kernel
    log, no DCGM XID field: ``data.xid_sources``), where 0 would claim none happened."""
    if not sources:
        return card("XIDs", "–", data.NO_XID_SOURCE, "fail-xids")
    n_fatal, untimed = int((xid["fatal"] == "yes").sum()), int(xid["untimed"].sum())
    sub = f"{len(xid)} codes, {n_fatal} fatal" + (
        f" ({untimed} at a time unknown)" if untimed else "")
    return card("XIDs", f"{int(xid['count'].sum()):,}", sub, "fail-xids")


def _recovery_card(r: dict[str, Any]) -> dbc.Col:
    """How interruptions were recovered; "–" with why when none says (not "0 / 0", which read
    as no recoveries)."""
    told = r["automated"] + r["manual"]
    total = r["unexpected"] + r["planned"]
    value = f"{r['automated']} / {r['manual']}" if told else "–"
    sub = "Llama 3: 3 of 466 needed manual work"
    if total and told < total:
        sub = f"not recorded for {total - told} of {total} · " + sub
    return card("Recovery: automated / manual", value, sub, "fail-recovery")


def _span(hours: float | None) -> str:
    return fmt_duration(None if hours is None else hours * 3600)


def _ts_text(s: pd.Series) -> pd.Series:
    return pd.to_datetime(s).dt.strftime("%Y-%m-%d %H:%M:%S").fillna("")


def _xid_table(df: pd.DataFrame, sources: list[str]) -> Any:
    if df.empty:
        said = "No XIDs in this range." if sources else f"XIDs unknown: {data.NO_XID_SOURCE}."
        return dbc.Alert(said, color="secondary", class_name="mb-0")
    df = df.assign(
        action=df["action"] + " (" + df["action_text"] + ")",
        last_ts=_ts_text(df["last_ts"]).mask(df["last_ts"].isna(), "time unknown"),
    )
    return table("fail-xid-table", df, XID_COLUMNS)


def _lemon_table(df: pd.DataFrame, sources: list[str]) -> Any:
    if df.empty:
        msg = ("No unexpected interruptions or XIDs on any node in this range." if sources else
               f"No unexpected interruption names a node in this range (XIDs unknown: "
               f"{data.NO_XID_SOURCE}).")
        return dbc.Alert(msg, color="secondary", class_name="mb-0")
    df = df.assign(
        rank=range(1, len(df) + 1),
        xids=["–" if pd.isna(n) else int(n) for n in df["xids"]],  # "–": no XID source covers
        lost_gpu_hours=ffig.known(df["lost_gpu_hours"], 1),
        downtime_min=ffig.known(df["downtime_s"] / 60.0, 1),
        last_failure=_ts_text(df["last_failure"]),
    )
    return table("fail-lemon-table", df, LEMON_COLUMNS)


def _tax_table(df: pd.DataFrame, by: str) -> Any:
    columns = dict(TAX_COLUMNS)
    if by == "category":
        del columns["category"]
        columns["key"] = "Category"
    df = df.assign(
        pct=df["pct"].round(1),
        ref_pct=df["ref_pct"].round(1),
        lost_gpu_hours=ffig.known(df["lost_gpu_hours"], 1),
    )
    return table("fail-tax-table", df, columns)


@callback(
    Output("fail-cards", "children"),
    Output("fail-xid", "children"),
    Output("fail-lemon", "children"),
    *view_inputs(themed=False),
)
@guarded("alert", "alert", "alert")
def _summary(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    tr = counted_range(view)
    if tr is None:
        return [dbc.Alert(NO_DATA, color="info")], "", ""
    run_id = run_of(view)
    xid, sources, summary, lemons = together(
        lambda: data.xid_table(run_id, tr),
        lambda: data.xid_sources(run_id, tr),
        lambda: data.failure_summary(run_id, tr),
        lambda: data.lemons(run_id, tr),
    )
    cards = _cards(summary, xid, prices(run_id), sources)
    return cards, _xid_table(xid, sources), _lemon_table(lemons, sources)


@callback(
    Output({"type": "chart", "id": "fail-taxonomy"}, "figure"),
    Output("fail-tax", "children"),
    *view_inputs(),
    Input("fail-by", "value"),
)
@guarded("figure", "alert")
def _taxonomy(view: dict[str, Any] | None, _n: int | None, theme: str | None, by: str | None):  # type: ignore[no-untyped-def]
    tpl = template(theme)
    tr = counted_range(view)
    if tr is None:
        return figures.empty("Interruption taxonomy", NO_DATA, template=tpl), ""
    by, run_id = data.taxonomy_key(by), run_of(view)
    df, summary = together(
        lambda: data.taxonomy(run_id, tr, by), lambda: data.failure_summary(run_id, tr)
    )
    planned = summary["planned"]
    fig = ffig.taxonomy_chart(df, by, planned, tpl).update_layout(uirevision=revision(view))
    return fig, _tax_table(df, by)


@callback(
    Output({"type": TIMECHART, "id": "fail-timeline"}, "figure"),
    *view_inputs(),
    Input("fail-by", "value"),
)
@guarded("figure")
def _timeline(view: dict[str, Any] | None, _n: int | None, theme: str | None, by: str | None):  # type: ignore[no-untyped-def]
    tpl = template(theme)
    tr = view_range(view)
    if tr is None:
        return figures.empty("Interruptions over time", unset_text(view, NO_DATA), template=tpl)
    df = data.failure_timeline(run_of(view), tr)
    undated = data.failure_summary(run_of(view), tr)["time_unknown"]  # no place on the axis
    fig = ffig.interruption_timeline(df, tr.start, tr.end, by or "component", tpl, undated)
    return fig.update_layout(uirevision=revision(view))


@callback(Output("fail-hangs", "children"), *view_inputs(themed=False))
@guarded("alert")
def _hang_cards(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    run = run_of(view)
    frag = fragment({"run": run or "", "range": "all"})
    return [
        _hangs.card(h, incident_href(pd.Timestamp(h["ts"]).isoformat(), frag)
                    if h.get("ts") is not None and h["ts"] == h["ts"] else None)
        for h in data.hangs(run)
    ]  # fmt: skip
