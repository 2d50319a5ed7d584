"""The incident view's figure and its postmortem text: one interruption's spans (stalled,
down, redoing lost steps) and its evidence lines on one time axis, and the same story as
Markdown for the postmortem document (every value escaped, code fenced: ``app.figures.md``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from app.figures import CATEGORY_COLOURS, TEMPLATE, _base, plot
from app.figures.md import code, fence, text
from app.figures.plot import Figure
from app.figures.units import fmt_duration, fmt_gpu_hours

SPAN_COLOURS = {
    "stalled until detected": "#ffa15a",
    "down until training resumed": "#ef553b",
    "lost steps redone": "#ab63fa",
    "held until the job ended": "#ef553b",
    "stalled until the job ended (its noticing not dated)": "#ef553b",
    "steps since the last checkpoint, lost": "#ab63fa",
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
    rows += _recovery_rows(fig, inc.get("recovery_spans"))
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
    for key, label, side in (("failed_at", "failed", "top left"),
                             ("noticed_at", "job noticed", "top right")):  # fmt: skip
        if inc.get(key) is not None:  # the two detection times (issue 57, 4)
            fig.add_vline(x=pd.Timestamp(inc[key]).to_pydatetime(), annotation_text=label,
                          annotation_position=side, line={"color": "#ffa15a", "dash": "dash"})
    fig.update_layout(
        hovermode="closest",
        showlegend=False,
        margin={"l": 190},
        yaxis={"categoryorder": "array", "categoryarray": rows[::-1], "title": None},
        xaxis={"title": "Time (UTC)", "type": "date"},
    )
    return fig


RECOVERY_COLOUR = "#00cc96"


def _recovery_rows(fig: Figure, rec: dict[str, Any] | None) -> list[str]:
    """Where the recovery went (``telemetry.metrics.recovery``): one row per named span, under the
    stop's own rows; the spans it cannot date are in the Markdown, with why."""
    rows = []
    for sp in (rec or {}).get("spans") or []:
        label = f"recovery: {sp['name']}"
        rows.append(label)
        a, b = pd.Timestamp(sp["start"]).to_pydatetime(), pd.Timestamp(sp["end"]).to_pydatetime()
        fig.add_trace(plot.Scatter(
            x=[a, b], y=[label, label], mode="lines+markers", name=label,
            line={"width": 10, "color": RECOVERY_COLOUR}, marker={"size": 6},
            hovertemplate=f"{sp['name']}: {fmt_duration(float(sp['seconds']))} "
            f"(goodput's {sp['category']})<extra></extra>",
        ))  # fmt: skip
    return rows


def recovery_lines(rec: dict[str, Any] | None) -> list[str]:
    """The Markdown list of where the recovery went: each span's length and times, then the
    spans the records do not date, with why (never a 0 for them). ``rec`` is the incident's
    ``recovery_spans`` (``app.data.incident``; the row's own ``recovery`` column says automated
    or manual)."""
    if not isinstance(rec, dict) or not rec:
        return []
    out = ["", "### Where the recovery went", ""]
    for sp in rec.get("spans") or []:
        out.append(f"- **{text(sp['name'])}:** {text(_seconds(float(sp['seconds'])))} "
                   f"({text(when(sp['start']))} to {text(when(sp['end']))} UTC; goodput's "
                   f"{text(sp['category'])})")  # fmt: skip
    for u in rec.get("unknown") or []:
        out.append(f"- **{text(u['name'])}:** unknown: {text(u['reason'])}")
    return out


def _seconds(s: float) -> str:
    """Whole seconds for the postmortem, and the rounder unit beside them past two minutes."""
    return f"{s:,.0f} s" + (f" ({fmt_duration(s)})" if s >= 120 else "")


def _clip(line: str) -> str:
    return line if len(line) <= HOVER_CHARS else line[: HOVER_CHARS - 1] + "…"


def markdown(inc: dict[str, Any]) -> str:
    """The incident as Markdown for a postmortem: what, where, when, restore, loss, evidence."""
    conf = inc.get("confidence")
    how = str(inc.get("source_shown") or inc.get("source") or "")
    cause = text(f"{inc['component']} ({inc['category']})")
    lines = [
        f"## {text(when(inc['ts']))} UTC: {cause}",
        "",
        f"- **Run:** {text(inc.get('run_name') or inc['run_id'])}",
        f"- **Cause:** {cause}, {text(how)}"
        + ("" if conf is None else f", confidence {float(conf) * 100:.0f} %"),
        f"- **Culprit:** {text(where(inc))}",
        f"- **{stop_label(inc)}:** {text(when(inc['ts']))} UTC; {text(outcome(inc))}",
        f"- **Failed:** {text(failed(inc))}",
        f"- **Job noticed:** {text(noticed(inc))}",
        f"- **Restored from:** {text(restored(inc))}",
        f"- **Lost:** {text(lost(inc))}",
        f"- **Job:** {text(_or_dash(inc.get('job_id'), 'no Slurm job known'))}; attempt "
        f"{text(_or_dash(inc.get('attempt'), 'not logged'))}",
        f"- **GPU:** {text(gpu(inc))}",
        "- **GPU identity (for the ticket):** "
        + "; ".join(f"{text(k)} {text(v)}" for k, v in identity(inc)),
        f"- **Run's final state:** {text(inc.get('final_state') or '–')}",
        f"- **The run's total:** {text(night(inc))}",
    ]
    if inc.get("action"):
        lines.append(f"- **What to do:** {text(inc['action_text'])} "
                     f"({text(inc['action_reason'])})")  # fmt: skip
    if inc.get("offender"):
        lines.append(f"- **Node history:** {text(offender_text(inc['offender']))}")
    if inc.get("description"):
        lines.append(f"- **Summary:** {text(inc['description'])}")
    lines += recovery_lines(inc.get("recovery_spans"))
    for h in inc.get("hangs") or []:
        lines += ["", "### The hang its ranks were stuck in (flight recorder)", "",
                  *hang_lines(h)]  # fmt: skip
    evidence = inc.get("evidence") or []
    if evidence:
        lines += ["", "### Evidence", ""]
        for e in evidence:
            head = " ".join(
                x
                for x in (
                    text(when(e.get("ts"))),
                    text(e.get("host") or ""),
                    f"[{text(e.get('role') or 'context')}]",
                    code(e["origin"]) if e.get("origin") else "",
                )
                if x
            )
            lines += [f"- {head}", "", *fence(e.get("line") or "", "  ")]
    return "\n".join(lines) + "\n"


def hang_lines(h: dict[str, Any]) -> list[str]:
    """A hang (flight recorder) as Markdown bullets: the collective, the culprit, the ranks,
    where the culprit last called from and where the others wait."""
    culprit, host = h.get("culprit_rank"), h.get("culprit_host")
    who = "no single rank (every rank stuck alike)"
    if culprit is not None and culprit == culprit:  # not NaN
        who = f"rank {int(culprit)}" + (f" on {text(host)}" if host else " (host not known)")
    missing = list(h.get("missing_ranks") if h.get("missing_ranks") is not None else [])
    ranks = (f"never called by rank(s) {', '.join(str(r) for r in missing[:20])}"
             + (f" and {len(missing) - 20:,} more" if len(missing) > 20 else "")
             if missing else f"{h.get('stuck_ranks') or 0:,} ranks stuck in it")  # fmt: skip
    out = [
        f"- **Collective:** {text(h.get('op') or 'collective')} #{text(h.get('seq_id'))}, "
        f"process group {text(h.get('pg_desc') or h.get('process_group') or '–')}",
        f"- **Culprit:** {who}",
        f"- **Ranks:** {text(ranks)} of {text(_count(h.get('ranks')))}; waiting since "
        f"{text(when(h.get('ts')))} UTC",
    ]
    if h.get("story"):
        out.append(f"- **Story:** {text(h['story'])}")
    for title, key in (("The culprit last called from", "culprit_frames"),
                       ("The others wait in", "waiting_frames")):  # fmt: skip
        frames = [str(f) for f in (h.get(key) if h.get(key) is not None else [])][:6]
        if frames:
            out += [f"- **{title}:**", *[f"  - {code(f)}" for f in frames]]
    return out


def _count(n: Any) -> str:
    try:
        return f"{int(n or 0):,}"
    except (TypeError, ValueError):
        return str(n)


def hang_markdown(h: dict[str, Any]) -> str:
    """A hang as Markdown for a postmortem."""
    lines = [
        f"## {text(when(h.get('ts')))} UTC: hang in {text(h.get('op') or 'a collective')} "
        f"#{text(h.get('seq_id'))}",
        "",
        f"- **Run:** {text(h.get('run_name') or h.get('run_id'))}",
        *hang_lines(h),
        f"- **From:** {text(h.get('source') or '–')} (PyTorch flight recorder)",
    ]
    return "\n".join(lines) + "\n"


def offender_text(seen: dict[str, Any]) -> str:
    """``node-7: repeat offender, culprit 3 times in 14 days``."""
    return (f"{seen['host']}: repeat offender, culprit {seen['incidents']} times in "
            f"{seen['days']:g} days")  # fmt: skip


def _or_dash(value: Any, why: str) -> str:
    return f"– ({why})" if value is None or (isinstance(value, float) and value != value) \
        else str(value)


def gpu(inc: dict[str, Any]) -> str:
    """The culprit's GPU (index, UUID where known) and the run's GPUs (count, model)."""
    own = "" if inc.get("gpu") is None else f"GPU {int(inc['gpu'])}"
    if own and inc.get("host"):
        own = f"{inc['host']} {own}"
    if own and inc.get("uuid"):
        own += f" ({inc['uuid']})"
    n, model = inc.get("gpus"), inc.get("gpu_model")
    run = (f"{int(n):,} × {model or 'GPU (model not known)'}" if n
           else "the run's GPU count is not known")  # fmt: skip
    return f"{own or 'no GPU named by the evidence'}; the run: {run}"


IDENTITY = {"index": "Index", "uuid": "UUID", "pci_bus_id": "PCI bus id", "serial": "Serial",
            "model": "Model"}  # fmt: skip


def identity(inc: dict[str, Any]) -> list[tuple[str, str]]:
    """The culprit GPU's identity for a replacement ticket, part by part: its value, or "–"
    with why it is not known (never a guess)."""
    got = inc.get("gpu_identity") or {}
    why = got.get("why") or {}
    parts = [(label, str(got[k]) if got.get(k) is not None
              else f"– ({why.get(k, 'not known')})") for k, label in IDENTITY.items()]  # fmt: skip
    if got.get("uuid") and got.get("scraped") is not None:  # the labels are the newest scrape's
        parts[1] = ("UUID", f"{got['uuid']} (as last scraped, {when(got['scraped'])} UTC, after "
                    "the failure: a GPU replaced since would show its replacement's)")
    return parts


def night(inc: dict[str, Any]) -> str:
    """Every interruption of the run together: how many, GPU-hours and dollars lost."""
    t = inc.get("night") or {}
    n = f"{t.get('unexpected', 0):,} unexpected, {t.get('planned', 0):,} planned interruptions"
    gh, usd = t.get("lost_gpu_hours"), t.get("lost_usd")
    if gh is None:
        return n + "; GPU-hours lost – (the run's GPU count is not known)"
    money = "–" if usd is None else f"${usd:,.2f}"
    return f"{n}; {float(gh):,.1f} GPU-hours lost, {money}"


def failed(inc: dict[str, Any]) -> str:
    """When the hardware failed or the failure began (``telemetry.detection``); "–" with
    why when no line dates it."""
    if inc.get("failed_at") is None:
        return f"– ({inc.get('failed_unknown') or 'not known'})"
    return f"{when(inc['failed_at'])} UTC"


def noticed(inc: dict[str, Any]) -> str:
    """When the job noticed (its first watchdog or teardown line), and how long after the
    failure and the last progress; "–" with why when no line dates it, never 0."""
    if inc.get("noticed_at") is None:
        return f"– ({inc.get('noticed_unknown') or 'not known'})"
    after = [f"{fmt_duration(inc[k])} after {what}" for k, what in
             (("wait_s", "the failure"), ("stall_s", "the last progress"))
             if inc.get(k) is not None]  # fmt: skip
    return f"{when(inc['noticed_at'])} UTC" + (f" ({', '.join(after)})" if after else "")


def stop_label(inc: dict[str, Any]) -> str:
    """What the stop's time is: the last progress, or (an inferred stop of a job whose log has no
    progress line, its steps unknown) the first failure line's."""
    if inc.get("source") == "inferred" and inc.get("lost_steps") is None \
            and inc.get("end_ts") is None:
        return "Stopped (no progress line in the data)"
    return "Last progress"


def outcome(inc: dict[str, Any]) -> str:
    """How the stop ended: training resumed, or the job ended with no progress after it."""
    if inc.get("resumed") is not None or not (inc.get("source") == "inferred"
                                               and inc.get("end_ts") is None):  # fmt: skip
        return f"training resumed {when(inc.get('resumed'))} UTC"
    ended = inc.get("ended")
    at = "– (no line dates it)" if ended is None else f"{when(ended)} UTC"
    return f"job ended {at}; training never resumed"


def where(inc: dict[str, Any]) -> str:
    """``node-7 · GPU 3 · rank 12``; "not named" when nothing places it."""
    parts = [
        str(inc["host"]) if inc.get("host") else "",
        "" if inc.get("gpu") is None else f"GPU {int(inc['gpu'])}",
        "" if inc.get("rank") is None else f"rank {int(inc['rank'])}",
        "" if inc.get("xid") is None else f"XID {int(inc['xid'])}",
    ]
    named = " · ".join(p for p in parts if p)
    if named or not inc.get("culprit_reason"):
        return named or "not named by the evidence"
    cands = inc.get("culprit_candidates") or []
    told = f"; candidates: {', '.join(cands)}" if cands else ""
    return f"unknown ({inc['culprit_reason']}){told}"


def restored(inc: dict[str, Any]) -> str:
    if inc.get("restored_tier") is None and inc.get("restored_step") is None:
        return "– (no restore seen)"
    step = inc.get("restored_step")
    return f"{inc.get('restored_tier') or '?'}, step {'?' if step is None else f'{int(step):,}'}"


def lost(inc: dict[str, Any]) -> str:
    """Steps, time down, GPU-hours and their cost; what is unknown says why."""
    steps = inc.get("lost_steps")
    parts = ["steps –" if steps is None else f"{int(steps):,} steps"]
    resumed: datetime | None = inc.get("resumed") or inc.get("ended")
    if resumed is not None:
        down = (resumed - pd.Timestamp(inc["ts"]).to_pydatetime()).total_seconds()
        parts.append(f"{fmt_duration(down)} down")
    elif inc.get("detect_s") is None and inc.get("restart_s") is None:
        parts.append("time down – (no line dates its detection)")  # never 0 by omission
    gh = inc.get("lost_gpu_hours")
    if gh is None:
        why = ("no line dates its detection, and its steps are not known" if inc.get("gpus")
               else "the run's GPU count is not known")  # fmt: skip
        parts.append(f"GPU-hours – ({why})")
    else:
        book = inc["prices"]
        cost = inc.get("cost_usd")
        money = "–" if cost is None else f"${cost:,.2f}"
        parts.append(f"{fmt_gpu_hours(float(gh))} GPU-hours, {money} {book.per_gpu_hour()}")
    return " · ".join(parts)
