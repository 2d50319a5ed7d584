"""Pure figure builders: DataFrame and options in, a figure (``app.figures.plot.Figure``: plotly's
JSON form, built without plotly.py's object layer) out.

No data access here. An empty frame gives a labelled "no data" figure, never a blank chart.
Colours and thresholds are presentation decisions and live here.
"""

from __future__ import annotations

import functools
import threading
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import plotly.io as pio

from app.figures import plot
from app.figures.plot import Figure

CATEGORY_COLOURS = {
    "GPU": "#ef553b",
    "Dependency": "#ab63fa",
    "Network": "#19d3f3",
    "Unplanned Maintenance": "#ffa15a",
    "Host": "#fecb52",
    "Unknown": "#b6b6b6",
    "Planned": "#00cc96",
}
TIER_COLOURS = {"nvme": "#636efa", "pfs": "#00cc96", "object": "#ffa15a"}
TEMPLATE = "plotly_dark"


# The trace types these builders draw; a template's defaults for the other twenty (3D, maps,
# carpets...) would be validated, copied and sent with every figure for nothing.
_TRACE_TYPES = ("scatter", "bar", "heatmap", "histogram")


_TEMPLATE_LOCK = threading.Lock()


@functools.cache
def _template(name: str) -> dict:
    """plotly's template ``name`` as data, trimmed to the layout and the trace types drawn
    here; shared read-only by every figure. Built under a lock: two callbacks building it at
    once from the same plotly objects (the first page load after start, callbacks run in
    threads) fail with plotly's "Invalid value"."""
    with _TEMPLATE_LOCK:
        full = pio.templates[name].to_plotly_json()
        data = {t: full["data"][t] for t in _TRACE_TYPES if t in full["data"]}
        return {"layout": full["layout"], "data": data}


HEIGHT = 300  # a chart's usual height (px)
# What a chart shows until its callback answers (``app.ui``'s graphs): nothing, at the usual
# height, on the page's own background. dcc.Graph draws its figure as soon as plotly.js is
# loaded, usually before the answer; its default (no data, plotly's default axes) cost
# 100-250 ms of the browser's main thread per chart in text measurement, nine times on the
# GPUs page, and showed meaningless 0-1 axes for a moment.
PLACEHOLDER = {
    "data": [],
    "layout": {
        "height": HEIGHT,
        "xaxis": {"visible": False},
        "yaxis": {"visible": False},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    },
}


def _base(title: str, height: int = HEIGHT, template: str = TEMPLATE) -> Figure:
    fig = Figure(layout={"template": _template(template)})
    fig.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 14}},
        height=height,
        margin={"l": 60, "r": 20, "t": 56, "b": 40},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        hovermode="x unified",
        legend={
            "orientation": "h",
            "y": 1.0,
            "x": 1.0,
            "xanchor": "right",
            "yanchor": "bottom",
            "font": {"size": 11},
        },
    )
    return fig


def legend_below(fig: Figure, rows: int = 1) -> Figure:
    """Put the legend at the bottom of the figure, under the x-axis title, and make room for
    ``rows`` rows of it. For charts whose legend is too long to sit beside the title: plotly
    anchors a legend at a negative paper ``y`` by its bottom edge, so it grows up into the axis
    title as it wraps; anchored to the container it cannot."""
    room = 22 * rows
    fig.update_layout(
        legend={
            "orientation": "h",
            "yref": "container",
            "y": 0.0,
            "yanchor": "bottom",
            "x": 0.0,
            "xanchor": "left",
        },
        margin={"b": fig.layout["margin"]["b"] + room},
        height=fig.layout["height"] + room,
    )
    return fig


def empty(title: str, message: str, height: int = HEIGHT, template: str = TEMPLATE) -> Figure:
    fig = _base(title, height, template)
    fig.add_annotation(
        text=message,
        showarrow=False,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        font={"size": 14, "color": "#8a8f98"},  # readable on the dark and the light theme
    )
    fig.update_layout(title_font_color="#8a8f98")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


# Charts stacked on one page over the same x range draw their plot areas between the same
# side margins (the y axes' labels set, not grown to fit, and room for a right-hand axis),
# so one time or step falls at the same place on each: autorange and automargins had put the
# Overview's three time charts, and the Training page's two, out of line by up to 135 px.
ALIGNED = {"margin": {"l": 72, "r": 64}}


def window_range(start: datetime, end: datetime) -> list[str]:
    """The x range of a page's time charts over the view's window ``start``-``end``: 1 % a
    side, so a marker at either end is drawn whole, and at least 30 s (a store of one scrape
    round is a window of one instant, which plotly cannot draw)."""
    pad = max((end - start) * 0.01, timedelta(seconds=30))
    return [str(start - pad), str(end + pad)]


def time_axis(x_range: list | None, title: str = "Time (UTC)") -> dict[str, Any]:
    """An x axis (time unless ``title`` says otherwise), over ``x_range`` (the same on every
    chart stacked on a page) when given."""
    return {"title": title} | ({"range": x_range} if x_range else {})


def fleet_timeline(
    df: pd.DataFrame,
    interruptions: pd.DataFrame,
    template: str = TEMPLATE,
    x_range: list | None = None,
) -> Figure:
    """Fleet utilization (%), real utilization where the GPUs report SM activity, and the
    hottest GPU's temperature (°C) over time, interruptions marked; over ``x_range`` when
    given, between ``ALIGNED`` margins."""
    title = "Fleet utilization and temperature"
    if df.empty:
        return empty(title, "No GPU samples in this range", template=template)
    fig = _base(title, 320, template)
    fig.add_trace(
        plot.Scatter(
            x=df["ts"],
            y=df["util_avg"],
            name="Mean utilization (%)",
            mode="lines",
            line={"color": "#636efa", "width": 1.5},
            hovertemplate="%{y:.1f} %<extra>utilization</extra>",
        )
    )
    if "real_avg" in df and df["real_avg"].notna().any():  # profiling fields reported
        fig.add_trace(
            plot.Scatter(
                x=df["ts"],
                y=df["real_avg"],
                name="Real utilization, SM activity (%)",
                mode="lines",
                line={"color": "#00cc96", "width": 1.5, "dash": "dot"},
                hovertemplate="%{y:.1f} %<extra>real utilization</extra>",
            )
        )
    fig.add_trace(
        plot.Scatter(
            x=df["ts"],
            y=df["temp_max"],
            name="Hottest GPU (°C)",
            mode="lines",
            yaxis="y2",
            line={"color": "#ef553b", "width": 1},
            hovertemplate="%{y:.1f} °C<extra>hottest GPU</extra>",
        )
    )
    ints = (
        interruptions
        if not interruptions.empty
        else pd.DataFrame(columns=["ts", "category", "component", "host"])
    )
    at, custom = ints["ts"].to_numpy(), ints[["component", "host"]].astype(str).to_numpy()
    # per category by row position (a sub-frame per category costs pandas' overhead each)
    for cat, rows in ints.groupby("category").indices.items():
        fig.add_trace(
            plot.Scatter(
                x=at[rows],
                y=[102] * len(rows),
                mode="markers",
                name=f"{cat} interruption",
                marker={"symbol": "x", "size": 9, "color": CATEGORY_COLOURS.get(cat, "#ccc")},
                customdata=custom[rows],
                hovertemplate="%{customdata[0]} on %{customdata[1]}<extra>" + cat + "</extra>",
            )
        )
    fig.update_layout(
        yaxis={"title": "Utilization (%)", "range": [0, 105], "automargin": False},
        yaxis2={
            "title": "Temperature (°C)",
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "range": [20, 100],
            "tickmode": "auto",  # its own round ticks, not the left axis' grid (96.2, 81...)
            "automargin": False,
        },
        xaxis=time_axis(x_range),
        **ALIGNED,
    )
    return legend_below(fig, rows=2)


def gapped(df: pd.DataFrame, ys: list[str]) -> pd.DataFrame:
    """``df`` with a row after each restart piece that repeats its last x but has no ``ys``:
    plotly breaks the line there, so a restart is not drawn as a jump back."""
    ends = df.groupby("segment", sort=False).tail(1)
    if len(ends) <= 1:
        return df
    gaps = ends.assign(**{c: np.nan for c in ys}).set_axis(ends.index + 0.5)
    return pd.concat([df, gaps]).sort_index(kind="stable")


def loss_curve(df: pd.DataFrame, template: str = TEMPLATE, x_range: list | None = None) -> Figure:
    """The Overview's loss over time, a restart breaking the line; over ``x_range`` when
    given, between ``ALIGNED`` margins."""
    title = "Training loss"
    if df.empty:
        return empty(title, "No training metrics in this range", template=template)
    fig = _base(title, 300, template)
    if "segment" in df:  # a restart breaks the line: no ramp across the downtime
        df = gapped(df.reset_index(drop=True), ["loss"])
    fig.add_trace(
        plot.Scatter(
            x=df["ts"],
            y=df["loss"],
            mode="lines",
            name="loss",
            line={"width": 1},
            connectgaps=False,
            customdata=df[["step"]].to_numpy(),
            hovertemplate="step %{customdata[0]:,}<br>loss %{y:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        yaxis={"title": "Loss (nats/token)", "type": "log", "automargin": False},
        xaxis=time_axis(x_range),
        **ALIGNED,
    )
    return fig


def power_series(
    df: pd.DataFrame,
    interruptions: pd.DataFrame | None = None,
    template: str = TEMPLATE,
    x_range: list | None = None,
) -> Figure:
    """Fleet GPU power (kW, or MW for a fleet past 1 MW) with each interruption (x) and the
    restart after it (triangle) marked above the line: the swings a facility sees. Over
    ``x_range`` when given, between ``ALIGNED`` margins."""
    title = "Fleet power"
    if df.empty:
        return empty(title, "No GPU samples in this range", template=template)
    top_w = float(df["power_w"].max() or 0.0)
    scale, unit = (1e6, "MW") if top_w >= 1e6 else (1e3, "kW")
    fig = _base(title, 240, template)
    fig.add_trace(
        plot.Scatter(
            x=df["ts"],
            y=df["power_w"] / scale,
            mode="lines",
            fill="tozeroy",
            name="GPU power",
            line={"color": "#fecb52", "width": 1},
            hovertemplate="%{y:,.2f} " + unit + "<extra></extra>",
        )
    )
    ints = interruptions if interruptions is not None else pd.DataFrame()
    if not ints.empty:
        y = top_w / scale * 1.08
        back = ints["ts"] + pd.to_timedelta(
            ints["detect_s"].fillna(0) + ints["restart_s"].fillna(0), unit="s"
        )
        known = ints["detect_s"].notna() | ints["restart_s"].notna()
        for name, xs, symbol, colour in (
            ("interruption", ints["ts"], "x", "#ef553b"),
            ("restart", back[known], "triangle-up", "#00cc96"),
        ):
            fig.add_trace(
                plot.Scatter(
                    x=xs,
                    y=[y] * len(xs),
                    mode="markers",
                    name=name,
                    marker={"symbol": symbol, "size": 8, "color": colour},
                    hovertemplate="%{x}<extra>" + name + "</extra>",
                )
            )
    fig.update_layout(
        yaxis={"title": f"Power ({unit})", "rangemode": "tozero", "automargin": False},
        xaxis=time_axis(x_range),
        showlegend=not ints.empty,
        **ALIGNED,
    )
    return fig
