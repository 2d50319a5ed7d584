"""The cluster's GPU-hours per day, stacked (allocated, idle, down, planned down), as
``sreport cluster utilization`` splits CPU time. A pure builder: the frames of
``telemetry.queries.accounting`` in."""

from __future__ import annotations

import pandas as pd

from app.figures import DAY_BAR_MS, TEMPLATE, _base, day_axis, empty, legend_below
from app.figures.plot import Bar, Figure

TITLE = "Where each day's GPU-hours went (UTC days)"
PARTS = {  # column -> (legend name, colour): used GPUs first, lost ones in warm colours
    "allocated": ("allocated", "#636efa"),
    "idle": ("idle", "#8c8c99"),
    "down": ("down / drained", "#ef553b"),
    "planned_down": ("planned down (maintenance)", "#ffa15a"),
}
TOP_ACCOUNTS = 6  # in the hover, the rest summed as "other"


def gpu_hours(v: float) -> str:
    """GPU-hours as read: one decimal, three under 10 (a test cluster's seconds-long jobs)."""
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.3f}"


def account_lines(accounts: pd.DataFrame, day: pd.Timestamp) -> str:
    """The hover's per-account split of one day's allocated GPU-hours, largest first."""
    rows = accounts[accounts["day"] == day].sort_values("gpu_hours", ascending=False)
    lines = [
        f"  {a}: {gpu_hours(h)} GPU-h"
        for a, h in zip(
            rows["account"][:TOP_ACCOUNTS], rows["gpu_hours"][:TOP_ACCOUNTS], strict=True
        )
    ]
    rest = rows["gpu_hours"][TOP_ACCOUNTS:].sum()
    if rest > 0:
        lines.append(f"  other: {gpu_hours(rest)} GPU-h")
    return "<br>".join(lines) or "  no job"


def day_chart(days: pd.DataFrame, accounts: pd.DataFrame, template: str = TEMPLATE) -> Figure:
    """Stacked bars per day; each bar's hover has the GPU-hours, their share of the reported
    capacity and, on allocated, the split by account."""
    if days.empty or not days["reported"].sum():
        return empty(TITLE, "No GPU capacity known for these days (no GPUs or Slurm nodes "
                     "stored)", template=template)  # fmt: skip
    fig = _base(TITLE, template=template)
    rep = days["reported"].where(days["reported"] > 0)
    by_account = [account_lines(accounts, d) for d in days["day"]]
    for col, (name, colour) in PARTS.items():
        share = (days[col] / rep * 100).fillna(0)
        extra = (
            [f"<br>by account:<br>{t}" for t in by_account]
            if col == "allocated"
            else [""] * len(days)
        )
        fig.add_trace(Bar(
            x=days["day"], y=days[col], name=name, marker_color=colour, width=DAY_BAR_MS,
            customdata=list(zip(share.round(1), extra, map(gpu_hours, days[col]), strict=True)),
            hovertemplate=f"{name}: %{{customdata[2]}} GPU-h (%{{customdata[0]}} %)"
                          "%{customdata[1]}<extra></extra>",
        ))  # fmt: skip
    fig.update_layout(
        barmode="stack",
        hovermode="x",
        yaxis_title="GPU-hours",
        xaxis=day_axis(days["day"]),
    )
    fig = legend_below(fig)
    fig.update_layout(legend={"traceorder": "normal"})  # allocated first, as stacked from 0
    return fig
