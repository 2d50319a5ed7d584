"""The Overview's figures: the fleet's utilization and temperature, its power, and the loss
curve, one above the other over the same window, interruptions marked."""

from __future__ import annotations

import pandas as pd

from app.figures import (
    ALIGNED,
    CATEGORY_COLOURS,
    TEMPLATE,
    _base,
    empty,
    gapped,
    legend_below,
    line_mode,
    plot,
    time_axis,
)
from app.figures.plot import Figure


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
    _mark_interruptions(fig, interruptions, 102)
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


def _mark_interruptions(
    fig: Figure, interruptions: pd.DataFrame | None, y: float, yaxis: str | None = None
) -> None:
    """An x per interruption at height ``y`` (on ``yaxis``), one trace per category, the
    component and host in its hover and its start (``customdata[2]``: a click on it opens
    the incident view)."""
    ints = (
        interruptions
        if interruptions is not None and not interruptions.empty
        else pd.DataFrame(columns=["ts", "category", "component", "host"])
    )
    at = ints["ts"].to_numpy()
    # component, host, and the start as the incident view's URL names it (a click opens it)
    starts = [pd.Timestamp(t).isoformat() for t in ints["ts"]]
    custom = ints[["component", "host"]].astype(str).assign(at=starts).to_numpy()
    axis = {"yaxis": yaxis} if yaxis else {}
    # per category by row position (a sub-frame per category costs pandas' overhead each)
    for cat, rows in ints.groupby("category").indices.items():
        fig.add_trace(
            plot.Scatter(
                x=at[rows],
                y=[y] * len(rows),
                mode="markers",
                name=f"{cat} interruption",
                marker={"symbol": "x", "size": 9, "color": CATEGORY_COLOURS.get(cat, "#ccc")},
                customdata=custom[rows],
                hovertemplate="%{customdata[0]} on %{customdata[1]}<extra>" + cat + "</extra>",
                **axis,
            )
        )


def loss_curve(
    df: pd.DataFrame,
    template: str = TEMPLATE,
    x_range: list | None = None,
    interruptions: pd.DataFrame | None = None,
) -> Figure:
    """The Overview's loss over time, a restart breaking the line, each interruption marked
    above it (the fleet chart beside it is empty for a run known from its logs alone); over
    ``x_range`` when given, between ``ALIGNED`` margins."""
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
            name="loss",
            line={"width": 1},
            connectgaps=False,
            customdata=df[["step"]].to_numpy(),
            hovertemplate="step %{customdata[0]:,}<br>loss %{y:.4f}<extra></extra>",
            **line_mode(df["loss"]),  # a restart's lone point a dot
        )
    )
    marked = interruptions is not None and not interruptions.empty
    if marked:  # on a hidden 0-1 axis over the log one: the top whatever the loss
        _mark_interruptions(fig, interruptions, 0.97, "y2")
    fig.update_layout(
        yaxis={"title": "Loss (nats/token)", "type": "log", "automargin": False},
        xaxis=time_axis(x_range),
        **ALIGNED,
    )
    if marked:
        fig.update_layout(
            yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
            showlegend=False,
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
