"""Hangs found in flight-recorder dumps (``collect.logs.flight_recorder``) into the store: the
``hangs`` row, a ``collective_hang`` signal on the culprit's host for the interruption
inference, and each rank's host from the run's Slurm node list."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
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


def import_dumps(store: Any, write: Any, paths: list[str], run: str) -> Imported:
    """Find the hang in the dumps at ``paths`` (files, or directories of one job's dumps) and
    store it for ``run`` through ``write`` (a sink's): a ``hangs`` row, once however often the
    same dumps are imported, and the run's row when the store does not know the run."""
    from telemetry.ingest.seam import Records, Tables

    files = [f for p in paths for f in dump_files(p)]
    ranks = [r for r in (rank_of(f) for f in files) if r is not None]
    try:
        hang, errors = analyse(files, rank_hosts(store, run, ranks))
    except DumpError as exc:
        raise FactoryFloorError(str(exc)) from None
    where = paths[0] if len(paths) == 1 else f"{len(paths)} paths"
    read = _not_refused(files, errors)
    ranks = [r for r in (rank_of(f) for f in read) if r is not None]
    if hang is None:
        return Imported(where, len(read), len(set(ranks)), errors, None, False)
    known = store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [run])
    if hang.ts is not None and not known:
        when = hang.ts.isoformat() + "Z"  # a run known from its dumps only: dated by the hang
        rec = {"run": run, "start_ts": when, "end_ts": when}
        write(Records("runs", [rec], target=f"import:{where}", origin="import"))
    batch_id = "fr-" + hashlib.sha256(
        f"{run}:{hang.process_group}:{hang.seq_id}:{hang.ts}:{sorted(set(ranks))}".encode()
    ).hexdigest()[:40]
    tables = {"hangs": hang_table(hang, run, where)}
    if hang.ts is not None:  # the interruption inference weighs it with the logs' signals
        tables["signals"] = signal_frame(hang, run, where)
    written = write(Tables(tables, hang.ts or datetime.now(), 0, batch_id, "a hang"))
    return Imported(where, len(read), len(set(ranks)), errors, hang, bool(written.duplicate))


def _not_refused(files: list[str], errors: list[str]) -> list[str]:
    """The ``files`` no line of ``errors`` ("PATH: why") names."""
    named = set()
    for line in errors:  # a path may itself hold ": "
        at = line.find(": ")
        while at >= 0:
            named.add(line[:at])
            at = line.find(": ", at + 1)
    return [f for f in files if f not in named]
