"""Page parts for Slurm (``collect.slurm.slurm_source``): each node's Slurm state and drain
reason (GPUs page), Slurm node events and job ends beside the XIDs (Failures page), and a job
filter (Overview and GPUs) that shows one job's GPUs during its time. Each part is a function
returning its component, included by its page with one line; the callbacks live here. Every
part says plainly when no Slurm data is stored (``factoryfloor import --slurm``)."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import Input, Output, callback, dcc, html

from app.data import slurm as data
from app.data.view import view_range
from app.ui import guarded, lazy, seen_input, table, unseen, view_inputs

NO_SLURM = "No Slurm data stored: run `factoryfloor import --slurm` or `ingest --slurm`."
NODE_COLUMNS = {
    "host": "Node",
    "state": "Slurm state",
    "reason": "Drain/down reason",
    "reason_user": "Set by",
    "reason_ts": "Since (UTC)",
}
EVENT_COLUMNS = {
    "ts": "Time (UTC)",
    "what": "Node/job",
    "who": "Which",
    "state": "State",
    "detail": "Reason / job",
}
JOB_GPU_COLUMNS = {
    "host": "Node",
    "gpu": "GPU",
    "samples": "Samples",
    "util_pct": "Utilization (%)",
    "temp_c": "Temperature (°C)",
    "power_w": "Power (W)",
}
FILTER_PAGES = ("overview", "gpus")


def _card(title: str, body_id: str, *extra: Any) -> dbc.Card:
    return dbc.Card(
        dbc.CardBody([html.H6(title, className="mb-1"), *extra, html.Div(id=body_id)]),
        class_name="mb-2",
    )


def nodes_card() -> html.Div:
    """GPUs page: every node's Slurm state and drain/down reason, who set it and when (at the
    page's bottom: drawn when scrolled near, ``app.ui.lazy``)."""
    return lazy("slurm-nodes", _card("Slurm node states", "slurm-nodes"))


def events_card() -> dbc.Card:
    """Failures page: Slurm node events (drain, down, not responding) and job ends."""
    return _card("Slurm node events and job ends", "slurm-events")


def job_filter(page: str) -> dbc.Card:
    """Overview/GPUs: pick a Slurm job of the range to see its GPUs during its time."""
    assert page in FILTER_PAGES
    picker = dbc.Row(
        [
            dbc.Col(
                html.Label("Slurm job", htmlFor=f"{page}-slurm-job", className="small"),
                width="auto",
            ),  # fmt: skip
            dbc.Col(
                dcc.Dropdown(
                    id=f"{page}-slurm-job",
                    options=[],
                    value=None,
                    placeholder="all jobs",
                    style={"minWidth": "320px"},
                ),
                width="auto",
            ),  # fmt: skip
        ],
        class_name="g-2 mb-2 align-items-center",
    )
    return _card("GPUs of a Slurm job", f"{page}-slurm-job-gpus", picker)


@callback(
    Output("slurm-nodes", "children"),
    *view_inputs(themed=False),
    seen_input("slurm-nodes"),
    prevent_initial_call=True,
)
@guarded("alert")
def _nodes(view: dict[str, Any] | None, _n: int | None, seen: Any):  # type: ignore[no-untyped-def]
    unseen(seen)
    df = data.slurm_nodes()
    if df.empty:
        return dbc.Alert(NO_SLURM, color="info")
    return table("slurm-nodes-table", df, NODE_COLUMNS)


@callback(Output("slurm-events", "children"), *view_inputs(themed=False))
@guarded("alert")
def _events(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    tr = view_range(view)
    df = data.slurm_events(tr) if tr is not None else None
    if df is None or df.empty:
        return dbc.Alert(NO_SLURM if tr is None or data.slurm_nodes().empty else
                         "No Slurm node event or job end in this range.", color="info")  # fmt: skip
    return table("slurm-events-table", df, EVENT_COLUMNS)


def _register(page: str) -> None:
    @callback(Output(f"{page}-slurm-job", "options"), *view_inputs(themed=False))
    @guarded("options")
    def _options(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
        tr = view_range(view)
        if tr is None:
            return []
        jobs = data.slurm_jobs(tr)
        return [
            {"label": f"{r.job_id} {r.name or ''} ({r.state}, {r.nodelist or 'no node'})",
             "value": str(r.job_id)}
            for r in jobs.itertuples()
        ]  # fmt: skip

    @callback(Output(f"{page}-slurm-job-gpus", "children"), Input(f"{page}-slurm-job", "value"),
              Input("refresh", "n_intervals"))  # fmt: skip
    @guarded("alert")
    def _gpus(job: str | None, _n: int | None):  # type: ignore[no-untyped-def]
        if not job:
            return html.Div("Pick a job to see its GPUs during its time.",
                            className="text-body-secondary small")  # fmt: skip
        df = data.slurm_job_gpus(job)
        if df.empty:
            return dbc.Alert(f"No GPU samples of job {job}'s nodes during its time.",
                             color="info")  # fmt: skip
        return table(f"{page}-slurm-job-table", df.round(1), JOB_GPU_COLUMNS)


for _page in FILTER_PAGES:
    _register(_page)
