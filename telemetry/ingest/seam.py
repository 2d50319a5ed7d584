"""The seam between where data comes from and where it goes: sources, batches and sinks.

Everything that fills a store is a ``Source``: something with a name that, asked at a clock
time it is given (``poll(now)``), hands over typed batches, learns what became of each
(``settle``) and reports its health. Everything that takes batches is a ``BatchSink``: the
store writer (``ingest.writer.StoreWriter``), the server's ingest service
(``ingest.http_api.IngestService``, the same writer behind a lock) and the forwarder
(``ingest.forward.Forwarder``, which spools rounds for a remote server). Any source runs with
any sink that accepts its batch types (``daemon.run_rounds`` checks), so the scrape loop, a file
import and the replay engine share one write path, and a new source is one module that yields
batches (see ``telemetry.sources`` for how to add one).

Batches are plain data, typed by what they carry (``Round``, ``Records``, ``Tables``,
``HealthBatch``), never by table-name strings chosen at the call site. Health is one row of the
``targets`` table per thing a source watches (a scrape URL, ``import:<file>``,
``replay:<run>``), so the dashboard's target view shows every source the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from telemetry.errors import FactoryFloorError
from telemetry.ingest.targets import Fetch

if TYPE_CHECKING:  # kept out of import time: the command line's parser imports this module
    import pandas as pd
    import pyarrow as pa

    from telemetry.ingest.records import RecordReport
    from telemetry.ingest.sink import RoundReport


# -- batches ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Round:
    """One scrape round: every target's fetch, all stamped with the round's time."""

    ts: datetime
    fetches: list[Fetch]
    interval_s: float
    batch_id: str | None = None  # set by a forwarded round: stored at most once
    # rows whose (series, time) is stored already are left out (``telemetry.store.once``): a
    # remote_write part joining a round already written (a late shard, a resend)
    once: bool = False


@dataclass(frozen=True)
class Records:
    """Training-job records of one kind (``records.KINDS``), validated and stored by
    ``records.store_records``: valid ones stored, bad ones reported, never raised."""

    kind: str
    # a list of records (JSON-like objects), or train_metrics as typed columns of equal length
    # by field name (a log reader's progress points: ``ingest.columnar``)
    records: Sequence[Any] | Mapping[str, Sequence[Any]]
    target: str  # the health row they count toward, e.g. "import:/logs/m.jsonl"
    origin: str = "ingest"  # ``runs.source`` of a run these records create
    batch_id: str | None = None


@dataclass(frozen=True)
class Tables:
    """Rows already shaped as store tables (the replay engine's windows), appended in one
    transaction; a ``targets`` table among them is the source's health row."""

    tables: Mapping[str, pa.Table | pd.DataFrame]
    ts: datetime  # the newest time in the batch
    rows: int  # GPU sample rows, what progress is counted in
    batch_id: str | None = None  # stored at most once (a log block, a checkpoint row)
    label: str | None = None  # what it holds, for the log line (default: GPU samples)


@dataclass(frozen=True)
class HealthBatch:
    """Health rows of sources whose data batches do not carry them."""

    ts: datetime
    health: list[Health]


@dataclass(frozen=True)
class Derive:
    """Re-derive the interruptions of ``runs`` (None: every real run) from what is stored,
    after the batches before it; ``tier_roots`` ({tier: [paths]}) are remembered for ``run``
    first (the checkpoint directories the restores are judged against), and ``ranks_per_node``
    (how the run's ranks sit on its Slurm nodes, ``--ranks-per-node``) when given. An empty
    ``runs`` only remembers them: nothing is derived (the dumps' ranks placed by them first)."""

    runs: tuple[str, ...] | None = None
    tier_roots: Mapping[str, Sequence[str]] = field(default_factory=dict)
    run: str | None = None
    ranks_per_node: int | None = None


@dataclass(frozen=True)
class Settle:
    """Bring the rollups up to ``until`` (None: the newest data) after ``Tables`` windows: the
    replay engine asks so between its windows and at its end (``telemetry.after_write``)."""

    until: datetime | None = None


Batch = Round | Records | Tables | HealthBatch | Derive | Settle


# -- what a sink says about a batch ----------------------------------------------------------
@dataclass(frozen=True)
class Written:
    ok: bool  # the sink took it: stored, already stored (duplicate), or spooled for delivery
    line: str  # what happened, in one line for the log
    rows: int = 0  # rows stored by this write (0 for a duplicate or a spooled round)
    error: str | None = None  # why not, when not ok
    duplicate: bool = False
    report: RoundReport | RecordReport | list[Any] | None = (
        None  # the store's own account, when stored
    )

    @classmethod
    def failed(cls, line: str, exc: BaseException) -> Written:
        return cls(ok=False, line=line, error=str(exc) or type(exc).__name__)


# -- health ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Health:
    """One thing a source watches, as its row in the ``targets`` table shows it."""

    target: str  # a scrape URL, or "<source>:<what>" ("import:/logs/m.jsonl")
    up: bool
    error: str | None = None  # the last error, while down
    last_success: datetime | None = None
    rows: int = 0  # rows stored by the last poll
    rejected: int = 0  # records or lines of the last poll that were refused
    duration_s: float | None = None


@dataclass
class HealthBook:
    """Per-target health kept by a source from what its sink said about each batch."""

    entries: dict[str, Health] = field(default_factory=dict)

    def record(
        self,
        now: datetime,
        target: str,
        up: bool,
        error: str | None = None,
        rows: int = 0,
        rejected: int = 0,
    ) -> None:
        before = self.entries.get(target)
        self.entries[target] = Health(
            target=target,
            up=up,
            error=None if up else (error or "down"),
            last_success=now if up else (before.last_success if before else None),
            rows=rows,
            rejected=rejected,
        )

    def all(self) -> list[Health]:
        return list(self.entries.values())


TARGETS_COLUMNS = (
    *("ts", "target", "up", "duration_s", "samples", "rejected_lines", "error", "stale"),
    *("digest", "unchanged"),
)


def health_table(ts: datetime, health: Iterable[Health]) -> pa.Table:
    """``targets`` rows (``TARGETS_COLUMNS``, in table order) for ``health`` at ``ts``; a source
    that is not scraped is never stale and keeps no value digest."""
    import pyarrow as pa

    hs = list(health)
    n = len(hs)
    columns = [
        pa.array([ts] * n, pa.timestamp("us")),
        pa.array([h.target for h in hs], pa.string()),
        pa.array([h.up for h in hs], pa.bool_()),
        pa.array([h.duration_s for h in hs], pa.float64()),
        pa.array([h.rows for h in hs], pa.int32()),
        pa.array([h.rejected for h in hs], pa.int32()),
        pa.array([h.error for h in hs], pa.string()),  # an up source may carry a warning
        pa.array([False] * n, pa.bool_()),
        pa.nulls(n, pa.int64()),
        pa.nulls(n, pa.int32()),
    ]
    return pa.table(columns, names=list(TARGETS_COLUMNS))


# -- the two sides of the seam ---------------------------------------------------------------
class Source(Protocol):
    """Something that produces batches for the store when asked, at a time it is given."""

    @property
    def name(self) -> str:
        """Its registry name; its health rows are named ``<name>:<what>`` (scrape: the URL)."""
        ...

    @property
    def produces(self) -> tuple[type, ...]:
        """The batch types ``poll`` yields (a sink must accept them all)."""
        ...

    @property
    def interval_s(self) -> float:
        """Seconds between the rounds it wants (0: polled once, or pushed)."""
        ...

    @property
    def health_rows(self) -> bool:
        """True when the loop stores ``health()`` after each round; False when its batches
        already carry its health rows (a scrape round, a replay window)."""
        ...

    def poll(self, now: datetime) -> Iterable[Batch]:
        """The batches due at ``now`` (the injected clock: wall time, or a replay's simulated
        time). May be a generator: each batch is written before the next is asked for."""
        ...

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        """What the sink did with ``batch``; a source that must not lose data (a tailed log's
        offset) advances only on ``written.ok``."""
        ...

    def health(self) -> list[Health]:
        """Its state now, one entry per thing it watches."""
        ...


class BatchSink(Protocol):
    """Where batches go: the store writer, the server's ingest service, the forwarder."""

    @property
    def accepts(self) -> tuple[type, ...]:
        """The batch types ``write`` takes."""
        ...

    def write(self, batch: Batch) -> Written:
        """Store (or deliver) one batch. Raises what the store raises (``StoreError``...);
        then nothing of the batch is stored."""
        ...


def check_fits(source: Source, sink: BatchSink) -> None:
    """``FactoryFloorError`` unless ``sink`` takes every batch type ``source`` yields (and its
    health rows): a source asked for where its data cannot go, said in one line."""
    wanted = list(source.produces) + ([HealthBatch] if source.health_rows else [])
    missing = [t.__name__ for t in wanted if not issubclass(t, tuple(sink.accepts))]
    if missing:
        where = getattr(sink, "describes", None) or type(sink).__name__
        raise FactoryFloorError(
            f"the {source.name} source writes a store, which {where} cannot carry "
            f"({', '.join(missing)}): give --store instead"
        )


# -- how a source plugs into the command line ------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One command-line option of a source: ``argparse.add_argument(flag, **kwargs)``. A flag
    without dashes is a positional argument. Its value reaches ``SourceSpec.build`` under
    ``key`` (the flag without dashes, ``-`` as ``_``)."""

    flag: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


# The run the followed logs, checkpoint directories and flight-recorder dumps belong to: one
# option those sources share on ``ingest`` and ``serve`` (``sources.SHARED``), read by each.
RUN_OPTION = Option(
    "--run", {"help": "the run the followed logs, checkpoints and flight-recorder dumps belong to"}
)


@dataclass(frozen=True)
class SourceContext:
    """What a command gives every source it builds."""

    command: str  # "ingest", "serve", "import"
    interval_s: float  # seconds between rounds
    timeout_s: float  # what one poll may take
    log: Callable[[str], None]
    store: str | None = None  # the store the command writes (names a source's own state)
    stop: threading.Event | None = None  # set when the command stops: a long wait ends early
    # The open store the command writes, asked while a source polls: for a source whose rows
    # depend on what the sources before it stored (the hosts of a hang's ranks, whether its
    # run is known). None where the command writes no store of its own.
    stored: Callable[[], Any] | None = None


Builder = Callable[[Mapping[str, Any], SourceContext], "Source | None"]


@dataclass(frozen=True)
class SourceSpec:
    """A source's registration (``telemetry.sources.SOURCES``): its name, what it reads, its
    options per command, and how to build it from their values (None: not asked for). Sources
    without options are built by the code that feeds them (the ingest API, the replay runner)."""

    name: str
    summary: str
    options: Mapping[str, tuple[Option, ...]] = field(default_factory=dict)
    build: Builder | None = None
    ask: str = ""  # how a user asks for it, for "give at least one ..." ("--target or ...")
    # whether a path given to ``import`` is this source's to read (``sources.claim``)
    recognises: Callable[[str], bool] | None = None
