"""Where an incident's recovery went (issue 58, 4): each unplanned interruption's downtime cut
into named spans, from its stored row, its evidence and the run's progress and checkpoint
loads, so that the spans of a run add up to goodput's badput of its incidents.

The downtime is goodput's: from the last progress (the row's ``ts``: the earliest the failure
can be) to training resumed (``end_ts``), or, for a run that never resumed, to the job's end
(``ts + detect_s + restart_s``). Its points, each known or not:

- *noticed*: the first line the job itself wrote about it (a cause, symptom or cascade line
  that is not the kernel's, the flight recorder's or the controller's), else, for a posted or
  replayed stop, its stored ``ts + detect_s``;
- *exited*: the last teardown line (the last process exiting);
- *started*: the new attempt's processes starting: Slurm's start of the run's job (or its
  requeue) between the exit and the new attempt's first line (``slurm_jobs``), else unknown (a
  new job step inside the same allocation is not a job record);
- *first line*: the new attempt's first line (its checkpoint load);
- the load's end, then *resumed*.

Between consecutive known points lie ``detection``, ``teardown``, ``rescheduling``,
``start-up`` and ``warm-up`` (the new attempt's time before its first progress, extended while
its first steps run more than 10 % over the ideal step time: that extension, ``after_resume_s``,
is goodput's slowdown, not its recovery); a point that is unknown merges its two neighbours into
one span named for both (``"rescheduling + start-up"``), and each of them is listed in
``unknown`` with the reason, never as 0 s. ``checkpoint load`` is the load the log timed
(goodput's checkpoint restore), ``redo`` the lost steps at the ideal step time (goodput's
wasted progress). The run's own start before its first step is goodput's ``startup`` and no
incident's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.goodput import goodput
from telemetry.store import Store

WARM = 1.10  # warmed up: the step time back within 10 % of the ideal
NOT_THE_JOB = frozenset({"xid", "gpu_off_bus", "gsp_timeout", "collective_hang",
                         "slurm_node_failure"})  # fmt: skip  # the host, the dumps, slurmctld
RECOVERY = ("detection", "teardown", "rescheduling", "start-up", "warm-up")


def recovery_spans(
    store: Store, run_id: str, block: dict[str, Any] | None = None, at: datetime | None = None
) -> dict[str, dict[str, Any]]:
    """Each unplanned interruption of the run (keyed by its ``ts``, ISO): ``spans`` (``name``,
    ``start``, ``end`` ISO, ``seconds``, ``category``: the goodput category it is counted in) and
    ``unknown`` (``name``, ``reason``: the spans whose ends the records do not give). ``block``:
    the run's goodput block where the caller has it (its ideal step time), else computed;
    ``at``: the interruption that began then alone (the incident view's)."""
    ints = store.df(
        """SELECT ts, end_ts, detect_s, restart_s, coalesce(lost_steps, 0) AS lost_steps, evidence,
                  source
           FROM interruptions WHERE run_id = ? AND NOT coalesce(planned, false)
             AND (?::TIMESTAMP IS NULL OR ts = ?) ORDER BY ts""",
        [run_id, at, at],
    )
    if ints.empty:
        return {}
    block = block or goodput(store, run_id, detail=False)
    ideal = None if block is None else block.get("ideal_step_s")
    loads = store.df(
        """WITH l AS (SELECT run_id, ts FROM checkpoint_events WHERE run_id = ? AND kind = 'load'),
                e AS (SELECT run_id, ts FROM checkpoint_events
                      WHERE run_id = ? AND kind = 'load_end')
           SELECT l.ts AS a, e.ts AS b FROM e ASOF JOIN l ON e.run_id = l.run_id AND e.ts >= l.ts
           WHERE e.ts - l.ts <= INTERVAL 6 HOUR ORDER BY a""",
        [run_id, run_id],
    )
    # each start of one of the run's Slurm jobs (a requeue is a record of its own: sacct -D)
    starts = [pd.Timestamp(t).to_pydatetime() for (t,) in store.rows(
        "SELECT start_ts FROM slurm_jobs WHERE run_id = ? AND start_ts IS NOT NULL ORDER BY 1",
        [run_id])] if store.has_table("slurm_jobs") else []  # fmt: skip
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
    noticed, exited = _job_said(json.loads(rec["evidence"] or "[]"), start, end)
    if noticed is None:
        noticed = _stated_detection(rec, start, end)
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
        spans = _cut(start, points, resumed, unknown)
    else:
        points.append(("start-up", la, ""))
        spans = _cut(start, points, la, unknown)
        spans.append(_span("checkpoint load", la, lb, "checkpoint_restore"))
        warm = _warm(store, run_id, resumed, ideal)
        spans.append(_span("warm-up", lb, warm, "recovery") | {
            "after_resume_s": round((warm - resumed).total_seconds(), 3)})  # fmt: skip
    return {"spans": spans + _redo(rec, resumed, ideal, lost=False), "unknown": unknown}


def _stated_detection(rec: dict[str, Any], start: datetime, end: datetime) -> datetime | None:
    """A posted or replayed stop's own detection time (``ts + detect_s``) where no line dates
    it; an inferred row's ``detect_s`` is its first failure signal of any kind (the host's XID
    too), not the job noticing, so it dates nothing here."""
    if rec["source"] == "inferred" or pd.isna(rec["detect_s"]):
        return None
    # to the millisecond the spans are rounded to: the detection and the span after it then
    # add up to the one span they split (goodput's recovery), not 1 ms more or less
    t = start + timedelta(seconds=round(float(rec["detect_s"]), 3))
    return t if t <= end else None


def _job_said(evidence: list[dict[str, Any]], start: datetime,
              end: datetime) -> tuple[datetime | None, datetime | None]:  # fmt: skip
    """When the job noticed (its first cause, symptom or cascade line of its own from
    ``start``) and its last process exited (the last teardown line), each within the
    downtime; None where no line dates it."""
    ev = [(e, _t(e["ts"])) for e in evidence if e.get("ts")]
    said = [t for e, t in ev if e.get("role") in ("cause", "symptom", "cascade")
            and e.get("kind") not in NOT_THE_JOB and t is not None and start <= t <= end]
    noticed = min(said, default=None)
    lo = noticed or start
    gone = [t for e, t in ev if e.get("role") == "teardown" and t is not None and lo <= t <= end]
    return noticed, max(gone, default=None)


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
    rows = store.rows(
        """SELECT ts, epoch(lead(ts) OVER w) - epoch(ts), lead(step) OVER w - step
           FROM train_metrics WHERE run_id = ? AND ts >= ? AND ts < ? + INTERVAL 6 HOUR
           WINDOW w AS (ORDER BY ts, step) ORDER BY ts LIMIT 1000""",
        [run_id, resumed, resumed],
    )
    for ts, dt, ds in rows:
        if dt is not None and ds and ds > 0 and dt / ds <= WARM * ideal:
            return pd.Timestamp(ts).to_pydatetime()
    return resumed
