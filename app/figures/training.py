"""Figures of the Training page: loss curves with run events, and throughput/MFU beneath."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures import CATEGORY_COLOURS, TIER_COLOURS, _base, empty

X_TITLES = {"step": "Step", "tokens": "Tokens trained", "time": "Time (UTC)"}
RUN_COLOURS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3"]
TIER_NAMES = {"nvme": "NVMe", "pfs": "PFS", "object": "Object store"}


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: an exponential moving average, debiased at the start."""
    if weight <= 0 or len(values) == 0:
        return np.asarray(values, dtype=float)
    out = np.empty(len(values))
    last, n = 0.0, 0
    for i, v in enumerate(np.asarray(values, dtype=float)):
        n += 1
        last = last * weight + (1 - weight) * v
        out[i] = last / (1 - weight**n)
    return out


def _x(df: pd.DataFrame, axis: str) -> pd.Series:
    return df["ts"] if axis == "time" else df[axis]


def loss_figure(
    runs: dict[str, pd.DataFrame],
    axis: str,
    smoothing: float,
    log_y: bool,
    events: pd.DataFrame,
    checkpoints: pd.DataFrame,
    tokens_per_step: float,
    template: str,
) -> go.Figure:
    """Loss per run (raw faint, smoothed solid); interruptions coloured by category, the
    rolled-back span of each restore shaded, checkpoints per tier as ticks along the bottom."""
    title = "Training loss"
    if all(df.empty for df in runs.values()):
        return empty(title, "No training metrics in this range", 420, template)
    fig = _base(title, 420, template)
    for i, (name, df) in enumerate(runs.items()):
        if df.empty:
            continue
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        custom = df[["step", "attempt"]].to_numpy()
        hover = "step %{customdata[0]:,} · attempt %{customdata[1]}<br>loss %{y:.4f}<extra>"
        if smoothing > 0:
            fig.add_trace(
                go.Scattergl(
                    x=_x(df, axis),
                    y=df["loss"],
                    mode="lines",
                    name=f"{name} (raw)",
                    line={"color": colour, "width": 1},
                    opacity=0.25,
                    hoverinfo="skip",
                    showlegend=False,
                )
            )
        fig.add_trace(
            go.Scattergl(
                x=_x(df, axis),
                y=ema(df["loss"].to_numpy(), smoothing),
                mode="lines",
                name=name,
                line={"color": colour, "width": 1.6},
                customdata=custom,
                hovertemplate=hover + name + "</extra>",
            )
        )
    _mark_events(fig, events, axis, tokens_per_step)
    _mark_checkpoints(fig, checkpoints, axis, tokens_per_step)
    fig.update_layout(
        xaxis={"title": X_TITLES[axis]},
        yaxis={"title": "Loss (nats/token)", "type": "log" if log_y else "linear"},
        hovermode="closest",
    )
    return fig


def _event_x(events: pd.DataFrame, axis: str, tps: float, col: str) -> pd.Series:
    if axis == "time":
        return events["ts"] if col == "failed_step" else events["resumed"]
    steps = events[col]
    return steps * tps if axis == "tokens" else steps


def _mark_events(fig: go.Figure, events: pd.DataFrame, axis: str, tps: float) -> None:
    if events.empty:
        return
    x0 = _event_x(events, axis, tps, "restored_step")
    x1 = _event_x(events, axis, tps, "failed_step")
    if axis == "time":  # shade the downtime: failure to resumed training
        x0, x1 = events["ts"], events["resumed"]
    # All shaded spans as one filled trace (one add_vrect per span costs ~50 ms each in
    # plotly.py: 20 s for the 437 interruptions of a 54-day run).
    xs: list = []
    ys: list = []
    for a, b in zip(x0, x1, strict=True):
        if b != a:
            xs += [a, a, b, b, a, None]
            ys += [0, 1, 1, 0, 0, None]
    if xs:
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                yaxis="y2",
                mode="lines",
                fill="toself",
                fillcolor="rgba(239,85,59,0.14)",
                line={"width": 0},
                hoverinfo="skip",
                name="Rolled back / down",
            )
        )
    for cat, grp in events.groupby("category"):
        xs = _event_x(grp, axis, tps, "failed_step")
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[1.0] * len(grp),
                yaxis="y2",
                mode="markers",
                name=f"{cat} interruption",
                marker={
                    "symbol": "triangle-down",
                    "size": 11,
                    "color": CATEGORY_COLOURS.get(str(cat), "#b6b6b6"),
                },
                customdata=grp[["component", "host", "restored_tier", "lost_steps"]].astype(str),
                hovertemplate=(
                    "%{customdata[0]} on %{customdata[1]}<br>restored from "
                    "%{customdata[2]}, %{customdata[3]} steps lost<extra>" + str(cat) + "</extra>"
                ),
            )
        )
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1.05], "visible": False})


def _mark_checkpoints(fig: go.Figure, ck: pd.DataFrame, axis: str, tps: float) -> None:
    if ck.empty:
        return
    levels = {"nvme": 0.02, "pfs": 0.05, "object": 0.08}
    for tier, grp in ck.groupby("tier"):
        xs = (
            grp["ts"]
            if axis == "time"
            else (grp["step"] * tps if axis == "tokens" else grp["step"])
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[levels.get(str(tier), 0.1)] * len(grp),
                yaxis="y2",
                mode="markers",
                name=f"{TIER_NAMES.get(str(tier), tier)} checkpoint",
                marker={
                    "symbol": "line-ns-open",
                    "size": 8,
                    "color": TIER_COLOURS.get(str(tier), "#999"),
                },
                customdata=grp[["step", "status"]].astype(str),
                hovertemplate="step %{customdata[0]} (%{customdata[1]})<extra>"
                + str(tier)
                + " checkpoint</extra>",
                visible=True if tier != "nvme" else "legendonly",
            )
        )
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1.05], "visible": False})


def throughput_figure(df: pd.DataFrame, axis: str, template: str) -> go.Figure:
    """Tokens per second (left) and MFU in percent (right) of the primary run."""
    title = "Throughput and MFU"
    if df.empty:
        return empty(title, "No training metrics in this range", 260, template)
    fig = _base(title, 260, template)
    # MFU is throughput x 6 x params / (GPUs x peak): one line, read on either axis.
    tps = df["tokens_per_s"] / 1e6
    per_mtps = float((df["mfu"] * 100 / tps).median())
    fig.add_trace(
        go.Scattergl(
            x=_x(df, axis),
            y=tps,
            mode="lines",
            name="Throughput",
            line={"color": "#19d3f3", "width": 1},
            customdata=(df["mfu"] * 100).to_numpy(),
            hovertemplate="%{y:.4f} M tokens/s · MFU %{customdata:.2f} %<extra></extra>",
        )
    )
    lo, hi = float(tps.min()), float(tps.max())
    pad = max((hi - lo) * 0.1, hi * 0.002)
    fig.add_trace(go.Scatter(x=[None], y=[None], yaxis="y2", showlegend=False, hoverinfo="skip"))
    fig.update_layout(
        xaxis={"title": X_TITLES[axis]},
        yaxis={"title": "Throughput (M tokens/s)", "range": [lo - pad, hi + pad]},
        yaxis2={
            "title": "MFU (%)",
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "range": [(lo - pad) * per_mtps, (hi + pad) * per_mtps],
            "tickmode": "auto",
            "tickformat": ".1f",
        },
        showlegend=False,
    )
    return fig
