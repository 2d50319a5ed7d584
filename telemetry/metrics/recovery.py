"""Where an incident's recovery went (issue 58, 4): each unplanned interruption's downtime cut
into named spans, from its stored row, its evidence and the run's progress and checkpoint
loads, so that the spans of a run add up to goodput's badput of its incidents.

The downtime is goodput's: from the last progress (the row's ``ts``: the earliest the failure
can be) to training resumed (``end_ts``), or, for a run that never resumed, to the job's end
(``ts + detect_s + restart_s``). Its points, each known or not:

- *noticed*: when the job noticed, as every view tells it (``telemetry.detection``: its
  first own watchdog, error or teardown line, not the kernel's, the flight recorder's or the
  controller's; a posted or replayed record's ``detect_s``);
- *exited*: the last teardown line (the last process exiting);
- *started*: the new attempt's processes starting: Slurm's start of the run's job (or its
  requeue) between the exit and the new attempt's first line (``slurm_jobs``), else unknown (a
  new job step inside the same allocation is not a job record);
- *first line*: the new attempt's first line (its checkpoint load);
- the load's end, then *resumed*.

Between consecutive known points lie ``detection``, ``teardown``, ``rescheduling``,
``start-up`` and ``warm-up`` (the new attempt's time before its first step: its first progress
line less that line's steps since the restored one at the ideal step time, which are redone
steps; ``after_resume_s`` says how long its first steps then ran more than 10 % over the ideal
step time: goodput's slowdown, outside the span); a point that is unknown merges its two
neighbours into one span named for both (``"rescheduling + start-up"``), and each of them is
listed in ``unknown`` with the reason, never as 0 s. ``checkpoint load`` is the load the log timed
(goodput's checkpoint restore), ``redo`` the lost steps at the ideal step time (goodput's
wasted progress). The run's own start before its first step is goodput's ``startup`` and no
incident's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.detection import detection
from telemetry.metrics.goodput import goodput
from telemetry.queries import goodput_rows as gr
from telemetry.store import Store

WARM = 1.10  # warmed up: the step time back within 10 % of the ideal
RECOVERY = ("detection", "teardown", "rescheduling", "start-up", "warm-up")


def recovery_spans(
    store: Store, run_id: str, block: dict[str, Any] | None = None, at: datetime | None = None
) -> dict[str, dict[str, Any]]:
    """Each unplanned interruption of the run (keyed by its ``ts``, ISO): ``spans`` (``name``,
    ``start``, ``end`` ISO, ``seconds``, ``category``: the goodput category it is counted in) and
    ``unknown`` (``name``, ``reason``: the spans whose ends the records do not give). ``block``:
    the run's goodput block where the caller has it (its ideal step time), else computed;
    ``at``: the interruption that began then alone (the incident view's)."""
    ints = gr.unplanned(store, run_id, at)
    if ints.empty:
        return {}
    block = block or goodput(store, run_id, detail=False)
    ideal = None if block is None else block.get("ideal_step_s")
    loads = gr.loads(store, run_id)
    starts = gr.job_starts(store, run_id)  # a requeue is a record of its own: sacct -D
    out = {}
    for rec in ints.to_dict("records"):
        if _t(rec["ts"]) is None:  # a log with no wall-clock time: no span can be dated
            continue
        out[pd.Timestamp(rec["ts"]).isoformat()] = _one(store, run_id, rec, loads, ideal, starts)
    return out


def _t(value: Any) -> datetime | None:
    return None if value is None or pd.isna(value) else pd.Timestamp(value).to_pydatetime()


def _one(store: Store, run_id: str, rec: dict[str, Any], loads: pd.DataFrame,
         ideal: float | None, starts: list[datetime]) -> dict[str, Any]:  # fmt: skip
    start, resumed = _t(rec["ts"]), _t(rec["end_ts"])
    assert start is not None
    held = [rec[k] for k in ("detect_s", "restart_s") if not pd.isna(rec[k])]
    end = resumed or (start + timedelta(seconds=float(sum(held))) if held else None)
    # an inferred stop no progress followed died (the job's end closes its downtime); a posted
    # or replayed one without an end resumed after its detection and restart, as goodput counts
    if resumed is None and rec["source"] != "inferred":
        resumed = end
    if end is None:
        why = "the job's end is unknown: it never resumed and no record says when it stopped"
        names = (*RECOVERY, "checkpoint load", "redo")
        return {"spans": [], "unknown": [{"name": n, "reason": why} for n in names]}
    noticed = detection(rec)["noticed_at"]
    noticed = noticed if noticed is not None and start <= noticed <= end else None
    exited = _exited(json.loads(rec["evidence"] or "[]"), noticed or start, end)
    points: list[tuple[str, datetime | None, str]] = [
        ("detection", noticed, "no line the job wrote dates its noticing"),
        ("teardown", exited, "no teardown line dates the last process's exit"),
    ]
    unknown: list[dict[str, str]] = []
    if resumed is None:
        never = "the run never resumed"
        points[1] = ("teardown", exited or end, "")  # the job's end: its last process gone
        unknown += [{"name": n, "reason": never} for n in (*RECOVERY[2:], "checkpoint load")]
        spans = _cut(start, points, end, unknown)
        return {"spans": spans + _redo(rec, start, ideal, lost=True), "unknown": unknown}
    # training resumed when the first redone step began: the first progress line's steps
    # since the restored one ran after it, at the ideal step time (goodput's wasted progress)
    k = rec.get("first_redone")
    ran = 0.0 if k is None or pd.isna(k) or not ideal else max(float(k), 0.0) * float(ideal)
    began = resumed - timedelta(seconds=min(ran, (resumed - start).total_seconds()))
    load = loads[(loads["a"] >= start) & (loads["b"] <= end)]
    la, lb = (_t(load["a"].iloc[0]), _t(load["b"].iloc[0])) if len(load) else (None, None)
    # Slurm's start of the job (or its requeue) that began after the last exit: the queue
    # wait ends there; a job that started before the stop is the old attempt's
    after = exited or noticed or start
    started = min((t for t in starts if after < t <= (la or resumed)), default=None)
    points.append(("rescheduling", started, "the new attempt's process start is unknown (no "
                                            "Slurm record of the run's job starts between)"))
    if la is None or lb is None:  # its first line and warm-up are one span to training resumed
        unknown.append({"name": "checkpoint load", "reason": "no checkpoint load in the log"})
        points += [("start-up", None, "no checkpoint load dates the new attempt's first line"),
                   ("warm-up", None, "no checkpoint load dates the new attempt's first line")]
        spans = _cut(start, points, began, unknown)
    else:
        points.append(("start-up", la, ""))
        spans = _cut(start, points, la, unknown)
        spans.append(_span("checkpoint load", la, lb, "checkpoint_restore"))
        warm = _warm(store, run_id, resumed, ideal)
        spans.append(_span("warm-up", lb, max(began, lb), "recovery") | {
            "after_resume_s": round((warm - resumed).total_seconds(), 3)})  # fmt: skip
    return {"spans": spans + _redo(rec, began, ideal, lost=False), "unknown": unknown}


def _exited(evidence: list[dict[str, Any]], lo: datetime, end: datetime) -> datetime | None:
    """When the job's last process exited: its last teardown line from ``lo`` (the job's
    noticing, else the stop) to ``end``; None where no line dates it."""
    gone = [t for e in evidence if e.get("ts") and e.get("role") == "teardown"
            and (t := _t(e["ts"])) is not None and lo <= t <= end]  # fmt: skip
    return max(gone, default=None)


def _cut(start: datetime, points: list[tuple[str, datetime | None, str]], end: datetime,
         unknown: list[dict[str, str]]) -> list[dict[str, Any]]:  # fmt: skip
    """The spans between known points from ``start`` to ``end``: a span ends at its point; an
    unknown point merges its span into the next (and the last into ``end``), and both spans
    it bounds are listed in ``unknown`` with why."""
    out, names, lo, why_last = [], [], start, ""
    for name, t, why in points:
        if t is None:
            unknown.append({"name": name, "reason": why})
        elif names:  # the unknown point before it leaves this span's start unknown
            unknown.append({"name": name, "reason": why_last})
        names.append(name)
        if t is None:
            why_last = why
            continue
        out.append(_span(" + ".join(names), lo, t, "recovery"))
        names, lo = [], t
    if names or lo < end:
        out.append(_span(" + ".join(names) or "held until the job ended", lo, end, "recovery"))
    return out


def _span(name: str, a: datetime, b: datetime, category: str) -> dict[str, Any]:
    return {"name": name, "start": a.isoformat(), "end": b.isoformat(),
            "seconds": round((b - a).total_seconds(), 3), "category": category}  # fmt: skip


def _redo(rec: dict[str, Any], at: datetime, ideal: float | None, lost: bool) -> list[dict]:
    """The lost steps at the ideal step time (goodput's wasted progress): redone after
    ``at`` (resumed), or, for a run that never resumed, lost before it."""
    steps = int(rec["lost_steps"] or 0)
    if not steps or not ideal:
        return []
    s = steps * float(ideal)
    if lost:
        return [_span("lost steps", at - timedelta(seconds=s), at, "wasted_progress")]
    return [_span("redo", at, at + timedelta(seconds=s), "wasted_progress")]


def _warm(store: Store, run_id: str, resumed: datetime, ideal: float | None) -> datetime:
    """The first progress point from ``resumed`` on whose next pair runs within 10 % of the
    ideal step time: the warm-up's end (``resumed`` itself when the first pair does)."""
    if not ideal:
        return resumed
    rows = gr.warm_pairs(store, run_id, resumed)
    for ts, dt, ds in rows:
        if dt is not None and ds and ds > 0 and dt / ds <= WARM * ideal:
            return pd.Timestamp(ts).to_pydatetime()
    return resumed
