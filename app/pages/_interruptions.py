"""The Failures page's interruptions one by one: where each came from (inferred from the
cluster's signals, posted by the job, or simulated), how sure the inference is, the evidence
lines behind it (click a row), and an operator's correction of its cause.

Corrections need the operator token given to ``serve`` (``--operator-token-file``); without
it the form is not offered and the page stays read-only. A correction with a missing or wrong
token is refused (403) and changes nothing.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, State, callback, clientside_callback, dcc, html, no_update

from app.data import failures as data
from app.data.incident import run_fragment
from app.data.services import corrections_allowed
from app.data.view import counted_range, run_of
from app.ui import guarded, log, operator_token_input, table, view_inputs

COLUMNS = {
    "time": "Start (UTC)",
    "component": "Component",
    "category": "Category",
    "source_text": "Source",  # with the inference's confidence: "inferred (90 %)"
    "restored": "Restored from",
    "lost_steps_text": "Lost steps",
    "downtime_min": "Down (min)",
    "host": "Host",
    "corrected": "Corrected",
    "evidence_n": "Evidence",
    # Hidden on the page (in the Source column, the selected run, the evidence panel), all
    # in the CSV export:
    "source": "Source (kind)",
    "confidence_text": "Confidence",
    "run_id": "Run",
    "evidence_text": "Evidence lines",
}
def incident_href(at: str, fragment: str) -> str:
    """The incident view's address (``pages/incident.py``) of the interruption that began at
    ``at``, in the run ``fragment`` names."""
    return "/incident?" + urlencode({"at": at}) + fragment


ROLE_COLOURS = {"cause": "danger", "symptom": "warning", "cascade": "info",
                "teardown": "light", "context": "secondary"}  # fmt: skip


def section() -> dbc.Row:
    comps, cats = data.label_choices()
    form = html.Div(
        [
            html.H6("Correct the cause", className="mt-3 mb-2"),
            dbc.Row(
                [
                    dbc.Col(
                        dcc.Dropdown(
                            id="fail-label-component",
                            options=sorted(comps),
                            placeholder="Component",
                            clearable=False,
                        ),
                        md=6,
                    ),
                    dbc.Col(
                        dcc.Dropdown(
                            id="fail-label-category",
                            options=cats,
                            placeholder="Category (the component's own)",
                        ),
                        md=6,
                    ),
                ],
                class_name="g-2 mb-2",
            ),
            dbc.Row(
                [
                    dbc.Col(dbc.Input(id="fail-label-by", placeholder="Your name", size="sm")),
                    dbc.Col(operator_token_input("fail-label-token")),
                    dbc.Col(
                        dbc.Button("Save correction", id="fail-label-save", size="sm"),
                        width="auto",
                    ),
                ],
                class_name="g-2",
            ),
            html.Div(id="fail-label-msg", className="small mt-2", role="status"),
        ],
        id="fail-label-form",
        style=None if corrections_allowed() else {"display": "none"},
    )
    readonly = html.Div(
        "Read-only: corrections need `serve --operator-token-file FILE`.",
        className="small text-body-secondary mt-3",
        id="fail-label-readonly",
        style={"display": "none"} if corrections_allowed() else None,
    )
    return dbc.Row(
        [
            dbc.Col(
                dbc.Card(
                    dbc.CardBody(
                        [
                            html.H6("Interruptions (click one for its evidence)", className="mb-2"),
                            html.Div(id="fail-int"),
                        ]
                    ),
                    class_name="h-100",
                ),
                xl=8,  # its columns need ~900 px: the evidence goes beside it from 1200 px
                xxl=7,
            ),
            dbc.Col(
                dbc.Card(
                    dbc.CardBody(
                        [
                            html.H6("Evidence", className="mb-2"),
                            html.Div(
                                "Click an interruption to see the lines it was derived from.",
                                id="fail-evidence",
                                className="small text-body-secondary",
                            ),
                            form,
                            readonly,
                        ]
                    ),
                    class_name="h-100",
                ),
                xl=4,
                xxl=5,
            ),
            dcc.Store(id="fail-selected"),
            dcc.Store(id="fail-labelled", data=0),
        ],
        class_name="g-2 mb-2",
    )


def _restored(tier: Any, step: Any) -> str:
    if pd.isna(step):
        return "–"
    return f"step {int(step):,}" + ("" if pd.isna(tier) else f" ({tier})")


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(
        # no line dates it: said, never a made-up time (``queries.failures``)
        time=pd.to_datetime(df["ts"]).dt.strftime("%Y-%m-%d %H:%M:%S").fillna(data.TIME_UNKNOWN),
        confidence_text=[
            "–" if pd.isna(c) else f"{float(c) * 100:.0f} %" for c in df["confidence"]
        ],
        source_text=[
            str(s) if pd.isna(c) else f"{s} ({float(c) * 100:.0f} %)"
            for s, c in zip(df["source"], df["confidence"], strict=True)
        ],
        restored=[
            _restored(t, s) for t, s in zip(df["restored_tier"], df["restored_step"], strict=True)
        ],
        lost_steps_text=["–" if pd.isna(n) else f"{int(n):,}" for n in df["lost_steps"]],
        downtime_min=["–" if pd.isna(d) else f"{float(d) / 60.0:.1f}" for d in df["downtime_s"]],
        host=[
            ("–" if pd.isna(h) else str(h)) + ("" if pd.isna(r) else f" · rank {int(r)}")
            for h, r in zip(df["host"], df["rank"], strict=True)
        ],
        corrected=[
            "" if pd.isna(by) else f"by {by} (was {orig})"
            for by, orig in zip(df["labelled_by"], df["orig_component"], strict=True)
        ],
    )


@callback(
    Output("fail-int", "children"),
    *view_inputs(themed=False),
    Input("fail-labelled", "data"),
)
@guarded("alert")
def _list(view: dict[str, Any] | None, _n: int | None, _labelled: int | None):  # type: ignore[no-untyped-def]
    tr = counted_range(view)
    if tr is None:
        return ""
    df = data.interruption_list(run_of(view), tr)
    if df.empty:
        return dbc.Alert("No interruptions in this range.", color="secondary", class_name="mb-0")
    rows = _rows(df)
    hidden = ["source", "confidence_text", "run_id", "evidence_text"]
    if not rows["corrected"].astype(bool).any():
        hidden.append("corrected")  # an empty column costs a laptop screen ~90 px
    return table(
        "fail-int-table",
        rows,
        COLUMNS,
        row_id="key",
        hidden=hidden,
        export_hidden=True,
        clickable=True,
    )


# The row clicked, by its "key" (its id in the grid), set in the browser: Dash calls this
# with nothing clicked each time the table is drawn, and asked of the server that was one
# more round trip at the end of each /failures load.
clientside_callback(
    """function(clicked){
      var key = (clicked || {}).rowId;
      return typeof key === 'string' ? key : window.dash_clientside.no_update;
    }""",
    Output("fail-selected", "data"),
    Input("fail-int-table", "cellClicked"),
    prevent_initial_call=True,
)


def evidence_item(e: dict[str, Any], whole: bool = False, raw: Any = None) -> html.Li:
    """One evidence line with its role, time, place and ``file:line``; clipped to a few lines
    in the Failures page's panel, ``whole`` on the incident view, where ``raw`` (a link)
    opens the log around it."""
    where = " ".join(
        str(x)
        for x in (
            "" if e.get("rank") is None else f"rank {e['rank']}",
            e.get("host") or "",
            "" if e.get("gpu") is None else f"GPU {e['gpu']}",
            "" if e.get("xid") is None else f"XID {e['xid']}",
        )
        if x
    )
    return html.Li(
        [
            dbc.Badge(
                e.get("role", "context"),
                color=ROLE_COLOURS.get(e.get("role"), "info"),
                text_color="dark" if e.get("role") == "teardown" else None,
            ),
            html.Span(
                f" {str(e.get('ts') or '').replace('T', ' ')} · {e.get('kind', '')} {where}",
                className="ms-1",
            ),
            html.Div([e.get("origin") or "", *([raw] if raw is not None else [])],
                     className="text-body-secondary"),
            html.Pre(
                e.get("line") or "",
                className="mb-1 small text-wrap",
                style={} if whole else {"maxHeight": "6rem"},
            ),
        ],
        className="mb-2 fail-evidence-item",
    )


@callback(
    Output("fail-label-category", "value"),
    Input("fail-label-component", "value"),
    prevent_initial_call=True,
)
def _category(component: Any) -> Any:
    if not isinstance(component, str) or not component:  # a crafted POST may send a list
        return no_update
    return data.label_choices()[0].get(component, no_update)


@callback(
    Output("fail-evidence", "children"),
    Output("fail-label-component", "value"),
    Input("fail-selected", "data"),
    Input("fail-labelled", "data"),
)
@guarded("alert", "alert")
def _evidence(key: str | None, _labelled: int | None):  # type: ignore[no-untyped-def]
    row = data.interruption_detail(key) if key else None
    if row is None:
        return "Click an interruption to see the lines it was derived from.", None
    at = None if row.get("ts") is None else pd.Timestamp(row["ts"])
    where = " · ".join(
        x
        for x in (
            str(row.get("host") or ""),
            "" if row.get("rank") is None else f"rank {int(row['rank'])}",
        )
        if x
    ) or _unknown_culprit(row)
    head = [
        html.Div(
            [
                html.Span(
                    data.TIME_UNKNOWN if at is None else f"{at:%Y-%m-%d %H:%M:%S} UTC",
                    id="fail-evidence-when",
                ),
                html.Span(f" · {where}" if where else "", id="fail-evidence-where"),
                # the incident view is addressed by the start: none for one of a time unknown
                *(
                    []
                    if at is None
                    else [
                        dcc.Link(
                            "Open the incident view",
                            href=incident_href(at.isoformat(), run_fragment(row["run_id"])),
                            id="fail-incident-link",
                            className="ms-3",
                        )
                    ]
                ),
            ],
            className="small mb-1",
        ),
        html.Div(
            [html.Strong(f"{row['component']} ({row['category']})"), f" · {row['source_shown']}"]
            + (
                []
                if row.get("confidence") is None
                else [f" · confidence {float(row['confidence']) * 100:.0f} %"]
            ),
        ),
        html.Div(row.get("description") or "", className="mb-2"),
    ]
    if row.get("labelled_by"):
        head.append(
            dbc.Alert(
                f"Corrected by {row['labelled_by']} at {row['labelled_at']:%Y-%m-%d %H:%M} UTC; "
                f"inferred: {row['orig_component']} ({row['orig_category']}).",
                color="info",
                class_name="py-1 small",
            )
        )
    ev = row["evidence"]
    body = (
        html.Ul([evidence_item(e) for e in ev], className="list-unstyled mb-0")
        if ev
        else html.Div("No evidence lines: this interruption was posted or simulated.")
    )
    return html.Div([*head, body]), row["component"]


@callback(
    Output("fail-label-msg", "children"),
    Output("fail-labelled", "data"),
    Input("fail-label-save", "n_clicks"),
    State("fail-selected", "data"),
    State("fail-label-component", "value"),
    State("fail-label-category", "value"),
    State("fail-label-by", "value"),
    State("fail-label-token", "value"),
    State("fail-labelled", "data"),
    prevent_initial_call=True,
)
def _save(_clicks, key, component, category, by, token, labelled):  # type: ignore[no-untyped-def]
    try:
        status, msg = data.relabel(key, component, category, by, token)
    except Exception as exc:  # shown, never a traceback in the browser
        log.error("correction failed: %s", exc)
        return dbc.Alert(f"Not saved: {type(exc).__name__}", color="danger"), no_update
    colour = "success" if status == 200 else "danger"
    out = dbc.Alert(msg, color=colour, class_name="py-1 mb-0")
    return out, ((labelled or 0) + 1) if status == 200 else no_update


def _unknown_culprit(row: dict) -> str:
    """An unknown culprit as the evidence left it: the candidates (the reason is in the
    description)."""
    if not row.get("culprit_reason"):
        return ""
    cands = row.get("culprit_candidates") or []
    return "culprit unknown" + (f" (candidates: {', '.join(cands)})" if cands else "")
