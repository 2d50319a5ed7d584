"""Page part for node health over time (``telemetry.queries.node_health``), on the GPUs page:
the rules' findings with the recommended action and evidence, the nodes drained or down at
Slurm's last word (for how long, why, set by whom), the repair times, and a timeline of the
worst nodes' drained/down bands with the findings marked."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
import pandas as pd
from dash import Output, callback, dcc, html

from app import figures
from app.data import node_health as data
from app.data.view import template, unset_text, view_range
from app.figures.node_health import TITLE, timeline
from app.ui import graph_config, guarded, lazy, seen_input, table, unseen, view_inputs

NOTHING = "Nothing stored yet"
FINDING_COLUMNS = {
    "host": "Node",
    "gpu": "GPU",
    "what": "Rule",
    "action": "Recommended action",
    "evidence": "Evidence",
    "first_ts": "First seen (UTC)",
    "last_ts": "Last seen (UTC)",
}
DRAINED_COLUMNS = {
    "host": "Node",
    "kind": "State",
    "hours": "For (h)",
    "reason": "Reason",
    "reason_user": "Set by",
    "since": "Since (UTC)",
}


def card() -> html.Div:
    """The GPUs page's node health section (near its bottom: drawn when scrolled near)."""
    return lazy("node-health", _card())


def _card() -> dbc.Card:
    return dbc.Card(
        dbc.CardBody(
            [
                html.H6("Node health", className="mb-1"),
                html.Div(id="health-summary", className="small mb-2"),
                html.Div(id="health-findings", className="mb-2"),
                html.Div(id="health-drained", className="mb-2"),
                dcc.Graph(id="health-timeline", figure=figures.PLACEHOLDER,
                          config=graph_config("node-health")),  # fmt: skip
            ]
        ),
        class_name="mb-2",
        id="node-health",
    )


def _times(df: pd.DataFrame, cols: tuple[str, ...]) -> pd.DataFrame:
    out = df.copy()
    for c in cols:
        out[c] = pd.to_datetime(out[c]).dt.strftime("%Y-%m-%d %H:%M")
    return out


def summary(h: data.Health) -> str:
    rules = h.findings["rule"].nunique() if len(h.findings) else 0
    fixed = h.repairs["hours"]
    repair = (f"; median time to repair {fixed.median():.1f} h over {len(fixed)} repair(s)"
              if len(fixed) else "")  # fmt: skip
    found = (f"{len(h.findings)} finding(s) of {rules} rule(s) on "
             f"{h.findings['host'].nunique() if len(h.findings) else 0} node(s) in this range"
             if h.judged else "Findings unknown: no XIDs (no kernel log or DCGM XID data) or "
             "Slurm job ends are stored for this range, which is what the rules judge")
    return (f"{found}; "
            + (f"{len(h.drained)} node(s) drained, down or in maintenance at Slurm's last "
               f"word{repair}" if h.slurm else "no Slurm node states stored")
            + ". Rules judge windows of 24 h, not single events.")


@callback(
    Output("health-summary", "children"),
    Output("health-findings", "children"),
    Output("health-drained", "children"),
    Output("health-timeline", "figure"),
    *view_inputs(),
    seen_input("node-health"),
    prevent_initial_call=True,
)
@guarded("alert", "alert", "alert", "figure")
def _health(view: dict[str, Any] | None, _n: int | None, theme: str | None, seen: Any):  # type: ignore[no-untyped-def]
    unseen(seen)
    tpl = template(theme)
    tr = view_range(view)
    if tr is None:  # nothing stored, or a store no line dates (a run and its stops, no time)
        said = unset_text(view, NOTHING)
        told = said if said == NOTHING else f"{said}; no node telemetry is stored for this run"
        return f"{told}.", None, None, figures.empty(TITLE, said, template=tpl)
    h = data.health(tr)
    found = ([html.Div("Findings", className="small fw-semibold mb-1"),
              table("health-findings-table", _times(h.findings, ("first_ts", "last_ts")),
                    FINDING_COLUMNS)] if len(h.findings) else None)  # fmt: skip
    drained = None
    if len(h.drained):
        d = _times(h.drained, ("since",)).assign(hours=h.drained["hours"].round(1))
        drained = [html.Div("Drained, down or in maintenance now (Slurm's last poll)",
                            className="small fw-semibold mb-1"),
                   table("health-drained-table", d, DRAINED_COLUMNS)]  # fmt: skip
    fig = timeline(h.states, h.findings, h.hosts, tr.start, tr.end, tpl)
    if h.troubled > len(h.hosts):
        fig.update_layout(title={"text": f"{TITLE}: the worst {len(h.hosts)} of "
                                         f"{h.troubled} nodes"})  # fmt: skip
    return summary(h), found, drained, fig
