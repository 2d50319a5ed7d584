"""A run's own time: the one definition every page and ``summary`` read it by (#57).

- ``last_record``: the run's newest record (a progress line, an interruption, a checkpoint's
  end): where its wall time stops.
- ``run_wall``: the run alive, from its start to its recorded end or newest record, within a
  range: the wall time MTBF, rates and shares are taken over.
- ``mtbf``: wall hours / unexpected interruptions over that wall time.
- ``run_bounds``: the time a page shows for the run: its recorded end, else the end of its own
  data unless a source still follows it. A store holding several runs used to give a run
  without a recorded end the store's end (an imported night of March shown to December).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from telemetry.queries import (
    SHOWN_FROM,
    SHOWN_TO,
    TimeRange,
    data_extent,
    newest_trained_run,
    run_span,
)
from telemetry.queries.run_end import run_end
from telemetry.store import Store

# Health rows of sources that read once (an import) or simulate: they follow nothing.
_FOLLOWING = "NOT (starts_with(target, 'import:') OR starts_with(target, 'replay:'))"
FOLLOW_WINDOW = timedelta(hours=1)  # a followed run whose data is this close to the newest round


def last_record(store: Store, run_id: str) -> datetime | None:
    """The run's newest record: progress line, interruption or checkpoint end (None: none).
    A stop the run never resumed from lasts until the job gave its GPUs back (its wait to
    detection and the time held after it): the run's time, which it lost (#57, 3). Goodput's
    window ended there and MTBF's wall at the stop: a hang's MTBF was half its run."""
    return store.scalar(
        """SELECT max(t) FROM (
             SELECT max(ts) AS t FROM train_metrics WHERE run_id = ?
             UNION ALL SELECT max(ts) FROM interruptions WHERE run_id = ?
             UNION ALL SELECT max(ts + to_microseconds(((coalesce(detect_s, 0)
                                   + coalesce(restart_s, 0)) * 1e6)::BIGINT))
                       FROM interruptions WHERE run_id = ? AND end_ts IS NULL
             UNION ALL SELECT max(end_ts) FROM checkpoints WHERE run_id = ?)""",
        [run_id] * 4,
    )


def run_wall(store: Store, run_id: str, tr: TimeRange | None = None) -> TimeRange | None:
    """The run alive within ``tr`` (all of it without): from its start to its recorded end or
    its newest record, whichever comes first (a live replay's record ends in the future).
    None when nothing dates the run or it does not overlap ``tr``."""
    rows = store.rows("SELECT start_ts, end_ts FROM runs WHERE run_id = ?", [run_id])
    last = last_record(store, run_id)
    if not rows or rows[0][0] is None or last is None:
        return None
    start, end = rows[0][0], min(rows[0][1], last) if rows[0][1] is not None else last
    if tr is not None:
        start, end = max(start, tr.start), min(end, tr.end)
    return TimeRange(start, end) if end >= start else None


@dataclass(frozen=True)
class Mtbf:
    wall_s: float  # the run's wall time in the range (0: none)
    unexpected: int  # unexpected interruptions in it
    mtbf_s: float | None  # wall_s / unexpected; None without an unexpected interruption, or
    # when the run was seen at one instant only (no wall time to divide: unknown, not 0)

    @property
    def hours(self) -> float | None:
        return None if self.mtbf_s is None else self.mtbf_s / 3600.0


def mtbf(store: Store, run_id: str, tr: TimeRange | None = None) -> Mtbf:
    """The run's MTBF over its wall time within ``tr`` (``run_wall``): the Overview, Failures,
    Checkpoints and ``summary`` all read it here."""
    win = run_wall(store, run_id, tr)
    if win is None:
        return Mtbf(0.0, 0, None)
    n = int(store.scalar(
        """SELECT count(*) FROM interruptions WHERE run_id = ? AND NOT planned
           AND ts BETWEEN ? AND ?""",
        [run_id, win.start, win.end],
    ))  # fmt: skip
    wall_s = max((win.end - win.start).total_seconds(), 0.0)
    return Mtbf(wall_s, n, wall_s / n if n and wall_s > 0 else None)


def _own_end(store: Store, run_id: str) -> datetime | None:
    """The newest time of anything the run itself recorded (its closing lines come after its
    last progress line, its final saves finish after both)."""
    inside = f"BETWEEN TIMESTAMP '{SHOWN_FROM:%Y-%m-%d}' AND TIMESTAMP '{SHOWN_TO:%Y-%m-%d}'"
    return store.scalar(
        f"""SELECT max(t) FROM (
             SELECT max(ts) AS t FROM train_metrics WHERE run_id = ? AND ts {inside}
             UNION ALL SELECT max(coalesce(end_ts, ts)) FROM interruptions
                       WHERE run_id = ? AND coalesce(end_ts, ts) {inside}
             UNION ALL SELECT max(coalesce(end_ts, start_ts)) FROM checkpoints
                       WHERE run_id = ? AND coalesce(end_ts, start_ts) {inside}
             UNION ALL SELECT max(ts) FROM signals WHERE run_id = ? AND ts {inside})""",
        [run_id] * 4,
    )


def following(store: Store) -> bool:
    """Whether any source watches the cluster (not only imports and a simulation)."""
    return store.scalar(f"SELECT count(*) FROM (SELECT 1 FROM targets WHERE {_FOLLOWING} "
                        "LIMIT 1)") > 0  # fmt: skip


def followed(store: Store, run_id: str, own_end: datetime) -> bool:
    """Whether a source still follows the run: some source watches the cluster (scrapes,
    followed logs, posted records; not an import, which read its files once) since the run's
    data ended (``FOLLOW_WINDOW`` before it at most), the run has not finished, and it is the
    one a live view judges (the newest that trained, its Slurm job still running, or its data
    within ``FOLLOW_WINDOW`` of that source's newest round)."""
    # rounds since shortly before the run's data ended: the table grows by a row per target
    # and round, appended in time order, so the time cut skips all older row groups
    newest = store.scalar(
        f"SELECT max(ts) FROM targets WHERE ts >= ? AND {_FOLLOWING}", [own_end - FOLLOW_WINDOW]
    )
    if newest is None or run_end(store, run_id, max(newest, own_end)) is not None:
        return False
    held = store.scalar(
        """SELECT count(*) FROM slurm_jobs WHERE run_id = ? AND state = 'RUNNING'
           AND polled_ts >= ?""",
        [run_id, own_end],
    )
    return bool(held) or newest_trained_run(store) == run_id or own_end >= newest - FOLLOW_WINDOW


def run_bounds(store: Store, run_id: str) -> TimeRange | None:
    """The run's own time as a page shows it: its start to its recorded end; without one, to
    the end of its own data, unless a source still follows it (``followed``: then the end is
    None, the newest data of the store). None when nothing dates the run."""
    span = run_span(store, run_id)
    if span is None or span.end is not None:
        return span
    own = _own_end(store, run_id)
    if own is None or followed(store, run_id, own):
        return span
    return TimeRange(span.start, max(own, span.start))


def undated(store: Store, run_id: str) -> bool:
    """Whether ``run_id`` is a stored run that nothing dates: no start, no record of it at a
    time a page can show (every line of its logs gave no wall-clock time). Such a run has no
    time of its own, and no other run's time is its time: a page says it is unknown."""
    if not store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]):
        return False
    return run_span(store, run_id) is None and _own_end(store, run_id) is None


def has_ended(store: Store, run_id: str) -> bool:
    """Whether the run's time is over, so a page tells its alerts as its history, not as what
    is active now: it has an end (``run_bounds``) and the store's data went on after it, or it
    is a real run no source follows or that finished. A simulation ends with the store's data:
    its end is the demo's now."""
    bounds = run_bounds(store, run_id)
    if bounds is None or bounds.end is None:
        return False
    ext = data_extent(store)
    if ext is not None and bounds.end < ext.end:
        return True
    if store.scalar("SELECT bool_or(simulated) FROM runs WHERE run_id = ?", [run_id]):
        return False
    return not following(store) or run_end(store, run_id, bounds.end) is not None
