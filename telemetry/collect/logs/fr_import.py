"""Hangs found in flight-recorder dumps (``collect.logs.flight_recorder``) as store rows: the
``hangs`` row, a ``collective_hang`` signal on the culprit's host for the interruption
inference, and each rank's host from the run's logs or Slurm node list.

``DumpImport`` is the source ``import`` hands the dumps its recogniser took
(``fr_source.recognises``): one poll that finds the hang and yields it as batches, through the
same writer as every other source. It reads what the sources before it stored (the ranks'
hosts, whether the run is known) from the store the command writes (``SourceContext.stored``);
it writes nothing itself."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from telemetry.collect.logs.flight_recorder import (
    MAX_SUSPECTS,
    DumpError,
    Hang,
    dump_files,
    rank_of,
)
from telemetry.collect.logs.fr_worker import analyse
from telemetry.errors import FactoryFloorError
from telemetry.ingest.seam import Batch, Derive, Health, Records, Tables, Written


def rank_hosts(store: Any, run_id: str, ranks: Iterable[int]) -> dict[int, str]:
    """Each rank's host as the run's logs or its Slurm node list say (``store.ranks``)."""
    from telemetry.store.ranks import rank_hosts as resolve

    return resolve(store, run_id, ranks)


def hang_table(hang: Hang, run_id: str, source: str) -> Any:
    """The ``hangs`` row of ``hang`` (a one-row Arrow table)."""
    import pyarrow as pa

    culprit = hang.culprit
    suspects = hang.missing_ranks or hang.stuck_ranks
    row = {
        "run_id": [run_id],
        "ts": pa.array([hang.ts], pa.timestamp("us")),
        "process_group": [hang.process_group],
        "pg_desc": [hang.pg_desc or hang.pg_name or None],
        "seq_id": pa.array([hang.seq_id], pa.int64()),
        "op": [hang.op],
        "input_sizes": [hang.input_sizes],
        "dtypes": [hang.dtypes],
        "ranks": pa.array([hang.ranks], pa.int32()),
        "missing_ranks": pa.array([hang.missing_ranks], pa.list_(pa.int32())),
        "stuck_ranks": pa.array([len(hang.stuck_ranks)], pa.int32()),
        "culprit_rank": pa.array([culprit], pa.int32()),
        "culprit_host": [hang.hosts.get(culprit) if culprit is not None else None],
        "hosts": pa.array(
            [sorted({hang.hosts[r] for r in suspects[:MAX_SUSPECTS] if r in hang.hosts})],
            pa.list_(pa.string()),
        ),
        "culprit_frames": pa.array([hang.culprit_frames], pa.list_(pa.string())),
        "waiting_frames": pa.array([hang.waiting_frames], pa.list_(pa.string())),
        "mismatched": pa.array([hang.mismatched], pa.list_(pa.string())),
        "story": [hang.story()],
        "source": [source],
    }
    return pa.table(row)


def signal_frame(hang: Hang, run_id: str, source: str) -> Any:
    """The hang as a ``signals`` row: at the time the waiting ranks enqueued the collective,
    on the culprit's host."""
    from telemetry.signals import COLLECTIVE_HANG, Signal, clean_line, signals_frame

    culprit = hang.culprit
    host = hang.hosts.get(culprit) if culprit is not None else None
    story = clean_line(hang.story())
    where = f"{source}: rank {culprit}" if culprit is not None else source
    short = f"{hang.op or 'collective'} #{hang.seq_id}"
    if hang.missing_ranks:
        short = f"rank {culprit} never called {short}, {hang.ranks - 1:,} ranks waited"
    elif culprit is not None:
        short = f"rank {culprit} did not complete {short}"
    sig = Signal(hang.ts, COLLECTIVE_HANG, host, None, None, short, where, story,
                 "flight_recorder", culprit)  # fmt: skip
    return signals_frame([sig], run_id)


@dataclass(frozen=True)
class Imported:
    where: str  # the path given, or how many
    read: int  # dumps read (not refused)
    ranks: int  # distinct ranks among them
    errors: list[str]  # files that could not be read, with why
    hang: Hang | None
    duplicate: bool  # the same hang was imported before


class DumpImport:
    """The flight-recorder dumps at ``paths`` (files, or directories of one job's dumps) given
    to ``import`` for ``run``: their hang (``hangs`` row and signal) once however often the
    same dumps are imported, the run's row when the store does not know the run, and the run
    derived again when the hang is new. ``got`` is what was found, once polled."""

    name = "flight_recorder"
    produces = (Records, Tables, Derive)
    health_rows = False
    interval_s = 0.0  # read once

    def __init__(
        self, paths: list[str], run: str, ranks_per_node: int | None, stored: Callable[[], Any]
    ) -> None:
        self.paths, self.run, self.per_node, self.stored = paths, run, ranks_per_node, stored
        self.got: Imported | None = None
        self._hang_batch: str | None = None
        self._duplicate = False

    def poll(self, now: datetime) -> Iterator[Batch]:
        if self.per_node:  # remembered first: the ranks' hosts by the Slurm node list read it
            yield Derive((), run=self.run, ranks_per_node=self.per_node)
        store, run, paths = self.stored(), self.run, self.paths
        files = [f for p in paths for f in dump_files(p)]
        ranks = [r for r in (rank_of(f) for f in files) if r is not None]
        try:
            hang, errors = analyse(files, rank_hosts(store, run, ranks))
        except DumpError as exc:
            raise FactoryFloorError(str(exc)) from None
        where = paths[0] if len(paths) == 1 else f"{len(paths)} paths"
        read = _not_refused(files, errors)
        ranks = [r for r in (rank_of(f) for f in read) if r is not None]
        self.got = Imported(where, len(read), len(set(ranks)), errors, hang, False)
        if hang is None:
            return
        known = store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [run])
        if hang.ts is not None and not known:
            when = hang.ts.isoformat() + "Z"  # a run known from its dumps only: dated by the hang
            rec = {"run": run, "start_ts": when, "end_ts": when}
            yield Records("runs", [rec], target=f"import:{where}", origin="import")
        self._hang_batch = "fr-" + hashlib.sha256(
            f"{run}:{hang.process_group}:{hang.seq_id}:{hang.ts}:{sorted(set(ranks))}".encode()
        ).hexdigest()[:40]
        tables = {"hangs": hang_table(hang, run, where)}
        if hang.ts is not None:  # the interruption inference weighs it with the logs' signals
            tables["signals"] = signal_frame(hang, run, where)
        yield Tables(tables, hang.ts or datetime.now(), 0, self._hang_batch, "a hang")
        self.got = Imported(where, len(read), len(set(ranks)), errors, hang, self._duplicate)
        if not self._duplicate:
            yield Derive(runs=(run,))

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        if isinstance(batch, Tables) and batch.batch_id == self._hang_batch:
            self._duplicate = bool(written.duplicate)

    def health(self) -> list[Health]:
        return []


def _not_refused(files: list[str], errors: list[str]) -> list[str]:
    """The ``files`` no line of ``errors`` ("PATH: why") names."""
    named = set()
    for line in errors:  # a path may itself hold ": "
        at = line.find(": ")
        while at >= 0:
            named.add(line[:at])
            at = line.find(": ", at + 1)
    return [f for f in files if f not in named]
