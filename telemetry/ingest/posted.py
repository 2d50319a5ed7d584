"""Training records posted to the ingest API (``POST /api/v1/metrics`` ...), as a source.

A push source: the training job decides when data comes, so nothing polls it (``poll`` has
nothing); each request becomes one ``Records`` batch that the server's ingest service writes
at once, because the reply says what was stored and what was rejected. Its health, one row per
record kind (``api:train_metrics``, ``api:checkpoints``...), is stored after every post: down
when a post carried no valid record, with the first reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from telemetry.ingest.seam import Batch, Health, HealthBook, Records, SourceSpec, Written


class PostedRecords:
    name = "api"
    produces = (Records,)
    health_rows = True
    interval_s = 0.0  # pushed, never polled

    def __init__(self) -> None:
        self.book = HealthBook()

    def batch(self, kind: str, records: list[Any], batch_id: str | None) -> Records:
        return Records(kind, records, f"{self.name}:{kind}", origin="http", batch_id=batch_id)

    def poll(self, now: datetime) -> list[Batch]:
        return []  # pushed: every request is written as it arrives

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        from telemetry.ingest.records import RecordReport  # loaded with the writer by now

        if not isinstance(batch, Records):
            return
        rep = written.report
        if not isinstance(rep, RecordReport):  # the store refused the batch
            self.book.record(now, batch.target, False, written.error)
            return
        up = rep.stored > 0 or rep.duplicate
        why = f"no valid records (first: {rep.rejected[0].reason})" if rep.rejected else None
        self.book.record(now, batch.target, up, why, rep.stored, len(rep.rejected))

    def health(self) -> list[Health]:
        return self.book.all()

    def health_of(self, target: str) -> list[Health]:
        return [self.book.entries[target]] if target in self.book.entries else []


SPEC = SourceSpec(
    name="api",
    summary="training metrics and run events posted to serve --accept-ingest (/api/v1/...)",
)
