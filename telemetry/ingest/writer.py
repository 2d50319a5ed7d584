"""The store writer: the ``BatchSink`` every batch type ends in, one store per writer.

Scrape rounds go through ``sink.StoreSink`` (exporter identities to store ids, XIDs, staleness;
created with the first round, whose interval the store's metadata records), training records
through ``records.store_records`` (validated, bad ones reported), a replay's windows and health
rows straight to ``Store.append_many``. Each write is one transaction. What follows a write
(the rollups, the Slurm refresh, the job figures, the hangs' hosts, the interruptions) is run
here, and only here, by the steps ``telemetry.after_write`` registers: after a round, after a
``Derive`` batch, on ``Settle`` and at ``finish``. The writer is not thread-safe by itself: the
server's ``IngestService`` serialises it behind a lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from telemetry import after_write
from telemetry.after_write import EVIDENCE, REST, ROUND, WINDOWS, After
from telemetry.errors import DuplicateBatchError
from telemetry.ingest.records import store_records
from telemetry.ingest.seam import (
    Batch,
    Derive,
    HealthBatch,
    Records,
    Round,
    Settle,
    Tables,
    Written,
    health_table,
)
from telemetry.ingest.sink import RoundReport, StoreSink
from telemetry.store import Store
from telemetry.store.run_meta import remember_ranks_per_node, remember_tier_roots


def round_line(rep: RoundReport) -> str:
    """A stored round in words, as the ingest daemon logs it."""
    return (
        f"{rep.up}/{rep.targets} targets up, {rep.samples:,} GPU samples, "
        f"{rep.xid_events} XID events, {rep.rejected_lines} rejected lines"
    )


class StoreWriter:
    accepts = (Round, Records, Tables, HealthBatch, Derive, Settle)

    def __init__(self, store: Store, rounds: bool = False, into_replay: bool = False) -> None:
        """With ``rounds`` the round sink is made now, so a store that cannot take scrape
        rounds (it holds a replay, unless ``into_replay``) raises ValueError at once instead of
        at the first round."""
        self.store = store
        self.into_replay = into_replay
        self.rounds: StoreSink | None = None
        self._lagging = False  # rounds stored since the last ``finish``
        if rounds:
            self.round_sink()

    def write(self, batch: Batch) -> Written:
        if isinstance(batch, Round):
            return self._round(batch)
        if isinstance(batch, Records):
            records: Any = batch.records
            if isinstance(records, Mapping):  # typed columns (a log's progress points)
                from telemetry.ingest.columnar import validate_columns

                records = validate_columns(records)
            rep = store_records(self.store, batch.kind, records, batch.batch_id, batch.origin)
            return Written(
                ok=True,
                line=f"{batch.target}: {rep.stored:,} {batch.kind} records stored, "
                f"{len(rep.rejected):,} rejected" + (" (duplicate)" if rep.duplicate else ""),
                rows=rep.stored,
                duplicate=rep.duplicate,
                report=rep,
            )
        if isinstance(batch, Tables):
            label = batch.label or _upto(batch.rows, batch.ts)
            try:
                n = self.store.append_many(
                    dict(batch.tables), batch_id=batch.batch_id, kind="tables"
                )
            except DuplicateBatchError:
                return Written(ok=True, line=f"{label}: already stored", duplicate=True)
            return Written(ok=True, line=f"{label} stored", rows=batch.rows or n)
        if isinstance(batch, Derive):
            return self._derive(batch)
        if isinstance(batch, Settle):
            after_write.run(self.store, After(WINDOWS, ts=batch.until))
            return Written(ok=True, line="rollups brought up to date")
        if isinstance(batch, HealthBatch):
            n = self.store.append_many({"targets": health_table(batch.ts, batch.health)})
            return Written(ok=True, line=f"health of {n} sources stored", rows=n)
        raise TypeError(f"StoreWriter cannot write {type(batch).__name__}")

    def _derive(self, batch: Derive) -> Written:
        if batch.run and batch.tier_roots:
            remember_tier_roots(self.store, batch.run, batch.tier_roots)
        if batch.run and batch.ranks_per_node:
            remember_ranks_per_node(self.store, batch.run, batch.ranks_per_node)
        runs = None if batch.runs is None else tuple(batch.runs)
        if runs == ():  # what was said of the run, kept before its evidence comes: no step
            return Written(ok=True, line=f"remembered for {batch.run}", report=[])
        done = after_write.run(self.store, After(EVIDENCE, runs=runs))["interruptions"]
        parts = [
            f"{d.run_id}: {d.interruptions} interruption(s)" + ("" if d.changed else ", unchanged")
            for d in done
        ]
        line = "derived " + ("; ".join(parts) if parts else "nothing (no real run with steps)")
        return Written(ok=True, line=line, rows=sum(d.interruptions for d in done), report=done)

    def finish(self) -> None:
        """When batches stop: the per-GPU hours and 6 hours, which a round's refresh builds
        only when a 5-minute bucket closes (the rollups step after a round), brought up to the
        last round, so a store at rest holds every sample at every level. Raises what the store
        raises."""
        if self._lagging:
            after_write.run(self.store, After(REST))
            self._lagging = False

    def round_sink(self) -> StoreSink:
        """The sink rounds go to, made on first use; ValueError for a store that cannot take
        scrape rounds (it holds a replay, unless ``into_replay``)."""
        if self.rounds is None:
            self.rounds = StoreSink(self.store, into_replay=self.into_replay)
        return self.rounds

    def _round(self, batch: Round) -> Written:
        try:
            sink = self.round_sink()  # ValueError: a replay store
            rep = sink.write(batch.ts, batch.fetches, batch.batch_id, batch.interval_s, batch.once)
        except DuplicateBatchError:
            line = f"round {batch.ts.isoformat()} already stored (batch {batch.batch_id})"
            return Written(ok=True, line=line, duplicate=True)
        self._lagging = True
        after_write.run(self.store, After(ROUND, ts=batch.ts))  # rollups, jobs ended: figures
        line = f"round {batch.ts.isoformat()} stored: {round_line(rep)}"
        return Written(ok=True, line=line, rows=rep.samples, report=rep)


def _upto(rows: int, ts: datetime) -> str:
    return f"{rows:,} GPU samples up to {ts.isoformat()} stored"


class Composing:
    """A store writer as a command composes sources given together (``import``'s logs and
    checkpoint directories): the ``Derive`` batches written while ``holding`` are kept back and
    written as one at ``flush`` (the runs they name, the tier roots given, their run and ranks
    per node: as one source alone would send them), so the evidence of both is derived once,
    after both. ``derived`` is what the last derivation found."""

    def __init__(self, writer: StoreWriter) -> None:
        self.writer, self.accepts = writer, writer.accepts
        self.holding = False
        self.held: list[Derive] = []
        self.derived: list[Any] = []

    def write(self, batch: Batch) -> Written:
        if self.holding and isinstance(batch, Derive):
            self.held.append(batch)
            return Written(ok=True, line="derived after the sources read with it")
        written = self.writer.write(batch)
        if isinstance(batch, Derive) and written.report:
            self.derived = list(written.report)
        return written

    def flush(self) -> None:
        held, self.held, self.holding = self.held, [], False
        if not held:
            return
        runs = sorted({r for d in held for r in d.runs or ()})
        roots: dict[str, list[str]] = {}
        for d in held:
            for tier, paths in d.tier_roots.items():
                roots.setdefault(tier, []).extend(paths)
        run = next((d.run for d in held if d.run), None)
        per_node = next((d.ranks_per_node for d in held if d.ranks_per_node), None)
        self.write(Derive(tuple(runs) or None, roots, run, per_node))
