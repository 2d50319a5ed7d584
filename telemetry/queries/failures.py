"""Queries of the Failures page: interruption taxonomy against the Llama 3 reference, the
interruption timeline, reliability figures (MTBF, downtime, lost GPU-hours, recovery), decoded
XIDs and the bad-node ("lemon") ranking.

Every function takes a run ID (``None`` = all runs) and a ``TimeRange`` and returns a small
frame or dict: interruptions and XIDs are events (hundreds per 54-day run at 16,384 GPUs), so
each result is grouped or capped in SQL before it reaches Python.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pandas as pd

from telemetry.queries import DOWNTIME, TimeRange, run_time
from telemetry.queries.xid_sources import xid_sources
from telemetry.reference import LLAMA3_DAYS, LLAMA3_PLANNED, llama3_interruptions, xids
from telemetry.store import Store

LLAMA3_UNEXPECTED = 419  # the basis of every reference percentage (Table 5)
LLAMA3_MTBF_H = LLAMA3_DAYS * 24 / LLAMA3_UNEXPECTED  # wall hours / unexpected interruptions

# Groupings the taxonomy may be asked for; the column name comes from here, never from input.
TAXONOMY_KEYS = {"component": "component", "category": "category"}

# NVIDIA's immediate-action buckets in plain words (xid_reference.csv, NVIDIA XID catalog).
ACTION_TEXT = {
    "RESTART_APP": "restart the application",
    "RESET_GPU": "reset the GPU",
    "RESTART_BM": "reboot the node",
    "IGNORE": "no action needed",
    "CHECK_MECHANICALS": "check power cables and mechanics",
    "UNEXPECTED_ERR_REPORT_ISSUE": "report to NVIDIA",
    "WORKFLOW_XID_45": "follow the XID 45 workflow",
    "WORKFLOW_XID_48": "follow the XID 48 (double-bit ECC) workflow",
    "WORKFLOW_NVLINK_ERR": "follow the NVLink error workflow",
    "WORKFLOW_NVLINK5_ERR": "follow the NVLink5 error workflow",
}

_RUN_AND_RANGE = "(? IS NULL OR run_id = ?) AND ts BETWEEN ? AND ?"
# An interruption no line dates (ts NULL: a log with no wall-clock time, ``derive.stopped``)
# lies in no range the page can tell and outside none: it is counted and listed in every range
# of its run, as ``summary`` counts it, and shown as "time unknown" (never at a made-up time),
# so the Failures page tells the Overview's and ``summary --json``'s numbers. Only the charts
# that place interruptions on a time axis (``timeline``, ``culprits``) leave it out.
_RUN_AND_RANGE_OR_UNTIMED = "(? IS NULL OR run_id = ?) AND (ts BETWEEN ? AND ? OR ts IS NULL)"

# The interruptions table with the lost GPU-hours of a record that left them out (a training
# job's own report rarely says them) filled in where they are known: the run's GPUs x
# (detection + restart + recomputation), the parts the record gives. A posted 4-minute
# interruption of a 64-GPU run lost 4.3 GPU-hours, not 0 and not "unknown". Unknown GPUs, or
# no duration at all, stay NULL.
COSTED = """(SELECT i.* REPLACE (coalesce(i.lost_gpu_hours,
      CASE WHEN coalesce(i.detect_s, i.restart_s, i.rework_s) IS NOT NULL
           THEN r.gpus * (coalesce(i.detect_s, 0) + coalesce(i.restart_s, 0)
                          + coalesce(i.rework_s, 0)) / 3600.0 END) AS lost_gpu_hours)
    FROM interruptions i LEFT JOIN runs r USING (run_id))"""


def _params(run_id: str | None, tr: TimeRange) -> list[Any]:
    return [run_id, run_id, tr.start, tr.end]


def reference_distribution(by: str = "component") -> pd.DataFrame:
    """Llama 3 405B Table 5 grouped by component or category: ``key``, ``category``,
    ``ref_count``, ``ref_pct`` (count / 419 x 100) and ``ref_pct_printed`` (as printed; the
    paper prints 30.1 % for Faulty GPU, which is 148/419 = 35.3 %). Raises ``ValueError`` for
    an unknown grouping."""
    if by not in TAXONOMY_KEYS:
        raise ValueError(f"unknown taxonomy grouping {by!r}; use one of {sorted(TAXONOMY_KEYS)}")
    ref = pd.DataFrame(
        [
            {
                "key": getattr(c, by),
                "category": c.category,
                "ref_count": c.count,
                "ref_pct_printed": c.pct_printed,
            }
            for c in llama3_interruptions()
        ]
    )
    ref = ref.groupby("key", as_index=False, sort=False).agg(
        category=("category", "first"),
        ref_count=("ref_count", "sum"),
        ref_pct_printed=("ref_pct_printed", "sum"),
    )
    ref["ref_pct"] = ref["ref_count"] * 100.0 / LLAMA3_UNEXPECTED
    return ref


def taxonomy(
    store: Store, run_id: str | None, tr: TimeRange, by: str = "component"
) -> pd.DataFrame:
    """Unexpected interruptions in the range grouped by ``component`` or ``category``, beside
    the Llama 3 reference. Columns: ``key``, ``category``, ``count``, ``pct`` (share of this
    range's unexpected interruptions, %), ``lost_gpu_hours``, ``ref_count``, ``ref_pct``
    (count / 419, %), ``ref_pct_printed``. Every reference row is present (count 0 if not seen
    here); keys seen here but absent from the reference are appended. Ordered by reference
    count, then count. Planned interruptions are excluded (see ``reliability``)."""
    ref = reference_distribution(by)
    col = TAXONOMY_KEYS[by]
    seen = store.df(
        f"""SELECT {col} AS key, any_value(category) AS category_seen, count(*) AS count,
                   sum(lost_gpu_hours) AS lost_gpu_hours
            FROM {COSTED} WHERE NOT planned AND {_RUN_AND_RANGE_OR_UNTIMED}
            GROUP BY {col}""",
        _params(run_id, tr),
    )
    df = ref.merge(seen, on="key", how="outer")
    df["category"] = df["category"].fillna(df["category_seen"]).fillna("Unknown")
    df = df.drop(columns="category_seen")
    for c in ("count", "ref_count"):
        df[c] = df[c].fillna(0).astype(int)
    for c in ("ref_pct", "ref_pct_printed"):
        df[c] = df[c].astype(float).fillna(0.0)
    # none seen: none lost; seen without a known cost: unknown (NaN), not 0
    df["lost_gpu_hours"] = df["lost_gpu_hours"].astype(float).mask(df["count"] == 0, 0.0)
    total = int(df["count"].sum())
    df["pct"] = df["count"] * 100.0 / total if total else 0.0
    df = df.sort_values(["ref_count", "count"], ascending=False, kind="stable")
    return df.reset_index(drop=True)[
        [
            "key",
            "category",
            "count",
            "pct",
            "lost_gpu_hours",
            "ref_count",
            "ref_pct",
            "ref_pct_printed",
        ]
    ]


def timeline(store: Store, run_id: str | None, tr: TimeRange, limit: int = 5000) -> pd.DataFrame:
    """Interruptions in the range, newest ``limit`` (all of them in any realistic run), oldest
    first: ts, run_id, host, gpu, component, category, xid, planned, downtime_s (detection +
    restart), rework_s, lost_steps, lost_gpu_hours, restored_tier, restored_step, recovery,
    node_lost, description, xid_name (the XID's mnemonic, "unknown XID" if not in the
    catalog, "" without an XID)."""
    df = store.df(
        f"""SELECT * FROM (
              SELECT ts, run_id, host, gpu, component, category, xid, planned,
                     {DOWNTIME} AS downtime_s, rework_s, lost_steps, lost_gpu_hours,
                     restored_tier, restored_step, recovery, node_lost, description
              FROM {COSTED} WHERE {_RUN_AND_RANGE}
              ORDER BY ts DESC LIMIT ?)
            ORDER BY ts""",
        [*_params(run_id, tr), int(limit)],
    )
    ref = xids()
    df["xid_name"] = [
        "" if pd.isna(x) else (ref[int(x)].mnemonic if int(x) in ref else "unknown XID")
        for x in df["xid"]
    ]
    return df


def reliability(store: Store, run_id: str | None, tr: TimeRange) -> dict[str, Any]:
    """Reliability figures of the run within the range (definitions as ``metrics.summary``):
    ``unexpected``, ``planned``, ``wall_hours`` (the run's time inside the range; None when
    nothing dates the run),
    ``mtbf_hours`` (wall hours / unexpected; None without unexpected interruptions),
    ``downtime_hours`` (detection + restart, planned included), ``rework_hours``,
    ``lost_gpu_hours`` (each None when no interruption in the range knows it),
    ``lost_steps``, ``automated``, ``manual`` (recovery of all interruptions),
    ``manual_unexpected``, ``planned_gpu_hours`` (the part of ``lost_gpu_hours`` in planned
    stops), ``time_unknown`` (how many of them no line dates: counted in every range) and the
    Llama 3 reference counts."""
    (row,) = store.rows(
        f"""SELECT count(*) FILTER (WHERE NOT planned), count(*) FILTER (WHERE planned),
                   sum(coalesce(detect_s, 0) + coalesce(restart_s, 0))
                       FILTER (WHERE coalesce(detect_s, restart_s) IS NOT NULL),
                   sum(rework_s),
                   sum(lost_gpu_hours), sum(lost_steps),
                   count(*) FILTER (WHERE recovery = 'automated'),
                   count(*) FILTER (WHERE recovery = 'manual'),
                   count(*) FILTER (WHERE recovery = 'manual' AND NOT planned),
                   coalesce(sum(lost_gpu_hours) FILTER (WHERE planned), 0),
                   count(*) FILTER (WHERE ts IS NULL)
            FROM {COSTED} WHERE {_RUN_AND_RANGE_OR_UNTIMED}""",
        _params(run_id, tr),
    )
    wall_h, unexpected = _wall_hours(store, run_id, tr), int(row[0])
    return {
        "unexpected": unexpected,
        "planned": int(row[1]),
        "wall_hours": wall_h,
        # the one MTBF of every page and ``summary`` (``run_time.mtbf``); all runs: the range
        "mtbf_hours": _mtbf_hours(store, run_id, tr, wall_h, unexpected),
        # None when interruptions in the range were posted without their durations
        "downtime_hours": _hours(row[2], unexpected + int(row[1])),
        "rework_hours": _hours(row[3], unexpected + int(row[1])),
        # None when no interruption in the range knows it (a run that did not say its GPUs)
        "lost_gpu_hours": None if row[4] is None else float(row[4]),
        # 0 without interruptions, None when none in the range knows it (never 0 by omission)
        "lost_steps": (0 if unexpected + int(row[1]) == 0 else None) if row[5] is None
        else int(row[5]),
        "automated": int(row[6]),
        "manual": int(row[7]),
        "manual_unexpected": int(row[8]),
        "planned_gpu_hours": float(row[9]),  # the part of lost_gpu_hours in planned stops
        "time_unknown": int(row[10]),  # of unexpected + planned, those no line dates
        "ref_unexpected": LLAMA3_UNEXPECTED,
        "ref_planned": LLAMA3_PLANNED,
        "ref_manual": 3,
    }


def _mtbf_hours(
    store: Store, run_id: str | None, tr: TimeRange, wall_h: float | None, unexpected: int
) -> float | None:
    if run_id is not None:
        return run_time.mtbf(store, run_id, tr).hours
    return wall_h / unexpected if unexpected and wall_h is not None else None


def _wall_hours(store: Store, run_id: str | None, tr: TimeRange) -> float | None:
    """Hours of the run alive in the range (``run_time.run_wall``); every run's: the range;
    None when nothing dates the run (a log with no wall-clock time: unknown, not 0) or its
    lines show it at one instant only (how long it ran, none says: ``summary``'s wall too)."""
    if run_id is None:
        return max((tr.end - tr.start).total_seconds(), 0.0) / 3600.0
    whole = run_time.run_wall(store, run_id)
    if whole is None or whole.end <= whole.start:
        return None
    win = run_time.run_wall(store, run_id, tr)
    return 0.0 if win is None else (win.end - win.start).total_seconds() / 3600.0


def _hours(seconds: float | None, n: int) -> float | None:
    """Hours of a sum of seconds over ``n`` interruptions: 0 without any, None when none of
    them knows the figure."""
    return 0.0 if n == 0 else None if seconds is None else float(seconds) / 3600.0


def _xid_filter() -> str:
    # XIDs not attributed to a run (a spare, a node between jobs) belong to every run's view.
    return "(? IS NULL OR run_id = ? OR run_id IS NULL) AND ts BETWEEN ? AND ?"


def xid_table(store: Store, run_id: str | None, tr: TimeRange, max_hosts: int = 5) -> pd.DataFrame:
    """XID events in the range per code, decoded with NVIDIA's catalog. Columns: ``xid``,
    ``mnemonic``, ``meaning``, ``action`` (NVIDIA's immediate-action bucket), ``action_text``,
    ``hint``, ``fatal`` ("yes"/"no"/"unknown"), ``count``, ``gpus`` (distinct host/GPU pairs),
    ``hosts`` (up to ``max_hosts`` hosts by count, then "+N more"), ``last_ts``. A code absent
    from the catalog is kept and shown as "unknown XID", never dropped. Most frequent first.
    An XID line of the run's logs no time dates (a kernel log's seconds since boot) is counted
    in every range of its run, as its interruptions are: ``untimed`` says how many."""
    df = store.df(
        f"""WITH e AS (SELECT ts, host, gpu, xid FROM xid_events WHERE {_xid_filter()}
                       UNION ALL  -- no time: in no range and outside none (xid_events: timed)
                       SELECT ts, host, gpu, xid FROM signals WHERE kind = 'xid' AND ts IS NULL
                       AND xid IS NOT NULL AND (? IS NULL OR run_id = ? OR run_id IS NULL)),
            h AS (SELECT xid, host, count(*) AS n FROM e WHERE host IS NOT NULL GROUP BY ALL)
            SELECT e.xid, count(*) AS count, count(DISTINCT (e.host, e.gpu)) AS gpus,
                   max(e.ts) AS last_ts, count(*) FILTER (WHERE e.ts IS NULL) AS untimed,
                   coalesce((SELECT list(host ORDER BY n DESC, host) FROM h
                             WHERE h.xid = e.xid), []) AS hl
            FROM e GROUP BY e.xid ORDER BY count DESC, e.xid""",
        [*_params(run_id, tr), run_id, run_id],
    )
    ref = xids()
    rows = []
    for r in df.itertuples():
        code = int(r.xid)
        x = ref.get(code)
        hosts = list(r.hl)
        more = f" +{len(hosts) - max_hosts} more" if len(hosts) > max_hosts else ""
        rows.append(
            {
                "xid": code,
                "mnemonic": x.mnemonic if x else "unknown XID",
                "meaning": x.message if x else "not in NVIDIA's XID catalog shipped here",
                "action": x.action if x else "unknown",
                "action_text": ACTION_TEXT.get(x.action, x.action) if x else "look up the code",
                "hint": x.hint if x else "",
                "fatal": ("yes" if x.fatal else "no") if x else "unknown",
                "count": int(r.count),
                "gpus": int(r.gpus),
                "hosts": ", ".join(hosts[:max_hosts]) + more,
                "last_ts": r.last_ts,
                "untimed": int(r.untimed),
            }
        )
    cols = ["xid", "mnemonic", "meaning", "action", "action_text", "hint", "fatal", "count"]
    return pd.DataFrame(rows, columns=[*cols, "gpus", "hosts", "last_ts", "untimed"])


def lemons(store: Store, run_id: str | None, tr: TimeRange, limit: int = 20) -> pd.DataFrame:
    """Hosts ranked by unexpected interruptions in the range, then XIDs, then lost GPU-hours
    (repeat offenders first). Columns: ``host``, ``rack``, ``unexpected``, ``planned``,
    ``xids``, ``lost_gpu_hours`` and ``downtime_s`` (of its unexpected interruptions: planned
    maintenance is not the node's fault), ``last_failure`` (newest unexpected interruption or
    XID), ``components`` (distinct, most frequent first), ``health`` (the node-health rules it
    broke: ``queries.node_health``; a broken rule ranks a node above one with more XIDs and
    the same interruptions). Hosts with only planned interruptions are left out, and
    interruptions that name no node (a blank row, #37). ``xids`` is NULL where no source that
    reports XIDs covers the run and range (``queries.xid_sources``): not 0, which it cannot
    know."""
    covered = bool(xid_sources(store, run_id, tr))
    return store.df(
        f"""WITH r AS (SELECT * FROM {COSTED} WHERE {_RUN_AND_RANGE_OR_UNTIMED}
                       AND nullif(host, '') IS NOT NULL),  -- no node named: no node to rank
            c AS (SELECT host, component, count(*) AS n FROM r WHERE NOT planned
                  GROUP BY host, component),
            i AS (
              SELECT host, count(*) FILTER (WHERE NOT planned) AS unexpected,
                     count(*) FILTER (WHERE planned) AS planned,
                     sum(lost_gpu_hours) FILTER (WHERE NOT planned) AS lost_gpu_hours,
                     sum({DOWNTIME}) FILTER (WHERE NOT planned) AS downtime_s,
                     max(ts) FILTER (WHERE NOT planned) AS last_int,
                     (SELECT string_agg(component, ', ' ORDER BY n DESC, component) FROM c
                      WHERE c.host = r.host) AS components
              FROM r GROUP BY host),
            x AS (SELECT host, count(*) AS xids, max(ts) AS last_xid
                  FROM xid_events WHERE {_xid_filter()} GROUP BY host),
            h AS (SELECT unnest(?::VARCHAR[]) AS host, unnest(?::VARCHAR[]) AS health,
                         unnest(?::INTEGER[]) AS rules)
            SELECT host, n.rack, coalesce(i.unexpected, 0) AS unexpected,
                   coalesce(i.planned, 0) AS planned,
                   CASE WHEN ? THEN coalesce(x.xids, 0) END AS xids,
                   -- no interruption: nothing lost; interruptions not saying it: unknown
                   CASE WHEN coalesce(i.unexpected, 0) = 0 THEN 0 ELSE i.lost_gpu_hours END
                       AS lost_gpu_hours,
                   CASE WHEN coalesce(i.unexpected, 0) = 0 THEN 0 ELSE i.downtime_s END
                       AS downtime_s,
                   greatest(i.last_int, x.last_xid) AS last_failure,
                   coalesce(i.components, '') AS components, coalesce(h.health, '') AS health
            FROM i FULL OUTER JOIN x USING (host) FULL OUTER JOIN h USING (host)
              LEFT JOIN nodes n USING (host)
            WHERE coalesce(i.unexpected, 0) + coalesce(x.xids, 0) + coalesce(h.rules, 0) > 0
            ORDER BY unexpected DESC, coalesce(h.rules, 0) DESC, xids DESC,
                     lost_gpu_hours DESC NULLS LAST, host
            LIMIT ?""",
        [*_params(run_id, tr), *_params(run_id, tr), *_health(store, tr), covered,
         int(limit)],
    )


def _health(store: Store, tr: TimeRange) -> list[list[Any]]:
    """The node-health rules each host broke in ``tr`` (``queries.node_health``): hosts, the
    rules in words (worst first), how many."""
    from telemetry.queries.node_health import findings

    by: dict[str, list[str]] = {}
    for host, what in zip(*(findings(store, tr)[c].tolist() for c in ("host", "what")),
                          strict=True):  # fmt: skip
        if what not in by.setdefault(host, []):
            by[host].append(what)
    return [list(by), [", ".join(v) for v in by.values()], [len(v) for v in by.values()]]


def interruption_list(
    store: Store, run_id: str | None, tr: TimeRange, limit: int = 500
) -> pd.DataFrame:
    """Every interruption in the range, newest first (``limit`` of them; those of a time
    unknown, ts null, last), with where it came from: ts, end_ts, run_id, component, category,
    planned, source ('inferred', 'replay', or the posting path), confidence (inferred only),
    host, rank (the culprit's), gpu, xid, restored_tier, restored_step, lost_steps,
    downtime_s, lost_gpu_hours, evidence_n (items of evidence), labelled_by, labelled_at,
    orig_component (the inferred cause an operator corrected), description, evidence_text
    (the evidence in one line each item: role, kind, host, origin, line; for CSV export)."""
    df = store.df(
        f"""SELECT ts, end_ts, run_id, component, category, planned,
                   coalesce(source, 'posted') AS source, confidence, host, rank, gpu, xid,
                   restored_tier, restored_step, lost_steps, {DOWNTIME} AS downtime_s,
                   lost_gpu_hours,
                   CASE WHEN evidence IS NULL THEN 0
                        ELSE json_array_length(evidence::JSON) END AS evidence_n,
                   labelled_by, labelled_at, orig_component, description, evidence
            FROM {COSTED} WHERE {_RUN_AND_RANGE_OR_UNTIMED}
            ORDER BY ts DESC NULLS LAST, run_id LIMIT ?""",
        [*_params(run_id, tr), int(limit)],
    )
    text = [_evidence_text(e) for e in df.pop("evidence")]
    return df.assign(evidence_text=text)


def _evidence_text(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        return ""
    try:
        items = json.loads(raw)
    except ValueError:
        return ""
    parts = []
    for e in items if isinstance(items, list) else []:
        if isinstance(e, dict):
            where = " ".join(str(e[k]) for k in ("host", "origin") if e.get(k))
            parts.append(f"{e.get('role', '')}: {e.get('kind', '')} {where}: {e.get('line', '')}")
    return " | ".join(parts)[:4000]


def interruption_detail(
    store: Store, run_id: str, ts: datetime | None
) -> dict[str, Any] | None:
    """One interruption with its evidence list parsed (``evidence``: list of dicts with ts,
    kind, host, gpu, xid, origin, line, role) and an unknown culprit's ``culprit_candidates``
    (a list) beside its ``culprit_reason``; None if there is none at that time (``ts`` None:
    the run's interruption of a time unknown)."""
    df = store.df(
        f"""SELECT *, coalesce(source, 'posted') AS source_shown FROM {COSTED}
           WHERE run_id = ? AND ts IS NOT DISTINCT FROM ? ORDER BY source LIMIT 1""",
        [run_id, ts],
    )
    if df.empty:
        return None
    row = {k: (None if missing(v) else v) for k, v in df.iloc[0].to_dict().items()}
    try:
        row["evidence"] = json.loads(row["evidence"]) if row.get("evidence") else []
    except ValueError:
        row["evidence"] = []
    row["culprit_candidates"] = candidates(row.get("culprit_candidates"))
    return row


def candidates(raw: Any) -> list[str]:
    """An unknown culprit's candidates as stored (a JSON list), as a list; [] when none."""
    try:
        got = json.loads(raw) if isinstance(raw, str) and raw else []
    except ValueError:
        return []
    return [str(c) for c in got] if isinstance(got, list) else []


def missing(v: Any) -> bool:
    """Whether a stored value is missing (NULL as pandas shows it: None, NaN, NA, NaT)."""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def culprits(store: Store, run_id: str | None, tr: TimeRange, limit: int = 200) -> pd.DataFrame:
    """Where each failure and hang in the range began: ``ts``, ``host`` (the culprit's node,
    not the nodes that waited), ``rank``, ``what`` (the cause, or the hung collective), for
    marking them on the fleet's timelines."""
    return store.df(
        f"""SELECT ts, host, rank, component AS what FROM interruptions
            WHERE {_RUN_AND_RANGE} AND host IS NOT NULL AND NOT planned
            UNION ALL
            SELECT ts, culprit_host, culprit_rank,
                   'hang: ' || coalesce(op, 'collective') || ' #' || seq_id::VARCHAR
            FROM hangs WHERE {_RUN_AND_RANGE} AND culprit_host IS NOT NULL
            ORDER BY ts LIMIT ?""",
        [*_params(run_id, tr), *_params(run_id, tr), int(limit)],
    )


def incident_context(store: Store, run_id: str, ts: Any) -> dict[str, Any]:
    """What a postmortem names beside a stop at ``ts``: ``job_id`` (the Slurm job of the run
    that was running then, else None), ``attempt`` (of the run's last progress at or before
    it, else None) and ``gpu_model`` (the run's, else None)."""
    job = store.scalar(
        """SELECT job_id FROM slurm_jobs WHERE run_id = ? AND start_ts <= ?
             AND (end_ts IS NULL OR end_ts >= ?)
           ORDER BY start_ts DESC, job_id_raw DESC LIMIT 1""",
        [run_id, ts, ts],
    ) if store.has_table("slurm_jobs") else None
    attempt = store.scalar(
        """SELECT attempt FROM train_metrics WHERE run_id = ? AND ts <= ?
           ORDER BY ts DESC, step DESC LIMIT 1""",
        [run_id, ts],
    )
    model = store.scalar("SELECT gpu_model FROM runs WHERE run_id = ?", [run_id])
    return {"job_id": job, "attempt": None if attempt is None else int(attempt),
            "gpu_model": model}  # fmt: skip
