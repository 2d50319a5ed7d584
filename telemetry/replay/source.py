"""A replay as a source: the adapter that puts the replay engine behind the collectors' seam.

The clock it is polled with is simulated time: ``poll(now)`` yields the windows of every sample
tick up to ``now`` not handed out before (at most ``batch_ticks`` ticks each), synthesised on
demand, each a ``Tables`` batch carrying the replay's health row ``replay:<run id>`` at the
window's end, so the row is stored in the window's own transaction and its time never runs
ahead of the data. ``runner.replay`` paces it (a backfill overlapping synthesis with writes, or
live at a speed); any ``BatchSink`` that accepts ``Tables`` can take it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from telemetry.ingest.seam import Batch, Health, SourceSpec, Tables, Written, health_table

if TYPE_CHECKING:  # the registry imports this module for SPEC: the engine loads when it runs
    import numpy as np

    from telemetry.replay.synth import Synthesizer

_TICK_SLACK_S = 1e-6  # a tick this close after ``now`` is due (datetimes hold microseconds)


class ReplaySource:
    name = "replay"
    produces = (Tables,)
    health_rows = False  # every window carries its own row

    def __init__(
        self, syn: Synthesizer, ticks: np.ndarray, batch_ticks: int, align_s: int = 0
    ) -> None:
        self.syn = syn
        self.ticks = ticks
        self.batch_ticks = max(1, batch_ticks)
        self.align_s = align_s  # window ends fall on these buckets' boundaries (0: anywhere)
        self.interval_s = syn.interval_s  # simulated seconds between ticks
        self.target = f"{self.name}:{syn.run_id}"
        self.done = 0  # ticks handed out
        self.t_prev = 0.0  # simulated seconds of the last tick handed out
        self.rows = 0  # sample rows stored
        self._health = Health(self.target, up=True)

    @property
    def left(self) -> int:
        return len(self.ticks) - self.done

    def until(self, t: float) -> Iterator[Tables]:
        """The windows of the ticks up to ``t`` simulated seconds, oldest first."""
        import numpy as np

        due = int(np.searchsorted(self.ticks, t + _TICK_SLACK_S, side="right"))
        while self.done < due:
            end = self._cut(self.done, min(self.done + self.batch_ticks, due))
            chunk = self.ticks[self.done : end]
            t1 = float(chunk[-1])
            edges = (
                float(self.ticks[self.done - 1]) if self.done else None,
                float(self.ticks[end]) if end < len(self.ticks) else None,
            )
            w = self.syn.window(chunk, self.t_prev, t1, edges)
            self.done += len(chunk)
            self.t_prev = t1
            ts = self.syn.abs_time(t1)
            row = Health(self.target, True, last_success=ts, rows=w.sample_rows)
            yield Tables({**w.tables, "targets": health_table(ts, [row])}, ts, w.sample_rows)

    def _cut(self, lo: int, hi: int) -> int:
        """Where a window of ticks [lo, hi) ends: before the last boundary of the store's
        coarsest per-GPU bucket in it (``align_s``), so that windows hold whole buckets,
        which the synthesiser hands over summed (``replay.partials``); ``hi`` when the
        window holds no boundary or ends the ticks."""
        if not self.align_s or hi >= len(self.ticks) or hi - lo < 2:
            return hi
        span = self.align_s * 1_000_000
        bucket = [self.syn.abs_us(float(t)) // span for t in self.ticks[lo : hi + 1]]
        for i in range(hi - lo, 0, -1):  # the last tick that starts a bucket
            if bucket[i] != bucket[i - 1]:
                return lo + i
        return hi

    def poll(self, now: datetime) -> Iterator[Tables]:
        return self.until((now - self.syn.sc.start).total_seconds())

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        if not isinstance(batch, Tables):
            return
        if written.ok:
            self.rows += written.rows
            self._health = Health(self.target, True, last_success=batch.ts, rows=written.rows)
        else:
            last = self._health.last_success
            self._health = Health(self.target, False, written.error, last, 0)

    def health(self) -> list[Health]:
        return [self._health]


SPEC = SourceSpec(
    name="replay",
    summary="the replay engine: a simulated cluster (`replay`, `serve --replay`, `demo`)",
)
