"""The incident view's figure and its postmortem text: one interruption's spans (stalled,
down, redoing lost steps) and its evidence lines on one time axis, and the same story as
Markdown for the postmortem document."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from app.figures import CATEGORY_COLOURS, TEMPLATE, _base, plot
from app.figures.checkpoints import fmt_duration
from app.figures.plot import Figure

SPAN_COLOURS = {
    "stalled until detected": "#ffa15a",
    "down until training resumed": "#ef553b",
    "lost steps redone": "#ab63fa",
}
ROLE_COLOURS = {"cause": "#ef553b", "symptom": "#ffa15a", "cascade": "#19d3f3",
                "teardown": "#b6b6b6", "context": "#8a8f98"}  # fmt: skip
HOVER_CHARS = 160  # an evidence line in a hover box (the page lists each line whole)


def when(t: Any) -> str:
    """A time as the incident view writes it (``2026-03-01 09:53:50``); "–" when unknown."""
    if t is None or (isinstance(t, float) and t != t):
        return "–"
    try:
        return f"{pd.Timestamp(t):%Y-%m-%d %H:%M:%S}"
    except (TypeError, ValueError):
        return str(t)


def timeline(inc: dict[str, Any], template: str = TEMPLATE) -> Figure:
    """The spans from the last progress to the lost steps redone, one row each, and every
    evidence line at its own time on a row of its role (cause, symptom, cascade...)."""
    fig = _base("What happened, in time", 300, template)
    rows: list[str] = []
    for label, start, end in inc["spans"]:
        rows.append(label)
        fig.add_trace(
            plot.Scatter(
                x=[start, end],
                y=[label, label],
                mode="lines",
                name=label,
                line={"width": 14, "color": SPAN_COLOURS.get(label, "#636efa")},
                hovertemplate=f"{label}: {fmt_duration((end - start).total_seconds())}"
                "<extra></extra>",
            )
        )
    evidence = [e for e in inc.get("evidence") or [] if e.get("ts")]
    by_role: dict[str, list[dict[str, Any]]] = {}
    for e in evidence:
        by_role.setdefault(str(e.get("role") or "context"), []).append(e)
    for role, items in by_role.items():
        label = f"{role} lines"
        rows.append(label)
        fig.add_trace(
            plot.Scatter(
                x=[pd.Timestamp(e["ts"]).to_pydatetime() for e in items],
                y=[label] * len(items),
                mode="markers",
                name=label,
                marker={"size": 11, "symbol": "diamond", "color": ROLE_COLOURS.get(role, "#ccc")},
                customdata=[[e.get("host") or "–", _clip(str(e.get("line") or ""))] for e in items],
                hovertemplate="%{customdata[0]}: %{customdata[1]}<extra>" + role + "</extra>",
            )
        )
    colour = CATEGORY_COLOURS.get(str(inc.get("category")), "#ccc")
    fig.add_vline(x=pd.Timestamp(inc["ts"]).to_pydatetime(), line={"color": colour, "dash": "dot"})
    fig.update_layout(
        hovermode="closest",
        showlegend=False,
        margin={"l": 190},
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1], "title": None},
        xaxis={"title": "Time (UTC)", "type": "date"},
    )
    return fig


def _clip(line: str) -> str:
    return line if len(line) <= HOVER_CHARS else line[: HOVER_CHARS - 1] + "…"


def markdown(inc: dict[str, Any]) -> str:
    """The incident as Markdown for a postmortem: what, where, when, restore, loss, evidence."""
    conf = inc.get("confidence")
    how = str(inc.get("source_shown") or inc.get("source") or "")
    cause = f"{inc['component']} ({inc['category']})"
    lines = [
        f"## {when(inc['ts'])} UTC: {cause}",
        "",
        f"- **Run:** {inc.get('run_name') or inc['run_id']}",
        f"- **Cause:** {cause}, {how}"
        + ("" if conf is None else f", confidence {float(conf) * 100:.0f} %"),
        f"- **Culprit:** {where(inc)}",
        f"- **Last progress:** {when(inc['ts'])} UTC; detected {when(inc['detected'])} UTC; "
        f"training resumed {when(inc.get('resumed'))} UTC",
        f"- **Restored from:** {restored(inc)}",
        f"- **Lost:** {lost(inc)}",
    ]
    if inc.get("description"):
        lines.append(f"- **Summary:** {inc['description']}")
    evidence = inc.get("evidence") or []
    if evidence:
        lines += ["", "### Evidence", ""]
        for e in evidence:
            head = " ".join(
                x
                for x in (
                    when(e.get("ts")),
                    str(e.get("host") or ""),
                    f"[{e.get('role') or 'context'}]",
                    f"`{e['origin']}`" if e.get("origin") else "",
                )
                if x
            )
            lines += [f"- {head}", "", "  ```", "  " + str(e.get("line") or ""), "  ```"]
    return "\n".join(lines) + "\n"


def where(inc: dict[str, Any]) -> str:
    """``node-7 · GPU 3 · rank 12``; "not named" when nothing places it."""
    parts = [
        str(inc["host"]) if inc.get("host") else "",
        "" if inc.get("gpu") is None else f"GPU {int(inc['gpu'])}",
        "" if inc.get("rank") is None else f"rank {int(inc['rank'])}",
        "" if inc.get("xid") is None else f"XID {int(inc['xid'])}",
    ]
    return " · ".join(p for p in parts if p) or "not named by the evidence"


def restored(inc: dict[str, Any]) -> str:
    if inc.get("restored_tier") is None and inc.get("restored_step") is None:
        return "– (no restore seen)"
    step = inc.get("restored_step")
    return f"{inc.get('restored_tier') or '?'}, step {'?' if step is None else f'{int(step):,}'}"


def lost(inc: dict[str, Any]) -> str:
    """Steps, time down, GPU-hours and their cost; what is unknown says why."""
    steps = inc.get("lost_steps")
    parts = ["steps –" if steps is None else f"{int(steps):,} steps"]
    resumed: datetime | None = inc.get("resumed")
    if resumed is not None:
        down = (resumed - pd.Timestamp(inc["ts"]).to_pydatetime()).total_seconds()
        parts.append(f"{fmt_duration(down)} down")
    gh = inc.get("lost_gpu_hours")
    if gh is None:
        parts.append("GPU-hours – (the run's GPU count is not known)")
    else:
        book = inc["prices"]
        cost = inc.get("cost_usd")
        money = "–" if cost is None else f"${cost:,.0f}"
        parts.append(f"{float(gh):,.1f} GPU-hours, {money} {book.per_gpu_hour()}")
    return " · ".join(parts)
