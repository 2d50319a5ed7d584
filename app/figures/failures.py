"""Figures of the Failures page: the interruption taxonomy beside the Llama 3 reference, and
the interruption timeline. Pure builders: frames from ``telemetry.queries.failures`` in."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from app.figures import CATEGORY_COLOURS, TEMPLATE, _base, empty, plot
from app.figures.plot import Figure
from app.figures.units import rounded

RUN_COLOUR = "#636efa"
REF_COLOUR = "#8c8c99"
TIER_NAMES = {"nvme": "NVMe", "pfs": "PFS", "object": "object store"}
REF_SOURCE = "The Llama 3 Herd of Models, 2024, Table 5 (54 days, 16,384 H100 GPUs)"


def basis_note(n_unexpected: int, n_planned: int) -> str:
    """The percentage basis, stated on the chart (the paper's own percentages disagree with
    its counts for one row, so the basis must be explicit)."""
    return "<br>".join(  # short lines: the note must fit a half-width chart at 1366 px
        [
            "Basis: share of unexpected interruptions.",
            f"This run = count / {n_unexpected:,} in range ({n_planned:,} planned not counted).",
            "Reference = count / 419 (the paper prints 30.1 % for Faulty GPU,",
            "which is 148/419 = 35.3 %).",
            f"Source: {REF_SOURCE.replace(' (', '<br>(')}.",
        ]
    )


def taxonomy_chart(df: pd.DataFrame, by: str, n_planned: int, template: str = TEMPLATE) -> Figure:
    """Grouped horizontal bars, % of unexpected interruptions per component (or category):
    this run vs the Llama 3 405B reference. Counts are in the hover."""
    what = "component" if by == "component" else "category"
    title = f"Unexpected interruptions by {what}: this run vs Llama 3 405B"
    if df.empty:
        return empty(title, "No interruption taxonomy available", template=template)
    n = int(df["count"].sum())
    rows = len(df)
    fig = _base(title, max(350, 200 + rows * 26), template)
    fig.add_trace(
        plot.Bar(
            y=df["key"],
            x=df["ref_pct"],
            orientation="h",
            name="Llama 3 405B (n = 419)",
            marker={"color": REF_COLOUR},
            customdata=np.stack([df["category"], df["ref_count"], df["ref_pct_printed"]], axis=-1),
            hovertemplate=(
                "<b>%{y}</b> (%{customdata[0]})<br>Llama 3 405B: %{customdata[1]} of 419 "
                "= %{x:.1f} %<br>printed in the paper: %{customdata[2]:.1f} %<extra></extra>"
            ),
        )
    )
    fig.add_trace(
        plot.Bar(
            y=df["key"],
            x=df["pct"],
            orientation="h",
            name=f"This run (n = {n:,})",
            marker={"color": RUN_COLOUR},
            text=[str(c) if c else "" for c in df["count"]],
            textposition="outside",
            textfont={"size": 11},
            constraintext="none",
            cliponaxis=False,
            customdata=np.stack(
                [df["category"], df["count"], known(df["lost_gpu_hours"])], axis=-1
            ),
            hovertemplate=(
                f"<b>%{{y}}</b> (%{{customdata[0]}})<br>this run: %{{customdata[1]}} of {n:,} "
                "= %{x:.1f} %<br>lost %{customdata[2]} GPU-hours<extra></extra>"
            ),
        )
    )
    xmax = float(max(df["pct"].max(), df["ref_pct"].max(), 1.0)) * 1.12
    fig.update_layout(
        barmode="group",
        bargap=0.25,
        hovermode="closest",
        margin={"l": 10, "r": 20, "t": 60, "b": 170},
        legend={"orientation": "h", "y": 1.0, "x": 0.0, "yanchor": "bottom"},
        xaxis={"title": "Share of unexpected interruptions (%)", "range": [0, xmax]},
        yaxis={"autorange": "reversed", "automargin": True, "title": None},
    )
    fig.update_layout(title={"y": 0.98, "yanchor": "top"})
    fig.add_annotation(
        text=basis_note(n, n_planned),
        showarrow=False,
        xref="paper",
        yref="paper",
        x=1.0,  # anchored right: wide component labels leave the plot area narrow
        y=0.0,
        yshift=-58,
        xanchor="right",
        yanchor="top",
        align="left",
        font={"size": 10},
    )
    if n == 0:
        fig.add_annotation(
            text="No unexpected interruptions in this range",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.98,
            y=0.5,
            xanchor="right",
            font={"size": 13},
        )
    return fig


def known(values: pd.Series, digits: int = 1) -> pd.Series:
    """Figures a record may not give (lost GPU-hours, downtime) for a table or a hover:
    rounded, or "–" where unknown (never 0, never "nan"); a value the rounding would make 0
    keeps two significant digits (a short job's 0.034 GPU-hours lost is not "0")."""
    values = pd.Series(values, dtype=float)
    return rounded(values, digits).astype(object).where(values.notna(), "–")


def _hover_rows(df: pd.DataFrame) -> np.ndarray:
    def fmt_gpu(host: str, gpu: object) -> str:
        return host if pd.isna(gpu) else f"{host} GPU {int(gpu)}"

    def fmt_xid(x: object, name: str) -> str:
        return "none" if pd.isna(x) else f"{int(x)} {name}"

    def fmt_tier(t: object, step: object) -> str:
        if pd.isna(t) or not t:
            return "none"
        return f"{TIER_NAMES.get(str(t), str(t))} (step {int(step):,})" if not pd.isna(step) else t

    return np.stack(
        [
            df["component"].astype(str),
            [fmt_gpu(h, g) for h, g in zip(df["host"], df["gpu"], strict=True)],
            [fmt_xid(x, n) for x, n in zip(df["xid"], df["xid_name"], strict=True)],
            known(df["downtime_s"].astype(float) / 60.0),
            ["–" if pd.isna(n) else f"{int(n):,}" for n in df["lost_steps"]],
            [fmt_tier(t, s) for t, s in zip(df["restored_tier"], df["restored_step"], strict=True)],
            df["recovery"].fillna("").astype(str),
            known(df["lost_gpu_hours"].astype(float)),
        ],
        axis=-1,
    )


_TIMELINE_HOVER = (
    "<b>%{customdata[0]}</b><br>%{x|%Y-%m-%d %H:%M:%S} UTC<br>host: %{customdata[1]}"
    "<br>XID: %{customdata[2]}<br>downtime: %{customdata[3]} min<br>steps lost: "
    "%{customdata[4]}<br>restored from: %{customdata[5]}<br>recovery: %{customdata[6]}"
    "<br>lost: %{customdata[7]} GPU-hours"
)


def interruption_timeline(
    df: pd.DataFrame,
    start: datetime,
    end: datetime,
    by: str = "component",
    template: str = TEMPLATE,
    undated: int = 0,
) -> Figure:
    """One marker per interruption, x = time, y = component (or category), coloured by
    category; planned ones hollow, manual recoveries as stars. Hover: host/GPU, XID,
    downtime, steps lost, restored tier. ``undated``: interruptions no line dates, which have
    no place on the axis (said in the title, listed below it)."""
    title = "Interruptions over time"
    if undated:
        title += f" ({undated} at a time unknown: not on this axis, in the list below)"
    if df.empty:
        return empty(title, "No dated interruptions in this range" if undated else
                     "No interruptions in this range", template=template)
    ycol = "component" if by == "component" else "category"
    rows = pd.DataFrame({"cat": df["category"], "y": df[ycol]}).drop_duplicates()
    rows["planned"] = rows["cat"] == "Planned"  # planned work at the bottom, apart
    order = rows.sort_values(["planned", "cat", "y"])["y"].drop_duplicates().tolist()
    fig = _base(title, max(300, 160 + len(order) * 28), template)
    for cat, grp in df.groupby("category", sort=True):
        planned = grp["planned"].astype(bool).to_numpy()
        manual = (grp["recovery"] == "manual").to_numpy()
        fig.add_trace(
            plot.Scatter(
                x=grp["ts"],
                y=grp[ycol],
                mode="markers",
                name=str(cat),
                marker={
                    "color": CATEGORY_COLOURS.get(str(cat), "#cccccc"),
                    "size": np.where(manual, 16, 12).tolist(),
                    "symbol": np.where(
                        manual, "star", np.where(planned, "circle-open", "circle")
                    ).tolist(),
                    "line": {"width": 2 if planned.all() else 1, "color": "rgba(0,0,0,0.4)"},
                },
                customdata=_hover_rows(grp),
                hovertemplate=_TIMELINE_HOVER + f"<extra>{cat}</extra>",
            )
        )
    pad = (end - start) * 0.01  # keep markers at the range edges whole
    fig.update_layout(
        hovermode="closest",
        # room for two-line date ticks and the axis title, set rather than left to automargin:
        # expanded after the first draw, the title was drawn outside the figure, over the card
        # below it
        margin={"l": 10, "r": 20, "t": 40, "b": 62},
        legend={"orientation": "h", "y": 1.0, "x": 1.0, "xanchor": "right", "yanchor": "bottom"},
        xaxis={
            "title": {"text": "Time (UTC)", "standoff": 6},
            "range": [start - pad, end + pad],
            "automargin": False,
        },
        yaxis={
            "title": None,
            "automargin": True,
            "categoryorder": "array",
            "categoryarray": order[::-1],
            "fixedrange": True,
        },
    )
    return fig
