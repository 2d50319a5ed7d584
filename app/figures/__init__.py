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

from app.figures import plot as plot  # the figure modules take it from here
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
        layout = dict(full["layout"])
        # Plotly measures every tick label against the div to hide one that would cross it
        # (0.06 s of /gpus' main thread); the margins keep each inside already.
        for axis in ("xaxis", "yaxis"):
            layout[axis] = {**layout.get(axis, {}), "ticklabeloverflow": "allow"}
        return {"layout": layout, "data": data}


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


# The hover box's own background: with the paper transparent (the page's card shows through),
# a unified ("x unified") hover box took the transparent paper as its background and its text
# sat on the lines beneath it, unreadable in the dark theme (#37).
HOVER_LABEL = {
    "plotly_dark": {"bgcolor": "#2b3035", "bordercolor": "#6c757d", "font": {"color": "#f8f9fa"}},
    "plotly_white": {"bgcolor": "#ffffff", "bordercolor": "#adb5bd", "font": {"color": "#212529"}},
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
        hoverlabel=HOVER_LABEL.get(template, HOVER_LABEL[TEMPLATE]),
        # the y axis's "0" and the x axis's first time ("18:00") met at the corner (#37)
        xaxis={"ticklabelstandoff": 7},
        yaxis={"ticklabelstandoff": 5},
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


def day_axis(days: Any, title: str | None = None) -> dict[str, Any]:
    """A date axis of whole days (bars a day each): half a day either side of the first and
    last, each tick a date, a tick a day up to two weeks (Plotly's spacing beyond). Autoscaled,
    one day's bar alone spanned a millisecond either side, ticked '23:59:59.9996'."""
    stamps = pd.to_datetime(pd.Series(list(days)))
    half = pd.Timedelta(hours=12)
    axis: dict[str, Any] = {"type": "date", "tickformat": "%b %d"}
    if len(stamps):
        axis["range"] = [(stamps.min() - half).isoformat(), (stamps.max() + half).isoformat()]
    if len(stamps) <= 14:
        axis["dtick"] = 86_400_000
    return axis | ({"title": title} if title else {})


DAY_BAR_MS = 0.9 * 86_400_000  # a day's bar on a ``day_axis``: one bar alone was a hairline


def gapped(df: pd.DataFrame, ys: list[str]) -> pd.DataFrame:
    """``df`` with a row after each restart piece that repeats its last x but has no ``ys``:
    plotly breaks the line there, so a restart is not drawn as a jump back."""
    ends = df.groupby("segment", sort=False).tail(1)
    if len(ends) <= 1:
        return df
    gaps = ends.assign(**{c: np.nan for c in ys}).set_axis(ends.index + 0.5)
    return pd.concat([df, gaps]).sort_index(kind="stable")


def line_mode(y: Any, **marker: Any) -> dict[str, Any]:
    """A line trace's ``mode`` (and ``marker``) for ``y`` in drawing order: a point with no
    neighbour on its line (a restart piece of one point, such as each retry of a restart loop
    that failed in its first logged step) is drawn as a dot, where plotly's lines alone draw
    nothing; only ``"lines"`` when there is none."""
    v = np.asarray(pd.to_numeric(pd.Series(y), errors="coerce"), dtype=float)
    here = ~np.isnan(v)
    before, after = np.r_[False, here[:-1]], np.r_[here[1:], False]
    lone = here & ~before & ~after
    if not lone.any():
        return {"mode": "lines"}
    return {"mode": "lines+markers", "marker": {**marker, "size": np.where(lone, 5, 0)}}
