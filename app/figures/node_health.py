"""Node health over time: one row per node (the worst first), coloured bands for the time it
was drained, down or in maintenance, and a mark at each rule's finding. A pure builder: the
frames of ``telemetry.queries.node_health`` in."""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from app.figures import TEMPLATE, _base, empty, legend_below, time_axis, window_range
from app.figures.plot import Bar, Figure, Scatter

TITLE = "Node health over time"
KINDS = {  # Slurm's word -> (legend, colour); in service is the background
    "drained": ("drained", "#ffa15a"),
    "down": ("down", "#ef553b"),
    "maintenance": ("maintenance", "#8c8c99"),
}
ROW_PX = 22


def timeline(states: pd.DataFrame, found: pd.DataFrame, hosts: list[str], start: datetime,
             end: datetime, template: str = TEMPLATE) -> Figure:  # fmt: skip
    """``hosts`` as rows (worst first, top), bands from ``states`` (host, start_ts, end_ts,
    kind, reason, reason_user) clipped to [start, end], and ``found`` (host, rule's words in
    ``what``, ``last_ts``) as marks."""
    if not hosts:
        return empty(TITLE, "No node drained, down or with a finding in this range",
                     template=template)  # fmt: skip
    fig = _base(TITLE, height=120 + ROW_PX * len(hosts), template=template)
    rows = list(reversed(hosts))  # the worst at the top
    st = states[states["host"].isin(hosts)]
    for kind, (name, colour) in KINDS.items():
        k = st[st["kind"] == kind]
        if k.empty:
            continue
        a = k["start_ts"].clip(lower=pd.Timestamp(start))
        b = k["end_ts"].fillna(pd.Timestamp(end)).clip(upper=pd.Timestamp(end))
        width = (b - a).dt.total_seconds() * 1000
        who = k["reason_user"].fillna("").map(lambda u: f" (set by {u})" if u else "")
        text = k["reason"].fillna("").astype(str) + who
        fig.add_trace(Bar(
            y=k["host"], x=width, base=a, orientation="h", name=name, marker_color=colour,
            customdata=list(zip(a.dt.strftime("%Y-%m-%d %H:%M"), b.dt.strftime("%H:%M"), text,
                                strict=True)),
            hovertemplate=f"%{{y}} {name} %{{customdata[0]}} – %{{customdata[1]}} UTC"
                          "<br>%{customdata[2]}<extra></extra>",
        ))  # fmt: skip
    f = found[found["host"].isin(hosts)]
    if not f.empty:
        fig.add_trace(Scatter(
            y=f["host"], x=f["last_ts"], mode="markers", name="finding",
            marker={"symbol": "x", "size": 10, "color": "#ab63fa"},
            customdata=f["what"].astype(str), hovertemplate="%{y}: %{customdata} "
            "(last %{x|%Y-%m-%d %H:%M} UTC)<extra></extra>",
        ))  # fmt: skip
    fig.update_layout(
        barmode="overlay",
        xaxis=time_axis(window_range(start, end)) | {"type": "date"},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": rows,
               "title": None, "automargin": True},  # fmt: skip
    )
    return legend_below(fig)
