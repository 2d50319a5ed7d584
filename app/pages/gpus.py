"""GPUs: the fleet heatmap, the metric's distribution, outlier GPUs with a reason, and a
drill-down into one node's eight GPUs. The selected node is part of the shared view and its
URL fragment (``&node=…``), so a link opens the same drill-down and back/forward step through
the nodes looked at."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import (
    ClientsideFunction,
    Input,
    Output,
    State,
    callback,
    clientside_callback,
    dcc,
    html,
    no_update,
)
from dash.exceptions import PreventUpdate

from app import figures
from app.data import gpus as data
from app.data import node_health
from app.data.services import together
from app.data.view import (
    CLASS_TEXT,
    EXTRA_FIELDS,
    MAX_ID,
    NODE_METRICS,
    clean_view,
    fragment,
    mapping,
    revision,
    run_of,
    template,
    unset_text,
    view_range,
)
from app.figures import gpus as gfig
from app.figures.incident import offender_text
from app.pages import _accounting, _node_health, _slurm
from app.ui import TIMECHART, graph, guarded, table, time_graph, view_inputs

dash.register_page(__name__, path="/gpus", name="GPUs", order=2)

NO_DATA = "No data stored yet: start a replay or the ingest daemon."
METRIC_OPTIONS = [
    {"label": "Utilization, GPU_UTIL (%)", "value": "util"},
    {"label": "Real utilization, SM activity (%)", "value": "real"},
    {"label": "Temperature, hottest GPU (°C)", "value": "temp"},
    {"label": "Power per GPU (W)", "value": "power"},
    {"label": "Framebuffer used (MiB)", "value": "fb"},
    {"label": "SM clock (MHz)", "value": "clock"},
]
OUTLIER_COLUMNS = {
    "host": "Host",
    "gpu": "GPU",
    "reason": "Reason",
    "value": "Value",
    "unit": "Unit",
    "detail": "Why",
}
NODE_CHART_IDS = {chart: f"gpu-node-{chart}" for chart in gfig.NODE_CHARTS}
HEATMAP = {"type": TIMECHART, "id": "gpu-heatmap"}
NODE_MORE_ID = "gpu-node-more"
WORKLOAD_COLUMNS = {
    "gpu": "GPU",
    "hpc_job": "Job",
    "pod": "Pod",
    "namespace": "Namespace",
    "container": "Container",
}


def layout(**_query: str) -> html.Div:
    charts = [dbc.Col(time_graph(i), lg=6) for i in NODE_CHART_IDS.values()]
    return html.Div(
        [
            dbc.Row(
                [
                    dbc.Col(
                        html.Label("Metric", htmlFor="gpu-metric", className="small"), width="auto"
                    ),
                    dbc.Col(
                        dcc.Dropdown(
                            id="gpu-metric",
                            options=METRIC_OPTIONS,
                            value="util",
                            clearable=False,
                            persistence=True,
                            persistence_type="session",
                            style={"minWidth": "260px"},
                        ),
                        width="auto",
                    ),
                ],
                class_name="g-2 mb-2 align-items-center",
            ),
            dbc.Row(
                [dbc.Col(time_graph("gpu-heatmap"), lg=8), dbc.Col(graph("gpu-dist"), lg=4)],
                class_name="g-2",
            ),
            time_graph("gpu-below"),
            time_graph("gpu-classes"),
            dbc.Card(
                dbc.CardBody(
                    [
                        html.H4(
                            "Click a node in the heatmap (or a row of the outlier table) to see "
                            "its GPUs",
                            id="gpu-node-host",
                            className="mb-0",
                        ),
                        html.Div(id="gpu-node-info", className="text-body-secondary small mb-2"),
                        dbc.Row(charts, class_name="g-2"),
                        _node_more(),
                    ]
                ),
                class_name="my-2",
                id="gpu-node",
            ),
            dcc.Store(id="gpu-node-scrolled"),
            dbc.Card(
                dbc.CardBody(
                    [
                        html.H6("Outlier GPUs", className="mb-1"),
                        html.Div(id="gpu-outlier-summary", className="small mb-2"),
                        html.Div(id="gpu-outliers"),
                    ]
                ),
                class_name="mb-2",
            ),
            _slurm.nodes_card(),
            _node_health.card(),
            _accounting.card(),
            _slurm.job_filter("gpus"),
        ]
    )


def _node_more() -> dbc.Row:
    """Below the node's charts: one more metric of its GPUs, picked from a list (memory clock,
    framebuffer, HBM temperature), and what runs on each GPU."""
    picker = dcc.Dropdown(
        id="gpu-node-metric",
        options=[
            {"label": f"{label} ({unit})", "value": key}
            for key, (_, label, unit, _) in NODE_METRICS.items()
        ],
        value="fb",
        clearable=False,
        persistence=True,
        persistence_type="session",
        style={"minWidth": "240px"},
    )
    return dbc.Row(
        [
            dbc.Col(
                [
                    html.Label("More per GPU", htmlFor="gpu-node-metric", className="small"),
                    picker,
                    time_graph(NODE_MORE_ID),
                ],
                lg=6,
            ),
            dbc.Col(
                [
                    html.H6("Workload per GPU", className="mb-1 mt-2"),
                    html.Div(id="gpu-node-workload-note", className="small mb-1"),
                    html.Div(id="gpu-node-workload"),
                ],
                lg=6,
            ),
        ],
        class_name="g-2 mt-1",
    )


@callback(
    Output(HEATMAP, "figure"),
    Output({"type": "chart", "id": "gpu-dist"}, "figure"),
    *view_inputs(),
    Input("gpu-metric", "value"),
)
@guarded("figure", "figure")
def _fleet(view: dict[str, Any] | None, _n: int | None, theme: str | None, key: str | None):  # type: ignore[no-untyped-def]
    tpl = template(theme)
    tr = view_range(view)
    if tr is None:
        e = figures.empty("GPUs", unset_text(view, NO_DATA), template=tpl)
        return e, e
    m = data.gpu_metric(key if isinstance(key, str) and key else "util")
    hm, dist, culprits = together(
        lambda: data.gpu_heatmap(tr, m.key),
        lambda: data.gpu_distribution(tr, m.key),
        lambda: data.culprits(run_of(view), tr),
    )
    opts = {"key": m.key, "label": m.label, "unit": m.unit, "bucket_s": hm.bucket_s}
    rev = f"{revision(view)}|{m.key}"
    basis = data.util_basis(tr).text if m.key == "real" else ""
    return (
        gfig.heatmap(
            hm.cells,
            nodes_total=hm.nodes_total,
            nodes_shown=hm.nodes_shown,
            basis=basis,
            culprits=culprits,
            template=tpl,
            **opts,
        ).update_layout(uirevision=rev),
        gfig.distribution(
            dist, threshold=data.gpu_threshold(m.key), template=tpl, **opts
        ).update_layout(uirevision=rev),
    )


@callback(
    Output({"type": TIMECHART, "id": "gpu-below"}, "figure"),
    Output({"type": TIMECHART, "id": "gpu-classes"}, "figure"),
    *view_inputs(),
)
@guarded("figure", "figure")
def _utilization(view: dict[str, Any] | None, _n: int | None, theme: str | None):  # type: ignore[no-untyped-def]
    """The two charts judged on real utilization, which share its basis."""
    tpl = template(theme)
    tr = view_range(view)
    if tr is None:
        e = figures.empty("GPUs", unset_text(view, NO_DATA), template=tpl)
        return e, e
    basis, under, classes_df = together(
        lambda: data.util_basis(tr),
        lambda: data.gpus_below(tr),
        lambda: data.workload_classes(tr),
    )
    rev = revision(view)
    span = figures.window_range(tr.start, tr.end)  # one above the other, in line
    below = gfig.below_per_bucket(
        under,
        util_pct=data.LOW_UTIL_PCT,
        basis=basis.text,
        real=basis.real,
        template=tpl,
        x_range=span,
    )
    classes = gfig.workload_classes(
        classes_df, texts=CLASS_TEXT, basis=basis.text, template=tpl, x_range=span
    )
    return below.update_layout(uirevision=rev), classes.update_layout(uirevision=rev)


@callback(
    Output("gpu-outlier-summary", "children"),
    Output("gpu-outliers", "children"),
    *view_inputs(themed=False),
)
@guarded("alert", "alert")
def _outliers(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    tr = view_range(view)
    if tr is None:
        return "", dbc.Alert(unset_text(view, NO_DATA), color="info")
    df = data.gpu_outliers(tr)
    flagged = _offenders()
    if df.empty:
        return flagged, dbc.Alert("No outlier GPUs in this range.", color="secondary")
    summary = " · ".join(f"{n:,} {reason}" for reason, n in data.outlier_reasons(df))
    summary = html.Div([summary, flagged]) if flagged else summary
    tbl = table(
        "gpu-outlier-table",
        df,
        OUTLIER_COLUMNS,
        row_id=["host", "gpu", "reason"],
        clickable=True,
    )
    return summary, tbl


def _offenders() -> Any:
    """The repeat offenders: nodes named the culprit of an interruption in the node memory's
    days (across runs and jobs) often enough, each with its count; "" when none."""
    seen = node_health.offenders()
    if not seen:
        return ""
    days = node_health.memory_days()
    names = ", ".join(f"{h} ({n}x)" for h, n in list(seen.items())[:MAX_OFFENDERS])
    more = f" and {len(seen) - MAX_OFFENDERS} more" if len(seen) > MAX_OFFENDERS else ""
    least = node_health.memory_min()
    return html.Div(f"Repeat offenders (the culprit {least} or more times in {days:g} days): "
                    f"{names}{more}", id="gpu-offenders", className="text-danger")  # fmt: skip


MAX_OFFENDERS = 20


# A click on the heatmap or the outlier table changes the drill-down below the fold: bring it
# into view and flash its border, so the click visibly did something (#37).
clientside_callback(
    """function(){
      var t = (window.dash_clientside.callback_context.triggered || [])[0];
      var box = document.getElementById('gpu-node');
      if (box && t && t.value) {  // a click, not a table or chart being (re)drawn
        box.scrollIntoView({behavior: 'smooth', block: 'start'});
        box.classList.remove('ff-flash'); void box.offsetWidth; box.classList.add('ff-flash');
      }
      return window.dash_clientside.no_update;
    }""",
    Output("gpu-node-scrolled", "data"),
    Input(HEATMAP, "clickData"),
    Input("gpu-outlier-table", "cellClicked"),
    prevent_initial_call=True,
)


# A node picked in the heatmap or the outlier table reaches the server through the shell's
# "node-pick" store, set in the browser (assets/36-grid-pick.js says why).
clientside_callback(
    ClientsideFunction("ff", "pickedPoint"),
    Output("node-pick", "data"),
    Input(HEATMAP, "clickData"),
    prevent_initial_call=True,
)
clientside_callback(
    ClientsideFunction("ff", "pickedRow"),
    Output("node-pick", "data", allow_duplicate=True),
    Input("gpu-outlier-table", "cellClicked"),
    State("gpu-outlier-table", "rowData"),
    prevent_initial_call=True,
)


@callback(
    Output("url", "hash", allow_duplicate=True),
    Input("node-pick", "data"),
    State("view", "data"),
    prevent_initial_call=True,
)
def _select_node(pick: dict[str, Any] | None, view: Any) -> str:
    """The picked node into the view (its drill-down), when the inventory knows it: the
    averaged "other nodes" row names none."""
    host = (mapping((mapping(pick) or {}).get("row")) or {}).get("host")
    if not isinstance(host, str) or not host or len(host) > MAX_ID or data.node_info(host) is None:
        raise PreventUpdate
    return fragment(clean_view(view) | {"node": host})


def _shown_node(view: Any, tr: Any) -> tuple[Any, tuple[str, str] | None]:
    """The node the drill-down shows: the one the view names, else (nothing chosen yet) the
    worst by the outlier ranking, which is returned too; (None, None) without either."""
    host = clean_view(view).get("node")
    worst = data.worst_node(tr) if host is None and tr is not None else None
    return (worst[0] if worst is not None else host), worst


@callback(
    Output("gpu-node-host", "children"),
    Output("gpu-node-info", "children"),
    *[Output({"type": TIMECHART, "id": i}, "figure") for i in NODE_CHART_IDS.values()],
    Output({"type": TIMECHART, "id": NODE_MORE_ID}, "figure"),
    Output("gpu-node-workload-note", "children"),
    Output("gpu-node-workload", "children"),
    *view_inputs(),
    Input("gpu-node-metric", "value"),
)
@guarded("alert", "alert", *["figure"] * len(NODE_CHART_IDS), "figure", "alert", "alert")
def _node(view: dict[str, Any] | None, _n: int | None, theme: str | None, key: Any):  # type: ignore[no-untyped-def]
    """The drill-down: the node's GPUs on four charts, one more metric picked from a list, and
    what runs on each GPU. One callback: the node shown (when none is chosen, the worst by the
    outlier ranking) is found once, not once per part (0.03 s of the first viewer's page)."""
    tpl = template(theme)
    tr = view_range(view)
    host, worst = _shown_node(view, tr)
    key, column, label, unit = data.node_metric(key)
    more_title = f"{label} ({unit})"
    known = isinstance(host, str) and len(host) <= MAX_ID and tr is not None
    info = data.node_info(host) if known else None
    if host is None or tr is None:
        pick = "Click a node in the heatmap to see its eight GPUs."
        msg = unset_text(view, NO_DATA) if tr is None else pick
        figs = [
            figures.empty(gfig.NODE_CHARTS[c][1], msg, gfig.NODE_CHART_HEIGHT, tpl)
            for c in NODE_CHART_IDS
        ]
        more = figures.empty(more_title, msg, gfig.NODE_CHART_HEIGHT, tpl)
        return no_update, "", *figs, more, "", ""
    series, (more_df, work) = (
        together(lambda: data.node_gpu_series(host, tr), lambda: data.node_more(host, tr, key))
        if info
        else (None, (None, None))  # a node the inventory does not know
    )
    rev = f"{revision(view)}|{host}"
    figs = [_node_chart(series, c, host, rev, tpl) for c in NODE_CHART_IDS]
    header = gfig.node_header(info, host)
    seen = node_health.offender(host)
    if seen:
        header += f" · {offender_text(seen)}"
    if worst is not None:
        header += f" · the worst node by the outlier ranking ({worst[1]}); click another to switch"
    note = data.expired_note(tr, series)
    if note:
        header += f" · {note}"
    if more_df is None:
        more = figures.empty(more_title, f"Unknown node {host!r}", gfig.NODE_CHART_HEIGHT, tpl)
        return host, header, *figs, more, "", ""
    return host, header, *figs, *_more(host, key, column, label, unit, more_df, work, rev, tpl)


def _node_chart(series: Any, chart: str, host: str, rev: str, tpl: str) -> Any:
    """One of the node's four charts; an empty one that says why when there is nothing to
    draw (an unknown node, a TSDB that did not answer for the expired part)."""
    title = gfig.NODE_CHARTS[chart][1]
    if series is None:
        return figures.empty(title, f"Unknown node {host!r}", gfig.NODE_CHART_HEIGHT, tpl)
    down = data.tsdb_down(series)
    if series.empty and down:
        return figures.empty(title, down[0].upper() + down[1:], gfig.NODE_CHART_HEIGHT, tpl)
    return gfig.node_metric(series, chart, host, tpl).update_layout(uirevision=rev)


def _more(  # type: ignore[no-untyped-def]
    host: str, key: str, column: str, label: str, unit: str, df, work, rev: str, tpl: str
):
    """Below the node's charts: the picked metric of its GPUs, and its workload table."""
    down = data.tsdb_down(df)
    if df.empty and down:
        fig = figures.empty(
            f"{label} ({unit})", down[0].upper() + down[1:], gfig.NODE_CHART_HEIGHT, tpl
        )
    elif df.empty and key in EXTRA_FIELDS:
        fig = figures.empty(
            f"{label} ({unit})",
            f"No {label.lower()} from {host} in this range: it is kept from dcgm-exporter "
            f"scrapes ({EXTRA_FIELDS[key]}), not by a replay",
            gfig.NODE_CHART_HEIGHT,
            tpl,
        )
    else:
        spec = (column, label, unit, None)
        fig = gfig.node_metric(df, key, host, tpl, spec=spec)
        fig.update_layout(uirevision=f"{rev}|{key}")
    if work.empty:
        return fig, "", dbc.Alert(f"No GPUs of {host} are stored.", color="secondary")
    tbl = table("gpu-node-workload-table", gfig.workload_rows(work), WORKLOAD_COLUMNS)
    return fig, gfig.WORKLOAD_NOTE, tbl
