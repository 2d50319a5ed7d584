"""Figures and display tables of the Checkpoints page: pure builders, frames in, figures out."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from app.figures import (
    DAY_BAR_MS,
    TEMPLATE,
    TIER_COLOURS,
    _base,
    day_axis,
    empty,
    legend_below,
    plot,
)
from app.figures.failures import known
from app.figures.plot import Figure
from app.figures.units import fmt_bytes, fmt_duration, rounded

TIER_NAMES = {"nvme": "NVMe (node-local)", "pfs": "Parallel filesystem", "object": "Object store",
              "unknown": "tier unknown"}  # fmt: skip
RESTORE_COLOURS = TIER_COLOURS | {"none": "#ef553b"}
TIER_TABLE_COLUMNS = {
    "tier_name": "Tier",
    "age": "Last checkpoint",
    "last_step": "Step",
    "n": "Count",
    "failed": "Failed",
    "size": "Size / ckpt",
    "write_mean_s": "Write mean (s)",
    "write_p95_s": "Write p95 (s)",
    "gbps": "GB/s",
    "interval_min": "Interval (min)",
    "blocking_pct": "Blocking (% wall)",
}
RESTORE_TABLE_COLUMNS = {
    "time": "Time (UTC)",
    "component": "Cause",
    "category": "Category",
    "tier_name": "Restored from",
    "restored_step": "Restored step",
    "lost_steps": "Steps lost",
    "lost_gpu_hours": "GPU-hours lost",
    "downtime_min": "Downtime (min)",
}


LOG_TICKS = [v * 10.0**e for e in range(-2, 6) for v in (1, 2, 5)]


def tier_name(tier: str) -> str:
    return TIER_NAMES.get(tier, tier)


def tier_table(df: pd.DataFrame, ended: bool = False) -> pd.DataFrame:
    """``tier_stats`` rows shaped for display (columns of ``TIER_TABLE_COLUMNS``); the ages of
    a run that ended count to its end ("before the end"), not to now ("ago")."""
    when = "before the end" if ended else "ago"
    out = pd.DataFrame(
        {
            "tier_name": [tier_name(t) for t in df["tier"]],
            "age": [f"{fmt_duration(a)} {when}" if pd.notna(a) else "never" for a in df["age_s"]],
            "last_step": [None if pd.isna(s) else int(s) for s in df["last_step"]],
            "n": df["n"].astype(int),
            "failed": df["failed"].astype(int),
            "size": [fmt_bytes(b) for b in df["bytes_avg"]],
        }
    )
    for col, digits in (("write_mean_s", 2), ("write_p95_s", 2), ("gbps", 1)):
        out[col] = rounded(df[col], digits)
    out["interval_min"] = (df["interval_s"].astype(float) / 60.0).round(1)
    out["blocking_pct"] = df["blocking_pct"].astype(float).round(3)
    return out.astype(object).where(out.notna(), None)


def restore_table(df: pd.DataFrame) -> pd.DataFrame:
    """``restores`` rows shaped for display (columns of ``RESTORE_TABLE_COLUMNS``)."""
    return pd.DataFrame(
        {
            "time": df["ts"].dt.strftime("%Y-%m-%d %H:%M:%S"),
            "component": df["component"],
            "category": df["category"],
            "tier_name": [
                tier_name(t) if t != "none" else "none (from scratch)" for t in df["restored_tier"]
            ],
            "restored_step": df["restored_step"].astype(int),
            "lost_steps": df["lost_steps"].astype(int),
            "lost_gpu_hours": known(df["lost_gpu_hours"]),
            "downtime_min": known(df["downtime_s"].astype(float) / 60.0),
        }
    )


def _tier_trace(tier: str, grp: pd.DataFrame) -> dict:
    bucketed = bool((grp["n"] > 1).any())
    custom = grp[["n", "step", "write_max_s"]].to_numpy()
    what = (
        "%{customdata[0]} checkpoints, newest step %{customdata[1]:,}"
        if bucketed
        else ("step %{customdata[1]:,}")
    )
    return plot.Scatter(
        x=grp["ts"],
        y=grp["write_mean_s"],
        mode="markers",
        name=tier_name(tier),
        marker={"color": TIER_COLOURS.get(tier, "#b6b6b6"), "size": 6, "symbol": "circle"},
        customdata=custom,
        hovertemplate=f"%{{x|%Y-%m-%d %H:%M:%S}}<br>{what}<br>"
        + ("mean write %{y:.2f} s (max %{customdata[2]:.2f} s)" if bucketed else "write %{y:.2f} s")
        + f"<extra>{tier_name(tier)}</extra>",
    )


MAX_RESTORE_LINES = 60  # beyond this many, drop lines (a curtain) and keep the markers


def _restore_traces(rs: pd.DataFrame) -> list[dict]:
    traces: list[dict] = []
    for tier, grp in rs.groupby("restored_tier", sort=False):
        colour = RESTORE_COLOURS.get(str(tier), "#b6b6b6")
        if len(rs) <= MAX_RESTORE_LINES:
            xs: list[object] = []
            for t in grp["ts"]:
                xs += [t, t, None]
            traces.append(
                plot.Scatter(
                    x=xs,
                    y=[0.0, 0.94, None] * len(grp),
                    yaxis="y2",
                    mode="lines",
                    line={"color": colour, "width": 1, "dash": "dot"},
                    hoverinfo="skip",
                    showlegend=False,
                )
            )
        traces.append(
            plot.Scatter(
                x=grp["ts"],
                y=[0.97] * len(grp),
                yaxis="y2",
                mode="markers",
                name=f"Restore from {tier_name(str(tier))}",
                marker={"symbol": "triangle-down", "size": 10, "color": colour},
                customdata=grp[["component", "restored_step", "lost_steps"]]
                .assign(lost=known(grp["lost_gpu_hours"]))
                .astype(object)
                .to_numpy(),
                hovertemplate="%{x|%Y-%m-%d %H:%M:%S}<br>%{customdata[0]}<br>"
                "restored step %{customdata[1]:,}, %{customdata[2]:,} steps lost<br>"
                "%{customdata[3]} GPU-hours lost<extra>restore</extra>",
            )
        )
    return traces


def _log_range(ck: pd.DataFrame) -> list[float] | None:
    """Log-axis range with headroom above the slowest write for the restore markers."""
    ys = pd.concat([ck["write_mean_s"], ck["write_max_s"]]).astype(float)
    ys = ys[ys > 0]
    if ys.empty:
        return None
    return [math.log10(ys.min() / 1.6), math.log10(ys.max() * 4.0)]


def timeline(ck: pd.DataFrame, restores: pd.DataFrame, template: str = TEMPLATE) -> Figure:
    """Checkpoint writes per tier over time (y: write time, s, log scale), failed writes as
    crosses, restores as dotted lines with a marker coloured by the tier restored from."""
    title = "Checkpoints per tier and restores"
    if ck.empty and restores.empty:
        return empty(title, "No checkpoints or restores in this range", template=template)
    bucketed = bool(not ck.empty and (ck["n"] > 1).any())
    if bucketed:
        title += " (time buckets: mean write time per bucket)"
    fig = _base(title, 340, template)
    seen = set(ck["tier"].unique().tolist())  # not set(column): Arrow strings one by one
    for tier in [t for t in TIER_COLOURS if t in seen] + sorted(seen - set(TIER_COLOURS)):
        fig.add_trace(_tier_trace(tier, ck[ck["tier"] == tier]))
    bad = ck[ck["failed"] > 0]
    if not bad.empty:
        fig.add_trace(
            plot.Scatter(
                x=bad["ts"],
                y=bad["write_max_s"],
                mode="markers",
                name="Failed write",
                marker={"symbol": "x", "size": 10, "color": "#ef553b"},
                customdata=bad[["tier", "failed"]].to_numpy(),
                hovertemplate="%{x|%Y-%m-%d %H:%M:%S}<br>%{customdata[1]} failed on "
                "%{customdata[0]}<extra>failed write</extra>",
            )
        )
    for trace in _restore_traces(restores):
        fig.add_trace(trace)
    fig.update_layout(
        hovermode="closest",
        xaxis={"title": "Time (UTC)"},
        yaxis={
            "title": "Write time (s, log scale)",
            "type": "log",
            "tickvals": LOG_TICKS,
            "range": _log_range(ck),
        },
        yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
    )
    return legend_below(fig)


def ettr_curve(
    curve: pd.DataFrame, marks: dict[str, tuple[float, float]], template: str = TEMPLATE
) -> Figure:
    """Expected ETTR (%) against checkpoint interval (min, log scale): one line per ``curve``
    label (columns ``interval_s``, ``ettr`` 0..1, ``curve``), with labelled points ``marks``:
    name -> (interval s, ETTR 0..1)."""
    title = "Expected ETTR vs checkpoint interval (Kokolis et al.)"
    if curve.empty:
        return empty(title, "Not enough measurements to model ETTR", template=template)
    fig = _base(title, 320, template)
    for i, (label, grp) in enumerate(curve.groupby("curve", sort=False)):
        fig.add_trace(
            plot.Scatter(
                x=grp["interval_s"] / 60.0,
                y=grp["ettr"] * 100.0,
                mode="lines",
                name=str(label),
                line={
                    "color": "#636efa" if i == 0 else "#ef553b",
                    "width": 2,
                    "dash": "solid" if i == 0 else "dash",
                },
                hovertemplate="interval %{x:.2f} min<br>ETTR %{y:.2f} %<extra>"
                + str(label)
                + "</extra>",
            )
        )
    symbols = {"Configured": "circle", "What-if": "diamond"}
    colours = {"Optimum": "#00cc96", "Configured": "#ffa15a", "What-if": "#ef553b"}
    colours["What-if optimum"] = "#ef553b"
    for name, (interval_s, ettr) in marks.items():
        fig.add_trace(
            plot.Scatter(
                x=[interval_s / 60.0],
                y=[ettr * 100.0],
                mode="markers",
                name=name,
                marker={
                    "symbol": symbols.get(name, "star"),
                    "size": 13,
                    "color": colours.get(name, "#fecb52"),
                    "line": {"width": 1, "color": "#222"},
                },
                hovertemplate="interval %{x:.2f} min<br>ETTR %{y:.2f} %<extra>" + name + "</extra>",
            )
        )
    ys = list(curve["ettr"] * 100.0) + [e * 100.0 for _, e in marks.values()]
    lo, hi = min(ys), max(ys)
    pad = max((hi - lo) * 0.08, 0.05)
    fig.update_layout(
        hovermode="closest",
        xaxis={
            "title": "Checkpoint interval (min, log scale)",
            "type": "log",
            "tickvals": LOG_TICKS,
        },
        yaxis={"title": "Expected ETTR (%)", "range": [lo - pad, hi + pad]},
    )
    # room for every row the legend can wrap to in a half-width chart (three items a row at
    # 1366 px): with the what-if's curve and marks it takes two, and grew into the axis title
    return legend_below(fig, rows=max(1, math.ceil(len(fig.data) / 3)))


def ettr_delta(delta: float, gpus: int, money: str | None = None) -> str:
    """``+0.12 points vs configured (≈ 1.9 GPU-hours/day gained, $3.80/day saved at
    $2.00/GPU-h)`` for an ETTR change (0..1); ``money`` is the part after the comma."""
    if round(abs(delta) * 100, 2) == 0:
        return "same as at the configured values"
    word = "gained" if delta > 0 else "lost"
    gh = abs(delta) * gpus * 24
    usd = f", {money}" if money else ""
    return f"{delta * 100:+.2f} points vs configured (≈ {gh:,.1f} GPU-hours/day {word}{usd})"


def interval_verdict(advice: Any, model: dict[str, Any] | None) -> tuple[str, str, str]:
    """The optimal intervals next to the configured one as three sentences: the basis, the
    verdict (which is longer and what that costs) and the modelled ETTR cost. ``advice`` is an
    ``IntervalAdvice`` (``data.interval_advice``: optima, MTBF, costs, modelled ETTR) or None;
    ``model`` the measured inputs it came from. Without a verdict to give, the first two are
    empty and the third says what is missing."""
    if model is None:
        return "", "", "The run does not overlap this time range."
    if advice is None:
        return (
            "",
            "",
            (
                "No checkpoints, or none with a known blocking time, in this range: the optimal "
                "interval needs the time a write stalls training (directory scans see only "
                "write times; enter one in What if)."
            ),
        )
    tier = tier_name(model.get("interval_tier") or "nvme")
    cfg = fmt_duration(advice.configured_s)
    if advice.young_s is None or advice.mtbf_s is None:
        hours = model["wall_s"] / 3600.0
        return (
            "",
            "",
            (
                f"No unexpected interruption in these {hours:.1f} h, so the MTBF (at least "
                f"{hours:.1f} h) and the optimal interval cannot be measured; widen the time "
                f"range. The configured {tier} interval is {cfg}."
            ),
        )
    young, ratio = advice.young_s, advice.configured_s / max(advice.young_s, 1e-9)
    opt = fmt_duration(young)
    basis = (
        f"From the measured MTBF of {fmt_duration(advice.mtbf_s)} and a mean blocking write of "
        f"{advice.write_s:.2f} s per {tier} checkpoint, Young's optimum is {opt} "
        f"(Daly: {fmt_duration(advice.daly_s)} with {fmt_duration(advice.restart_s)} restarts; "
        f"higher-order {fmt_duration(advice.daly_higher_order_s)}). "
    )
    stall = f"{advice.write_s / advice.configured_s * 100:.2f} %"
    stall_opt = f"{advice.write_s / max(young, 1e-9) * 100:.2f} %"
    if 0.9 <= ratio <= 1.1:
        verdict = f"The configured interval ({cfg}) is within 10 % of it: little to gain."
    elif ratio > 1:
        verdict = (
            f"The configured interval ({cfg}) is {ratio:.1f}× longer: each failure recomputes "
            f"about {fmt_duration(advice.configured_s / 2)} of work instead of "
            f"{fmt_duration(young / 2)}, while stalls take {stall} of training time instead of "
            f"{stall_opt}."
        )
    else:
        verdict = (
            f"The configured interval ({cfg}) is {1 / ratio:.1f}× shorter: checkpoint stalls take "
            f"{stall} of training time instead of {stall_opt}, more than the recomputation it "
            f"saves ({fmt_duration(advice.configured_s / 2)} instead of "
            f"{fmt_duration(young / 2)} per failure)."
        )
    cost = ""
    if advice.ettr_optimum is not None and advice.gpu_hours_per_day is not None:
        cost = (
            f"Expected ETTR {advice.ettr_configured * 100:.2f} % vs "
            f"{advice.ettr_optimum * 100:.2f} % at the optimum: the configured interval costs "
            f"≈ {advice.gpu_hours_per_day:,.1f} GPU-hours/day."
        )
    return basis, verdict, cost


# Goodput's categories as the day chart draws them: productive first (the bar's base), then the
# badput from the job's own (checkpoints, redone work) to the cluster's (recovery, planned)
GOODPUT_COLOURS = {
    "productive": "#00cc96", "slowdown": "#fecb52", "checkpoint_save": "#636efa",
    "checkpoint_restore": "#19d3f3", "wasted_progress": "#ffa15a", "startup": "#b6e880",
    "data_loading": "#ff97ff", "evaluation": "#9467bd", "recovery": "#ef553b",
    "planned": "#8c8c8c", "other": "#d0d0d0",
}  # fmt: skip


def category_name(key: str) -> str:
    return key.replace("_", " ").capitalize()


def goodput_days(block: dict[str, Any] | None, template: str = TEMPLATE) -> Figure:
    """Each day of the run's wall time by goodput category (stacked, % of the day's hours of
    data: productive at the base, badput above it) and the rolling 7-day goodput (a line)."""
    title = "Where each day went: goodput and badput"
    days = (block or {}).get("days") or []
    if not days:
        return empty(title, "No timed training in this range", template=template)
    x = [d["day"] for d in days]
    wall = [d["window_s"] for d in days]
    fig = _base(title, 340, template)
    for key, colour in GOODPUT_COLOURS.items():
        secs = [d["seconds"].get(key, 0.0) for d in days]
        if not any(v > 0 for v in secs):
            continue
        share = [v / w * 100 if w else 0.0 for v, w in zip(secs, wall, strict=True)]
        fig.add_trace(plot.Bar(
            x=x, y=share, name=category_name(key), marker={"color": colour}, width=DAY_BAR_MS,
            customdata=[v / 3600.0 for v in secs],
            hovertemplate="%{x|%Y-%m-%d}: " + category_name(key).lower()
            + " %{y:.1f} % (%{customdata:.2f} h)<extra></extra>",
        ))  # fmt: skip
    prod = [d["seconds"]["productive"] for d in days]
    rolling = [sum(prod[max(0, i - 6) : i + 1]) / sum(wall[max(0, i - 6) : i + 1]) * 100
               if sum(wall[max(0, i - 6) : i + 1]) else None for i in range(len(days))]  # fmt: skip
    fig.add_trace(plot.Scatter(
        x=x, y=rolling, name="Goodput, rolling 7 days",
        mode="lines+markers" if len(x) <= 14 else "lines",  # one day: a point, not nothing
        line={"color": "#ffffff" if "dark" in template else "#222222", "width": 2, "dash": "dot"},
        hovertemplate="%{x|%Y-%m-%d}: 7-day goodput %{y:.1f} %<extra></extra>",
    ))  # fmt: skip
    fig.update_layout(
        barmode="stack",
        bargap=0.1,
        hovermode="closest",
        xaxis=day_axis(x, "Day (UTC)"),
        yaxis={"title": "Share of the day (%)", "range": [0, 100]},
    )
    return legend_below(fig, rows=2)


def step_time_hours(block: dict[str, Any] | None, template: str = TEMPLATE) -> Figure:
    """Each hour's step time against the ideal (the goodput block's ``step_time``), in percent:
    the median step (a slow phase, a straggler) and the mean (what the slowdown badput counts,
    its stalls included). The axis stops above every median and most means, so one stalled
    hour does not flatten the rest; its hover says its value."""
    title = "Step time against the ideal, per hour"
    hours = (block or {}).get("step_time") or []
    ideal = (block or {}).get("ideal_step_s")
    if not hours or not ideal:
        return empty(title, "No timed steps in this range", 260, template)
    x = [h["hour"] for h in hours]
    fig = _base(f"{title} (ideal {ideal:.3g} s)", 260, template)
    for key, name, colour in (("median_pct", "Median step", "#19d3f3"),
                              ("mean_pct", "Mean (stalls included)", "#ffa15a")):  # fmt: skip
        fig.add_trace(plot.Scatter(  # a run of an hour or two: its points, not a bare axis
            x=x, y=[h[key] for h in hours], name=name, mode="lines" if len(x) > 2 else "markers",
            line={"color": colour, "width": 1},
            hovertemplate="%{x|%Y-%m-%d %H:00}: %{y:+.1f} % against the ideal<extra>"
            + name + "</extra>",
        ))  # fmt: skip
    means = sorted(h["mean_pct"] for h in hours)  # the medians all shown, the means mostly
    top = max(means[int(0.98 * (len(means) - 1))], max(h["median_pct"] for h in hours)) * 1.2
    top = max(top, 10.0)
    low = min(min(h["median_pct"] for h in hours) * 1.2, -5.0)
    xaxis: dict[str, Any] = {"title": "Time (UTC)", "type": "date"}
    if len(x) == 1:  # one hour: that hour's width, not a millisecond around its point
        t0 = pd.Timestamp(x[0])
        xaxis["range"] = [str(t0 - pd.Timedelta(hours=1)), str(t0 + pd.Timedelta(hours=1))]
    fig.update_layout(
        hovermode="x unified",
        xaxis=xaxis,
        yaxis={"title": "Against the ideal (%)", "range": [low, top], "zeroline": True},
    )
    return legend_below(fig)
