"""Interruption inference: failures, restores and their causes from signals a cluster already has.

Long module: the stop finder, restart-loop grouping and each stop's row share one signal list.

A real cluster rarely posts interruption records, but its step stream shows every stop and its
logs say why. This module is the pure engine (frames in, one frame out, no store, no I/O); the
lead re-derives a run's rows after each import or ingest round and replaces them whole, so the
output is deterministic: same inputs, same rows, same order, same evidence text.

Stops (found vectorised over the whole step stream; only the rare stops get per-stop work):
- a **stall**: the gap between consecutive progress points exceeds ``k`` x the median gap
  between metric rows, with a floor of ``min_stall_s`` (the median gap, not the step time, so a
  log line every 100 steps works); a gap covered by checkpoint saves with no failure evidence
  and no restart is a blocking save, not an interruption;
- a **step going backwards** (a restore from an older checkpoint);
- a **new attempt**: the ``attempt`` column changes, or a checkpoint ``load`` line falls between
  two progress points (a quick restart that neither stalls long nor goes back a logged step).
A stall with no progress after it yet is not an interruption (see ``current_stall``), unless
the data ends with its cause after the last progress: a Slurm time limit or preemption, a crash
nobody restarted. That stop is an interruption without an end (``_ended``), whose lost steps are
those since the newest checkpoint. A trainer's planned exit there (``exiting program``,
``Training completed``) is a finished run, and a planned exit before a restart is planned.

Per stop: ``ts`` = last progress before it, ``end_ts`` = next progress. Restored step: a ``load``
checkpoint event in between, else the newest ``ok`` checkpoint on a surviving tier that ended
before the restart with a step at most the first step after it, else that first step minus the
log interval (an estimate, said so in the evidence). Tier: the load path under a tier root,
else the checkpoint's; a step on several tiers takes the fastest surviving one (nvme < pfs <
object), never NVMe when a node was lost (a Slurm node failure or an XID 79 in the window) nor
NVMe copies written before an earlier node loss. The first step after the restart has the last
word (a checkpoint at S resumes at S+1..S+log interval): if only an NVMe copy fits it, the
NVMe survived; if a newer NVMe copy than the restored step was passed over, it was lost, and
so was a node. The downtime ends when training resumed: the next progress point less its
steps since the restored one at the median step time (they ran after it: redone steps, in
``rework_s``). Two detection times (issue 57, 4): ``failed_ts``, when the failure began (the
cause's line: the kernel's XID, the culprit's own error, the collective a hang's ranks began
waiting in; null when only the ranks that waited or the teardown speak), and ``noticed_ts``,
when the job noticed (its first own failure line from then: a watchdog timeout, its error, a
teardown line; never the kernel's, the dumps' or the controller's; null when none).
``detect_s`` = ``noticed_ts`` - ``ts`` (0 when it came before the last progress; null when
unknown, never 0), ``restart_s`` the rest of the downtime. Recovery is ``automated`` when the job
restarted (new attempt, load line or step regression) within ``automated_max_s`` and nobody
cancelled it (``slurm_cancelled``); else unknown (None): logs cannot tell a person's hand from
a slow script.

Root cause (``telemetry.derive.evidence`` holds the ranking table): the strongest evidence on the
run's hosts in the window from ``pre_s`` before the last progress (never before the previous
stop's end) to the restart; every other failure signal there is its symptom. Its rank and host
are the culprit's only where evidence places it (``telemetry.derive.culprit``); otherwise they
are null and ``culprit_candidates`` (a JSON list) and ``culprit_reason`` say who it may be and
why none is named. Restarts are counted per writer: every rank logs its own restore line.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from telemetry.derive.agents import agent_gap
from telemetry.derive.culprit import Culprit, judge, told, who_columns
from telemetry.derive.evidence import (
    INITIATING,
    UNKNOWN,
    XID,
    Explanation,
    column,
    gather,
    is_empty,
    item,
    roles,
    to_ns,
)
from telemetry.derive.oom import oom_killed
from telemetry.derive.restores import (
    Restore,
    checkpoints_frame,
    covered_ns,
    events,
    restarts,
    restore,
    save_spans,
)
from telemetry.derive.waits import exact_world, lost_node, missing_rank
from telemetry.signals import COLLECTIVE_HANG, PLANNED_EXIT
from telemetry.vocabulary import PLANNED_CATEGORY

COLUMNS = (
    "run_id", "ts", "host", "gpu", "component", "category", "xid", "planned", "node_lost",
    "detect_s", "restart_s", "recovery", "restored_tier", "restored_step", "lost_steps",
    "rework_s", "lost_gpu_hours", "description", "source", "confidence", "evidence", "end_ts",
    "rank", "restarts", "culprit_candidates", "culprit_reason", "failed_ts", "noticed_ts",
)  # fmt: skip
SOURCE = "inferred"
K = 5.0  # a stall is a gap beyond K x the median gap between metric rows ...
MIN_STALL_S = 60.0  # ... and never shorter than this (GC pauses, slow log flushes)
PRE_S = 300.0  # the evidence window opens this long before the last progress
AUTOMATED_MAX_S = 1800.0  # a restart within this long, nobody cancelling, is automated
POSTED_SLACK_S = 300.0  # a posted record this close to a stop's window is that stop
EVIDENCE_CAP = 20  # evidence items kept per interruption; the rest are counted
LOOP_RESTARTS = 3  # this many restarts without getting past one checkpoint are a restart loop
LOOP_GAP_S = 1800.0  # the same GPU failing again this soon after a restore is one too
TAIL_NS = 7 * 86400 * 10**9  # after the last progress, evidence is read this far for its stop
TEARDOWN_GAP_NS = 1800 * 10**9  # a job's going-down lines follow each other closer than this
_NEVER = np.iinfo(np.int64).min


@dataclass(frozen=True)
class _Stream:
    run_id: str | None
    ts: np.ndarray  # int64 ns, ascending
    step: np.ndarray
    attempt: np.ndarray  # float, NaN unknown
    thr_ns: float


def _stream(metrics: pd.DataFrame, k: float, min_stall_s: float) -> _Stream:
    missing = {"ts", "step"} - set(metrics.columns)
    if missing:
        raise ValueError(f"metrics lack column(s) {sorted(missing)}: need run_id, ts, step")
    m = metrics[metrics["ts"].notna() & metrics["step"].notna()]
    runs = column(m, "run_id").dropna().unique()
    if len(runs) > 1:
        raise ValueError(f"metrics hold {len(runs)} runs; infer one run at a time")
    ts, step = to_ns(m["ts"]), m["step"].to_numpy(np.int64)
    att = pd.to_numeric(column(m, "attempt"), errors="coerce").to_numpy(float, na_value=np.nan)
    order = np.lexsort((step, ts))
    ts, step, att = ts[order], step[order], att[order]
    keep = np.r_[True, (np.diff(ts) != 0) | (np.diff(step) != 0)]  # the same row twice
    ts, step, att = ts[keep], step[keep], att[keep]
    gaps = np.diff(ts)
    med = float(np.median(gaps[gaps > 0])) if (gaps > 0).any() else 0.0
    thr = max(k * med, min_stall_s * 1e9)
    return _Stream(str(runs[0]) if len(runs) else None, ts, step, att, thr)


def _load_gaps(s: _Stream, loads: pd.DataFrame) -> np.ndarray:
    """The gap each load line falls in (``i``: between progress points i and i+1). A load line
    often has no time of its own and takes the last timed line's; where progress points share
    that time (a log stamped to the second: a job stopped in the second of its last three
    steps), it is the gap whose next point resumes from the loaded step (S+1 to S+the log
    interval), else the first of them (the load logged before the points of its second)."""
    t = loads["ts"].to_numpy(np.int64)
    lo = np.searchsorted(s.ts, t, "left") - 1
    hi = np.searchsorted(s.ts, t, "right") - 1
    up = np.diff(s.step)[np.diff(s.step) > 0]
    every = max(round(float(np.median(up))), 1) if len(up) else 1
    for n in np.flatnonzero(hi > lo):  # only ties: rare
        got = loads["step"].iloc[n]
        fits = [i for i in range(max(lo[n], 0), min(hi[n] + 1, len(s.step) - 1))
                if got is not None and got < s.step[i + 1] <= got + every]  # fmt: skip
        lo[n] = fits[0] if fits else lo[n]
    return lo


def stall_threshold_s(
    metrics: pd.DataFrame, k: float = K, min_stall_s: float = MIN_STALL_S
) -> float:
    """Seconds without progress after which a run counts as stalled."""
    return _stream(metrics, k, min_stall_s).thr_ns / 1e9


def current_stall(
    metrics: pd.DataFrame, now: datetime, *, k: float = K, min_stall_s: float = MIN_STALL_S
) -> dict[str, Any] | None:
    """The run's open stall at ``now`` (naive UTC), or None: ``run_id``, ``since`` (the last
    progress), ``step``, ``stalled_s``, ``threshold_s``. Such a stop is no interruption until
    progress resumes; the lead raises a live alert instead."""
    s = None if is_empty(metrics) else _stream(metrics, k, min_stall_s)
    if s is None or not len(s.ts):
        return None
    stalled = pd.Timestamp(now).as_unit("ns").value - int(s.ts[-1])
    if stalled <= s.thr_ns:
        return None
    since = pd.Timestamp(int(s.ts[-1])).to_pydatetime()
    return {
        "run_id": s.run_id,
        "since": since,
        "step": int(s.step[-1]),
        "stalled_s": stalled / 1e9,
        "threshold_s": s.thr_ns / 1e9,
    }


def infer_interruptions(
    metrics: pd.DataFrame,
    signals: pd.DataFrame | None = None,
    *,
    checkpoints: pd.DataFrame | None = None,
    ckpt_events: pd.DataFrame | None = None,
    xid_events: pd.DataFrame | None = None,
    posted: pd.DataFrame | None = None,
    run_hosts: set[str] | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
    tier_roots: Mapping[str, Sequence[str]] | None = None,
    rank_hosts: Mapping[int, str] | None = None,
    run_id: str | None = None,
    job_hosts: Collection[str] = (),
    k: float = K,
    min_stall_s: float = MIN_STALL_S,
    pre_s: float = PRE_S,
    automated_max_s: float = AUTOMATED_MAX_S,
    posted_slack_s: float = POSTED_SLACK_S,
) -> pd.DataFrame:
    """The interruptions of ONE run, derived from its step stream and evidence (module doc).

    ``metrics``: run_id, ts, step[, attempt]. ``signals``: ts, host, gpu, kind, xid, detail,
    origin, line[, source]. ``checkpoints``: step, tier, end_ts, status[, start_ts, path].
    ``ckpt_events``: ts, kind (save_start|save_end|load), step, path[, origin, line].
    ``xid_events``: ts, host, gpu, xid[, source]. ``posted``: stored interruptions from other
    sources (ts[, source]; 'inferred' rows are ignored): a stop whose window holds one within
    ``posted_slack_s`` is left to it. ``run_hosts``: the run's hosts (None = all). ``gpus``:
    the run's GPU count (None: lost GPU-hours unknown); ``nodes`` its nodes, at least (None:
    unknown). ``tier_roots``: {tier: [roots]}.
    ``rank_hosts``: {rank: host} for signals that name their rank and not their host.
    ``job_hosts``: the hosts the run's lines were labelled with (a node lost at once).
    Returns ``COLUMNS``, one row per stop that progress has resumed from, in time order.
    Raises ``ValueError`` when metrics lack ts/step or hold several runs.
    """
    if is_empty(metrics):
        return _frame([])
    s = _stream(metrics, k, min_stall_s)
    d_ts, d_step, a = np.diff(s.ts), np.diff(s.step), s.attempt
    back = d_step < 0
    new_att = ~np.isnan(a[:-1]) & ~np.isnan(a[1:]) & (a[:-1] != a[1:])
    loads = events(ckpt_events, "load")
    j = _load_gaps(s, loads)
    new_att[j[(j >= 0) & (j < len(d_ts))]] = True  # a load line between two progress points
    stop = (d_ts > s.thr_ns) | back | new_att
    idx = np.flatnonzero(stop)
    normal = ~stop & (d_step > 0)
    step_s = float(np.median(d_ts[normal] / d_step[normal])) / 1e9 if normal.any() else None
    log_every = max(round(float(np.median(d_step[normal]))), 1) if normal.any() else 1
    starts, ends = s.ts[idx], s.ts[idx + 1]
    w0 = np.maximum(starts - int(pre_s * 1e9), np.r_[_NEVER, ends[:-1]])
    last_ts = int(s.ts[-1])  # and the end of the data: a stop no progress followed
    # a line at a restart's first progress time belongs after it, as between stops: the last
    # launch's own crash logged in the second it resumed (untimed tracebacks take that time)
    tail0 = max(last_ts - int(pre_s * 1e9), int(ends[-1]) if len(ends) else _NEVER)
    hosts_of = dict(rank_hosts or {})
    evidence = gather(signals, xid_events, run_hosts, np.r_[w0, tail0],
                      np.r_[ends, last_ts + TAIL_NS], hosts_of)  # fmt: skip
    world = max(max(hosts_of, default=-1) + 1, gpus or 0)
    for evs in evidence:  # a rank missing from a collective, a node lost: from the others
        oom_killed(evs)  # and who sent a SIGKILL, where the kernel says
        role = roles(evs)
        if INITIATING in role:
            continue
        exact = exact_world(hosts_of, gpus)
        if (w := missing_rank(evs, exact, hosts_of) or lost_node(evs, role, world, hosts_of)
                or agent_gap(evs, role, hosts_of, world=world, stated=gpus, nodes=nodes,
                             job_hosts=job_hosts)):
            evs.append(w)
    ck = checkpoints_frame(checkpoints)
    spans = save_spans(ck, ckpt_events)
    pt = np.array([], np.int64)
    if not is_empty(posted):
        p = posted[posted["ts"].notna() & (column(posted, "source").fillna("") != SOURCE)]  # type: ignore[index]
        pt = np.sort(to_ns(p["ts"]))
    slack = int(posted_slack_s * 1e9)
    rows, nvme_from = [], _NEVER
    saves_started, saves_ended = events(ckpt_events, "save_start"), events(ckpt_events, "save_end")
    lt = loads["ts"].to_numpy(np.int64)
    for n, i in enumerate(idx):
        start, end = int(starts[n]), int(ends[n])
        ex, who = judge(evidence[n], run_hosts is not None, world, hosts_of)
        nxt, roots = int(s.step[i + 1]), tier_roots or {}
        rs = restore(start, end, nxt, log_every, ex.node_lost, nvme_from, ck, loads, roots)
        node_lost = (ex.node_lost or rs.nvme_lost) and rs.tier != "nvme"  # NVMe used: it lived
        nvme_from = start if node_lost else nvme_from
        restarted = bool(back[i] or new_att[i] or rs.how == "load")
        if not restarted and ex.cause is None:
            if end - start - covered_ns(spans, start, end) <= s.thr_ns:
                continue  # a blocking checkpoint save, not an interruption
        if np.searchsorted(pt, end + slack, "right") > np.searchsorted(pt, start - slack):
            continue  # the job posted this stop itself: its record wins
        automated = restarted and (end - start) / 1e9 <= automated_max_s and not ex.cancelled
        torn = _unfinished_saves(saves_started, saves_ended, int(w0[n]), end)
        # the next line's steps since the restored one (a restart), else since the last line
        ran = nxt - (rs.step if back[i] or new_att[i] else int(s.step[i]))
        row = _row(start, end, (int(s.step[i]), ran), rs, ex, step_s, gpus, torn,
                   who) | who_columns(who)  # fmt: skip
        tries = restarts(loads, lt, start, end)
        rows.append(
            row
            | {
                "run_id": run_id or s.run_id,
                "node_lost": node_lost,
                "recovery": "automated" if automated else None,
                "restarts": max(tries, 1),
            }
        )
    ex, who = judge(evidence[-1], run_hosts is not None, world, hosts_of)
    gap = s.thr_ns / k  # the median gap between progress points
    ended = ex.cause is not None and ex.cause.kind != PLANNED_EXIT and ex.cause.ts >= last_ts - gap
    if ended and not np.searchsorted(pt, last_ts - slack) < len(pt):
        saves = events(ckpt_events, "save_end")
        began = max(int(s.step[0]) - log_every, 0)  # the step the data's first line follows
        row = _ended(last_ts, (began, int(s.step[-1])), ex, ck, saves, step_s, gpus,
                     who) | who_columns(who)  # fmt: skip
        rows.append(row | {"run_id": run_id or s.run_id, "node_lost": ex.node_lost})
    return _frame(_loops(rows))


def _loops(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Restart loops as one incident each: ``LOOP_RESTARTS`` or more restarts that never got
    past the checkpoint they restored (one stop with that many loads, or consecutive stops
    restoring the same step), or the same GPU failing again within ``LOOP_GAP_S`` of a
    restore. Automation did not recover them; each is one row, its restarts counted."""
    out: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []

    def same_gpu(a: dict[str, Any], b: dict[str, Any]) -> bool:
        if a["host"] is None or a["gpu"] is None or pd.isna(a["end_ts"]):
            return False
        near = (b["ts"] - a["end_ts"]).total_seconds() <= LOOP_GAP_S
        return near and (a["host"], a["gpu"]) == (b["host"], b["gpu"])

    def flush() -> None:
        tries = sum(r.get("restarts") or 1 for r in group)
        steps = {r["restored_step"] for r in group}
        stuck = len(steps) == 1 and None not in steps and tries >= LOOP_RESTARTS
        again = len(group) > 1 and all(same_gpu(a, b) for a, b in itertools.pairwise(group))
        if stuck or again:
            out.append(_loop(group, tries, stuck, again))
        else:
            out.extend(group)
        group.clear()

    for r in rows:
        prev = group[-1] if group else None
        joins = prev is not None and (
            (r["restored_step"] is not None and r["restored_step"] == prev["restored_step"])
            or same_gpu(prev, r)
        )
        if prev is not None and not joins:
            flush()
        group.append(r)
    if group:
        flush()
    return out


def _loop(group: list[dict[str, Any]], tries: int, stuck: bool, again: bool) -> dict[str, Any]:
    first, last = group[0], group[-1]
    row = dict(first)
    span = None if pd.isna(last["end_ts"]) else (last["end_ts"] - first["ts"]).total_seconds()
    why = []
    if stuck:
        why.append(f"never got past step {first['restored_step']:,}")
    if again:
        why.append(f"{first['host']} GPU {first['gpu']} failed again after each restore")
    lasted = f" in {_dur(span)}" if span is not None else ""
    row["description"] = (
        f"Restart loop: {tries} restarts{lasted}, {' and '.join(why)}; first: "
        + first["description"]
    )
    items = [
        item(int(pd.Timestamp(r["ts"]).value), "restart", "symptom", line=r["description"])
        for r in group[: EVIDENCE_CAP // 2]
    ]
    row["evidence"] = json.dumps(items + json.loads(first["evidence"])[: EVIDENCE_CAP // 2],
                                 ensure_ascii=False)  # fmt: skip
    row["end_ts"] = last["end_ts"]
    row["restart_s"] = None if span is None else span - (first["detect_s"] or 0.0)
    for k in ("lost_steps", "rework_s", "lost_gpu_hours"):
        vals = [r[k] for r in group if r[k] is not None]
        row[k] = sum(vals) if vals else None
    row["restored_tier"], row["restored_step"] = last["restored_tier"], last["restored_step"]
    row["node_lost"] = any(r["node_lost"] for r in group)
    row["recovery"] = None  # automation restarted it, and it did not recover
    row["restarts"] = tries
    return row


def _row(
    start: int,
    end: int,
    steps: tuple[int, int],
    rs: Restore,
    ex: Explanation,
    step_s: float | None,
    gpus: int | None,
    torn: Sequence[dict[str, Any]] = (),
    who: Culprit | None = None,
) -> dict[str, Any]:
    items = _items(ex.ordered, end, rs.item, *torn)
    last, after = steps  # the last step before the stop, the next line's steps after it
    stalled = (end - start) / 1e9
    noticed = _own(ex.noticed_ns, start)
    detect = max((noticed - start) / 1e9, 0.0) if noticed is not None else None
    # training resumed when the first step after the restored one began: the next progress
    # line's steps since it ran after that, at the step time (redone steps, not downtime)
    ran = max(after, 0) * step_s if step_s is not None else 0.0
    downtime = max(stalled - ran, detect or 0.0)
    lost = max(last - rs.step, 0)
    rework = lost * step_s if step_s is not None else None
    cause, n, k = ex.cause, ex.symptoms, ex.cascade_ranks
    rule = cause.rule if cause is not None else None
    tier = "estimated" if rs.how == "estimate" else rs.tier or "tier unknown"
    desc = (
        f"Step stalled at {last:,} for {_dur(stalled)}; "
        + told(cause, who)
        + (f" (+{n} symptom{'s' if n > 1 else ''})" if n and cause is not None and not k else "")
        + (f"; the cascade on {k:,} other rank{'s' if k > 1 else ''} ({n:,} lines) set aside"
           if k else "")
        + f"; resumed from step {'~' if rs.how == 'estimate' else ''}{rs.step:,} ({tier})"
        + (f", {lost:,} steps lost" if lost else "")
    )
    return {
        "ts": pd.Timestamp(start),
        "host": cause.host if cause else None,
        "rank": cause.rank if cause else None,
        "gpu": cause.gpu if cause else None,
        "component": rule.component if rule else UNKNOWN,
        "category": rule.category if rule else UNKNOWN,
        "xid": cause.xid if cause and cause.kind == XID else None,
        "planned": bool(rule and rule.category == PLANNED_CATEGORY),
        "detect_s": detect,
        "restart_s": downtime - (detect or 0.0),
        "restored_tier": rs.tier,
        "restored_step": rs.step,
        "lost_steps": lost,
        "rework_s": rework,
        "lost_gpu_hours": gpus * (downtime + (rework or 0.0)) / 3600.0 if gpus else None,
        "description": desc,
        "source": SOURCE,
        "confidence": ex.confidence,
        "evidence": json.dumps(items, ensure_ascii=False),
        "end_ts": pd.Timestamp(end),
    } | _times(ex, start)


def _own(t: int | None, last: int | None) -> int | None:
    """``t``, unless it is exactly the last progress's time (``last``): the time a line after
    it took from it, having none of its own (a traceback, an old watchdog line). Such a time
    dates nothing: the wait, stall and hold it would give are unknown, never 0."""
    return None if t is None or t == last else t


def _times(ex: Explanation, last: int | None = None) -> dict[str, Any]:
    """The two detection times (module doc): when the failure began and the job noticed, each
    its line's own time (``_own``)."""
    began, noticed = _own(ex.began, last), _own(ex.noticed_ns, last)
    return {"failed_ts": pd.NaT if began is None else pd.Timestamp(began),
            "noticed_ts": pd.NaT if noticed is None else pd.Timestamp(noticed)}


def _unfinished_saves(
    started: pd.DataFrame, ended: pd.DataFrame, w0: int, end: int
) -> list[dict[str, Any]]:
    """Checkpoint saves the log started in a stop's window and never finished before progress
    resumed: failed writes (the step they would have saved is not there to restore). An end
    line in the same second as its start (untimed save lines take the time before them) ends
    it when it comes after the start in the file."""
    out = []
    st = started[(started["ts"] >= w0) & (started["ts"] <= end)]
    for t, step, path, origin, line in st[["ts", "step", "path", "origin", "line"]].itertuples(
        index=False
    ):
        later = (ended["ts"] > t) | ((ended["ts"] == t) & ended["origin"].map(
            lambda o, s=origin: _after(o, s)))
        done = ended[later & (ended["ts"] <= end)]
        if step is not None:
            done = done[done["step"].isna() | (done["step"] == step)]
        if not len(done):
            what = f"step {step:,}" if step is not None else (path or "a checkpoint")
            text = f"{line or 'checkpoint save'} (the save of {what} never finished: failed)"
            out.append(item(int(t), "ckpt_save_unfinished", origin=origin, line=text))
    return out


def _after(origin: str | None, than: str | None) -> bool:
    """Whether ``file:line`` ``origin`` comes after ``than`` in the same file."""
    (f, _, n), (g, _, m) = (str(o).rpartition(":") for o in (origin, than))
    return f == g and n.isdigit() and m.isdigit() and int(n) > int(m)


def _more(rest: list[tuple[Any, str]], end: int) -> dict[str, Any]:
    """One item for the evidence not kept: how many, by role and kind, from how many ranks."""
    by: dict[tuple[str, str], list[Any]] = {}
    for e, role in rest:
        by.setdefault((role, e.kind), []).append(e)
    parts = []
    for (role, kind), evs in sorted(by.items(), key=lambda kv: -len(kv[1])):
        ranks = {e.rank for e in evs if e.rank is not None}
        who = f" from {len(ranks):,} rank{'s' if len(ranks) > 1 else ''}" if ranks else ""
        parts.append(f"{len(evs):,} {role} {kind}{who}")
    line = f"{len(rest):,} more items not shown: " + "; ".join(parts)
    return item(end, "more", line=line) | {"count": len(rest)}


def _ended(
    last_ts: int, steps: tuple[int, int], ex: Explanation, ck: pd.DataFrame, saves: pd.DataFrame,
    step_s: float | None, gpus: int | None, who: Culprit | None = None,
) -> dict[str, Any]:
    """A run whose data ends with a stop and a cause after its last progress (a Slurm time
    limit or preemption, a crash nobody restarted): an interruption without an end. It costs
    the wait until the job noticed (``detect_s``), the time it held its GPUs after that until
    its last line (``restart_s``: nothing restarted) and the steps since the newest checkpoint
    written before it, or since ``began`` (the step the data's first progress line follows)
    when none is known (a restart redoes them all: issue 57, "a loss is never $0 by
    omission"). ``steps``: (began, the last step)."""
    began, last = steps
    ok = ck[ck["ok"].astype(bool) & (ck["end"] <= last_ts + TAIL_NS) & (ck["step"] <= last)]
    logged = [int(x) for x in saves["step"] if x is not None and int(x) <= last]
    known = [*ok["step"].astype(int).tolist(), *logged]  # directories, and the log's saves
    saved = max(known) if known else None
    lost = last - (saved if saved is not None else began)
    rework = lost * step_s if step_s is not None else None
    noticed, first = _own(ex.noticed_ns, last_ts), _first_line(ex)
    detect = max((noticed - last_ts) / 1e9, 0.0) if noticed is not None else None
    end = _gone(ex, max(first, last_ts)) if first is not None else last_ts
    end = end if noticed is None else max(end, noticed)  # a noticing after a long silence
    # held after the job noticed; with its noticing undated, the whole wait to its end (unknown
    # when no line after the last progress has a later time of its own)
    held = None if first is None or end == last_ts else (
        end - max(noticed if noticed is not None else last_ts, last_ts)) / 1e9  # fmt: skip
    cause = ex.cause
    assert cause is not None and cause.rule is not None
    where = (f"{lost:,} steps since the last checkpoint (step {saved:,}) to redo" if saved
             is not None else f"no checkpoint known: all {lost:,} steps since step "
             f"{began:,} to redo")  # fmt: skip
    desc = (f"Run stopped at step {last:,}; {told(cause, who)}; no progress after it in the data; "
            + where)  # fmt: skip
    items = _items(ex.ordered, end)
    parts = [x for x in (detect, held, rework) if x is not None]  # as failures.COSTED sums
    cost = sum(parts) if parts else None
    return {
        "ts": pd.Timestamp(last_ts), "end_ts": pd.NaT, "host": cause.host, "rank": cause.rank,
        "gpu": cause.gpu, "component": cause.rule.component, "category": cause.rule.category,
        "xid": cause.xid if cause.kind == XID else None,
        "planned": cause.rule.category == PLANNED_CATEGORY, "detect_s": detect,
        "restart_s": held, "recovery": None, "restored_tier": None, "restored_step": None,
        "lost_steps": lost, "rework_s": rework,
        "lost_gpu_hours": gpus * cost / 3600.0 if gpus and cost is not None else None,
        "description": desc, "source": SOURCE, "confidence": ex.confidence,
        "evidence": json.dumps(items, ensure_ascii=False),
    } | _times(ex, last_ts)  # fmt: skip


def _gone(ex: Explanation, noticed: int) -> int:
    """When the job was gone: its last failure line in the run of lines that follow the one
    it noticed by at most ``TEARDOWN_GAP_NS`` each (a job goes down in minutes; a line hours
    later, a kernel's or another job's, is not this stop's)."""
    end = noticed
    for t in sorted(e.ts for e, role in ex.ordered if role != "context" and e.ts > noticed):
        if t - end > TEARDOWN_GAP_NS:
            break
        end = t
    return end


def _first_line(ex: Explanation) -> int | None:
    """The stop's first failure line, from which its teardown lines follow (``_gone``). A
    flight-recorder hang is dated by the collective its ranks began waiting in, not by any
    line; it counts only when nothing else was logged."""
    told_ = [e.ts for e, role in ex.ordered if role != "context" and e.kind != COLLECTIVE_HANG]
    return min(told_, default=ex.first_failure_ns)


def _items(ordered: list[tuple[Any, str]], end: int, *extra: dict[str, Any]) -> list[dict]:
    """The evidence kept (``EVIDENCE_CAP`` items, ``extra`` last) and one item counting the
    rest."""
    items = [e.item(role) for e, role in ordered[: EVIDENCE_CAP - 1]] + list(extra)
    if len(ordered) > EVIDENCE_CAP - 1:
        items.append(_more(ordered[EVIDENCE_CAP - 1 :], end))
    return items


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


_DTYPES: dict[str, Any] = {
    "ts": "datetime64[us]",
    "end_ts": "datetime64[us]",
    "gpu": "Int16",
    "xid": "Int16",
    "planned": bool,
    "node_lost": bool,
    "restored_step": "Int64",
    "rank": "Int32",
    "restarts": "Int32",
    "lost_steps": "Int64",
    "failed_ts": "datetime64[us]",
    "noticed_ts": "datetime64[us]",
}
_FLOATS = ("detect_s", "restart_s", "rework_s", "lost_gpu_hours", "confidence")


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows in ``COLUMNS`` order; unknowns are nulls (NA), never 0."""
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    strings = [c for c in COLUMNS if c not in _DTYPES and c not in _FLOATS]
    return df.astype(_DTYPES | dict.fromkeys(_FLOATS, "Float64") | dict.fromkeys(strings, object))
