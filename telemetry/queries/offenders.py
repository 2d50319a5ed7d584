"""Nodes remember (issue 58, item 3), and what to do about each interruption (item 2).

A node's culprit history spans every run and job in the store: the interruptions whose culprit
``host`` is the node, never those whose candidates merely list it and never those it waited
in (a victim's host is not stored as the culprit: ``derive.culprit``). Planned stops name no
culprit. An incident counts once however many sources recorded it (a posted and an inferred
row at one time), and a run's software bugs count once (a restart loop re-raising its error is
the code's doing, not the node's). The window ends at the store's newest data (an import of
March's logs is judged in March), ``days`` long; ``min_count`` incidents or more make a repeat
offender.

``actions`` gathers the facts the rules of ``telemetry.actions`` read, for every interruption
of a run, in one statement, at read time: nothing is stored, so an operator's override of the
table changes every page at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry import actions as act
from telemetry.queries import data_extent
from telemetry.reference import xids
from telemetry.store import Store

SOFTWARE_CATEGORY = "Dependency"  # Software Bug and Dependency in the Llama 3 taxonomy
# One incident (run and time) of a culprit host; planned stops are no one's fault. A software
# bug counts once per run: the same code raising again after each restart is the code's
# fault, not the node's (an exam restart loop made a healthy node a "repeat offender" to
# drain); the same host failing so in another run counts again.
_CULPRIT = "host IS NOT NULL AND NOT coalesce(planned, false)"
_INCIDENT = f"""CASE WHEN coalesce(category, '') = '{SOFTWARE_CATEGORY}' THEN run_id
                ELSE run_id || '|' || ts::VARCHAR END"""
# The kind of the evidence item that caused it (``derive`` stores role "cause" on it)
_CAUSE_KIND = """CASE WHEN json_valid(evidence) THEN list_filter(
    from_json(evidence, '[{"kind":"VARCHAR","role":"VARCHAR"}]'),
    lambda x: x.role = 'cause')[1].kind END"""


def newest(store: Store) -> datetime | None:
    """The store's newest data: where the node memory's window ends."""
    ext = data_extent(store)
    last = store.scalar("SELECT max(ts) FROM interruptions")
    ends = [t for t in (ext.end if ext else None, last) if t is not None]
    return max(ends) if ends else None


def node_history(
    store: Store, days: float | None = None, min_count: int | None = None
) -> pd.DataFrame:
    """Nodes named culprit ``min_count`` times or more in the last ``days`` of the store's data
    (the actions table's memory unless given), most incidents first: host, incidents, first_ts,
    last_ts, runs (list), causes (list of components)."""
    table = act.current()
    days = table.days if days is None else days
    least = table.min_count if min_count is None else min_count
    end = newest(store)
    cols = ["host", "incidents", "first_ts", "last_ts", "runs", "causes"]
    if end is None:
        return pd.DataFrame(columns=cols)
    return store.df(
        f"""SELECT host, count(DISTINCT {_INCIDENT}) AS incidents, min(ts) AS first_ts,
                   max(ts) AS last_ts, list(DISTINCT run_id ORDER BY run_id) AS runs,
                   list(DISTINCT component ORDER BY component) AS causes
            FROM interruptions WHERE {_CULPRIT} AND ts > ? AND ts <= ?
            GROUP BY host HAVING count(DISTINCT {_INCIDENT}) >= ?
            ORDER BY incidents DESC, host""",
        [end - timedelta(days=days), end, int(least)],
    )


def memory_days() -> float:
    """How many days the node memory spans (the actions table's, or its override)."""
    return act.current().days


def memory_min() -> int:
    """How many culprit incidents make a repeat offender (the actions table's)."""
    return act.current().min_count


def repeat_offenders(store: Store) -> dict[str, int]:
    """host -> culprit incidents, for the repeat offenders of the actions table's memory."""
    df = node_history(store)
    return dict(zip(df["host"].tolist(), df["incidents"].astype(int).tolist(), strict=True))


def actions(
    store: Store, run_id: str, ts: datetime | None = None
) -> dict[tuple[Any, str], tuple[str, str, str]]:
    """(ts, source) -> (action, action_reason, rule) for each interruption of ``run_id`` (only
    the one at ``ts`` if given); ``source`` as ``coalesce(source, 'posted')``."""
    table = act.current()
    df = store.df(
        f"""WITH i AS (
              SELECT *, {_CAUSE_KIND} AS cause_kind FROM interruptions
              WHERE run_id = ? AND (?::TIMESTAMP IS NULL OR ts = ?))
            SELECT ts, coalesce(source, 'posted') AS source, host, rank, component, category,
                   xid, coalesce(planned, false) AS planned, coalesce(restarts, 1) AS restarts,
                   culprit_candidates, cause_kind,
                   (SELECT count(DISTINCT {_INCIDENT}) FROM interruptions c
                    WHERE c.host = i.host AND NOT coalesce(c.planned, false)
                      AND c.ts <= i.ts AND c.ts > i.ts - to_seconds(?)) AS culprit_n,
                   EXISTS (SELECT 1 FROM interruptions p
                           WHERE p.run_id = i.run_id AND p.ts < i.ts AND p.end_ts <= i.ts
                             AND p.category = ? AND p.component = i.component
                             AND ({_CAUSE_KIND}) IS NOT DISTINCT FROM i.cause_kind) AS recurred
            FROM i""",
        [run_id, ts, ts, table.days * 86400.0, SOFTWARE_CATEGORY],
    )
    out = {}
    for r in df.to_dict("records"):
        out[(pd.Timestamp(r["ts"]), r["source"])] = act.recommend(_facts(r, table), table)
    return out


def _facts(r: dict[str, Any], table: act.Table) -> act.Facts:
    from telemetry.queries.failures import candidates, missing

    v = {k: (None if missing(x) else x) for k, x in r.items() if not isinstance(x, list)}
    code = None if v["xid"] is None else int(v["xid"])
    xid = xids().get(code) if code is not None else None
    count = int(v["culprit_n"] or 0) if v["host"] is not None else 0
    return act.Facts(
        planned=bool(v["planned"]), category=v["category"], component=v["component"],
        host=v["host"], rank=None if v["rank"] is None else int(v["rank"]), xid=code,
        xid_action=xid.action if xid else None, nan_loss=v["cause_kind"] == "nan_loss",
        restart_loop=int(v["restarts"]) > 1,
        recurred=bool(v["recurred"]) and v["category"] == SOFTWARE_CATEGORY,
        count=count, days=table.days, repeat_offender=count >= table.min_count,
        candidates=tuple(candidates(v["culprit_candidates"])),
    )  # fmt: skip


def action_of(
    found: dict[tuple[Any, str], tuple[str, str, str]], ts: Any, source: str | None
) -> dict[str, str | None]:
    """The ``action``, ``action_text``, ``action_reason`` and ``action_rule`` fields of one
    interruption from ``actions``' answer; all None where it has none (never a guess)."""
    got = found.get((pd.Timestamp(ts), source or "posted"))
    if got is None:
        return {"action": None, "action_text": None, "action_reason": None, "action_rule": None}
    return {"action": got[0], "action_text": act.ACTIONS[got[0]], "action_reason": got[1],
            "action_rule": got[2]}  # fmt: skip
