"""Each finished job's GPU figures, kept (``job_figures``), so the Jobs page reads a finished
job's figures from one small row instead of its GPUs' rollup buckets.

A job's figures (``telemetry.queries.job_stats``: GPU-hours used, idle, memory peak,
power, energy) are read from the per-GPU rollups over its GPUs and its time. For a finished
job (a Slurm job with an end time, an imported run that ended) they stop changing once the
rollup bucket holding its end is complete: the bucket of the level it is read at
(``job_stats.level_for``; a day-level job's days after the day mark are read from 6-hour buckets, so
that bucket) is built with data up to its end. That time is ``settled_ts``; ``keep`` computes
and stores the figures of every finished job settled by then and not kept yet, a few hundred
jobs per statement. A running job's figures are kept up to the finest level's last complete
bucket (``end`` and ``settled_ts`` that time), again each time that moves (every 5 minutes
at a 15-second scrape): a listing shows them as of then, at most one bucket behind the
rollups it would otherwise read. Jobs known only from attribution labels (no end, no start
of their own) and jobs not settled yet are read from the rollups when listed.

A kept row is valid for the job as it was: its key, start, end, hosts and label are stored
with it and a listing uses the row only when they match (a requeued job starts again; its
record's end or nodes may change; a running job's end is not compared). Data that arrives
late (a spool delivered after its buckets closed, ``since`` older than rows' ``settled_ts``)
drops the rows whose buckets it may change; they are computed again when settled. A job kept
with nothing sampled has a row with its figures None (so it is not computed again each time).

A step of ``telemetry.after_write``: run by the store writer after the rollups of every round
and at rest, and after a ``Derive`` batch's Slurm refresh (``telemetry.store.slurm_store``);
cheap when nothing changed: one statement compares the jobs' and the rollups' marks with the
ones kept in ``meta``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from telemetry.queries import job_stats as js
from telemetry.queries import jobs as jq
from telemetry.store import Store
from telemetry.store.rollups import DAY_FROM, DAY_MARK, DAY_S, gpu_table

# any job whose figures could be kept (one that started: running or ended)
_ANY_JOB = """SELECT EXISTS (SELECT 1 FROM slurm_jobs WHERE start_ts IS NOT NULL)
  OR EXISTS (SELECT 1 FROM runs WHERE source IN ('import', 'logs') AND start_ts IS NOT NULL)"""
CHUNK = 500  # jobs per statement (about one listing's worth)
_MARK_KEY = "job_figures_mark"
_EPOCH = datetime(1970, 1, 1)


def _horizons(store: Store, levels: list[int]) -> dict[int, datetime]:
    """Per per-GPU level, the time up to which its buckets are complete: for the finest
    (built every refresh) the start of the bucket the newest data is in (the rollups'
    watermark of that level); for the coarser ones no later than the data time of their last
    build (``gpu_built_<level>``: a scrape's refresh builds them when a finest bucket closes).
    A store whose rollups were written whole, without samples, has no watermark: the end of
    its newest finest bucket."""
    meta = store.meta()
    mark = meta.get(f"rollup_watermark_{levels[0]}")
    if mark is not None:
        newest = datetime.fromisoformat(mark)
    else:
        top = store.scalar(f"SELECT max(ts) FROM {gpu_table(levels[0])}")
        newest = top + timedelta(seconds=levels[0]) if top is not None else None
    if newest is None:
        return {}
    out = {}
    for i, lv in enumerate(levels):
        built = meta.get(f"gpu_built_{lv}")
        out[lv] = newest if i == 0 or built is None else min(newest, datetime.fromisoformat(built))
    return out


def settled_at(end: datetime, level: int) -> datetime:
    """When a job ending at ``end`` read at ``level`` has its figures final: the end of the
    bucket its last moment is in (``end`` itself on a bucket's edge; a day-level job's last
    part is read from 6-hour buckets)."""
    lv = DAY_FROM if level == DAY_S else level
    step = timedelta(seconds=lv)
    return _EPOCH + -(-(end - _EPOCH) // step) * step


def _mark(store: Store, horizons: dict[int, datetime]) -> str:
    """What the kept figures were computed against: the jobs' tables and the horizons."""
    got = store.rows(
        """SELECT (SELECT count(*) || '/' || coalesce(max(polled_ts)::VARCHAR, '')
                          || '/' || count(end_ts) FROM slurm_jobs),
                  (SELECT count(*) || '/' || count(end_ts) || '/'
                          || coalesce(max(end_ts)::VARCHAR, '') FROM runs),
                  (SELECT count(*) FROM job_figures)"""
    )[0]
    return "|".join(map(str, (*got, sorted(horizons.items()))))


def keep(store: Store, since: datetime | None = None) -> int:
    """Compute and store the figures of the finished jobs settled by now and not kept yet,
    and of the running ones up to now (see the module); ``since``: the oldest time of data
    just written (late data drops the rows it may change). Returns the number of jobs kept.
    A read-only store, or one without per-GPU rollups, keeps nothing."""
    if store.read_only or not store.gpu_rollup_levels():
        return 0
    levels = sorted(store.gpu_rollup_levels())
    if since is not None and store.scalar(
        "SELECT count(*) FROM job_figures WHERE settled_ts > ?", [since]
    ):
        with store.transaction(["job_figures"]) as con:
            con.execute("DELETE FROM job_figures WHERE settled_ts > ?", [since])
    if not store.scalar(_ANY_JOB):
        return 0
    horizons = _horizons(store, levels)
    if not horizons:
        return 0
    mark = _mark(store, horizons)
    if store.meta().get(_MARK_KEY) == mark:
        return 0
    todo = _todo(store, levels, horizons)
    for i in range(0, len(todo), CHUNK):
        _write(store, todo.iloc[i : i + CHUNK])
    store.set_meta({_MARK_KEY: _mark(store, horizons)})
    return len(todo)


def _todo(store: Store, levels: list[int], horizons: dict[int, datetime]) -> pd.DataFrame:
    """The jobs whose figures are to be kept now, oldest first (a statement's jobs then lie
    close in time: its buckets are read over a narrow window), with ``level_s`` and
    ``settled_ts``: finished jobs settled by the horizons and not kept as they are; running
    jobs, up to the finest level's horizon (their ``end`` moved there), when it has moved
    past what was kept."""
    jobs = jq.list_jobs(store, jq.JobFilter(), limit=None, labels=False)
    jobs = jobs[jobs["hosts"].notna() | jobs["label"].notna()]
    if jobs.empty:
        return jobs
    if store.meta().get(DAY_MARK) and DAY_FROM in levels:
        levels = [*levels, DAY_S]
    finished = jobs["finished"].astype(bool)
    kept = jobs["kept"].astype(bool)
    now = horizons[min(horizons)]
    upto = jobs["end"].where(finished, jobs["end"].clip(upper=pd.Timestamp(now)))
    jobs = jobs.assign(end=upto)
    span = (jobs["end"] - jobs["start"]).dt.total_seconds().tolist()
    picked = [js.level_for(s, levels) for s in span]
    settled = [settled_at(e.to_pydatetime(), lv) if f else e.to_pydatetime()
               for e, lv, f in zip(jobs["end"], picked, finished, strict=True)]  # fmt: skip
    ready = [s <= horizons.get(DAY_FROM if lv == DAY_S else lv, _EPOCH)
             for s, lv in zip(settled, picked, strict=True)]  # fmt: skip
    moved = (jobs["end"] > jobs["start"]) & (~kept | (jobs["kept_end"] < jobs["end"]))
    want = (finished & ~kept & pd.Series(ready, index=jobs.index)) | (~finished & moved)
    jobs = jobs.assign(level_s=picked, settled_ts=settled)[want]
    return jobs.sort_values("start", kind="stable")


def _write(store: Store, jobs: pd.DataFrame) -> None:
    """Compute one chunk's figures and replace their rows."""
    stats = js.job_stats(store, jobs.drop(columns=["level_s"]))
    rows = jobs[["key", "start", "end", "hosts", "label", "finished", "settled_ts", "level_s"]]
    rows = rows.merge(stats.drop(columns=["level_s"]), on="key", how="left")
    if "gpus_seen" not in rows.columns:  # nothing sampled for any of them
        rows = rows.assign(**{c: None for c in js.STAT_COLUMNS[2:]})
    rows["level_s"] = rows["level_s"].where(rows["gpus_seen"].notna(), None)  # as job_stats
    rows["kept_ts"] = datetime.now().replace(tzinfo=None)
    frame = rows[["key", "start", "end", "hosts", "label", "finished", "settled_ts",
                  *js.STAT_COLUMNS[1:], "kept_ts"]]  # fmt: skip
    with store.transaction(["job_figures"]) as con:
        con.register("_figures", frame)
        try:
            con.execute("INSERT OR REPLACE INTO job_figures BY NAME SELECT * FROM _figures")
        finally:
            con.unregister("_figures")
