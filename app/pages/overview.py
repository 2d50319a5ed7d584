"""Overview: the fleet and the current run at a glance, with what needs attention now."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import dash
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, callback, clientside_callback, dcc, html

from app import figures
from app.data import overview as data
from app.data.alerts import alert_delivery, alert_episodes
from app.data.services import together
from app.data.training import loss_series
from app.data.view import counted_range, revision, template, undated_range, unset_text, view_range
from app.figures import overview as ofig
from app.figures import targets as ft
from app.figures.units import fmt_count, fmt_duration, fmt_percent
from app.pages import _settings, _silences, _slurm
from app.pages._alert_list import alert_list, delivery_text, history, incident_link
from app.ui import TIMECHART, card, guarded, table, time_graph, view_inputs

dash.register_page(__name__, path="/", name="Overview", order=0)

_TIER_NAMES = {"nvme": "NVMe", "pfs": "PFS", "object": "Object store"}
NO_DATA = "No data stored yet: start a replay or the ingest daemon."
UNDATED_ALERTS = ("This run's time is unknown (no line of its logs gives a wall-clock time): "
                  "none of its alerts is judged at a time. Its interruptions are on Failures.")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            dbc.Row(
                [  # the fleet's cards and the run's, each its own callback's, in one row
                    html.Div(id="ov-cards", className="ff-contents"),
                    html.Div(id="ov-run-cards", className="ff-contents"),
                ],
                class_name="g-2 mb-2",
            ),
            dbc.Row(id="ov-targets", class_name="g-2 mb-2"),
            dbc.Row(
                [
                    dbc.Col(time_graph("ov-fleet"), lg=8),
                    dbc.Col(
                        dbc.Card(
                            dbc.CardBody(
                                [
                                    html.H6("Active alerts"),
                                    html.Div(id="ov-alerts"),
                                    html.Div(
                                        id="ov-alert-delivery",
                                        className="small text-body-secondary mt-2",
                                    ),
                                    _silences.form(),
                                ]
                            )
                        ),
                        lg=4,
                    ),
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
            dbc.Row(
                [
                    dbc.Col(time_graph("ov-power"), lg=8),
                    dbc.Col(
                        [
                            html.H6("Hottest GPUs (latest sample)", className="mt-2"),
                            html.Div(id="ov-hot"),
                        ],
                        lg=4,
                    ),
                ],
                class_name="g-2",
            ),
            dbc.Row(dbc.Col(_settings.section(), lg=8), class_name="g-2"),
            _slurm.job_filter("overview"),
            dcc.Store(id="ov-incident-click"),
        ]
    )


# A click on an interruption's marker (its start in customdata[2]) opens its incident view,
# in the run the page shows (the URL's fragment).
clientside_callback(
    """function(){
      var t = (window.dash_clientside.callback_context.triggered || [])[0];
      var pts = (t && t.value && t.value.points) || [];
      for (var i = 0; i < pts.length; i++) {
        var cd = pts[i].customdata;
        if (cd && cd.length > 2 && typeof cd[2] === 'string' && cd[2].length <= 40) {
          var hash = (window.location.hash || '').replace(/&node=[^&]*/, '');
          window.location.assign('/incident?at=' + encodeURIComponent(cd[2]) + hash);
          break;
        }
      }
      return window.dash_clientside.no_update;
    }""",
    Output("ov-incident-click", "data"),
    Input({"type": TIMECHART, "id": "ov-fleet"}, "clickData"),
    Input({"type": TIMECHART, "id": "ov-loss"}, "clickData"),
    prevent_initial_call=True,
)


def _fmt_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _range_util(series: Any, column: str = "util_avg") -> float | None:
    """The fleet's mean utilization (or ``column``) over the range shown (weighted by GPUs
    reporting); None where no bucket has it."""
    if series.empty or column not in series:
        return None
    ok = series.dropna(subset=[column])
    gpus = ok["gpus"].astype(float).sum()
    return float((ok[column] * ok["gpus"]).sum() / gpus) if gpus else None


def _util_sub(fleet: dict[str, Any], series: Any, zoomed: bool = False) -> str:
    """Beside the value now: why it may read 0 % (every reporting GPU idle, as while a job
    restarts) and the mean over the range, so one instant is not read as the whole picture."""
    parts = []
    if fleet.get("reporting") and fleet.get("idle") == fleet["reporting"]:
        parts.append(f"all {fleet['reporting']:,} reporting GPUs idle now")
    roles = fleet.get("roles") or {}
    mean = _range_util(series)
    if mean is not None:
        parts.append(f"{mean:.1f} % over the {'zoomed window' if zoomed else 'range'}"
                     + (" (all GPUs)" if roles else ""))  # fmt: skip
    if roles:  # the value is the job's GPUs': say what the rest of the fleet is doing
        rest = ", ".join(f"{n:,} {r}" for r, n in roles.items() if r != "job")
        now = _or_dash(fleet.get("util_avg"), "{:.1f} %")
        also = f"; all {fleet['reporting']:,} now {now} with {rest}" if rest else ""
        parts.append(f"{roles.get('job', 0):,} job GPUs{also}")
    real = _range_util(series, "real_avg")
    if real is not None:  # what the SMs did: GPU_UTIL counts any kernel as busy
        parts.append(f"real {real:.1f} % (SM activity)")
    parts.append("hottest GPU " + _or_dash(fleet.get("temp_max"), "{:.0f} °C"))
    return " · ".join(parts)


def _fleet_cards(fleet: dict[str, Any], series: Any, zoomed: bool = False) -> list[Any]:
    return [
        card(
            "GPUs reporting",
            f"{fleet['reporting']:,} / {fleet['expected']:,}",
            f"{fleet['healthy']:,} healthy · {fleet.get('degraded', 0)} degraded · "
            f"{fleet.get('idle', 0)} idle · {fleet['failed']:,} silent",
            "ov-gpus",
        ),
        # the job's GPUs where the exporters say which they are: spares, drained and idle
        # nodes are a state, not the job's utilization (issue 57, 6)
        card(
            "Job GPU utilization" if fleet.get("roles") else "Fleet utilization",
            _or_dash(fleet.get("util_job" if fleet.get("roles") else "util_avg"), "{:.1f} %"),
            _util_sub(fleet, series, zoomed),
            "ov-util",
        ),
        card(
            "GPU power",
            _or_dash(
                None if fleet.get("power_w") is None else fleet["power_w"] / 1000, "{:,.1f} kW"
            ),
            "all GPUs, latest",
        ),
    ]


NO_GPUS = "No GPU telemetry for this run"


def _no_gpu_card(shape: dict[str, Any]) -> Any:
    """One card where a run known from its logs alone would show "GPUs reporting 0 / 0": what
    its logs say of its size instead."""
    gpus, nodes, per = shape["gpus"], shape["nodes"], shape["per_node"]
    return card(
        "GPUs (from the logs)",
        _or_dash(gpus, "{:,}"),
        f"{NO_GPUS}: no GPU sample in its time. World size {_or_dash(gpus, '{:,}')} · "
        f"nodes {_or_dash(nodes, '{:,}')} · GPUs per node {_or_dash(per, '{:,}')}",
        "ov-gpus",
    )


def _or_dash(value: Any, fmt: str) -> str:
    """A measured value, or "–" when no GPU reported one (not a made-up 0)."""
    return "–" if value is None or value != value else fmt.format(value)  # None or NaN


def _energy_text(e: dict[str, Any]) -> str:
    """The run's GPU energy (MWh past 1 MWh) and per million tokens, with its basis."""
    if e["kwh"] is None:
        return "energy –"
    kwh = e["kwh"]
    text = f"{kwh / 1000:,.1f} MWh" if kwh >= 1000 else f"{kwh:,.0f} kWh"
    if e["kwh_per_million_tokens"] is not None:
        text += f", {e['kwh_per_million_tokens'] * 1000:,.1f} Wh per M tokens"
    return text + (" (counter)" if e["basis"] == "energy counter" else " (power x time)")


def _goodput_card(s: dict[str, Any], good: dict[str, Any] | None) -> Any:
    """Goodput (the productive share of the run's wall time) with its largest badput category;
    ETTR, MFU and energy beneath. Without a goodput (nothing timed), the ETTR."""
    extra = f"MFU {fmt_percent(s['mfu'])}" + (
        f" · {_energy_text(s['energy'])} · whole run")
    if good is None or good.get("goodput") is None:
        return card("ETTR", "–" if s["ettr"] is None else f"{s['ettr'] * 100:.1f} %", extra,
                    "ov-ettr")  # fmt: skip
    top = data.top_badput(good)
    worst = "no badput" if top is None else f"most lost: {top[0].replace('_', ' ')} " \
        f"{top[1] * 100:.1f} %"
    ettr = "ETTR –" if s["ettr"] is None else f"ETTR {s['ettr'] * 100:.1f} %"
    return card("Goodput", f"{good['goodput'] * 100:.1f} %", f"{worst} · {ettr} · {extra}",
                "ov-ettr")  # fmt: skip


# the run's state as ``summary`` names it (a run that died said "the run's latest"; a log long
# silent with no end line said nothing: #57, 5)
_STATE_WORDS = {"finished": "finished", "stopped": "stopped: nothing resumed it",
                "unknown": "how it ended unknown: its log has no end line"}  # fmt: skip


def _interruptions_text(last24: int | None, undated: int) -> str:
    """What the Interruptions card says beneath its count: those no line dates as the Failures
    page says them, and the last 24 h's count of the dated ones ("–" when nothing dates the
    run; "dated" beside some of a time unknown, which may be in those 24 h or not)."""
    recent = "in the last 24 h of data" if not undated or last24 is None else (
        "dated in the last 24 h of data")  # fmt: skip
    unknown = f" ({undated} at a time unknown)" if undated else ""
    return f"unexpected + planned, whole run{unknown} · {_or_dash(last24, '{}')} {recent}"


def _run_cards(
    s: dict[str, Any], last24: int | None, good: dict[str, Any] | None = None, undated: int = 0
) -> list[Any]:
    i = s["interruptions"]
    return [
        card(
            "Step",
            _or_dash(s["steps"], "{:,}"),
            ("tokens –" if s["tokens"] is None else f"{fmt_count(s['tokens'])} tokens")
            + f" · loss {_or_dash(s['last_loss'], '{}')} · "
            + _STATE_WORDS.get(s.get("state"), "the run's latest"),
            "ov-step",
        ),
        _goodput_card(s, good),
        card(
            "Interruptions",
            f"{i['unexpected']} + {i['planned']}",
            _interruptions_text(last24, undated) + " · MTBF "
            + fmt_duration(None if s["mtbf_hours"] is None else s["mtbf_hours"] * 3600),
            "ov-ints",
        ),
    ]


def _targets(health: Any) -> list[Any]:
    """The sources card (scrape targets, followed logs, imports...), and those down or stale
    with their reasons."""
    n = data.target_counts(health)
    colour = "text-danger" if n["down"] else "text-warning-emphasis" if n["stale"] else ""
    imported = f"{n['imported']:,} imported (read once, not followed)" if n["imported"] else ""
    followed = f"{n['down']:,} down · {n['stale']:,} stale"
    out = [
        card(
            "Sources",
            f"{n['up']:,} / {n['followed']:,} up" if n["followed"] else "none followed",
            " · ".join(t for t in (followed if n["followed"] else "", imported) if t),
            "ov-targets-count",
            colour,
        )
    ]
    problems = ft.problem_targets(health)
    if not problems.empty:
        body = [
            html.H6("Sources down or stale (exporters, logs, imports)"),
            table("ov-targets-table", problems, ft.TARGET_COLUMNS),
        ]
        out.append(dbc.Col(dbc.Card(dbc.CardBody(body), class_name="h-100"), md=8, xl=10))
    return out


def _checkpoint_card(ages: Any, ended: bool = False) -> Any:
    """Each tier's newest checkpoint and its age at the end of the range; a run that ended:
    how long before its end (not "ago": its time is over)."""
    rows = [
        html.Tr(
            [
                html.Td(_TIER_NAMES.get(r.tier, r.tier)),
                html.Td(_fmt_age(r.age_s) + (" before the end" if ended else "")),
                html.Td(f"{r.step:,}"),
            ]
        )
        for r in ages.itertuples()
    ]
    if not rows:
        return dbc.Alert("No checkpoint completed yet in this run.", color="secondary")
    return dbc.Card(
        dbc.CardBody(
            [
                html.H6(
                    "Last checkpoint before the run's end"
                    if ended
                    else "Time since the last checkpoint",
                    className="mb-2",
                ),
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


def _hot_table(hottest: pd.DataFrame) -> Any:
    return table(
        "ov-hot-table",
        hottest.round(1),
        {
            # Short headers: the table shares a row with the charts and must fit at 1366 px.
            "host": "Host",
            "gpu": "GPU",
            "temp_c": "°C",
            "util_pct": "Util %",
            "sm_clock_mhz": "SM MHz",
            "power_w": "W",
        },
    )


@callback(Output("ov-alert-delivery", "children"), *view_inputs(themed=False))
@guarded("alert", remember=False)  # delivery changes without a store write
def _delivery(_view: Any, _n: int | None):  # type: ignore[no-untyped-def]
    state = alert_delivery()
    return "" if state is None else delivery_text(state)


@callback(
    Output("ov-cards", "children"),
    Output({"type": TIMECHART, "id": "ov-fleet"}, "figure"),
    Output({"type": TIMECHART, "id": "ov-power"}, "figure"),
    Output("ov-hot", "children"),
    Output("ov-targets", "children"),
    Output("ov-fleet", "style"),
    Output("ov-power", "style"),
    *view_inputs(),
)
@guarded("alert", "figure", "figure", "alert", "alert", "style", "style")
def _update(view: dict[str, Any] | None, _n: int | None, theme: str | None):  # type: ignore[no-untyped-def]
    """The fleet: its cards, utilization, temperature and power over the range, the hottest
    GPUs and the sources. The run's cards, its loss and the alerts are callbacks of their own,
    asked for at the same time (the first viewer after a write waits for the slowest of them,
    not their sum)."""
    tpl = template(theme)
    tr = view_range(view)
    run_id = (view or {}).get("run")
    if tr is None:  # a store no line dates: the run's size as its logs tell it, no time axis
        shape = data.without_gpus(run_id, pd.DataFrame()) if undated_range(view) else None
        e = figures.empty("Fleet", unset_text(view, NO_DATA), template=tpl)
        if shape is not None:
            return [_no_gpu_card(shape)], e, e, "", [], {"display": "none"}, {"display": "none"}
        return [dbc.Alert(NO_DATA, color="info")], e, e, "", [], {}, {}
    live = (view or {}).get("range") != "custom"  # a preset range follows the newest data
    at = data.target_time(tr, live)
    ints, series, latest, health, hot = together(
        lambda: data.interruption_marks(run_id, tr),
        lambda: data.fleet_series(tr),
        data.fleet_latest,
        lambda: data.target_health(at),
        lambda: data.hottest_gpus(8),
    )
    rev = revision(view)
    span = figures.window_range(tr.start, tr.end)  # the three time charts, in line
    shape = data.without_gpus(run_id, series)
    if shape is not None:  # said once, with what the logs know; no empty GPU charts
        e = figures.empty("Fleet", NO_GPUS, template=tpl)
        hidden = {"display": "none"}
        targets = _targets(health) if health is not None else []
        return [_no_gpu_card(shape)], e, e, "", targets, hidden, hidden
    return (
        _fleet_cards(latest, series, zoomed=not live),
        ofig.fleet_timeline(series, ints, tpl, span).update_layout(uirevision=rev),
        ofig.power_series(series, ints, tpl, span).update_layout(uirevision=rev),
        _hot_table(hot),
        _targets(health) if health is not None else [],
        {},
        {},
    )


@callback(Output("ov-run-cards", "children"), *view_inputs())
@guarded("alert")
def _run_panel(view: dict[str, Any] | None, _n: int | None, _theme: str | None):  # type: ignore[no-untyped-def]
    """The selected run's cards (step, goodput, interruptions), beside the fleet's."""
    tr = counted_range(view)  # the cards are the whole run's: a store no line dates has them
    run_id = (view or {}).get("run")
    if tr is None or run_id is None:
        return []
    summary, last24, good, undated = together(
        lambda: data.summary(run_id),
        lambda: data.recent_interruptions(run_id),
        lambda: data.goodput(run_id),
        lambda: data.undated_interruptions(run_id),
    )
    return _run_cards(summary, last24, good, undated)


@callback(
    Output({"type": TIMECHART, "id": "ov-loss"}, "figure"),
    Output("ov-ckpt", "children"),
    *view_inputs(),
)
@guarded("figure", "alert")
def _loss_panel(view: dict[str, Any] | None, _n: int | None, theme: str | None):  # type: ignore[no-untyped-def]
    """The run's loss over the range (interruptions marked) and its checkpoints' ages."""
    tpl = template(theme)
    tr = view_range(view)
    run_id = (view or {}).get("run")
    if tr is None:
        return figures.empty("Training loss", unset_text(view, NO_DATA), template=tpl), ""
    if run_id is None:
        return figures.empty("Training loss", "No training run in this store", template=tpl), ""
    ints, train, ages, ended = together(
        lambda: data.interruption_marks(run_id, tr),
        lambda: loss_series(run_id, tr),
        lambda: data.checkpoint_ages(run_id, tr.end),
        lambda: data.run_ended(run_id),
    )
    span = figures.window_range(tr.start, tr.end)
    loss = ofig.loss_curve(train, tpl, span, ints).update_layout(uirevision=revision(view))
    return loss, _checkpoint_card(ages, ended)


@callback(Output("ov-alerts", "children"), *view_inputs(), Input("ov-ack-msg", "children"))
@guarded("alert")
def _alert_panel(view: dict[str, Any] | None, _n: int | None, _theme: str | None, _acked: Any = None):  # type: ignore[no-untyped-def]  # noqa: E501
    """The active alerts at the end of the view, asked for beside the cards and charts (its
    rules read their own data: the first viewer after a write waits for the slower of the
    two, not their sum)."""
    run_id = (view or {}).get("run")
    if run_id is not None and data.run_undated(run_id):
        # no alert of a run no line dates is judged at a time: the store's end is other runs'
        # time; what is active now is the fleet's, told apart
        undated = dbc.Alert(UNDATED_ALERTS, color="secondary", class_name="small mb-1",
                            id="ov-alerts-run")  # fmt: skip
        now = data.now_alerts((view or {}).get("range"))
        return html.Div([history(now, None, datetime.min), undated])
    tr = view_range(view)
    if tr is None:
        return ""
    live = (view or {}).get("range") != "custom"
    alerts = data.active_alerts(run_id, tr, data.target_time(tr, live))
    delivered = alert_episodes(run_id, tr, live)
    link = incident_link(run_id, alerts, *(delivered or ()))
    listed = alert_list(alerts, link)
    ended = data.run_ended(run_id)
    if delivered is not None:  # what this server delivers: firing now, resolved in the range
        firing, resolved = delivered
        now = alert_list(firing, link, id_="ov-alerts-now", clear="Nothing fires now.")
        # a live run's alerts at the end of a live view are those firing now: said once
        shown = listed if ended or not live else None
        said = "In this run, to its end" if ended else "At the end of this range"
        return history(None, shown, tr.end, resolved, now, said)
    if not ended:
        return listed
    # the run has ended: what it raised is its history, not what is active now (#57, 2)
    return history(data.now_alerts((view or {}).get("range")), listed, tr.end)


def warm(view: dict[str, Any], theme: str) -> None:
    """Build ``view``'s replies into the reply memo (and their reads into the store's cache),
    as the first browser to ask for them would."""
    for fn in (_update, _run_panel, _loss_panel, _alert_panel):
        fn(view, None, theme)
