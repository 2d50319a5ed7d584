"""Derived facts in the store: the interruptions of each real run, inferred from its signals,
kept current as data arrives, and operators' corrections of their causes.

``telemetry.derive.inference`` is the pure engine; this module feeds it from the store and
writes its rows back. A run's inferred interruptions are replaced as a whole, in one
transaction, and only when they changed (a digest per run in ``meta``), so re-importing the
same files, or re-deriving after a round that brought nothing new, writes nothing. Simulated
runs are never derived: the replay engine records its own interruptions (ground truth).

Inputs per run: its step stream (``train_metrics``), the signals attributed to it or to no run
(``signals``: job and kernel logs, later Slurm), XIDs from dcgm-exporter (``xid_events``; the
kernel-log XIDs are in ``signals`` with their lines), its checkpoints (directory scans) and
checkpoint log lines, the interruptions posted by the job (they win over an inference of the
same stop), its GPU count, and the tier roots given with ``--checkpoints TIER=PATH``
(remembered in ``meta``, ``store.run_meta``, so that a later re-derivation, e.g. in ``serve``,
still knows them).

A correction (``relabel``) is stored in ``interruption_labels`` keyed by run and start time
(a stop's start is the time of a stored progress point, so it is stable across
re-derivations) and applied to the row at once and to every later re-derivation; the
inferred cause is kept beside it (``orig_component``/``orig_category``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.derive.inference import COLUMNS, SOURCE, current_stall, infer_interruptions
from telemetry.derive.logged_saves import LOGGED, logged_checkpoints
from telemetry.derive.xid_gpus import name_gpus
from telemetry.reference import llama3_interruptions
from telemetry.store import Store
from telemetry.store.ranks import job_hosts, rank_hosts
from telemetry.store.run_meta import tier_roots
from telemetry.vocabulary import PLANNED_CATEGORY, PLANNED_COMPONENT

UNKNOWN = "Unknown"
_DIGEST_KEY = "derived:"  # meta key prefix: digest of a run's inferred rows
_LOGGED_KEY = "logged_saves:"  # meta key prefix: digest of a run's log-only checkpoints
_MARGIN = timedelta(hours=1)  # evidence is read this far around the run's progress


def components() -> dict[str, str]:
    """Component -> category an operator may choose: the Llama 3 vocabulary, planned work
    and ``Unknown``."""
    out = {c.component: c.category for c in llama3_interruptions()}
    return out | {PLANNED_COMPONENT: PLANNED_CATEGORY, UNKNOWN: UNKNOWN}


def categories() -> list[str]:
    return list(dict.fromkeys(components().values()))


@dataclass(frozen=True)
class Derived:
    run_id: str
    interruptions: int  # inferred rows for the run now
    changed: bool  # whether they were written (False: the same as before)
    by_component: dict[str, int]


def real_runs(store: Store) -> list[str]:
    """Runs that are not simulated and have a step stream, oldest first."""
    return [
        r[0]
        for r in store.rows(
            """SELECT r.run_id FROM runs r
               WHERE r.simulated IS NOT TRUE
                 AND EXISTS (SELECT 1 FROM train_metrics m WHERE m.run_id = r.run_id)
               ORDER BY r.start_ts, r.run_id"""
        )
    ]


def _inputs(store: Store, run_id: str) -> dict[str, Any]:
    metrics = store.df(
        "SELECT run_id, ts, step, attempt FROM train_metrics WHERE run_id = ? ORDER BY ts, step",
        [run_id],
    )
    lo = metrics["ts"].min() - _MARGIN
    hi = metrics["ts"].max() + _MARGIN
    signals = store.df(
        """SELECT ts, host, gpu, kind, xid, detail, origin, line, source, rank FROM signals
           WHERE (run_id = ? OR run_id IS NULL) AND ts BETWEEN ? AND ?
           ORDER BY ts, origin""",
        [run_id, lo, hi],
    )
    xid_events = store.df(
        """SELECT ts, host, gpu, xid, source FROM xid_events
           WHERE (run_id = ? OR run_id IS NULL) AND ts BETWEEN ? AND ?
             AND source IS DISTINCT FROM 'kernel'
           ORDER BY ts, host, gpu""",
        [run_id, lo, hi],
    )
    name_gpus(store, signals, xid_events)  # the GPU index and UUID an XID's bus id names
    hosts = {
        r[0]
        for r in store.rows(
            """SELECT DISTINCT host FROM signals WHERE run_id = ? AND host IS NOT NULL
               UNION SELECT DISTINCT host FROM gpus WHERE hpc_job = ? AND host IS NOT NULL""",
            [run_id, run_id],
        )
    }
    gpus, nodes = (store.rows("SELECT gpus, nodes FROM runs WHERE run_id = ?", [run_id])
                   or [(None, None)])[0]  # fmt: skip
    ranked = signals["rank"].notna() & signals["host"].isna()
    wanted = sorted({int(r) for r in signals.loc[ranked, "rank"]})
    world = 0 if gpus is None or pd.isna(gpus) else int(gpus)  # every rank: the one missing too
    return {
        "metrics": metrics,
        "signals": signals,
        "checkpoints": store.df(
            """SELECT step, tier, start_ts, end_ts, status, path FROM checkpoints
               WHERE run_id = ? AND format IS DISTINCT FROM ? ORDER BY end_ts, step, tier""",
            [run_id, LOGGED],  # the scanned ones: the log's saves are read as events
        ),
        "ckpt_events": store.df(
            """SELECT ts, kind, step, path, origin, line FROM checkpoint_events
               WHERE run_id = ? ORDER BY ts, origin""",
            [run_id],
        ),
        "xid_events": xid_events,
        "posted": store.df(
            """SELECT ts, source FROM interruptions
               WHERE run_id = ? AND source IS DISTINCT FROM ?""",
            [run_id, SOURCE],
        ),
        "run_hosts": hosts or None,
        "gpus": None if gpus is None or pd.isna(gpus) else int(gpus),
        "nodes": None if nodes is None or pd.isna(nodes) else int(nodes),
        "tier_roots": tier_roots(store, run_id),
        "rank_hosts": rank_hosts(store, run_id, wanted + list(range(min(world, 65536)))),
        "job_hosts": job_hosts(store, run_id),
        "run_id": run_id,
    }


def _labels(store: Store, run_id: str) -> pd.DataFrame:
    return store.df(
        """SELECT ts, arg_max(component, labelled_at) AS component,
                  arg_max(category, labelled_at) AS category,
                  arg_max(labelled_by, labelled_at) AS labelled_by,
                  max(labelled_at) AS labelled_at
           FROM interruption_labels WHERE run_id = ? GROUP BY ts""",
        [run_id],
    )


def _apply_labels(df: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(
        labelled_by=pd.Series([None] * len(df), dtype=object),
        labelled_at=pd.Series([pd.NaT] * len(df), dtype="datetime64[us]"),
        orig_component=pd.Series([None] * len(df), dtype=object),
        orig_category=pd.Series([None] * len(df), dtype=object),
    )
    if labels.empty or df.empty:
        return df
    by_ts = {pd.Timestamp(r.ts): r for r in labels.itertuples()}
    for i, ts in enumerate(df["ts"]):
        lab = by_ts.get(pd.Timestamp(ts))
        if lab is None:
            continue
        df.iloc[i, df.columns.get_loc("orig_component")] = df["component"].iloc[i]
        df.iloc[i, df.columns.get_loc("orig_category")] = df["category"].iloc[i]
        df.iloc[i, df.columns.get_loc("component")] = lab.component
        df.iloc[i, df.columns.get_loc("category")] = lab.category
        df.iloc[i, df.columns.get_loc("planned")] = lab.category == PLANNED_CATEGORY
        df.iloc[i, df.columns.get_loc("labelled_by")] = lab.labelled_by
        df.iloc[i, df.columns.get_loc("labelled_at")] = lab.labelled_at
    return df


def _digest(df: pd.DataFrame) -> str:
    text = df.to_json(orient="split", date_format="iso", date_unit="us", default_handler=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def place_hangs(store: Store, run_id: str) -> int:
    """Give the run's hangs stored without hosts (dumps read as they landed, before the
    logs or Slurm placed their ranks) the hosts of their culprit and missing ranks; how many."""
    rows = store.rows(
        "SELECT ts, process_group, seq_id, culprit_rank, missing_ranks FROM hangs "
        "WHERE run_id = ? AND culprit_host IS NULL AND culprit_rank IS NOT NULL",
        [run_id],
    )
    done = 0
    for ts, pg, seq, culprit, missing in rows:
        suspects = [int(r) for r in (missing or [])][:64] or [int(culprit)]
        hosts = rank_hosts(store, run_id, [int(culprit), *suspects])
        if int(culprit) not in hosts:
            continue
        with store.transaction(["hangs"]) as con:
            con.execute(
                "UPDATE hangs SET culprit_host = ?, hosts = ? WHERE run_id = ? AND ts = ? "
                "AND process_group = ? AND seq_id = ?",
                [hosts[int(culprit)], sorted({hosts[r] for r in suspects if r in hosts}),
                 run_id, ts, pg, seq],
            )  # fmt: skip
        done += 1
    return done


def derive_run(store: Store, run_id: str) -> Derived:
    """Infer the run's interruptions and replace its inferred rows if they changed."""
    inputs = _inputs(store, run_id)
    _sync_logged(store, run_id, inputs)
    df = infer_interruptions(**inputs)
    return _keep_inferred(store, run_id, df)


def _keep_inferred(store: Store, run_id: str, df: pd.DataFrame) -> Derived:
    """The run's inferred rows, corrected by its labels, replacing the stored ones if changed."""
    df = _apply_labels(df, _labels(store, run_id))
    digest = _digest(df)
    by_component = {str(k): int(v) for k, v in df["component"].value_counts().items()}
    key = _DIGEST_KEY + run_id
    if store.meta().get(key) == digest:
        return Derived(run_id, len(df), False, by_component)
    _replace(store, "interruptions", "source", [run_id, SOURCE], df, key, digest)
    return Derived(run_id, len(df), True, by_component)


# The derived rows of a table, by the column that marks them (names are these constants, never
# input): inferred interruptions by ``source``, log-only checkpoints by ``format``.
_DERIVED_ROWS = {("interruptions", "source"), ("checkpoints", "format")}


def _replace(
    store: Store, table: str, marker: str, where: list[Any], rows: pd.DataFrame, key: str,
    digest: str,
) -> None:  # fmt: skip
    """Replace the run's derived rows of ``table`` (``run_id``, ``marker`` = ``where``) with
    ``rows`` and remember their digest, in one transaction."""
    assert (table, marker) in _DERIVED_ROWS
    with store.transaction([table, "meta"]) as con:
        con.execute(f"DELETE FROM {table} WHERE run_id = ? AND {marker} = ?", where)
        if len(rows):
            con.register("_derived", rows)
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _derived")
            con.unregister("_derived")
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, digest])


def _sync_logged(store: Store, run_id: str, inputs: dict[str, Any]) -> None:
    """Store the run's checkpoints known from its log only (``logged_saves``), when they
    changed: the Checkpoints page, the tier ages and the cadence count them."""
    rows = logged_checkpoints(
        run_id, inputs["checkpoints"], inputs["ckpt_events"], inputs["tier_roots"]
    )
    key, digest = _LOGGED_KEY + run_id, _digest(rows)
    if store.meta().get(key, _digest(rows.iloc[0:0])) == digest:
        return
    _replace(store, "checkpoints", "format", [run_id, LOGGED], rows, key, digest)


def place_unplaced(store: Store, runs: Iterable[str] | None = None) -> int:
    """Place the hangs of the given runs (default: every run) stored without hosts
    (``place_hangs``), a run known from its dumps only too; how many were placed."""
    unplaced = [r[0] for r in store.rows(
        "SELECT DISTINCT run_id FROM hangs WHERE culprit_host IS NULL ORDER BY 1")]  # fmt: skip
    wanted = unplaced if runs is None else [r for r in unplaced if r in set(runs)]
    return sum(place_hangs(store, run) for run in wanted)


def derive(store: Store, runs: Iterable[str] | None = None) -> list[Derived]:
    """Re-derive the given real runs (default: every real run with a step stream) and the runs
    known from their failure lines only. The store writer runs it after the Slurm refresh, the
    job figures and the hangs' placing (``telemetry.after_write``), so it reads them."""
    real = real_runs(store)
    wanted = real if runs is None else [r for r in real if r in set(runs)]
    stopped = [r for r in signal_only_runs(store) if runs is None or r in set(runs)]
    return [derive_run(store, r) for r in wanted] + [derive_stopped(store, r) for r in stopped]


def signal_only_runs(store: Store) -> list[str]:
    """Runs with failure signals and no step stream (a job that stopped before or without
    printing progress; ``telemetry.derive.stopped``), not simulated; signals without a time
    count (a log with no wall-clock time still shows a stop, at a time unknown)."""
    return [r[0] for r in store.rows(
        """SELECT DISTINCT s.run_id FROM signals s
           WHERE s.run_id IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM train_metrics m WHERE m.run_id = s.run_id)
             AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = s.run_id AND r.simulated)
           ORDER BY 1""")]  # fmt: skip


def derive_stopped(store: Store, run_id: str) -> Derived:
    """The one interruption of a run known from its failure lines only (``stopped``), stored
    as ``derive_run`` stores a run's; a run without a row gets the minimal one a record
    naming it would create (``ingest.records``: name = run id, start = its first signal), so
    that it is listed."""
    from telemetry.derive.stopped import infer_stopped

    signals = store.df(  # the untimed are judged only when no line has a time (stopped)
        """SELECT ts, host, gpu, kind, xid, detail, origin, line, source, rank FROM signals
           WHERE run_id = ? ORDER BY ts, origin""",
        [run_id],
    )
    gpus, nodes = (store.rows("SELECT gpus, nodes FROM runs WHERE run_id = ?", [run_id])
                   or [(None, None)])[0]  # fmt: skip
    df = infer_stopped(
        signals, rank_hosts=rank_hosts(store, run_id), run_id=run_id,
        job_hosts=job_hosts(store, run_id),
        gpus=None if gpus is None or pd.isna(gpus) else int(gpus),
        nodes=None if nodes is None or pd.isna(nodes) else int(nodes),
    )  # fmt: skip
    hung = store.rows(
        """SELECT culprit_rank, culprit_host, story FROM hangs WHERE run_id = ?
           ORDER BY ts DESC NULLS LAST LIMIT 1""",
        [run_id],
    )
    if len(df) and hung:
        # The flight recorder told this stop: it is the hang's, whose culprit the dumps name
        # where the watchdog lines alone would say "unknown"; kept as an interruption, so the
        # stop is counted and costed as any other (issue 57, 3)
        df = _told_by_hang(df, *hung[0])
    if len(df):
        with store.transaction(["runs"]) as con:
            con.execute(
                """INSERT INTO runs (run_id, name, start_ts, source, simulated)
                   SELECT ?, ?, first, 'logs', false
                   FROM (SELECT min(ts) AS first FROM signals WHERE run_id = ?)
                   WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run_id = ?)""",
                [run_id, run_id, run_id, run_id],
            )
    return _keep_inferred(store, run_id, df)


def _told_by_hang(df: pd.DataFrame, rank: Any, host: Any, story: Any) -> pd.DataFrame:
    """The stopped row with the hang's culprit (rank, host) and its story as the cause."""
    df = df.copy()
    if rank is not None:
        df["rank"] = pd.array([int(rank)] * len(df), dtype="Int32")
        df["host"] = host
        df["culprit_candidates"] = None
        df["culprit_reason"] = None
    df["description"] = (f"Job stopped with no progress lines in the data: hung, told by the "
                         f"flight recorder: {story}; steps and lost work unknown")  # fmt: skip
    return df


class LabelError(ValueError):
    """A correction that cannot be stored: an unknown interruption, component or category."""


def relabel(
    store: Store,
    run_id: str,
    ts: datetime,
    component: str,
    category: str | None = None,
    by: str = "operator",
    now: datetime | None = None,
) -> dict[str, Any]:
    """Correct an interruption's cause. ``category`` defaults to the component's own; both
    must be in the vocabulary (``components()``). Stored with who and when; the inferred cause
    is kept. Raises ``LabelError`` naming what is wrong."""
    comps = components()
    if component not in comps:
        raise LabelError(f"unknown component {component!r}; choose one of the Llama 3 causes")
    category = category or comps[component]
    if category not in categories():
        raise LabelError(f"unknown category {category!r}")
    by = (by or "operator").strip()[:128] or "operator"
    ts = pd.Timestamp(ts).to_pydatetime().replace(tzinfo=None)
    found = store.scalar(
        "SELECT count(*) FROM interruptions WHERE run_id = ? AND ts = ?", [run_id, ts]
    )
    if not found:
        raise LabelError(f"no interruption of run {run_id!r} at {ts:%Y-%m-%d %H:%M:%S}")
    at = now or datetime.now(UTC).replace(tzinfo=None)
    with store.transaction() as con:
        con.execute(
            "INSERT INTO interruption_labels VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, ts, component, category, by, at],
        )
        con.execute(
            """UPDATE interruptions SET
                 orig_component = coalesce(orig_component, component),
                 orig_category = coalesce(orig_category, category),
                 component = ?, category = ?, planned = ?, labelled_by = ?, labelled_at = ?
               WHERE run_id = ? AND ts = ?""",
            [component, category, category == PLANNED_CATEGORY, by, at, run_id, ts],
        )
    return {"run": run_id, "ts": ts, "component": component, "category": category, "by": by}


def open_stall(store: Store, run_id: str, now: datetime) -> dict[str, Any] | None:
    """The run's stall at ``now`` (no progress for longer than its stall threshold), or None.
    Reads only the last few thousand progress points: the threshold is a median gap."""
    metrics = store.df(
        """SELECT * FROM (SELECT run_id, ts, step, attempt FROM train_metrics
                          WHERE run_id = ? AND ts <= ? ORDER BY ts DESC LIMIT 2000)
           ORDER BY ts""",
        [run_id, now],
    )
    return current_stall(metrics, now)


__all__ = [
    "COLUMNS",
    "Derived",
    "LabelError",
    "categories",
    "components",
    "derive",
    "derive_run",
    "open_stall",
    "place_unplaced",
    "relabel",
]
