"""Raw retention: per-GPU samples are kept ``--raw-retention`` long, the rollups for ever.

At 16,384 GPUs and a 15 s interval the raw samples grow by ~94 M rows a day, while every
fleet and per-node chart over more than a few hours reads the rollups (``telemetry.store.rollups``).
So the raw tables (``gpu_samples``, ``gpu_samples_extra`` and the per-tick node sums
``node_tick``) keep a window, and what is older leaves the store (per-GPU 5 min and 1 h
buckets stay in ``gpu_rollup``):

- The horizon is measured in data time (the newest tick minus the retention), not the wall
  clock, so a store backfilled with weeks of history keeps its newest window, and it never
  passes the finest rollup level's watermark: a tick leaves only once the rollup it feeds is
  complete (coarser levels are built from finer ones, never from the raw tables).
- Expiry runs in the owning process (``RetentionKeeper``), in slices of ``SLICE`` of data
  time, each its own short transaction under the store's write lock, so an ingest round
  waits at most one slice, and readers, on their own cursors, are never blocked (DuckDB's
  MVCC: a query sees the store as of its start).
- ``meta.raw_since`` records the horizon: queries read rollups, not ticks, for a range that
  starts before it (``queries.pick_level``), the GPU drill-down says why older per-GPU lines
  are missing, and ``Store.refresh_rollups`` never rebuilds a bucket there from a partial
  tick table (a sample arriving later than the horizon is stored, not rolled up, and expires
  on the next pass).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from telemetry.store import Store

RAW_TABLES = ("gpu_samples", "gpu_samples_extra", "node_tick")
SLICE = timedelta(hours=1)  # data time deleted per transaction
EVERY_S = 60.0  # how often the keeper looks


@dataclass(frozen=True)
class Expired:
    """One pass: the rows that left each raw table, the horizon now, and the wall time."""

    rows: dict[str, int]
    horizon: datetime | None
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def horizon(store: Store, keep: timedelta) -> datetime | None:
    """The newest tick minus ``keep``, but not past the finest rollup level's watermark (what
    is older than that is not rolled up yet). None when there is nothing to keep."""
    newest = store.scalar("SELECT max(ts) FROM node_tick")
    if newest is None:
        return None
    levels = store.rollup_levels()
    finest = [levels[0], *store.gpu_rollup_levels()[:1]]  # those built from raw tables
    marks = [store.meta().get(f"rollup_watermark_{lv}") for lv in finest]
    if None in marks:
        return None  # nothing rolled up yet: nothing may leave
    cut = min(newest - keep, *(datetime.fromisoformat(m) for m in marks if m))
    # on a bucket boundary of every level built from raw rows (the per-GPU 5 min as well as
    # the node 1 min): a bucket is whole or gone, never half expired, so a late round that
    # rebuilds the bucket at the horizon finds all of its rows
    step = timedelta(seconds=max(finest))
    return datetime.min + ((cut - datetime.min) // step) * step


def expire(store: Store, keep: timedelta, slice_: timedelta = SLICE) -> Expired:
    """Delete raw rows older than ``horizon(store, keep)``, oldest first, one ``slice_`` of
    data time per transaction; ``meta.raw_since`` moves with each committed slice."""
    t0 = time.monotonic()
    rows = dict.fromkeys(RAW_TABLES, 0)
    until = horizon(store, keep)
    if until is None:
        return Expired(rows, store.raw_since(), time.monotonic() - t0)
    oldest = store.scalar("SELECT min(ts) FROM node_tick")
    done = store.raw_since()
    cut = oldest if oldest is not None else until
    while cut < until:
        cut = min(cut + slice_, until)
        with store.transaction() as con:
            for table in RAW_TABLES:
                n = con.execute(f"DELETE FROM {table} WHERE ts < ?", [cut]).fetchone()
                rows[table] += int(n[0]) if n else 0
            con.execute("INSERT OR REPLACE INTO meta VALUES ('raw_since', ?)", [cut.isoformat()])
        done = cut
    if done is None or done < until:  # nothing was old enough: the horizon still stands
        store.set_meta({"raw_since": until.isoformat()})
        done = until
    return Expired(rows, done, time.monotonic() - t0)


class RetentionKeeper:
    """Expires raw samples every ``every_s`` on a thread of the store's owning process."""

    def __init__(
        self,
        store: Store,
        keep: timedelta,
        log: Callable[[str], None],
        every_s: float = EVERY_S,
    ) -> None:
        self.store, self.keep, self.log, self.every_s = store, keep, log, every_s

    def start(self, stop: threading.Event) -> threading.Thread:
        def run() -> None:
            while not stop.is_set():
                try:
                    done = expire(self.store, self.keep)
                    if done.total:
                        self.log(
                            f"raw retention: {done.total:,} raw rows before "
                            f"{done.horizon:%Y-%m-%d %H:%M} UTC left the store "
                            f"({done.seconds:.1f} s); rollups kept"
                        )
                except Exception as exc:  # a full disk, a closed store: next pass tries again
                    self.log(f"raw retention: pass failed: {exc}")
                stop.wait(self.every_s)

        thread = threading.Thread(target=run, name="raw-retention", daemon=True)
        thread.start()
        return thread
