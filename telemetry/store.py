"""The telemetry store: one DuckDB file, one owning process, batched appends, rollups.

Process topology (DuckDB allows one process per file, see STACK.md): the process that opens the
store read-write owns it. ``factoryfloor serve`` owns it and may run the replay engine (or the
scrape loop) in a thread of its own; a second process that tries to open it gets
``StoreLockedError`` naming the file and the holder, never a raw traceback.

Within the owning process every writer goes through ``Store`` (one write lock); readers take a
``cursor()`` each, which DuckDB runs concurrently with the writer.
"""

from __future__ import annotations

import copy
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from telemetry.catalog import SAMPLE_COLUMNS, field_rows
from telemetry.errors import DuplicateBatchError, StoreError, StoreLockedError

SCHEMA_VERSION = "1"

# Rollup levels in seconds; a store keeps those at or above its sample interval.
ROLLUP_LEVELS_S: tuple[int, ...] = (60, 300, 3600, 21600)

_SAMPLE_COLS_SQL = ",\n  ".join(
    f"{c.name} {'DOUBLE' if c.kind == 'counter' else 'FLOAT'}" for c in SAMPLE_COLUMNS
)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS fields (
  field VARCHAR PRIMARY KEY, column_name VARCHAR, unit VARCHAR, kind VARCHAR, help VARCHAR);
CREATE TABLE IF NOT EXISTS nodes (
  node_id INTEGER PRIMARY KEY, host VARCHAR UNIQUE, rack VARCHAR, role VARCHAR);
CREATE TABLE IF NOT EXISTS gpus (
  gpu_id INTEGER PRIMARY KEY, node_id INTEGER, host VARCHAR, gpu SMALLINT, uuid VARCHAR,
  model VARCHAR, pci_bus_id VARCHAR, device VARCHAR, driver_version VARCHAR,
  mig_profile VARCHAR, mig_instance VARCHAR,
  namespace VARCHAR, pod VARCHAR, container VARCHAR, hpc_job VARCHAR);
CREATE TABLE IF NOT EXISTS gpu_samples (
  ts TIMESTAMP NOT NULL, gpu_id INTEGER NOT NULL,
  {_SAMPLE_COLS_SQL});
CREATE OR REPLACE VIEW gpu_samples_v AS
  SELECT s.*, g.host, g.gpu, g.uuid, g.model, g.mig_instance, g.namespace, g.pod, g.hpc_job
  FROM gpu_samples s JOIN gpus g USING (gpu_id);
CREATE TABLE IF NOT EXISTS gpu_samples_extra (
  ts TIMESTAMP NOT NULL, gpu_id INTEGER NOT NULL, field VARCHAR NOT NULL, value DOUBLE);
CREATE TABLE IF NOT EXISTS node_tick (
  ts TIMESTAMP, node_id INTEGER, n INTEGER, util_s DOUBLE, util_min FLOAT, temp_s DOUBLE,
  temp_max FLOAT, mem_temp_max FLOAT, power_s DOUBLE, fb_s DOUBLE, clock_s DOUBLE,
  clock_min FLOAT, tensor_s DOUBLE);
CREATE TABLE IF NOT EXISTS node_rollup (
  bucket_s INTEGER, ts TIMESTAMP, node_id INTEGER, samples INTEGER, gpus SMALLINT,
  util_avg FLOAT, util_min FLOAT, temp_avg FLOAT, temp_max FLOAT, mem_temp_max FLOAT,
  power_w FLOAT, fb_used_avg FLOAT, sm_clock_avg FLOAT, sm_clock_min FLOAT,
  tensor_avg FLOAT);
CREATE TABLE IF NOT EXISTS fleet_rollup (
  bucket_s INTEGER, ts TIMESTAMP, nodes INTEGER, gpus INTEGER,
  util_avg FLOAT, util_min FLOAT, temp_avg FLOAT, temp_max FLOAT, power_w DOUBLE,
  fb_used_avg FLOAT, sm_clock_avg FLOAT, tensor_avg FLOAT);
CREATE TABLE IF NOT EXISTS runs (
  run_id VARCHAR PRIMARY KEY, name VARCHAR, model_params DOUBLE, gpu_model VARCHAR,
  gpus INTEGER, nodes INTEGER, start_ts TIMESTAMP, end_ts TIMESTAMP,
  tokens_per_step DOUBLE, peak_flops_per_gpu DOUBLE, ckpt_policy VARCHAR,
  source VARCHAR, scenario VARCHAR, seed BIGINT, simulated BOOLEAN);
CREATE TABLE IF NOT EXISTS train_metrics (
  run_id VARCHAR, ts TIMESTAMP, step BIGINT, tokens DOUBLE, loss FLOAT, lr FLOAT,
  grad_norm FLOAT, tokens_per_s FLOAT, mfu FLOAT, attempt INTEGER);
CREATE TABLE IF NOT EXISTS interruptions (
  run_id VARCHAR, ts TIMESTAMP, host VARCHAR, gpu SMALLINT, component VARCHAR,
  category VARCHAR, xid SMALLINT, planned BOOLEAN, node_lost BOOLEAN,
  detect_s DOUBLE, restart_s DOUBLE, recovery VARCHAR, restored_tier VARCHAR,
  restored_step BIGINT, lost_steps BIGINT, rework_s DOUBLE, lost_gpu_hours DOUBLE,
  description VARCHAR);
CREATE TABLE IF NOT EXISTS checkpoints (
  run_id VARCHAR, step BIGINT, tier VARCHAR, start_ts TIMESTAMP, end_ts TIMESTAMP,
  bytes BIGINT, write_s DOUBLE, blocking_s DOUBLE, status VARCHAR);
CREATE TABLE IF NOT EXISTS targets (
  ts TIMESTAMP, target VARCHAR, up BOOLEAN, duration_s DOUBLE, samples INTEGER,
  rejected_lines INTEGER, error VARCHAR, stale BOOLEAN, digest BIGINT, unchanged INTEGER);
CREATE TABLE IF NOT EXISTS xid_events (
  ts TIMESTAMP, host VARCHAR, gpu SMALLINT, xid SMALLINT, run_id VARCHAR, source VARCHAR);
CREATE TABLE IF NOT EXISTS ingest_batches (
  batch_id VARCHAR PRIMARY KEY, ts TIMESTAMP, kind VARCHAR, rows BIGINT);
"""

# Tables that accept appends through ``append``; anything else is refused (no SQL from names).
APPENDABLE = (
    "gpu_samples",
    "node_tick",
    "gpu_samples_extra",
    "train_metrics",
    "interruptions",
    "checkpoints",
    "xid_events",
    "targets",
    "runs",
    "nodes",
    "gpus",
)

TIERS = ("nvme", "pfs", "object")
TIER_LABELS = {"nvme": "Node-local NVMe", "pfs": "Parallel filesystem", "object": "Object store"}

# Opt-in SQL audit for the security tests (see ``_Audited``): read once per ``Store``.
SQL_AUDIT_ENV = "FACTORYFLOOR_SQL_AUDIT"

_LOCK_RE = re.compile(r'lock on file "(?P<path>[^"]+)".*held in (?P<holder>.+?)(?:\. See|$)', re.S)


_NODE_TICK_SQL = """INSERT INTO node_tick
  SELECT b.ts, g.node_id, count(*), sum(util_pct), min(util_pct), sum(temp_c), max(temp_c),
    max(mem_temp_c), sum(power_w), sum(fb_used_mib), sum(sm_clock_mhz), min(sm_clock_mhz),
    sum(tensor_active)
  FROM _batch b JOIN gpus g USING (gpu_id) GROUP BY b.ts, g.node_id"""


def _io_reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0]
    for marker in ("Could not write", "No space left", "File too large", "Read-only"):
        i = text.find(marker)
        if i >= 0:
            return f"cannot write ({text[i:]}); nothing of this batch was stored"
    return text


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back after a failure; a commit that failed has already ended the transaction."""
    try:
        con.rollback()
    except duckdb.TransactionException:
        pass


def _open(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise StoreError(path, f"directory {parent} does not exist")
        if read_only and not os.path.exists(path):
            raise StoreError(path, "no such store file (run `factoryfloor replay` to create one)")
    try:
        return duckdb.connect(path, read_only=read_only)
    except duckdb.IOException as exc:
        m = _LOCK_RE.search(str(exc))
        if m:
            raise StoreLockedError(path, m.group("holder").strip()) from None
        raise StoreError(path, str(exc).splitlines()[0]) from None
    except duckdb.Error as exc:
        raise StoreError(path, str(exc).splitlines()[0]) from None


class _Audited:
    """A DuckDB connection (or cursor) that appends every SQL text it is given to a file, one
    ``repr`` per line, before running it. The injection tests send a marker string through
    every input and then require that no audited SQL contains it: a value pasted into SQL
    (even a harmless-looking read) shows up here, where a changed row count would not."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str) -> None:
        self._raw, self._path = con, path

    def _log(self, sql: str) -> None:
        # One O_APPEND write per statement: lines from concurrent threads do not interleave.
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (repr(sql) + "\n").encode())
        finally:
            os.close(fd)

    def execute(self, sql: str, *args: Any) -> Any:
        self._log(sql)
        return self._raw.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._log(sql)
        return self._raw.executemany(sql, *args)

    def cursor(self) -> Any:
        return _Audited(self._raw.cursor(), self._path)

    def __getattr__(self, name: str) -> Any:  # begin, commit, register, close, ...
        return getattr(self._raw, name)


def _audited(con: duckdb.DuckDBPyConnection, path: str | None) -> duckdb.DuckDBPyConnection:
    """``con`` itself unless auditing is on: with it off the store pays nothing."""
    return con if not path else _Audited(con, path)  # type: ignore[return-value]


# Columns added to ``targets`` after the first release, in table order (see ``_init_schema``).
_ADDED_TARGET_COLUMNS = {"stale": "BOOLEAN", "digest": "BIGINT", "unchanged": "INTEGER"}
# Of those, the ones the dashboard reads. ``digest``/``unchanged`` are only read back by the
# ingest sink, which opens the store for writing and adds them itself, so a store that lacks
# only them is still served read-only without an upgrade (which would need write access).
_READ_TARGET_COLUMNS = ("stale",)


def _outdated(con: duckdb.DuckDBPyConnection) -> list[str]:
    """What a store written by an older Factory Floor lacks that a read-only open needs:
    tables, and the columns added to ``targets`` that the dashboard reads."""
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    want = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA)
    missing = [t for t in want if t not in have]
    if "targets" in have:
        cols = con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'targets'"
        ).fetchall()
        missing += [f"targets.{c}" for c in _READ_TARGET_COLUMNS if (c,) not in cols]
    return missing


def _foreign(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables of a DuckDB file that is not a Factory Floor store (it has tables, but not
    our ``meta``): empty for a new file or one of ours."""
    have = sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())
    return [] if not have or "meta" in have else have


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
    return _open(path, True)


def _copy_error(exc: BaseException) -> BaseException:
    """A copy of a shared failure, of the same type and text, without its traceback.

    ``copy.copy`` keeps what built-in errors hold outside ``__dict__`` (``OSError.errno`` and
    ``filename``, ``UnicodeDecodeError``'s fields), but it re-runs ``__init__`` with ``args``,
    which fails for errors whose constructor takes other arguments (``StoreError(path,
    reason)``); those are built field by field.
    """
    try:
        dup = copy.copy(exc)
        if type(dup) is not type(exc) or str(dup) != str(exc):
            raise TypeError("not a faithful copy")
    except Exception:
        try:
            dup = type(exc).__new__(type(exc))
            dup.__dict__.update(exc.__dict__)
            dup.args = exc.args
        except Exception:  # an exotic type that cannot be built so: a plain one with its text
            return RuntimeError(f"{type(exc).__name__}: {exc}")
    dup.__cause__, dup.__context__ = exc.__cause__, exc.__context__
    dup.__suppress_context__ = exc.__suppress_context__
    return dup.with_traceback(None)


def _key(params: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(tuple(p) if isinstance(p, list) else p for p in params)


def _size(value: Any) -> int:
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=False).sum()) + 1024
    if isinstance(value, list):
        return 64 * len(value) * (len(value[0]) if value and isinstance(value[0], tuple) else 1)
    return 64


class ResultCache:
    """Query results kept until the store's next write (the version changes), so twenty
    engineers looking at the same view cost one query per data update, not twenty.

    Bounded by bytes (least recently used out first), and results of an older version are
    dropped as soon as one of a newer version is stored (a live store writes every few seconds,
    and a moving time range makes new keys each time); results larger than a tenth of the bound
    are not kept. Concurrent requests for the same uncached result wait for the one
    that computes it ("single flight") instead of all hitting DuckDB.
    """

    def __init__(
        self, max_bytes: int = 128 * 2**20, sizeof: Callable[[Any], int] | None = None
    ) -> None:
        self.max_bytes = max_bytes
        self._sizeof = sizeof or _size
        self._items: OrderedDict[Any, tuple[int, Any, int]] = OrderedDict()
        self._bytes = 0
        self._newest = 0  # the newest store version seen
        self._lock = threading.Lock()
        self._inflight: dict[Any, threading.Event] = {}
        # key -> (version, when, error): a failure is shared with the callers that waited for
        # it, for a few seconds only, so a transient error is retried soon after
        self._failed: dict[Any, tuple[int, float, BaseException]] = {}
        self.hits = self.misses = 0
        self._generation = 0  # bumped by clear(): computations begun before it are not kept

    def get(self, key: Any, version: int, compute: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                item = self._items.get(key)
                if item is not None and item[0] == version:
                    self._items.move_to_end(key)
                    self.hits += 1
                    return item[1]
                failed = self._failed.get(key)
                if failed and failed[0] == version and time.monotonic() - failed[1] < 5:
                    # It just failed for the caller we waited on: no rerun. Each caller gets
                    # a copy; re-raising the one object would grow its traceback per caller.
                    raise _copy_error(failed[2]) from None
                waiting = self._inflight.get(key)
                if waiting is None:
                    done = self._inflight[key] = threading.Event()
                    generation = self._generation
                    self.misses += 1
                    break
            waiting.wait(60)
        try:
            value = compute()
            self._put(key, version, value, generation)
            return value
        except Exception as exc:
            with self._lock:
                if generation != self._generation:
                    raise
                self._failed[key] = (version, time.monotonic(), exc)
                if len(self._failed) > 64:
                    self._failed.pop(next(iter(self._failed)))
            raise
        finally:
            with self._lock:
                if self._inflight.get(key) is done:
                    del self._inflight[key]
            done.set()

    def clear(self) -> None:
        """Forget everything (another store was bound: its versions mean nothing here)."""
        with self._lock:
            self._items.clear()
            self._failed.clear()
            self._bytes = 0
            self._newest = 0
            self._generation += 1
            # A computation under way is of the old store: its result is not stored, and new
            # callers do not wait for it (the key is theirs to compute again).
            self._inflight.clear()

    def _put(self, key: Any, version: int, value: Any, generation: int | None = None) -> None:
        size = self._sizeof(value)
        if size > self.max_bytes // 10:
            return
        with self._lock:
            if generation is not None and generation != self._generation:
                return  # computed before clear(), from what was then bound
            if version > self._newest:  # a write happened: older results are of no use now
                self._newest = version
                for k in [k for k, item in self._items.items() if item[0] < version]:
                    self._bytes -= self._items.pop(k)[2]
            # A result of an older version is still stored: callers that asked at that version
            # are waiting on this computation and must find it, not recompute one by one.
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            self._items[key] = (version, value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                _, (_, _, s) = self._items.popitem(last=False)
                self._bytes -= s


class Store:
    """One DuckDB telemetry store. Thread-safe: writes serialise on a lock, reads use cursors."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._audit = os.environ.get(SQL_AUDIT_ENV)
        self._con = _audited(_open(path, read_only), self._audit)
        self._write_lock = threading.Lock()
        self._version = 0
        self._cache = ResultCache()
        if path != ":memory:" and (foreign := _foreign(self._con)):
            self._con.close()
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise StoreError(
                path,
                f"not a Factory Floor store (it holds other tables: {shown}); "
                "it is left untouched. Give a new path or a store made by `factoryfloor`.",
            )
        if not read_only:
            self._init_schema()
        elif path != ":memory:" and _outdated(self._con):
            self._con.close()
            self._con = _audited(_upgrade(path), self._audit)

    # -- lifecycle -------------------------------------------------------------------------
    def _init_schema(self) -> None:
        with self._write_lock:
            self._con.execute(SCHEMA)
            # Stores created before target staleness was recorded get its columns (appends are
            # positional, so they must exist, in this order, before the first round).
            for column, kind in _ADDED_TARGET_COLUMNS.items():
                self._con.execute(f"ALTER TABLE targets ADD COLUMN IF NOT EXISTS {column} {kind}")
            if self._con.execute("SELECT count(*) FROM fields").fetchone()[0] == 0:
                self._con.executemany("INSERT INTO fields VALUES (?, ?, ?, ?, ?)", field_rows())
            self._con.execute(
                "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION]
            )

    def close(self) -> None:
        self._con.close()

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

        out = self._cache.get(("df", sql, _key(params)), self._version, run)
        return out.copy(deep=True)

    def rows(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a parameterised read-only query on a fresh cursor and return all rows."""

        def run() -> list[tuple[Any, ...]]:
            cur = self._con.cursor()
            try:
                return cur.execute(sql, list(params)).fetchall()
            finally:
                cur.close()

        return list(self._cache.get(("rows", sql, _key(params)), self._version, run))

    def scalar(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> Any:
        def run() -> Any:
            cur = self._con.cursor()
            try:
                row = cur.execute(sql, list(params)).fetchone()
                return None if row is None else row[0]
            finally:
                cur.close()

        return self._cache.get(("scalar", sql, _key(params)), self._version, run)

    def cache_stats(self) -> dict[str, int]:
        c = self._cache
        return {"cache_hits": c.hits, "cache_misses": c.misses, "cache_bytes": c._bytes}

    @property
    def version(self) -> int:
        """Bumped by every write in this process; cached query results are valid within one."""
        return self._version

    def meta(self) -> dict[str, str]:
        return dict(self.rows("SELECT key, value FROM meta"))

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self.read_only:
            raise StoreError(self.path, "opened read-only; writes go through the owning process")
        with self._write_lock:
            try:
                yield self._con
            except (duckdb.IOException, duckdb.TransactionException) as exc:
                # A full disk or a file-size limit surfaces as a failed write or commit; the
                # transaction is rolled back and DuckDB takes writes again once space returns.
                raise StoreError(self.path, _io_reason(exc)) from None
            finally:
                self._version += 1  # after the commit: readers from now on see the new data

    def set_meta(self, values: dict[str, str]) -> None:
        with self._writing() as con:
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
    ) -> int:
        """Append several tables' batches in one transaction (a replay tick, a scrape round).

        With ``batch_id`` the batch is stored at most once: the id is recorded in
        ``ingest_batches`` in the same transaction, and a batch whose id is already there raises
        ``DuplicateBatchError`` and writes nothing (a sender retrying after a lost reply).
        Rows for ``runs`` replace the stored row with the same ``run_id`` (a run's metadata and
        end time change while it runs); every other table is append-only.

        GPU samples also get their per-(tick, node) partial sums computed from the batch while
        it is in memory (``node_tick``), which every rollup level is built from. A producer
        that already holds per-node arrays (the replay engine) may pass ``node_tick`` itself;
        tests check that it equals what this SQL computes."""
        for table in batches:
            if table not in APPENDABLE:
                raise ValueError(f"table {table!r} is not appendable")
        total = 0
        with self._writing() as con:
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
                        verb = "INSERT OR REPLACE" if table == "runs" else "INSERT"
                        con.execute(f"{verb} INTO {table} SELECT * FROM _batch")
                        if table == "gpu_samples" and "node_tick" not in batches:
                            con.execute(_NODE_TICK_SQL)
                        con.unregister("_batch")
                        total += n
                if batch_id is not None:
                    con.execute(
                        "INSERT INTO ingest_batches VALUES (?, current_timestamp::TIMESTAMP, ?, ?)",
                        [batch_id, kind, total],
                    )
                con.commit()
            except BaseException:
                _rollback(con)
                raise
        return total

    # -- rollups ---------------------------------------------------------------------------
    def sample_interval_s(self) -> float:
        return float(self.meta().get("sample_interval_s", "15"))

    def rollup_levels(self) -> list[int]:
        """Bucket sizes kept in the rollup tables: those coarser than the sample interval (at
        the sample interval itself, ``node_tick`` already is the per-node series)."""
        interval = self.sample_interval_s()
        return [lv for lv in ROLLUP_LEVELS_S if lv > interval] or [ROLLUP_LEVELS_S[-1]]

    def refresh_rollups(self, until: datetime | None = None, since: datetime | None = None) -> None:
        """Recompute node and fleet rollups from the last complete bucket of each level on.

        Buckets from each level's watermark up to ``until`` (default: the newest sample) are
        deleted and recomputed, so a partly filled bucket is corrected on the next refresh.
        Each level is built from the level below it (or raw samples), keeping the cost
        proportional to the new data, not to the store. ``since`` is the oldest time of the
        data just written: data older than a watermark (a spool delivered late, a second
        daemon's backlog) has its own bucket rebuilt too, and only that one, so a backlog of
        many late rounds costs one bucket each, not a rebuild up to now each. ``until`` never
        goes below the newest stored tick, so newer buckets are never left deleted.
        """
        with self._writing() as con:
            newest = con.execute("SELECT max(ts) FROM node_tick").fetchone()[0]
            if newest is None:
                return
            until = newest if until is None else max(until, newest)
            marks = dict(con.execute("SELECT key, value FROM meta").fetchall())
            prev: int | None = None
            for level in self.rollup_levels():
                key = f"rollup_watermark_{level}"
                mark = marks.get(key, "1970-01-01 00:00:00")
                ranges: list[tuple[str, datetime]] = [(mark, until)]
                if since is not None:
                    floor = con.execute(
                        "SELECT time_bucket(to_seconds(?), ?::TIMESTAMP)", [level, since]
                    ).fetchone()[0]
                    if str(floor) < mark:  # late data: only its own bucket is rebuilt
                        end = floor + timedelta(seconds=level) - timedelta(microseconds=1)
                        ranges.insert(0, (str(floor), end))
                con.begin()
                try:
                    for lo, hi in ranges:
                        self._rollup_level(con, level, prev, lo, hi)
                    new_mark = con.execute(
                        "SELECT time_bucket(to_seconds(?), ?::TIMESTAMP)", [level, until]
                    ).fetchone()[0]
                    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, str(new_mark)])
                    con.commit()
                except BaseException:
                    _rollback(con)
                    raise
                prev = level

    @staticmethod
    def _rollup_level(
        con: duckdb.DuckDBPyConnection, level: int, prev: int | None, since: str, until: datetime
    ) -> None:
        bucket = "time_bucket(to_seconds(?), ts)"
        for table in ("node_rollup", "fleet_rollup"):
            con.execute(
                f"DELETE FROM {table} WHERE bucket_s = ? AND ts >= ? AND ts <= ?",
                [level, since, until],
            )
        if prev is None:
            # One node_tick row per (tick, node): a node's GPUs at one tick arrive in one batch
            # (one replay window, one scrape of that node's exporter).
            con.execute(
                f"""INSERT INTO node_rollup
                SELECT ?, {bucket} AS b, node_id, sum(n), max(n),
                  sum(util_s) / sum(n), min(util_min), sum(temp_s) / sum(n), max(temp_max),
                  max(mem_temp_max), sum(power_s) / count(*), sum(fb_s) / sum(n),
                  sum(clock_s) / sum(n), min(clock_min), sum(tensor_s) / sum(n)
                FROM node_tick WHERE ts >= ? AND ts <= ? GROUP BY b, node_id""",
                [level, level, since, until],
            )
        else:
            con.execute(
                f"""INSERT INTO node_rollup
                SELECT ?, {bucket} AS b, node_id, sum(samples), max(gpus),
                  sum(util_avg * samples) / sum(samples), min(util_min),
                  sum(temp_avg * samples) / sum(samples), max(temp_max), max(mem_temp_max),
                  avg(power_w), sum(fb_used_avg * samples) / sum(samples),
                  sum(sm_clock_avg * samples) / sum(samples), min(sm_clock_min),
                  sum(tensor_avg * samples) / sum(samples)
                FROM node_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?
                GROUP BY b, node_id""",
                [level, level, prev, since, until],
            )
        con.execute(
            """INSERT INTO fleet_rollup
            SELECT ?, ts, count(*), sum(gpus), sum(util_avg * samples) / sum(samples),
              min(util_min), sum(temp_avg * samples) / sum(samples), max(temp_max), sum(power_w),
              sum(fb_used_avg * samples) / sum(samples), sum(sm_clock_avg * samples) / sum(samples),
              sum(tensor_avg * samples) / sum(samples)
            FROM node_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?
            GROUP BY ts""",
            [level, level, since, until],
        )


def open_store(path: str, read_only: bool = False) -> Store:
    """Open (creating if needed) the store at ``path``; see ``Store`` for the errors raised."""
    return Store(path, read_only=read_only)
