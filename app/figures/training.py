"""Figures of the Training page: loss curves with run events, and throughput/MFU beneath."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from app.figures import (
    ALIGNED,
    CATEGORY_COLOURS,
    TIER_COLOURS,
    _base,
    empty,
    gapped,
    legend_below,
    line_mode,
    plot,
    time_axis,
    window_range,
)
from app.figures.plot import Figure

X_TITLES = {"step": "Step", "tokens": "Tokens trained", "time": "Time (UTC)"}
RUN_COLOURS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3"]
TIER_NAMES = {"nvme": "NVMe", "pfs": "PFS", "object": "Object store"}
StepScale = Callable[[Any], Any]  # steps (a Series) -> x positions on the chart's axis


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: an exponential moving average, debiased at the start (for
    finite values the same as pandas' ``ewm(alpha=1 - weight, adjust=True)``); a NaN carries
    on to the end, as in TensorBoard. One pass in Python: a chart's series is at most a few
    thousand points, and a run has a piece per restart (386 on the 54-day llama3 run), where
    pandas' per-call cost (~0.35 ms) made the smoothing most of the Training page's build."""
    values = np.asarray(values, dtype=float)
    if weight <= 0 or len(values) == 0:
        return values
    out = []
    last, keep, new, bias = 0.0, float(weight), 1.0 - weight, 1.0
    for v in values.tolist():
        last = last * keep + new * v
        bias *= keep  # weight ** (points so far)
        out.append(last / (1.0 - bias))
    return np.array(out)


def _x(df: pd.DataFrame, axis: str) -> pd.Series:
    return df["ts"] if axis == "time" else df[axis]


def has_tokens(df: pd.DataFrame) -> bool:
    """Whether a series logged a tokens count (a Megatron text log may log steps only)."""
    return "tokens" in df and bool(df["tokens"].notna().any())


def axis_for(df: pd.DataFrame, axis: str, name: str) -> tuple[str, str]:
    """The x axis to draw the run's series on, and a note when it is not the one asked for:
    a run without a tokens metric is drawn by step (saying so), never on an empty axis."""
    if axis == "tokens" and not df.empty and not has_tokens(df):
        return "step", f"{name} has no tokens metric: shown by step"
    return axis, ""


def shared_x_range(runs: dict[str, pd.DataFrame], axis: str) -> list | None:
    """The x range of the loss and throughput charts: every run the loss chart draws (the
    first is the primary, whose tokens decide the axis, see ``axis_for``), padded 1 % a side
    (by wall clock as ``window_range`` pads); None when no run has a point."""
    if not runs:
        return None
    name, primary = next(iter(runs.items()))
    axis = axis_for(primary, axis, name)[0]
    ends = []
    for df in runs.values():
        if df.empty or (axis == "tokens" and not has_tokens(df)):
            continue
        x = _x(df, axis).dropna()
        if len(x):
            ends += [x.min(), x.max()]
    if not ends:
        return None
    lo, hi = min(ends), max(ends)
    if axis == "time":  # as the Overview's time charts are padded
        return window_range(lo, hi)
    pad = max(float(hi - lo) * 0.01, 1.0)
    return [float(lo) - pad, float(hi) + pad]


def _with_restarts(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``segment``/``rolled_back`` (``mark_restarts``), if a caller did not add them:
    one piece, nothing rolled back."""
    if "segment" in df:
        return df.reset_index(drop=True)
    return df.reset_index(drop=True).assign(segment=0, rolled_back=False)


def _smooth(df: pd.DataFrame, weight: float) -> pd.Series:
    """EMA of the loss, started over at each restart piece (a restore resets the curve)."""
    loss, out = df["loss"].to_numpy(dtype=float), np.empty(len(df))
    for rows in df.groupby("segment", sort=False).indices.values():
        out[rows] = ema(loss[rows], weight)
    return pd.Series(out, index=df.index)


def _loss_traces(df: pd.DataFrame, name: str, colour: str, axis: str, weight: float) -> list[dict]:
    """A run's loss: raw (faint, when smoothing), smoothed, and the rolled-back work (steps
    trained again after a restore) dotted, in the run's colour and legend group."""
    df = _with_restarts(df)
    lost = df["rolled_back"].astype(bool)
    # the dotted piece starts at the last kept point, so the two lines meet
    lead = lost.shift(-1, fill_value=False) & (df["segment"].shift(-1) == df["segment"])
    smooth = _smooth(df, weight)
    df = df.assign(raw=df["loss"], kept=smooth.where(~lost), lost=smooth.where(lost | lead))
    g = gapped(df, ["raw", "kept", "lost"])
    x, custom = _x(g, axis), g[["step", "attempt"]].to_numpy()
    hover = "step %{customdata[0]:,} · attempt %{customdata[1]}<br>loss %{y:.4f}<extra>"

    def line(y: str, label: str, width: float, **style: Any) -> dict:
        return plot.Scatter(
            x=x,
            y=g[y],
            **line_mode(g[y], color=colour),  # a restart's lone point a dot
            name=label,
            legendgroup=name,
            line={"color": colour, "width": width, "dash": style.pop("dash", "solid")},
            **style,
        )

    out = []
    if weight > 0:
        faint = {"opacity": 0.25, "hoverinfo": "skip", "showlegend": False}
        out.append(line("raw", f"{name} (raw)", 1, **faint))
    out.append(line("kept", name, 1.6, customdata=custom, hovertemplate=f"{hover}{name}</extra>"))
    if lost.any():
        out.append(
            line(
                "lost",
                f"{name}: rolled back",
                1.4,
                dash="dot",
                opacity=0.7,
                customdata=custom,
                hovertemplate=hover + "rolled back (lost at a restart)</extra>",
            )
        )
    return out


def loss_figure(
    runs: dict[str, pd.DataFrame],
    axis: str,
    smoothing: float,
    log_y: bool,
    events: pd.DataFrame,
    checkpoints: pd.DataFrame,
    tokens_per_step: float,
    template: str,
    x_range: list | None = None,
) -> Figure:
    """Loss per run (raw faint, smoothed solid, each piece between restarts its own line and
    the rolled-back work dotted); interruptions coloured by category, the rolled-back span of
    each restore shaded, checkpoints per tier as ticks along the bottom. The first run is the
    primary one: without a tokens metric it is drawn by step, an overlay run without one is
    left out, and a note under the title says so."""
    title = "Training loss"
    if all(df.empty for df in runs.values()):
        return empty(title, "No training metrics in this range", 420, template)
    fig = _base(title, 420, template)
    primary_name, primary = next(iter(runs.items()))
    axis, note = axis_for(primary, axis, primary_name)
    notes = [note] if note else []
    for i, (name, df) in enumerate(runs.items()):
        if df.empty:
            continue
        if axis == "tokens" and not has_tokens(df):
            notes.append(f"{name} has no tokens metric: not shown")
            continue
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        for trace in _loss_traces(df, name, colour, axis, smoothing):
            fig.add_trace(trace)
    to_x = _step_scale(primary, axis, tokens_per_step)
    _mark_events(fig, events, axis, to_x)
    _mark_checkpoints(fig, checkpoints, axis, to_x)
    fig.update_layout(
        xaxis=time_axis(x_range, X_TITLES[axis]),
        yaxis={
            "title": "Loss (nats/token)",
            "type": "log" if log_y else "linear",
            "automargin": False,
        },
        hovermode="closest",
        **ALIGNED,
    )
    # below the chart: with a run, its rolled-back work, the down spans, three categories and
    # three tiers, the legend wraps and would run into the title
    return _noted(legend_below(fig, rows=2), notes)


def _noted(fig: Figure, notes: list[str]) -> Figure:
    if notes:
        fig.update_layout(
            title={"subtitle": {"text": " · ".join(notes), "font": {"size": 12}}},
            margin={"t": 64},
        )
    return fig


def _step_scale(df: pd.DataFrame, axis: str, tps: float) -> StepScale:
    """Steps -> x of the axis: steps, or tokens (``tps`` tokens per step; unknown, the run's
    own step -> tokens as logged). Wall-clock marks do not use it."""
    if axis != "tokens":
        return lambda steps: steps
    if tps > 0:
        return lambda steps: steps * tps
    known = df.dropna(subset=["step", "tokens"]).sort_values("step")
    kept = known[~known["rolled_back"].astype(bool)] if "rolled_back" in known else known
    return lambda steps: pd.Series(
        np.interp(np.asarray(steps, dtype=float), kept["step"], kept["tokens"]),
        index=getattr(steps, "index", None),
    )


def _event_x(events: pd.DataFrame, axis: str, to_x: StepScale, col: str) -> pd.Series:
    if axis == "time":
        return events["ts"] if col == "failed_step" else events["resumed"]
    return to_x(events[col])


def _listed(values: Any) -> list:
    """A column's values as a list of JSON-ready items: times as ``datetime`` (missing as
    None), numbers as floats."""
    a = np.asarray(values)
    if a.dtype.kind == "M":  # via microseconds: nanosecond times would become integers
        a = a.astype("datetime64[us]").astype(object)
    return a.tolist()


def _mark_events(fig: Figure, events: pd.DataFrame, axis: str, to_x: StepScale) -> None:
    if events.empty:
        return
    x0 = _event_x(events, axis, to_x, "restored_step")
    x1 = _event_x(events, axis, to_x, "failed_step")
    if axis == "time":  # shade the downtime: failure to resumed training
        x0, x1 = events["ts"], events["resumed"]
    # All shaded spans as one filled trace (one add_vrect per span costs ~50 ms each in
    # plotly.py: 20 s for the 437 interruptions of a 54-day run). Ends as plain datetimes
    # (or numbers), converted once: a list of pandas Timestamps costs ~2 us per item later.
    xs: list = []
    ys: list = []
    for a, b in zip(_listed(x0), _listed(x1), strict=True):
        if b != a:
            xs += [a, a, b, b, a, None]
            ys += [0, 1, 1, 0, 0, None]
    if xs:
        fig.add_trace(
            plot.Scatter(
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
    # per category, by row position: a sub-frame per category cost pandas' overhead each
    at = np.asarray(_event_x(events, axis, to_x, "failed_step"))
    custom = events[["component", "host", "restored_tier", "lost_steps"]].astype(str).to_numpy()
    for cat, rows in events.groupby("category").indices.items():
        fig.add_trace(
            plot.Scatter(
                x=at[rows],
                y=[1.0] * len(rows),
                yaxis="y2",
                mode="markers",
                name=f"{cat} interruption",
                marker={
                    "symbol": "triangle-down",
                    "size": 11,
                    "color": CATEGORY_COLOURS.get(str(cat), "#b6b6b6"),
                },
                customdata=custom[rows],
                hovertemplate=(
                    "%{customdata[0]} on %{customdata[1]}<br>restored from "
                    "%{customdata[2]}, %{customdata[3]} steps lost<extra>" + str(cat) + "</extra>"
                ),
            )
        )
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1.05], "visible": False})


def _mark_checkpoints(fig: Figure, ck: pd.DataFrame, axis: str, to_x: StepScale) -> None:
    if ck.empty:
        return
    levels = {"nvme": 0.02, "pfs": 0.05, "object": 0.08}
    at = np.asarray(ck["ts"] if axis == "time" else to_x(ck["step"]))
    custom = ck[["step", "status"]].astype(str).to_numpy()
    for tier, rows in ck.groupby("tier").indices.items():  # by position, as _mark_events
        fig.add_trace(
            plot.Scatter(
                x=at[rows],
                y=[levels.get(str(tier), 0.1)] * len(rows),
                yaxis="y2",
                mode="markers",
                name=f"{TIER_NAMES.get(str(tier), tier)} checkpoint",
                marker={
                    "symbol": "line-ns-open",
                    "size": 8,
                    "color": TIER_COLOURS.get(str(tier), "#999"),
                },
                customdata=custom[rows],
                hovertemplate="step %{customdata[0]} (%{customdata[1]})<extra>"
                + str(tier)
                + " checkpoint</extra>",
                visible=True if tier != "nvme" else "legendonly",
            )
        )
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1.05], "visible": False})


def _step_time_figure(
    df: pd.DataFrame, axis: str, template: str, name: str, x_range: list | None
) -> Figure:
    """Seconds per step (from the progress points' times) where the run logs no tokens/s: a
    slowdown still shows, as a rise; each restart piece its own line, from zero."""
    df = _with_restarts(df)
    if "step_s" not in df or not df["step_s"].notna().any():
        return empty("Step time", f"{name} logs no throughput (tokens/s) and too few timed steps "
                     "for a step time in this range", 260, template)  # fmt: skip
    axis, note = axis_for(df, axis, name)
    g = gapped(df, ["step_s"])
    fig = _base("Step time (the run logs no tokens/s)", 260, template)
    fig.add_trace(
        plot.Scatter(
            x=_x(g, axis), y=g["step_s"], mode="lines", name="Step time",
            line={"color": "#19d3f3", "width": 1},
            hovertemplate="%{y:.3f} s per step<extra></extra>",
        )
    )  # fmt: skip
    top = float(df["step_s"].max()) * 1.08 or 1.0
    fig.update_layout(
        xaxis=time_axis(x_range, X_TITLES[axis]),
        yaxis={"title": "Step time (s)", "range": [0.0, top], "automargin": False},
        showlegend=False,
        **ALIGNED,
    )
    return _noted(fig, [note] if note else [])


ONE_LINE = "one line: throughput on the left axis, MFU on the right"


def throughput_figure(
    df: pd.DataFrame,
    axis: str,
    template: str,
    name: str = "this run",
    x_range: list | None = None,
) -> Figure:
    """Tokens per second (left) and MFU in percent (right) of the primary run (``name``), each
    piece between restarts its own line; by step (saying so) when the run has no tokens
    metric, and a message instead of an empty axis when it logs no throughput. Over
    ``x_range`` (the loss chart's, ``shared_x_range``) when given."""
    title = "Throughput and MFU"
    if df.empty:
        return empty(title, "No training metrics in this range", 260, template)
    if not df["tokens_per_s"].notna().any():
        return _step_time_figure(df, axis, template, name, x_range)
    axis, note = axis_for(df, axis, name)
    df = _with_restarts(df)
    fig = _base(title, 260, template)
    # MFU is throughput x 6 x params / (GPUs x peak): one line, read on either axis.
    g = gapped(df.assign(mtps=df["tokens_per_s"] / 1e6), ["mtps"])
    tps = df["tokens_per_s"] / 1e6
    ratio = (df["mfu"] * 100 / tps).median()
    fig.add_trace(
        plot.Scatter(
            x=_x(g, axis),
            y=g["mtps"],
            mode="lines",
            name="Throughput",
            line={"color": "#19d3f3", "width": 1},
            customdata=(g["mfu"] * 100).to_numpy(),
            hovertemplate="%{y:.4f} M tokens/s"
            + (" · MFU %{customdata:.2f} %" if pd.notna(ratio) else "")
            + "<extra></extra>",
        )
    )
    # From zero: a 1 % dip drawn over a zoomed axis looked like a crash (#37); the restarts'
    # drops to nothing still show, as gaps.
    top = float(tps.max()) * 1.08 or 1.0
    layout = {
        "xaxis": time_axis(x_range, X_TITLES[axis]),
        "yaxis": {
            "title": "Throughput (M tokens/s)",
            "range": [0.0, top],
            "automargin": False,
        },
        "showlegend": False,
        **ALIGNED,
    }
    if pd.notna(ratio):  # the MFU axis only where the run logs MFU
        per_mtps = float(ratio)
        fig.add_trace(
            plot.Scatter(x=[None], y=[None], yaxis="y2", showlegend=False, hoverinfo="skip")
        )
        layout["yaxis2"] = {
            "title": "MFU (%)",
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "range": [0.0, top * per_mtps],
            "tickmode": "auto",
            "tickformat": ".1f",
            "automargin": False,
        }
    fig.update_layout(**layout)
    notes = [note] if note else []
    if pd.notna(ratio):  # one line read on two axes, no legend: said, or it read as two lines
        notes.append(ONE_LINE)  # drawn over each other with nothing naming them (#57)
    return _noted(fig, notes)
