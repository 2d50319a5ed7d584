"""Jobs: every job of the range (Slurm, dcgm-exporter labels, imported logs) with what it did
with its GPUs, as ``seff``/jobstats report it for GPUs: GPU-hours allocated, used and idle,
peak memory, energy, and its problems. Filters by state, user, account, partition and name
(the time is the shared range); "problem jobs only"; a click on a job shows its GPUs and nodes
over its time; "Download CSV" writes one day's jobs."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, State, callback, dcc, html

from app.data import jobs as data
from app.data import node_health
from app.data.view import last_instant, table_row, view_range
from app.figures.incident import offender_text
from app.figures.units import fmt_gpu_hours
from app.ui import card, guarded, table, view_inputs

dash.register_page(__name__, path="/jobs", name="Jobs", order=6)

NO_JOBS = ("No job in this range: Slurm jobs come from `factoryfloor import --slurm` or "
           "`ingest --slurm`, label jobs from dcgm-exporter's hpc_job/pod labels.")  # fmt: skip
JOB_COLUMNS = {
    "job_id": "Job",
    "name": "Name",
    "user": "User",
    "account": "Account",
    "partition": "Partition",
    "state": "State",
    "problem_text": "Problems",
    "start": "Start (UTC)",
    "end": "End (UTC)",
    "elapsed_h": "Hours",
    "nodes": "Nodes",
    "gpus": "GPUs",
    "alloc_gpu_hours": "Alloc. GPU-h",
    "used_gpu_hours": "Used GPU-h",
    "used_dcp_gpu_hours": "SM-act. GPU-h",
    "idle_gpu_hours": "Idle GPU-h",
    "util_pct": "Util. %",
    "mem_peak_gib": "Peak GiB",
    "power_w": "W/GPU",
    "energy_kwh": "kWh",
    "exit_code": "Exit",
    "source": "Source",
    "attribution": "GPUs from",
}
# in the CSV export, not on screen (room for the rest)
HIDDEN = ("partition", "end", "nodes", "exit_code", "source", "attribution")
GPU_COLUMNS = {
    "host": "Node",
    "gpu": "GPU",
    "sampled_gpu_hours": "Sampled (GPU-h)",
    "used_gpu_hours": "Used (GPU-h)",
    "idle_gpu_hours": "Idle (GPU-h)",
    "util_pct": "Utilization (%)",
    "mem_peak_gib": "Peak memory (GiB)",
    "power_w": "Power (W)",
    "energy_kwh": "Energy (kWh)",
}
_FILTER_LABELS = {"states": "State", "users": "User", "accounts": "Account",
                  "partitions": "Partition"}  # fmt: skip


def _filters() -> dbc.Row:
    cols = [
        dbc.Col(
            dcc.Dropdown(id=f"jobs-{f}", multi=True, placeholder=label, options=[]),
            xs=6,
            md=2,
        )  # fmt: skip
        for f, label in _FILTER_LABELS.items()
    ]
    name = dbc.Input(id="jobs-name", placeholder="Name, job id or node", debounce=True,
                     size="sm", maxLength=128)  # fmt: skip
    problems = dbc.Checkbox(id="jobs-problems", label="Problem jobs only", value=False)
    cols.append(dbc.Col(name, xs=6, md=2))
    cols.append(dbc.Col(problems, xs=6, md=2, class_name="d-flex align-items-center"))
    return dbc.Row(cols, class_name="g-2 mb-2")


def _download() -> html.Div:
    return html.Div(
        [
            html.Label("Day (UTC)", htmlFor="jobs-day", className="small"),
            dcc.Input(
                id="jobs-day",
                type="date",
                className="form-control form-control-sm",
                style={"width": "11rem"},
            ),  # fmt: skip
            dbc.Button("Download CSV", id="jobs-csv-button", size="sm", color="secondary"),
            dcc.Download(id="jobs-csv"),
            html.Span(id="jobs-csv-error", className="small text-danger"),
        ],
        className="d-flex align-items-center gap-2 mb-2",
    )


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            _filters(),
            dbc.Row(id="jobs-cards", class_name="g-2 mb-2"),
            _download(),
            html.Div(id="jobs-grid", className="mb-2"),
            html.Div(
                f"Problems: a GPU idle more than {data.IDLE_MINUTES} min in total while "
                f"allocated; failed within {data.FAILED_WITHIN_MIN} min of its start; requeued "
                f"{data.REQUEUED_TIMES} times or more. Utilization and memory come from the "
                "per-GPU rollups of exactly the job's GPUs over its time (memory: the highest "
                "bucket mean). GPU-h: GPU-hours allocated, used (weighted by utilization, and "
                "by SM activity where profiled) and idle; W/GPU: mean power per GPU; kWh: "
                "energy. Export adds partition, end, nodes, exit code and where the figures "
                "come from. Click a job for its GPUs and nodes.",
                className="small text-body-secondary mb-2",
            ),
            html.H6("Selected job", className="mt-2"),
            html.Div(id="jobs-detail", className="mb-3"),
        ]
    )


def _shown(df: pd.DataFrame) -> pd.DataFrame:
    """``jobs``' rows as the grid shows them: hours, GiB, rounded, problems as text."""
    out = df.assign(
        elapsed_h=df["elapsed_s"] / 3600,
        mem_peak_gib=df["mem_peak_mib"] / 1024,
        problem_text=df["problems"].map("; ".join),
    )
    for col in ("elapsed_h", "alloc_gpu_hours", "used_gpu_hours", "used_dcp_gpu_hours",
                "idle_gpu_hours", "util_pct", "mem_peak_gib", "power_w", "energy_kwh"):  # fmt: skip
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float).round(2)
    return out


def _picks(states: Any, users: Any, accounts: Any, partitions: Any, name: Any,
           problems: Any) -> dict[str, Any]:  # fmt: skip
    return {"states": states, "users": users, "accounts": accounts, "partitions": partitions,
            "name": name, "problems": problems}  # fmt: skip


def options_for(view: dict[str, Any] | None) -> tuple[list[str], ...]:
    """The values each filter offers over the view's range."""
    got = data.options(view_range(view))
    return tuple(got[f] for f in data.FILTERS)


def _total(df: pd.DataFrame, col: str) -> float | None:
    """The listed jobs' sum of a figure; None when no job knows it (rows say "–": a card
    never says 0 for them)."""
    values = pd.to_numeric(df[col], errors="coerce")
    return None if values.isna().all() else float(values.sum())


def _gh(hours: float | None) -> str:
    return "–" if hours is None else f"{fmt_gpu_hours(hours)} GPU-h"


def _share(part: float | None, whole: float | None) -> str:
    if part is None:
        return "– (no GPU samples of these jobs: their nodes sent none)"
    return f"{part / whole:.0%} of allocated" if whole else "utilization-weighted"


def _when(t: Any) -> str:
    return "" if t is None or pd.isna(t) else f"{pd.Timestamp(t):%Y-%m-%d %H:%M}"


def _why(reason: Any, user: Any) -> str:
    said = f", reason \u201c{reason}\u201d" if isinstance(reason, str) and reason else ""
    return said + (f", set by {user}" if isinstance(user, str) and user else "")


def node_panel(story: dict[str, Any] | None, seen: dict[str, Any] | None = None) -> html.Div:
    """A node named in the filter: a repeat offender's flag, its Slurm state now and why, its
    drains and downs in the range, and the health rules' findings on it (the GPUs page has
    the fleet's)."""
    flag = ([html.Div(f"\u26a0 {offender_text(seen)}", id="jobs-node-offender",
                      className="text-danger fw-semibold")] if seen else [])  # fmt: skip
    if story is None:  # known only as a culprit (an imported log's host)
        return html.Div(flag, id="jobs-node", className="small mb-2")
    host, now = story["host"], story["now"]
    if now is None:
        lines = [f"Node {host}: Slurm has not reported it (no node states collected)."]
    elif now["kind"] == "in service":
        lines = [f"Node {host} at Slurm's last word: {now['state']}, in service."]
    else:
        hours = f", {now['hours']:.1f} h" if now["hours"] is not None else ""
        why = _why(now["reason"], now["reason_user"])
        lines = [f"Node {host} at Slurm's last word: {now['state']} ({now['kind']} since "
                 f"{_when(now['since']) or 'unknown'}{hours}){why}."]  # fmt: skip
    bad = story["states"][story["states"]["kind"] != "in service"]
    for r in bad.tail(5).itertuples():
        lines.append(f"In this range: {r.kind} {_when(r.start_ts)} \u2192 "
                     f"{_when(r.end_ts) or 'still'}{_why(r.reason, r.reason_user)}.")  # fmt: skip
    if bad.empty and now is not None:
        lines.append("In this range: never drained or down.")
    for r in story["findings"].head(5).itertuples():
        lines.append(f"Finding: {r.what} ({r.evidence}): {r.action}.")
    return html.Div([*flag, *(html.Div(t) for t in lines)], id="jobs-node",
                    className="small mb-2")  # fmt: skip


def grid_for(view: dict[str, Any] | None, picks: dict[str, Any]) -> tuple[Any, list[dbc.Col]]:
    """The jobs grid and the cards above it for the view's range and the filters; with a
    node's name in the name filter, that node's state and why above them."""
    tr = view_range(view)
    df = data.jobs(data.job_filter(tr, picks))
    name = str(picks.get("name") or "").strip()
    story = node_health.node_story(name, tr) if name and tr is not None else None
    seen = node_health.offender(name) if name else None
    panel = node_panel(story, seen) if story is not None or seen else None
    if df.empty:
        return html.Div([panel, dbc.Alert(NO_JOBS, color="info")]), []
    alloc, used, idle = (_total(df, c) for c in ("alloc_gpu_hours", "used_gpu_hours",
                                                 "idle_gpu_hours"))  # fmt: skip
    more = f"the newest {data.MAX_JOBS}" if len(df) >= data.MAX_JOBS else "all"
    cards = [
        card("Jobs", f"{len(df):,}", f"{more} in the range", id_="jobs-count"),
        card("Allocated", _gh(alloc), "the listed jobs' GPUs x elapsed"),
        card("Used", _gh(used), _share(used, alloc), id_="jobs-used"),
        card("Idle while allocated", _gh(idle), "GPU time below 5 % utilization"),
        card("Problem jobs", f"{int((df['problems'].map(len) > 0).sum()):,}", "see Problems"),
    ]  # fmt: skip
    grid = table("jobs-table", _shown(df), JOB_COLUMNS, row_id="key", clickable=True,
                 hidden=HIDDEN, export_hidden=True)  # fmt: skip
    return (grid if panel is None else html.Div([panel, grid])), cards


def detail_for(key: str | None) -> Any:
    """A job's GPUs over its time and its nodes."""
    if not key:
        return html.Div("Click a job to see its GPUs during its time.",
                        className="text-body-secondary small")  # fmt: skip
    df = data.job_gpus(key)
    source, _, job_id = key.partition(":")
    if df.empty:
        return dbc.Alert(f"No GPU samples of job {job_id} ({source}) during its time: its "
                         "nodes sent none, or the store does not know them.",
                         color="info")  # fmt: skip
    held = df.attrs.get("gpus")
    nodes = sorted(df["host"].unique())
    shown = df.assign(mem_peak_gib=df["mem_peak_mib"].astype(float) / 1024).round(2)
    where = ", ".join(nodes[:64]) + (" ..." if len(nodes) > 64 else "")
    on = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    labelled = bool(df["by_label"].eq(True).any())
    if held is not None and held < len(df) and not labelled:
        what = (f"Job {job_id} ({source}) holds {held} of the {len(df)} GPUs of its {on} and "
                "no label says which: every GPU of its nodes is shown (its figures in the list "
                f"are its share of these): {where}")  # fmt: skip
    else:
        what = f"Job {job_id} ({source}): {len(df)} GPUs on {on}: {where}"
    return html.Div(
        [
            html.Div(
                what,
                id="jobs-detail-nodes",
                className="small mb-1",
            ),  # fmt: skip
            table("jobs-gpus-table", shown, GPU_COLUMNS),
        ]
    )


_FILTER_INPUTS = [Input(f"jobs-{f}", "value") for f in data.FILTERS] + [
    Input("jobs-name", "value"), Input("jobs-problems", "value")]  # fmt: skip


@callback([Output(f"jobs-{f}", "options") for f in data.FILTERS], *view_inputs(themed=False))
@guarded("options", "options", "options", "options")
def _options(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    return options_for(view)


@callback(Output("jobs-grid", "children"), Output("jobs-cards", "children"),
          *view_inputs(themed=False), *_FILTER_INPUTS)  # fmt: skip
@guarded("alert", "alert")
def _grid(view: dict[str, Any] | None, _n: int | None, states: Any, users: Any, accounts: Any,
          partitions: Any, name: Any, problems: Any):  # type: ignore[no-untyped-def]  # fmt: skip
    return grid_for(view, _picks(states, users, accounts, partitions, name, problems))


@callback(Output("jobs-detail", "children"), Input("jobs-table", "cellClicked"),
          State("jobs-table", "rowData"))  # fmt: skip
@guarded("alert")
def _detail(clicked: Any, rows: Any):  # type: ignore[no-untyped-def]
    row = table_row(clicked, rows)  # its key from its own cells: an id may hold "#"
    return detail_for(f"{row.get('source')}:{row.get('job_id')}" if row else None)


@callback(Output("jobs-day", "value"), Input("view", "data"))
def _day(view: dict[str, Any] | None) -> str | None:
    tr = view_range(view)
    if tr is None:
        return None
    return last_instant(tr.start, tr.end).strftime("%Y-%m-%d")  # the range's last day


@callback(Output("jobs-csv", "data"), Output("jobs-csv-error", "children"),
          Input("jobs-csv-button", "n_clicks"), State("jobs-day", "value"),
          prevent_initial_call=True)  # fmt: skip
def _csv(_clicks: int | None, day: Any) -> tuple[Any, str]:
    day = day if isinstance(day, str) else ""  # as a crafted request may send
    try:
        data.day_range(day)
        text = data.day_csv(day)
    except data.FactoryFloorError as exc:
        return None, str(exc)
    return {"content": text, "filename": f"factoryfloor-jobs-{day}.csv", "type": "text/csv"}, ""
