"""Figures of the GPUs page: the fleet heatmap (node x time), the metric's distribution and one
node's GPUs over time. Pure builders: frames from ``telemetry.queries.gpus`` in, figures out.
Colour scales are presentation choices and live here; the operating thresholds marked on a
chart (hot, idle) are the queries' own, passed in by the page.

Long module: the page's six figures share their time axes, colour scales and gap handling; split
by figure they would import each other's helpers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from app.figures import ALIGNED, TEMPLATE, _base, empty, legend_below, plot, time_axis
from app.figures.plot import Figure

# Red is bad on every scale: low utilization and clock, high temperature.
_GOOD_HIGH = [
    [0.0, "#a50026"],
    [0.25, "#f46d43"],
    [0.5, "#fee08b"],
    [0.75, "#a6d96a"],
    [1, "#1a9850"],
]
_TEMP = [[0.0, "#313695"], [0.45, "#74add1"], [0.7, "#fee090"], [0.917, "#f46d43"], [1, "#a50026"]]
COLOUR_SCALES: dict[str, dict[str, Any]] = {
    "util": {"colorscale": _GOOD_HIGH, "zmin": 0, "zmax": 100},
    "real": {"colorscale": _GOOD_HIGH, "zmin": 0, "zmax": 100},
    "temp": {"colorscale": _TEMP, "zmin": 25, "zmax": 91},  # 85 °C sits at the orange stop
    "power": {"colorscale": "Viridis"},
    "fb": {"colorscale": "Cividis"},
    "clock": {"colorscale": _GOOD_HIGH},
}
# what a value past the threshold means
THRESHOLD_WORDS = {"temp": "hot", "util": "idle", "real": "idle"}
GPU_COLOURS = [
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
]
NODE_CHART_HEIGHT = 320  # px: room for a legend of eight GPUs
NODE_CHARTS = {  # drill-down chart -> (column, title, unit, y range)
    "util": ("util_pct", "Utilization", "%", [0, 105]),
    "temp": ("temp_c", "Temperature", "°C", None),
    "power": ("power_w", "Power", "W", None),
    "clock": ("sm_clock_mhz", "SM clock", "MHz", None),
}


def bucket_text(seconds: float) -> str:
    s = int(seconds)
    if s % 3600 == 0:
        return f"{s // 3600} h"
    return f"{s // 60} min" if s % 60 == 0 else f"{s} s"


def table(
    rows: pd.Series, cols: pd.Series, values: pd.Series, missing: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Long rows as a grid: the sorted distinct ``rows`` and ``cols`` and, for each pair, the
    sum of its ``values`` (``missing`` where none). A pandas pivot table, in numpy (20 ms
    less per heatmap)."""
    row_keys, r = np.unique(rows.to_numpy(), return_inverse=True)
    col_keys, c = np.unique(cols.to_numpy(), return_inverse=True)
    grid = np.zeros((len(row_keys), len(col_keys)))
    np.add.at(grid, (r, c), values.to_numpy(dtype=float))
    seen = np.zeros(grid.shape, dtype=bool)
    seen[r, c] = True
    grid[~seen] = missing
    return row_keys, col_keys, grid


def _silences(stamps: np.ndarray, z: np.ndarray, bucket_s: float) -> tuple[np.ndarray, np.ndarray]:
    """``stamps`` (time order) and ``z``'s columns with a column of no value (NaN) a bucket after
    and a bucket before every gap longer than two buckets and a half (raw ticks come late by
    a few seconds; a late round is not a silence). Plotly sizes a heatmap cell up to its
    neighbours, so a silence of the whole fleet (an exporter outage, a collector down) was
    drawn as the cells on either side stretched across it."""
    if len(stamps) < 2:
        return stamps, z
    step = np.timedelta64(int(round(bucket_s * 1e9)), "ns")
    stamps = stamps.astype("datetime64[ns]")
    gaps = np.flatnonzero(np.diff(stamps) > 2 * step + step // 2)
    if not len(gaps):
        return stamps, z
    after, before = stamps[gaps] + step, stamps[gaps + 1] - step
    new = np.stack([after, before], axis=1).ravel()
    at = np.repeat(gaps + 1, 2)
    keep = np.ones(len(new), bool)
    keep[1::2] = before > after  # a gap of two buckets needs one column
    new, at = new[keep], at[keep]
    return np.insert(stamps, at, new), np.insert(z, at, np.nan, axis=1)


def _scale(key: str, z: np.ndarray) -> dict[str, Any]:
    """The metric's colour scale; data-driven ranges ignore idle cells (below half the peak),
    so that a few percent of clock or power still shows between busy nodes."""
    spec = dict(COLOUR_SCALES.get(key, {"colorscale": "Viridis"}))
    vals = z[np.isfinite(z)]
    if "zmin" not in spec and vals.size:
        busy = vals[vals >= 0.5 * vals.max()] if vals.max() > 0 else vals
        lo, hi = float(np.quantile(busy, 0.02)), float(vals.max())
        spec |= {"zmin": lo, "zmax": hi if hi > lo else lo + 1}
    return spec


ROW_LABEL_PX = 13  # a row label's least height: an 11 px name with room around it


def heatmap(
    cells: pd.DataFrame,
    *,
    key: str,
    label: str,
    unit: str,
    bucket_s: float,
    nodes_total: int,
    nodes_shown: int,
    basis: str = "",
    culprits: pd.DataFrame | None = None,
    template: str = TEMPLATE,
) -> Figure:
    """Node x time cells, most anomalous node on top; a last row averages the nodes without a
    row of their own. Hover: host, time, value with unit. ``basis`` (real utilization's) is
    said in the subtitle, or as the reason a real-utilization heatmap is empty. ``culprits``
    (ts, host, rank, what) are marked where each failure or hang began: on the culprit's row,
    or on the averaged row naming the node when it has no row of its own."""
    title = f"{label} per node ({unit})"
    if cells.empty:
        why = basis if key == "real" and basis else "No GPU samples in this range"
        return empty(title, why, height=360, template=template)
    rest = nodes_total - nodes_shown
    ranks, stamps, z = table(cells["rank"], cells["ts"], cells["value"], np.nan)
    off = _off(cells, stamps, bucket_s)
    stamps, z = _silences(stamps, z, bucket_s)
    per_rank = cells[["rank", "host"]].drop_duplicates("rank")  # 200 rows of 43 K cells
    labels = per_rank["host"].where(per_rank["host"].notna(), f"other {rest:,} nodes (mean)")
    names = dict(zip(per_rank["rank"].tolist(), labels.tolist(), strict=True))
    row_names = [names[r] for r in ranks.tolist()]  # top to bottom
    rows = len(ranks)
    height = int(min(max(140 + 14 * rows, 360), 760))
    fig = _base(title, height, template)
    fig.add_trace(
        plot.Heatmap(
            x=stamps,
            # each cell over its own bucket, not centred on the bucket's start (an hour's
            # cell half an hour early beside the page's other time charts)
            xperiod=bucket_s * 1000,
            xperiodalignment="middle",
            y=row_names,
            z=np.round(z, 1).astype(np.float32),  # a typed array: compact, NaN = no sample
            colorbar={"title": {"text": unit, "side": "right"}, "thickness": 12},
            hovertemplate="%{y}<br>%{x|%Y-%m-%d %H:%M} UTC<br>%{z:,.1f} "
            + unit
            + "<extra></extra>",
            xgap=0,
            ygap=1 if rows <= 40 else 0,
            **_scale(key, z),
        )
    )
    _grey_cells(fig, off, row_names, stamps, z, bucket_s)
    if culprits is not None and not culprits.empty:
        other = f"other {rest:,} nodes (mean)" if rest > 0 else None
        _mark_culprits(fig, culprits, set(per_rank["host"].dropna().tolist()), other)
    which = (
        f"all {nodes_total:,} nodes"
        if rest <= 0
        else f"the {nodes_shown:,} most anomalous of {nodes_total:,} nodes, the rest averaged"
    )
    # A label every ROW_LABEL_PX at most: 200 rows of 3 px each drew 200 overlapping names
    # (and Plotly measured each, 0.14 s of the page); the hover names every row.
    step = math.ceil(ROW_LABEL_PX / max((height - 140) / max(rows, 1), 0.1))
    if step > 1:
        which += f"; one row in {step} named, hover for each"
    fig.update_layout(
        title={
            "subtitle": {
                "text": f"{which}; worst on top · {bucket_text(bucket_s)} buckets · "
                + (f"{basis} · " if basis else "")
                + "click a node to drill down",
                "font": {"size": 11},
            }
        },
        margin={"t": 60, "l": 150 if rest > 0 else 90},
        hovermode="closest",
        xaxis={"title": "Time (UTC)"},
        yaxis={"title": None, "autorange": "reversed", "type": "category", "automargin": True,
               **_role_ticks(cells, row_names, step)},  # fmt: skip
    )
    return fig


GREYS = [[0.0, "#5f6368"], [1.0, "#c4c7cc"]]  # no alarm colour, readable on both themes


def _off(cells: pd.DataFrame, stamps: np.ndarray, bucket_s: float) -> np.ndarray | None:
    """The cells of nodes running no job then (``off``) as a matrix like the heatmap's z (1:
    no job), None where there are none."""
    if "off" not in cells or not cells["off"].fillna(False).astype(bool).any():
        return None
    _, _, off = table(cells["rank"], cells["ts"], cells["off"].astype(float), np.nan)
    return _silences(stamps, off, bucket_s)[1]


def _grey_cells(fig: Figure, off: np.ndarray | None, rows: list[str], stamps: Any, z: np.ndarray,
                bucket_s: float) -> None:  # fmt: skip
    """Repaint the cells of nodes running no job then (a hot spare before its swap-in, a
    failed node after its failure) in greys over the metric's scale: an idle spare is a state,
    not a fault, and in the scale's alarm red it read as a failing job node (issue 57, 6).
    Hover keeps their values."""
    if off is None:
        return
    grey = np.where(off == 1.0, z, np.nan)
    fig.add_trace(
        plot.Heatmap(
            x=stamps, xperiod=bucket_s * 1000, xperiodalignment="middle", y=rows,
            z=np.round(grey, 1).astype(np.float32), colorscale=GREYS,
            showscale=False, xgap=0, ygap=1 if len(rows) <= 40 else 0,
            hovertemplate="%{y}, running no job<br>%{x|%Y-%m-%d %H:%M} UTC<br>%{z:,.1f}"
            "<extra></extra>",
        )
    )  # fmt: skip


def _role_ticks(cells: pd.DataFrame, rows: list[str], step: int) -> dict[str, Any]:
    """Labels of every ``step``-th row from the worst (and the averaged last row), each saying
    when its node runs no job now ("h100-0009 · spare"): an idle spare painted red read as an
    idle job node (#37). The rows' values stay the hosts (a click names one)."""
    shown = [h for i, h in enumerate(rows) if i % step == 0 or i == len(rows) - 1]
    roles: dict[Any, Any] = {}
    if "role_now" in cells:
        # one row per host (the cells are hosts x buckets: 130 K at 54 days, slow to iterate)
        per_host = cells[["rank", "host", "role_now"]].drop_duplicates("rank")
        roles = dict(zip(per_host["host"].tolist(), per_host["role_now"].tolist(), strict=True))
    text = [f"{h} · {r}" if isinstance(r := roles.get(h), str) and r != "job" else h
            for h in shown]  # fmt: skip
    if step == 1 and text == shown:
        return {}
    return {"tickvals": shown, "ticktext": text}


def _mark_culprits(
    fig: Figure, culprits: pd.DataFrame, rows: set[str], other: str | None
) -> None:
    on_row = culprits["host"].isin(rows)
    shown = culprits[on_row | (other is not None)]
    if shown.empty:
        return
    y = [h if h in rows else other for h in shown["host"]]
    text = [
        f"{w} · {h}" + ("" if pd.isna(r) else f" · rank {int(r)}")
        for w, h, r in zip(shown["what"], shown["host"], shown["rank"], strict=True)
    ]
    fig.add_trace(
        plot.Scatter(
            x=shown["ts"], y=y, mode="markers", name="culprit", showlegend=False, text=text,
            marker={"symbol": "x-thin-open", "size": 14, "line": {"width": 3},
                    "color": "#ff2e63"},
            hovertemplate="%{text}<br>%{x|%Y-%m-%d %H:%M:%S} UTC<extra>culprit</extra>",
        )
    )  # fmt: skip


def distribution(
    df: pd.DataFrame,
    *,
    key: str,
    label: str,
    unit: str,
    bucket_s: float,
    threshold: float | None = None,
    template: str = TEMPLATE,
) -> Figure:
    """Node-hours spent in each value bin (bins from SQL), log scale so the tails show; a
    dashed line at the metric's operating ``threshold`` (hot, idle) when it has one."""
    title = f"Distribution: {label} ({unit})"
    if df.empty:
        return empty(title, "No GPU samples in this range", height=360, template=template)
    fig = _base(title, 360, template)
    hi = df["lo"] + df["width"]
    fig.add_trace(
        plot.Bar(
            x=(df["lo"] + df["width"] / 2).tolist(),
            y=df["node_hours"].round(3).tolist(),
            width=df["width"].tolist(),
            customdata=np.column_stack([df["lo"], hi, df["cells"]]),
            marker={"color": "#636efa", "line": {"width": 0}},
            hovertemplate="%{customdata[0]:,.0f} – %{customdata[1]:,.0f} "
            + unit
            + "<br>%{y:,.1f} node-hours (%{customdata[2]:,} cells)<extra></extra>",
        )
    )
    if threshold is not None:
        fig.add_vline(
            x=threshold,
            line={"color": "#ef553b", "dash": "dash", "width": 1},
            annotation_text=f"{threshold:g} {unit} {THRESHOLD_WORDS.get(key, '')}".rstrip(),
            annotation_position="top right" if threshold < 50 else "top left",
        )
    fig.update_layout(
        title={
            "subtitle": {
                "text": f"time nodes spent at each value · {bucket_text(bucket_s)} cells",
                "font": {"size": 11},
            }
        },
        margin={"t": 60},
        hovermode="closest",
        bargap=0,
        showlegend=False,
        xaxis={"title": f"{label} ({unit})"},
        yaxis={"title": "Node-hours (log)", "type": "log", **log_ticks(df["node_hours"])},
    )
    return fig


def below_per_bucket(
    df: pd.DataFrame,
    *,
    util_pct: float,
    basis: str,
    real: bool,
    template: str = TEMPLATE,
    x_range: list | None = None,
) -> Figure:
    """GPUs whose utilization (real utilization when ``real``) averaged under ``util_pct`` over
    each bucket (an hour; 6 h over long ranges: ``bucket_s``), as bars, beside the GPUs that
    reported in it (a line): wasted capacity bucket by bucket. ``basis`` says what utilization
    meant. Over ``x_range`` when given, between ``ALIGNED`` margins (the classes chart is
    drawn below it)."""
    what = "real utilization" if real else "utilization"
    bucket_s = int(df["bucket_s"].iloc[0]) if not df.empty else 3600
    per = "hour" if bucket_s == 3600 else bucket_text(bucket_s)
    title = f"GPUs under {util_pct:g} % {what}, per {per}"
    if df.empty:
        return empty(title, "No GPU samples in this range", height=260, template=template)
    fig = _base(title, 260, template)
    x = df["ts"].tolist()
    share = (100 * df["below"] / df["gpus"].where(df["gpus"] > 0)).round(1)
    fig.add_trace(
        plot.Bar(
            x=x,
            # each bar over its own bucket, not centred on the bucket's start (half an hour
            # early beside the charts around it)
            xperiod=bucket_s * 1000,
            xperiodalignment="middle",
            y=df["below"].tolist(),
            name=f"under {util_pct:g} %",
            marker={"color": "#ef553b", "line": {"width": 0}},
            customdata=share.tolist(),
            hovertemplate="%{y:,} GPUs under " + f"{util_pct:g}" + " % (%{customdata} %)"
            "<extra></extra>",
        )
    )
    fig.add_trace(
        plot.Scatter(
            x=x,
            y=df["gpus"].tolist(),
            name="reporting",
            mode="lines",
            line={"color": "#888", "width": 1, "shape": "hv"},
            hovertemplate="%{y:,} GPUs reporting<extra></extra>",
        )
    )
    # room above the reporting line: autorange ends at its value and the line sat on the
    # plot's top edge, where nobody could read it
    top = float(max(df["gpus"].max(), df["below"].max()))
    fig.update_layout(
        bargap=0.1,
        yaxis={"title": "GPUs", "range": [0, top * 1.12 or 1], "automargin": False},
        xaxis=time_axis(x_range),
        **ALIGNED,
        title={
            "subtitle": {
                "text": f"job nodes' GPUs, each GPU's mean over the {per} · {basis}",
                "font": {"size": 11},
            }
        },
    )
    return fig


def log_ticks(values: pd.Series) -> dict[str, Any]:
    """Tick spacing of a log axis over ``values``: labels at each power of ten when they span
    two decades or more (plotly's own choice labels the minor ticks too, and at this height
    they pile up: "5 2 1 5 2 ..."), else at 1, 2 and 5 of each decade."""
    pos = values[values > 0]
    decades = float(np.log10(pos.max() / pos.min())) if len(pos) else 0.0
    return (
        {"dtick": 1, "minor": {"ticks": "inside", "ticklen": 3}}
        if decades >= 2
        else {"dtick": "D2"}
    )


GAP_BUCKETS = 3  # a silence longer than this many buckets breaks a line


def break_gaps(ts: np.ndarray, y: np.ndarray, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """One series (``ts`` in time order, datetime64) with a missing ``y`` inserted inside every
    silence longer than ``GAP_BUCKETS`` x ``step_s``, a bucket before the sample that ends it:
    plotly breaks the line there instead of drawing a ramp across a drained or silent period
    it has no sample of."""
    step = np.timedelta64(int(round(step_s * 1e9)), "ns")
    after = np.flatnonzero(np.diff(ts) > GAP_BUCKETS * step) + 1
    if not len(after):
        return ts, y
    return np.insert(ts, after, ts[after] - step), np.insert(y.astype(float), after, np.nan)


def node_metric(
    df: pd.DataFrame,
    chart: str,
    host: str,
    template: str = TEMPLATE,
    spec: tuple[str, str, str, list[float] | None] | None = None,
) -> Figure:
    """One metric of one node's GPUs over time: a line per GPU ("GPU 0" ... "GPU 7"), broken
    where the GPU was silent for more than a few buckets (``break_gaps``). ``chart`` is a key
    of ``NODE_CHARTS``, or ``spec`` gives (column, title, unit, y range) of another."""
    col, name, unit, yrange = spec or NODE_CHARTS[chart]
    title = f"{name} ({unit})"
    if df.empty:
        return empty(
            title,
            f"No samples from {host} in this range",
            height=NODE_CHART_HEIGHT,
            template=template,
        )
    fig = _base(title, NODE_CHART_HEIGHT, template)
    step_s = float(df["bucket_s"].iloc[0]) if "bucket_s" in df else 0.0
    gpus, stamps = df["gpu"].to_numpy(), df["ts"].to_numpy()
    values = df[col].to_numpy(dtype=float)
    for gpu in np.unique(gpus).tolist():
        mine = gpus == gpu
        x, y = stamps[mine], np.round(values[mine], 1)
        if step_s > 0:
            x, y = break_gaps(x, y, step_s)
        fig.add_trace(
            plot.Scatter(
                x=x,
                y=y,
                mode="lines",
                name=f"GPU {gpu}",
                legendgroup=f"GPU {gpu}",
                line={"width": 1.3, "color": GPU_COLOURS[int(gpu) % len(GPU_COLOURS)]},
                hovertemplate="%{y:,.1f} " + unit,
            )
        )
    fig.update_layout(
        xaxis={"title": "Time (UTC)", "automargin": False},
        yaxis={
            "title": f"{name} ({unit})",
            "automargin": False,
            **({"range": yrange} if yrange else {}),
        },
        legend={
            "orientation": "v",
            "x": 1.01,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "font": {"size": 10},
            "tracegroupgap": 0,
        },
        margin={"t": 40, "b": 76, "r": 96, "l": 72},
    )
    return fig


WORKLOAD_NOTE = (
    "As last scraped: the exporter's attribution labels (job, or Kubernetes pod), else the "
    "targets file's; – where none is reported."
)


def workload_rows(df: pd.DataFrame) -> pd.DataFrame:
    """``telemetry.queries.gpu_node.node_workload`` as the table shows it: gpu (with its MIG
    slice), hpc_job, pod, namespace, container, "–" where nothing is reported."""
    gpu = df["gpu"].astype(str)
    mig = df["mig_instance"].notna()
    profile = df["mig_profile"].fillna("").astype(str)
    gpu[mig] = gpu[mig] + " · MIG " + profile[mig] + " #" + df["mig_instance"][mig].astype(str)
    cols = ["hpc_job", "pod", "namespace", "container"]
    shown = df[cols].astype(object).where(df[cols].notna(), "–")
    return shown.assign(gpu=gpu)[["gpu", *cols]]


def node_header(info: dict[str, Any] | None, host: str) -> str:
    """One line naming the drilled-down node (rack, role, GPUs)."""
    if info is None:
        return f"No node called {host!r} in this store"
    rack = info["rack"] or "rack –"  # a scraped node whose targets file gives no rack
    return f"{rack} · {info['role']} node · {info['gpus']} × {info['model'] or 'GPU'}"


CLASS_COLOURS = {  # workload class -> colour: work in greens/blues, waste in reds, idle greys
    "tensor-bound": "#1a9850",
    "memory-bound": "#4575b4",
    "communicating": "#74add1",
    "busy-but-light": "#fdae61",
    "communication-stalled": "#d73027",
    "idle-but-allocated": "#8c510a",
    "unallocated": "#bbbbbb",
}


def workload_classes(
    df: pd.DataFrame,
    *,
    texts: dict[str, str],
    basis: str,
    template: str = TEMPLATE,
    x_range: list | None = None,
) -> Figure:
    """GPUs in each workload class over time, stacked (``telemetry.queries.workload.classes``);
    ``texts`` says what each class means (hover), ``basis`` what the fleet reported. Over
    ``x_range`` when given, between ``ALIGNED`` margins."""
    title = "Workload classes: what the GPUs were doing"
    if df.empty:
        why = "No GPU reported DCGM profiling fields (tensor or DRAM active) in this range"
        return empty(title, why, height=300, template=template)
    fig = _base(title, 300, template)
    stamps, classes, gpus = table(df["ts"], df["class"], df["gpus"], 0.0)
    column = {c: i for i, c in enumerate(classes.tolist())}
    for cls, colour in CLASS_COLOURS.items():
        if cls not in column:
            continue
        fig.add_trace(
            plot.Scatter(
                x=stamps,
                y=np.round(gpus[:, column[cls]], 1).tolist(),
                name=cls,
                mode="lines",
                stackgroup="classes",
                line={"width": 0.5, "color": colour, "shape": "hv"},
                fillcolor=colour,
                hovertemplate=f"%{{y:,.1f}} GPUs {cls}: {texts.get(cls, '')}<extra></extra>",
            )
        )
    interval = bucket_text(float(df["interval_s"].iloc[0]))
    bucket = bucket_text(float(df["bucket_s"].iloc[0]))
    fig.update_layout(
        yaxis={"title": "GPUs", "rangemode": "tozero", "automargin": False},
        xaxis=time_axis(x_range),
        hovermode="x unified",
        **ALIGNED,
        title={
            "subtitle": {
                "text": f"each GPU's {interval} interval classified, mean GPUs per {bucket}"
                f" · {basis}",
                "font": {"size": 11},
            }
        },
    )
    return legend_below(fig)  # seven classes beside the title would cover its subtitle
