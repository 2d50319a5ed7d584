"""The telemetry store: one DuckDB file, one owning process, batched appends.

Process topology (DuckDB allows one process per file, see STACK.md): the process that opens the
store read-write owns it. ``factoryfloor serve`` owns it and may run the replay engine (or the
scrape loop) in a thread of its own; a second process that tries to open it gets
``StoreLockedError`` naming the file and the holder, never a raw traceback.

Within the owning process every writer goes through ``Store`` (one write lock); readers take a
``cursor()`` each, which DuckDB runs concurrently with the writer.

The store's other concerns live beside it in ``telemetry.store``: the tables and their upgrades
in ``schema``, opening the file and the SQL audit in ``connection``, the result cache in
``cache`` and the rollups in ``rollups``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from telemetry import env
from telemetry.errors import DuplicateBatchError, StoreError, StoreLockedError
from telemetry.store import batch_sql, rollups, schema
from telemetry.store import once as once_sql
from telemetry.store.cache import ResultCache, params_key
from telemetry.store.connection import audited, io_reason, open_connection, rollback
from telemetry.store.versions import TableVersions

# Tables that accept appends through ``append``; anything else is refused (no SQL from names).
APPENDABLE = (
    "gpu_samples",
    "node_tick",
    "gpu_buckets",
    "gpu_samples_extra",
    "train_metrics",
    "interruptions",
    "checkpoints",
    "xid_events",
    "targets",
    "runs",
    "nodes",
    "gpus",
    "signals",
    "checkpoint_events",
    "slurm_jobs",
    "slurm_nodes",
    "slurm_node_events",
    "slurm_reservations",
    "hangs",
    "rank_hosts",
    "rank_perf",
    "log_files",
    "run_settings",
)
# Tables appended by column name: producers may omit columns added later (NULL).
_BY_NAME = frozenset(
    {"gpu_samples", "node_tick", "gpu_buckets", "interruptions", "checkpoints", "signals",
     "checkpoint_events", "slurm_jobs", "slurm_nodes", "slurm_node_events", "hangs", "rank_hosts",
     "rank_perf", "slurm_reservations", "log_files",
     "run_settings"}
)  # fmt: skip
# Batch names stored under other tables' names: a producer's whole per-GPU buckets
# (``telemetry.replay.partials``) are rollup rows, one table per level.
_INTO = {"gpu_buckets": rollups.GPU_TABLES}
# Tables whose rows replace the stored row with the same key (a run's end, a job's state).
_REPLACING = frozenset({"runs", "slurm_jobs", "slurm_nodes", "slurm_reservations"})


def _upgrade(path: str) -> duckdb.DuckDBPyConnection:
    """A read-only open of a store from an older version: add what it lacks (tables are only
    ever added, never changed, so no data is touched), then reopen it read-only. If it cannot
    be written, say so instead of failing on every page later."""
    try:
        Store(path).close()
    except (StoreError, StoreLockedError) as exc:
        reason = exc.reason if isinstance(exc, StoreError) else str(exc)
        raise StoreError(
            path,
            "it was written by an older Factory Floor and lacks tables this version reads; "
            f"upgrading it failed ({reason}). Open it once with write access "
            "(e.g. `factoryfloor serve --accept-ingest --store ...`).",
        ) from None
    return open_connection(path, True)


class Store:
    """One DuckDB telemetry store. Thread-safe: writes serialise on a lock, reads use cursors."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._audit = env.sql_audit_path()
        self._con = audited(open_connection(path, read_only), self._audit)
        self._write_lock = threading.Lock()
        self._version = 0
        self._handed_over = False  # a batch brought whole per-GPU buckets since the refresh
        size = ResultCache().max_bytes if env.result_cache() else 0
        self._cache = ResultCache(max_bytes=size, stale=self._stale)
        if path != ":memory:" and (foreign := schema.foreign(self._con)):
            self._con.close()
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise StoreError(
                path,
                f"not a Factory Floor store (it holds other tables: {shown}); "
                "it is left untouched. Give a new path or a store made by `factoryfloor`.",
            )
        if not read_only:
            try:
                self._init_schema()
            except Exception as exc:  # closed, so the file can be opened again
                self._con.close()
                raise StoreError(path, f"bringing it up to this version failed: {exc}") from exc
        elif path != ":memory:" and schema.outdated(self._con):
            self._con.close()
            self._con = audited(_upgrade(path), self._audit)
        # which write each cached result depends on (the per-GPU levels' writers report
        # their view's name)
        self._tables = TableVersions(self._con, tracked=[rollups.GPU_VIEW])

    # -- lifecycle -------------------------------------------------------------------------
    def _init_schema(self) -> None:
        with self._write_lock:
            schema.create(self._con)

    def close(self, wait_s: float = 10.0) -> None:
        """Close the store once no reader is inside a query. DuckDB refuses to close a
        connection whose cursor is running one ("connection is busy"), and a process that
        exits with a thread still inside DuckDB aborts: a server stopped while a request or
        the landing view's warm-up reads lets them finish, for up to ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._con.close()
                return
            except duckdb.ResourceInUseException:
                if time.monotonic() >= deadline:
                    raise StoreError(
                        self.path, f"a reader was still inside a query after {wait_s:g} s"
                    ) from None
                time.sleep(0.02)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for one reader thread; DuckDB runs it concurrently with the writer."""
        return self._con.cursor()

    def df(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> pd.DataFrame:
        """Run a parameterised read-only query on a fresh cursor and return a DataFrame (the
        caller's own copy: results are cached until the next write, see ``ResultCache``)."""

        def run() -> pd.DataFrame:
            cur = self._con.cursor()
            try:
                return cur.execute(sql, list(params)).df()
            finally:
                cur.close()

        out = self._cache.get(("df", sql, params_key(params)), self._read_version(sql), run)
        return out.copy(deep=True)

    def rows(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a parameterised read-only query on a fresh cursor and return all rows."""

        def run() -> list[tuple[Any, ...]]:
            cur = self._con.cursor()
            try:
                return cur.execute(sql, list(params)).fetchall()
            finally:
                cur.close()

        key = ("rows", sql, params_key(params))
        return list(self._cache.get(key, self._read_version(sql), run))

    def scalar(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> Any:
        def run() -> Any:
            cur = self._con.cursor()
            try:
                row = cur.execute(sql, list(params)).fetchone()
                return None if row is None else row[0]
            finally:
                cur.close()

        return self._cache.get(("scalar", sql, params_key(params)), self._read_version(sql), run)

    def forget_results(self) -> None:
        """Drop every cached query result, as a write to every table would: the next reader
        of each query runs it (the cold benchmark starts every request so)."""
        self._cache.clear()

    def cache_stats(self) -> dict[str, int]:
        c = self._cache
        return {"cache_hits": c.hits, "cache_misses": c.misses, "cache_bytes": c._bytes}

    @property
    def version(self) -> int:
        """Bumped by every write in this process; cached query results are valid within one."""
        return self._version

    def tables_version(self, *tables: str) -> int:
        """The version of the last write to any of ``tables`` (every write's, for a table the
        store does not know): a watcher acts when it moves, not on every scrape round."""
        return self._read_version("SELECT * FROM " + ", ".join(tables))

    def _read_version(self, sql: str) -> int:
        """The version a result of ``sql`` is cached under: that of the last write to a table
        it reads (``telemetry.store.versions``), so a scrape round keeps the training results."""
        return self._tables.of(sql, self._version)

    def _stale(self, key: Any, version: int) -> bool:
        """A cached result that a write since has made useless (the cache drops it)."""
        return self._read_version(key[1]) != version

    def meta(self) -> dict[str, str]:
        return dict(self.rows("SELECT key, value FROM meta"))

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def _writing(self, tables: Iterable[str] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """The write lock and connection; ``tables``: those the write may touch (None: any,
        and the table names are read again, since such a write may create one)."""
        if self.read_only:
            raise StoreError(self.path, "opened read-only; writes go through the owning process")
        with self._write_lock:
            try:
                yield self._con
            except (duckdb.IOException, duckdb.TransactionException) as exc:
                # A full disk or a file-size limit surfaces as a failed write or commit; the
                # transaction is rolled back and DuckDB takes writes again once space returns.
                raise StoreError(self.path, io_reason(exc)) from None
            finally:
                self._version += 1  # after the commit: readers from now on see the new data
                self._tables.wrote(self._version, tables)
                if tables is None:
                    with contextlib.suppress(duckdb.Error):  # names kept; results still safe
                        self._tables.reload(self._con)

    @contextmanager
    def transaction(self, tables: list[str] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """One atomic write for the modules that replace derived rows (``telemetry.derive``):
        everything inside is committed together or rolled back whole. ``tables``: the tables
        it may write (None: any; cached results of every table are then recomputed)."""
        with self._writing(tables) as con:
            con.begin()
            try:
                yield con
                con.commit()
            except BaseException:
                rollback(con)
                raise

    def set_meta(self, values: dict[str, str]) -> None:
        with self._writing(["meta"]) as con:
            con.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(k, str(v)) for k, v in values.items()],
            )

    def append(self, table: str, data: pa.Table | pd.DataFrame) -> int:
        """Append one batch (Arrow table or DataFrame, columns in table order) in one transaction.

        Returns the number of rows written. Raises ``ValueError`` for a table that is not
        appendable; a failed batch is rolled back whole, so a batch is either stored or not.
        """
        return self.append_many({table: data})

    def append_many(
        self,
        batches: dict[str, pa.Table | pd.DataFrame],
        batch_id: str | None = None,
        kind: str = "",
        once: bool = False,
    ) -> int:
        """Append several tables' batches in one transaction (a replay tick, a scrape round).

        With ``batch_id`` the batch is stored at most once: the id is recorded in
        ``ingest_batches`` in the same transaction, and a batch whose id is already there raises
        ``DuplicateBatchError`` and writes nothing (a sender retrying after a lost reply).
        Rows for ``runs`` replace the stored row with the same ``run_id`` (a run's metadata and
        end time change while it runs); every other table is append-only.

        GPU samples also get their per-(tick, node) partial sums computed from the batch while
        it is in memory (``node_tick``), which every rollup level is built from. A producer
        that already holds per-node arrays (the replay engine) may pass ``node_tick`` itself,
        and the per-GPU rollup rows of the buckets its batch holds whole (``gpu_buckets``: the
        refresh keeps a bucket whose rows account for every sample in it); tests check that
        both equal what the store's SQL computes from the samples. The batch's newest samples
        also replace their GPUs' rows in ``gpu_now`` where newer (``batch_sql.NOW_SQL``).
        With ``once`` (scrape rounds) rows whose (series, timestamp) is already stored are left
        out, and blank cells of stored samples filled (``telemetry.store.once``); the count
        returned is then of the rows added."""
        for table in batches:
            if table not in APPENDABLE:
                raise ValueError(f"table {table!r} is not appendable")
        if "gpu_buckets" in batches and "gpu_samples" not in batches:
            raise ValueError("gpu_buckets come only with the GPU samples they sum")
        total = 0
        touched = [n for t in batches for n in _INTO.get(t, (t,))] + ["ingest_batches"]
        touched += ["node_tick", "gpu_now"] if "gpu_samples" in batches else []
        with self._writing(touched) as con:
            con.begin()
            try:
                if batch_id is not None:
                    seen = con.execute(
                        "SELECT ts FROM ingest_batches WHERE batch_id = ?", [batch_id]
                    ).fetchone()
                    if seen is not None:
                        raise DuplicateBatchError(batch_id, seen[0])
                for table, data in batches.items():
                    n = data.num_rows if isinstance(data, pa.Table) else len(data)
                    if n:
                        con.register("_batch", data)
                        verb = "INSERT OR REPLACE" if table in _REPLACING else "INSERT"
                        by = " BY NAME" if table in _BY_NAME else ""
                        ticked = False  # the node sums done already (``once``)
                        if table == "gpu_buckets":  # one table per level (rollups.GPU_VIEW)
                            batch_sql.insert_gpu_buckets(con, n)
                        elif once and table in once_sql.KEYS:
                            n, ticked = once_sql.insert(con, table, table in _BY_NAME)
                        else:
                            con.execute(f"{verb} INTO {table}{by} SELECT * FROM _batch")
                        if table == "gpu_samples" and "node_tick" not in batches and not ticked:
                            con.execute(batch_sql.NODE_TICK_SQL)
                        if table == "gpu_samples":
                            con.execute(batch_sql.NOW_SQL, [batch_sql.now_window_us(con)])
                        con.unregister("_batch")
                        total += n
                if batch_id is not None:
                    con.execute(
                        "INSERT INTO ingest_batches VALUES (?, current_timestamp::TIMESTAMP, ?, ?)",
                        [batch_id, kind, total],
                    )
                con.commit()
            except BaseException:
                rollback(con)
                raise
            self._handed_over |= "gpu_buckets" in batches
        return total

    def has_table(self, name: str) -> bool:
        """Whether the store has table ``name``: an optional table (``schema.OPTIONAL_TABLES``)
        is missing only from a store written before it, served read-only, where nothing adds
        it while it is open (a writable store creates every table when opened), so the answer
        is kept for the life of this object."""
        tables = self.__dict__.get("_table_names")
        if tables is None:
            tables = self._table_names = frozenset(
                r[0] for r in self.rows("SELECT table_name FROM duckdb_tables()")
            )
        return name in tables

    # -- rollups ---------------------------------------------------------------------------
    def sample_interval_s(self) -> float:
        return float(self.meta().get("sample_interval_s", "15"))

    def rollup_levels(self) -> list[int]:
        """Bucket sizes kept in the rollup tables (``rollups.levels_for``)."""
        return rollups.levels_for(self.sample_interval_s())

    def gpu_rollup_levels(self) -> list[int]:
        """Bucket sizes kept per GPU in ``gpu_rollup`` (``rollups.gpu_levels_for``)."""
        return rollups.gpu_levels_for(self.sample_interval_s())

    def gpu_rollup_since(self) -> datetime:
        """Where ``gpu_rollup`` starts being whole: the first sample for a store that always
        had it, the first hour after the upgrade for one that had samples before."""
        return datetime.fromisoformat(self.meta().get("gpu_rollup_since", "1970-01-01 00:00:00"))

    def raw_since(self) -> datetime | None:
        """The raw-retention horizon (``telemetry.store.retention``): per-GPU samples and ticks
        before it have left the store; None while nothing has."""
        value = self.meta().get("raw_since")
        return datetime.fromisoformat(value) if value else None

    def refresh_rollups(
        self, until: datetime | None = None, since: datetime | None = None, lazy: bool = False
    ) -> None:
        """Recompute node and fleet rollups from the last complete bucket of each level on.

        Buckets from each level's watermark up to ``until`` (default: the newest sample) are
        deleted and recomputed, so a partly filled bucket is corrected on the next refresh.
        Each level is built from the level below it (or raw samples), keeping the cost
        proportional to the new data, not to the store. ``since`` is the oldest time of the
        data just written: data older than a watermark (a spool delivered late, a second
        daemon's backlog) has its own bucket rebuilt too, and only that one, so a backlog of
        many late rounds costs one bucket each, not a rebuild up to now each. ``until`` never
        goes below the newest stored tick, so newer buckets are never left deleted.
        ``lazy`` (a scrape round's refresh) brings the per-GPU hours and 6 hours up to date
        only when a bucket of the finest per-GPU level (5 minutes) has closed since their last
        build: between, their newest bucket lags by at most that bucket.
        """
        horizon = self.raw_since()
        if since is not None and horizon is not None and since < horizon:
            since = horizon  # older buckets' ticks are gone: keep them
        with self._writing(list(rollups.TABLES)) as con:
            rollups.refresh(
                con, self.rollup_levels(), until, since, self.gpu_rollup_levels(),
                self._handed_over, lazy,
            )  # fmt: skip
            self._handed_over = False


def open_store(path: str, read_only: bool = False) -> Store:
    """Open (creating if needed) the store at ``path``; see ``Store`` for the errors raised."""
    return Store(path, read_only=read_only)
