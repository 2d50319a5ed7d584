"""Checkpoints: per-tier health, restores and the work they lost, the optimal interval, and a
what-if projection of ETTR for another interval or write time."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, callback, dcc, html, no_update

from app import figures
from app.data import checkpoints as data
from app.data.services import prices, together
from app.data.view import (
    money,
    number,
    per_day_usd,
    revision,
    run_of,
    template,
    unset_text,
    view_range,
)
from app.figures import checkpoints as ckfig
from app.figures.units import fmt_duration, fmt_gpu_hours
from app.ui import TIMECHART, card, graph, guarded, table, time_graph, view_inputs

dash.register_page(__name__, path="/checkpoints", name="Checkpoints", order=4)


def _whatif_controls() -> dbc.Card:
    def field(label: str, id_: str, unit: str) -> dbc.Col:
        return dbc.Col(
            [
                dbc.Label(label, html_for=id_, class_name="small mb-0"),
                dbc.InputGroup(
                    [
                        dcc.Input(
                            id=id_,
                            type="number",
                            min=0,
                            step="any",
                            debounce=False,
                            className="form-control",
                        ),
                        dbc.InputGroupText(unit),
                    ],
                    size="sm",
                ),
            ],
            xs=6,
        )

    return dbc.Card(
        dbc.CardBody(
            [
                html.H6("What if", className="mb-2"),
                dbc.Row(
                    [
                        field("Checkpoint interval", "ck-whatif-interval", "min"),
                        field("Blocking write", "ck-whatif-write", "s"),
                    ],
                    class_name="g-2 mb-2",
                ),
                dbc.Row(
                    [
                        dbc.Col(
                            [
                                html.Div("Projected ETTR", className="small text-body-secondary"),
                                html.Div(id="ck-whatif-ettr", className="fs-4 fw-semibold"),
                                html.Div(id="ck-whatif-delta", className="small"),
                            ]
                        ),
                        dbc.Col(
                            [
                                html.Div(
                                    "ETTR at configured values",
                                    className="small text-body-secondary",
                                ),
                                html.Div(id="ck-whatif-base", className="fs-4 fw-semibold"),
                                html.Div(id="ck-whatif-base-sub", className="small"),
                                html.Div(
                                    id="ck-measured-ettr", className="small text-body-secondary"
                                ),
                            ]
                        ),
                    ]
                ),
            ]
        ),
    )


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            dcc.Store(id="ck-model"),
            dbc.Row(id="ck-cards", class_name="g-2 mb-2"),
            html.Div(id="ck-tiers", className="mb-2"),
            time_graph("ck-timeline"),
            dbc.Row(
                [
                    dbc.Col(
                        [html.Div(id="ck-optimal", className="mb-2"), _whatif_controls()], lg=5
                    ),
                    dbc.Col(graph("ck-ettr-curve"), lg=7),
                ],
                class_name="g-2 my-2",
            ),
            html.H6("Restores", className="mt-2"),
            html.Div(id="ck-restores"),
            graph("ck-goodput"),
            html.Div(id="ck-goodput-note", className="small text-body-secondary mb-3"),
            graph("ck-step-time"),
            html.H6("Slow ranks", className="mt-2"),
            html.Div(id="ck-slow-ranks", className="mb-3"),
        ]
    )


def _blocking(tiers: pd.DataFrame, good: dict[str, Any] | None) -> tuple[float, float] | None:
    """The range's blocking save seconds and their % of its wall time, as the goodput's
    checkpoint_save counts them (stored blocking times and the saves the log times: the one
    definition summary's cost reads, #57, 7); None where no save's blocking time is known."""
    if good is not None and "saves_timed" in good:
        if not good["saves_timed"] or not good["window_s"]:
            return None
        secs = float(good["seconds"]["checkpoint_save"])
        return secs, secs / float(good["window_s"]) * 100.0
    if not int(tiers["blocking_n"].sum()):
        return None
    return float(tiers["blocking_s"].sum()), float(tiers["blocking_pct"].sum())


def _cards(
    tiers: pd.DataFrame, rs: pd.DataFrame, m: dict[str, Any] | None, book: Any,
    good: dict[str, Any] | None = None,
) -> list[dbc.Col]:  # fmt: skip
    known = rs["lost_gpu_hours"].notna().any() if not rs.empty else True
    lost_gh = float(rs["lost_gpu_hours"].sum()) if known and not rs.empty else 0.0
    lost = fmt_gpu_hours(lost_gh)
    per = book.per_gpu_hour()
    gpus = (m or {}).get("gpus")
    blocking = _blocking(tiers, good)
    stalled_gh = blocking[0] / 3600 * gpus if gpus and blocking else None
    return [
        card(
            "Blocking overhead",
            "–" if blocking is None else f"{blocking[1]:.2f} %",
            "not known: no save's blocking time (checkpoint files show write times, not stalls)"
            if blocking is None
            else f"{fmt_duration(blocking[0])} stalled, all tiers"
            + (f" · ≈ {money(stalled_gh * book.gpu_hour)} {per}" if stalled_gh else ""),
            "ck-blocking",
        ),
        card("Checkpoints", f"{tiers['n'].sum():,}", f"{tiers['failed'].sum()} failed writes"),
        card(
            "Restores",
            f"{len(rs):,}",
            "none in the range: the losses of stops nothing resumed are on Failures"
            if rs.empty  # not "0.0 GPU-hours lost, $0.00" beside a run that died
            else f"{lost} GPU-hours lost · ≈ {money(lost_gh * book.gpu_hour)} {per}"
            if known
            else "GPU-hours lost unknown (GPU count unknown)",
            "ck-restore-count",
        ),
        card(
            "Measured MTBF",
            fmt_duration(m["mtbf_s"] if m else None),
            f"{m['unexpected']} unexpected interruptions" if m else "",
            "ck-mtbf",
        ),
        card(
            "Mean blocking write",
            f"{m['write_s']:.2f} s" if m and m["write_s"] is not None else "–",
            f"per {ckfig.tier_name(m['interval_tier'])} checkpoint"
            if m and m["interval_tier"]
            else "",
        ),
        card(
            "Configured interval",
            fmt_duration(data.model_interval_s(m)),
            f"measured spacing {fmt_duration(m['measured_interval_s'])}" if m else "",
            "ck-configured",
        ),
    ]


def _verdict(model: dict[str, Any] | None) -> html.Div:
    basis, verdict, cost = ckfig.interval_verdict(data.interval_advice(model), model)
    parts = [html.Span(basis), html.Strong(verdict), html.Span(" " + cost if verdict else cost)]
    return html.Div(parts, id="ck-verdict", className="small")


@callback(
    Output("ck-cards", "children"),
    Output("ck-tiers", "children"),
    Output({"type": TIMECHART, "id": "ck-timeline"}, "figure"),
    Output("ck-optimal", "children"),
    Output("ck-restores", "children"),
    Output("ck-model", "data"),
    *view_inputs(),
)
@guarded("alert", "alert", "figure", "alert", "alert", "alert")
def _update(view: dict[str, Any] | None, _n: int | None, theme: str | None):  # type: ignore[no-untyped-def]
    tpl = template(theme)
    tr = view_range(view)
    run_id = run_of(view)
    if tr is None or run_id is None:
        msg = unset_text(view, "No data stored yet: start a replay or the ingest daemon.")
        e = figures.empty("Checkpoints", msg, template=tpl)
        return [dbc.Alert(msg, color="info")], "", e, "", "", None
    # every read at once (the model's inputs read the tiers too: one statement, shared)
    tiers, rs, points, model, ended, good = together(
        lambda: data.tier_stats(run_id, tr),
        lambda: data.restores(run_id, tr),
        lambda: data.checkpoint_timeline(run_id, tr),
        lambda: data.checkpoint_model(run_id, tr),
        lambda: data.run_ended(run_id),
        lambda: data.goodput(run_id, tr),  # the blocking card's (one definition: #57, 7)
    )
    fig = ckfig.timeline(points, rs, tpl)
    restores = (
        table("ck-restores-table", ckfig.restore_table(rs), ckfig.RESTORE_TABLE_COLUMNS)
        if not rs.empty
        else dbc.Alert("No restores in this range.", color="secondary")
    )
    return (
        _cards(tiers, rs, model, prices(run_id), good),
        table("ck-tiers-table", ckfig.tier_table(tiers, ended), ckfig.TIER_TABLE_COLUMNS),
        fig.update_layout(uirevision=revision(view)),
        _verdict(model),
        restores,
        model,
    )


@callback(
    Output("ck-whatif-interval", "value"),
    Output("ck-whatif-write", "value"),
    Input("ck-model", "data"),
    Input("ck-whatif-interval", "value"),
    Input("ck-whatif-write", "value"),
)
def _prefill(m: dict[str, Any] | None, interval_min: float | None, write_s: float | None):  # type: ignore[no-untyped-def]
    """Empty inputs take the configured interval and the measured write time."""
    interval_default, write_default = data.what_if_defaults(m)
    return (
        interval_default
        if number(interval_min) is None and interval_default is not None
        else no_update,
        write_default if number(write_s) is None and write_default is not None else no_update,
    )


@callback(
    Output("ck-whatif-ettr", "children"),
    Output("ck-whatif-delta", "children"),
    Output("ck-whatif-base", "children"),
    Output("ck-whatif-base-sub", "children"),
    Output({"type": "chart", "id": "ck-ettr-curve"}, "figure"),
    Input("ck-model", "data"),
    Input("ck-whatif-interval", "value"),
    Input("ck-whatif-write", "value"),
    Input("theme-store", "data"),
)
@guarded("alert", "alert", "alert", "alert", "figure")
def _whatif(  # type: ignore[no-untyped-def]
    m: dict[str, Any] | None, interval_min: float | None, write_s: float | None, theme: str | None
):
    tpl = template(theme)
    projection = data.what_if(m, interval_min, write_s)
    if projection is None:
        msg = "Nothing to model: no checkpoints, or no blocking write time (enter one)."
        return "–", "", "–", msg, figures.empty("Expected ETTR", msg, template=tpl)
    base, what = projection.base, projection.what
    delta = what.ettr_configured - base.ettr_configured
    refused = data.what_if_refused(interval_min, write_s)
    entered = " (entered: the run reports none)" if (m or {}).get("write_s") is None else ""
    return (
        f"{what.ettr_configured * 100:.2f} %",
        html.Span(refused, className="text-warning-emphasis")
        if refused
        else ckfig.ettr_delta(delta, m["gpus"], _per_day(delta, m)),
        f"{base.ettr_configured * 100:.2f} %",
        f"interval {fmt_duration(base.configured_s)}, write {base.write_s:.2f} s{entered}",
        ckfig.ettr_curve(projection.curves, projection.marks, tpl),
    )


@callback(Output("ck-measured-ettr", "children"), *view_inputs(themed=False))
@guarded("alert")
def _measured(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    """The run's measured ETTR and goodput under the model's: its own request, beside the
    cards (the goodput total was a third of their cold time) and not chained after them."""
    run_id = run_of(view)
    return (data.measured_ettr(run_id) or "") if run_id else ""


def _per_day(delta: float, m: dict[str, Any]) -> str | None:
    """``$3.80/day saved at $2.00/GPU-h``: the what-if's ETTR change in money (the run's
    prices); None without a GPU count."""
    book = prices(m.get("run_id"))
    usd = per_day_usd(delta, m.get("gpus"), book)
    if usd is None:
        return None
    word = "saved" if delta > 0 else "spent"
    return f"{money(abs(usd))}/day {word} {book.per_gpu_hour(source=False)}"


@callback(
    Output({"type": "chart", "id": "ck-goodput"}, "figure"),
    Output("ck-goodput-note", "children"),
    Output("ck-slow-ranks", "children"),
    Output({"type": "chart", "id": "ck-step-time"}, "figure"),
    *view_inputs(),
)
@guarded("figure", "alert", "alert", "figure")
def _goodput(view: dict[str, Any] | None, _n: int | None, theme: str | None):  # type: ignore[no-untyped-def]
    """Where each day of the run went (#38, 3): goodput and its badput categories per day, the
    slow ranks, and each hour's step time against the ideal (#38, 2)."""
    tpl = template(theme)
    tr = view_range(view)
    run_id = run_of(view)
    block = data.goodput(run_id, tr) if tr is not None and run_id else None
    note = ""
    if block is not None and block.get("goodput") is not None:
        top = data.top_badput(block)
        note = (f"Goodput {block['goodput'] * 100:.1f} % of {fmt_duration(block['window_s'])} in "
                "this range" + (f"; most lost to {top[0].replace('_', ' ')} "
                                f"({top[1] * 100:.1f} %)" if top else "")
                + ". Every second in one category: interruptions' downtime (recovery, planned), "
                "start-up, blocking checkpoint saves, steps redone after restores, and the "
                "other steps at the ideal step time (productive), the rest slowdown.")  # fmt: skip
    slow, slow_note = data.slow_ranks(block)
    slow_note += data.straggler_note(tr, slow)
    note_div = html.Div(slow_note, className="small text-body-secondary mb-1")
    shown = [note_div, table("ck-slow-ranks-table", slow, data.SLOW_RANK_COLUMNS)] if len(
        slow) else note_div  # fmt: skip
    return ckfig.goodput_days(block, tpl), note, shown, ckfig.step_time_hours(block, tpl)
