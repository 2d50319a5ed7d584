"""Node health over time: rules over time windows, each a finding with a recommended action and
its evidence, and each node's drained/down time with who set it and how long repair took.

Rules (as NVIDIA's health-event analysers judge them: a pattern over a window, not one event):

- ``fatal_xid_repeat``: the same fatal XID (the reference's NVSentinel column) on one GPU
  ``FATAL_REPEAT`` times within ``WINDOW``: drain the node, reset the GPU, and replace it if it
  comes back.
- ``app_xid_repeat``: XID 13 or 31 (graphics exception, memory page fault: usually the
  application) ``APP_REPEAT`` times within ``WINDOW`` on one GPU: run the DCGM diagnostic
  before blaming the code again.
- ``row_remap_failure``: XID 64 (the row remapper could not record a failing row): drain, RMA.
- ``jobs_of_users_failed``: jobs of ``USERS_FAILED`` different users failed on one node
  (FAILED, NODE_FAIL, BOOT_FAIL) within ``WINDOW``: the node, not the users' code.

A finding is kept when its window's count reached the threshold at any time in the view's
range; ``first_ts``/``last_ts`` span the events of its windows that did. Events come from
``xid_events`` (dcgm-exporter's XID field, kernel logs) and ``slurm_jobs``; every value is a
bound parameter and every read is bounded by the range (plus one window before it).

The timeline (``node_states``) reads Slurm's node events: each change the poller saw starts an
interval (drained, down, maintenance, or in service) that lasts to the node's next event (or
the range's end); repair is a drain or down followed by the node back in service.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.reference import xids
from telemetry.store import Store

WINDOW = timedelta(hours=24)
FATAL_REPEAT = 2  # the same fatal XID on one GPU this often in a window
APP_XIDS = (13, 31)  # usually the application: repeated, the GPU is suspect
APP_REPEAT = 3
ROW_REMAP_XIDS = (64,)  # ECC page retirement or row remapper recording failure
FAILED_STATES = ("FAILED", "NODE_FAIL", "BOOT_FAIL")
USERS_FAILED = 2  # different users' jobs failed on one node in a window

ACTIONS = {  # worst first: the order findings are listed in
    "row_remap_failure": "drain the node; RMA GPU {gpu} (its failing rows cannot be remapped)",
    "fatal_xid_repeat": "drain the node; reset GPU {gpu}, replace it if the XID returns",
    "jobs_of_users_failed": "drain and investigate the node, not the jobs",
    "app_xid_repeat": "run the DCGM diagnostic on GPU {gpu} (dcgmi diag -r 3); if it passes, "
    "look at the application",
}
RULES = {
    "row_remap_failure": "row remap failure",
    "fatal_xid_repeat": "same fatal XID repeated",
    "jobs_of_users_failed": "jobs of several users failed",
    "app_xid_repeat": "XID 13/31 repeated",
}

# per GPU and XID, how many of the same in the window ending at each event
_XID_SQL = f"""WITH e AS (
  SELECT host, gpu, xid, ts FROM xid_events
  WHERE ts >= ? AND ts <= ? AND host IS NOT NULL AND xid IS NOT NULL),
w AS (
  SELECT host, gpu, xid, ts, count(*) OVER (
           PARTITION BY host, gpu, xid ORDER BY ts
           RANGE BETWEEN INTERVAL {int(WINDOW.total_seconds())} SECOND PRECEDING
           AND CURRENT ROW) AS n
  FROM e),
r AS (
  SELECT *, CASE WHEN list_contains(?::INTEGER[], xid) THEN 'row_remap_failure'
                 WHEN list_contains(?::INTEGER[], xid) AND n >= ? THEN 'app_xid_repeat'
                 WHEN list_contains(?::INTEGER[], xid) AND n >= ? THEN 'fatal_xid_repeat'
            END AS rule
  FROM w)
SELECT host, gpu, rule, xid, max(n) AS n, min(ts) AS first_ts, max(ts) AS last_ts
FROM r WHERE rule IS NOT NULL AND ts >= ?
GROUP BY host, gpu, rule, xid"""

# failed jobs on a node, each with the other users' failures there in the window before it
_JOBS_SQL = """WITH f AS (
  SELECT unnest(hosts) AS host, job_id, user_name, end_ts FROM slurm_jobs
  WHERE state IN (SELECT unnest(?::VARCHAR[])) AND end_ts >= ? AND end_ts <= ?
    AND user_name IS NOT NULL AND hosts IS NOT NULL),
p AS (
  SELECT a.host, a.end_ts, count(DISTINCT b.user_name) AS users,
         list(DISTINCT b.user_name ORDER BY b.user_name) AS who,
         list(DISTINCT b.job_id ORDER BY b.job_id) AS jobs, min(b.end_ts) AS since
  FROM f a JOIN f b ON a.host = b.host AND b.end_ts BETWEEN a.end_ts - ? AND a.end_ts
  GROUP BY a.host, a.end_ts)
SELECT host, max(users) AS n, min(since) AS first_ts, max(end_ts) AS last_ts,
       arg_max(who, users) AS who, arg_max(jobs, users) AS jobs
FROM p WHERE users >= ? AND end_ts >= ? GROUP BY host"""

FINDING_COLUMNS = ["host", "gpu", "rule", "what", "action", "evidence", "n", "first_ts",
                   "last_ts"]  # fmt: skip


def findings(store: Store, tr: TimeRange) -> pd.DataFrame:
    """The rules' findings in ``tr``, worst first (a node's hardware before its jobs, then the
    most events): host, gpu (None for a node's), rule, what (the rule in words), action,
    evidence, n (events in the fullest window), first_ts, last_ts."""
    since = tr.start - WINDOW
    fatal = [c for c, x in xids().items() if x.fatal and c not in ROW_REMAP_XIDS]
    hits = store.df(
        _XID_SQL,
        [since, tr.end, list(ROW_REMAP_XIDS), list(APP_XIDS), APP_REPEAT, fatal,
         FATAL_REPEAT, tr.start],  # fmt: skip
    )
    jobs = store.df(
        _JOBS_SQL, [list(FAILED_STATES), since, tr.end, WINDOW, USERS_FAILED, tr.start]
    )
    rows = []
    for r in hits.itertuples():
        gpu = None if pd.isna(r.gpu) else int(r.gpu)
        name = xids().get(int(r.xid))
        meaning = f" ({name.message})" if name is not None else ""
        rows.append({
            "host": r.host, "gpu": gpu, "rule": r.rule, "what": RULES[r.rule],
            "action": ACTIONS[r.rule].format(gpu="?" if gpu is None else gpu),
            "evidence": f"XID {int(r.xid)}{meaning} on GPU {'?' if gpu is None else gpu}"
                        + (f", {int(r.n)} times within {_hours(WINDOW)}" if r.n > 1 else ""),
            "n": int(r.n), "first_ts": r.first_ts, "last_ts": r.last_ts,
        })  # fmt: skip
    for r in jobs.itertuples():
        rows.append({
            "host": r.host, "gpu": None, "rule": "jobs_of_users_failed",
            "what": RULES["jobs_of_users_failed"], "action": ACTIONS["jobs_of_users_failed"],
            "evidence": f"jobs {', '.join(map(str, r.jobs))} of {int(r.n)} users "
                        f"({', '.join(map(str, r.who))}) failed within {_hours(WINDOW)}",
            "n": int(r.n), "first_ts": r.first_ts, "last_ts": r.last_ts,
        })  # fmt: skip
    out = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    if out.empty:
        return out
    order = {k: i for i, k in enumerate(RULES)}
    out["_o"] = out["rule"].map(order)
    return (out.sort_values(["_o", "n", "last_ts"], ascending=[True, False, False])
            .drop(columns="_o").reset_index(drop=True))  # fmt: skip


def _hours(d: timedelta) -> str:
    return f"{d.total_seconds() / 3600:g} h"


# node states as the rest of the Slurm views read them
_STATE_SQL = """CASE WHEN regexp_matches(state, 'MAINT') THEN 'maintenance'
  WHEN regexp_matches(state, 'DOWN|FAIL|NOT_RESPONDING') THEN 'down'
  WHEN regexp_matches(state, 'DRAIN') THEN 'drained' ELSE 'in service' END"""

_INTERVALS_SQL = f"""WITH e AS (
  SELECT host, coalesce(reason_ts, ts) AS ts, {_STATE_SQL} AS kind, reason, reason_user
  FROM slurm_node_events WHERE coalesce(reason_ts, ts) <= ?),
s AS (
  SELECT *, lead(ts) OVER (PARTITION BY host ORDER BY ts) AS next_ts,
         lag(kind) OVER (PARTITION BY host ORDER BY ts) AS prev_kind
  FROM e),
i AS (SELECT * FROM s WHERE prev_kind IS DISTINCT FROM kind)  -- a change of state only
SELECT host, ts AS start_ts, lead(ts) OVER (PARTITION BY host ORDER BY ts) AS end_ts, kind,
       reason, reason_user FROM i"""


def node_states(store: Store, tr: TimeRange, host: str | None = None) -> pd.DataFrame:
    """Each node's states overlapping ``tr`` from Slurm's node events: host, start_ts, end_ts
    (None: still so at the range's end), kind (drained, down, maintenance, in service),
    reason, reason_user (who set it). Consecutive events of one kind are one interval.
    ``host``: that node's only."""
    return store.df(
        f"""SELECT * FROM ({_INTERVALS_SQL})
            WHERE coalesce(end_ts, ?) >= ? AND (?::VARCHAR IS NULL OR host = ?)
            ORDER BY host, start_ts""",
        [tr.end, tr.end, tr.start, host, host],
    )


def repairs(states: pd.DataFrame) -> pd.DataFrame:
    """Each drain or down that ended with the node back in service: host, kind, start_ts,
    end_ts, hours, reason (from ``node_states``' rows)."""
    if states.empty:
        return pd.DataFrame(columns=["host", "kind", "start_ts", "end_ts", "hours", "reason"])
    df = states.sort_values(["host", "start_ts"]).copy()
    df["next_kind"] = df.groupby("host")["kind"].shift(-1)
    bad = df[df["kind"].isin(["drained", "down"]) & (df["next_kind"] == "in service")]
    bad = bad.assign(hours=(bad["end_ts"] - bad["start_ts"]).dt.total_seconds() / 3600)
    return bad[["host", "kind", "start_ts", "end_ts", "hours", "reason"]].reset_index(drop=True)


# each node at Slurm's last word: host, state, kind, reason, reason_user, since, hours (from
# the reason's time to that last poll)
_NOW_SQL = f"""SELECT host, state, {_STATE_SQL} AS kind, reason, reason_user, reason_ts AS since,
  (epoch(polled_ts) - epoch(reason_ts)) / 3600 AS hours FROM slurm_nodes"""


def drained_now(store: Store) -> pd.DataFrame:
    """Nodes drained, down or in maintenance at Slurm's last word: host, state, kind, reason,
    reason_user, since, hours (from the reason's time to that last poll), longest first."""
    return store.df(
        f"""SELECT * FROM ({_NOW_SQL}) WHERE kind <> 'in service'
            ORDER BY since NULLS LAST, host"""
    )


def node_story(store: Store, name: str, tr: TimeRange) -> dict[str, object] | None:
    """One node as an operator asks about it ("what ran on node X, and why is it drained"),
    ``name`` its host name in any case: ``host``; ``now``, its state at Slurm's last word
    (``drained_now``'s columns, None where Slurm does not know it); ``states``, its
    ``node_states`` intervals overlapping ``tr``; ``findings``, the rules' findings on it in
    ``tr``. None when the store knows no such node."""
    host = store.scalar(
        """SELECT host FROM (SELECT host FROM slurm_nodes UNION ALL SELECT host FROM nodes)
           WHERE lower(host) = lower(?) LIMIT 1""",
        [str(name)[:256]],
    )
    if host is None:
        return None
    now = store.df(f"SELECT * FROM ({_NOW_SQL}) WHERE host = ?", [host])
    states = node_states(store, tr, host)
    found = findings(store, tr)  # the fleet's (the GPUs page reads the same), this node's kept
    return {
        "host": host,
        "now": _records(now)[0] if len(now) else None,
        "states": states,
        "findings": found[found["host"] == host].reset_index(drop=True),
    }


def has_job_ends(store: Store) -> bool:
    """Whether Slurm's job records are stored (what the repeated-job-failure rule judges)."""
    return bool(store.scalar("SELECT count(*) > 0 FROM (SELECT 1 FROM slurm_jobs LIMIT 1)"))


def has_node_states(store: Store) -> bool:
    """Whether Slurm's node states were ever stored (a replay or a bare exporter has none)."""
    return bool(store.scalar("SELECT count(*) > 0 FROM (SELECT 1 FROM slurm_nodes LIMIT 1)"))


SUMMARY_DAYS = 7  # summary --json's node health: the findings and repairs of this many days


def summary_block(store: Store, days: float = SUMMARY_DAYS) -> dict[str, object]:
    """``summary --json``'s ``node_health``: ``drained_now`` (``drained_now``'s rows: host,
    state, kind, reason, reason_user, since, hours), and over the last ``days`` to Slurm's
    last poll or the newest XID, ``findings`` (``findings``' rows) and ``repairs``
    (``repairs``' rows); empty lists where nothing says."""
    end = store.scalar(
        "SELECT greatest((SELECT max(polled_ts) FROM slurm_nodes), "
        "(SELECT max(ts) FROM slurm_node_events), (SELECT max(ts) FROM xid_events))"
    )
    out: dict[str, object] = {"drained_now": [], "findings": [], "repairs": []}
    if end is None:
        return out
    tr = TimeRange(end - timedelta(days=days), end)
    out["drained_now"] = _records(drained_now(store))
    out["findings"] = _records(findings(store, tr))
    out["repairs"] = _records(repairs(node_states(store, tr)))
    return out


def _records(df: pd.DataFrame) -> list[dict[str, object]]:
    """Rows as JSON-ready dicts: times as ISO text, numbers rounded, None for unknown."""
    out = []
    for rec in df.to_dict("records"):
        row: dict[str, object] = {}
        for k, v in rec.items():
            if v is None or (not isinstance(v, (list, tuple, str)) and pd.isna(v)):
                row[k] = None
            elif isinstance(v, pd.Timestamp):
                row[k] = v.isoformat()
            elif isinstance(v, float):
                row[k] = round(v, 3)
            elif hasattr(v, "item"):  # a numpy number
                row[k] = v.item()
            else:
                row[k] = v
        out.append(row)
    return out
