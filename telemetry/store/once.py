"""Scrape rounds stored exactly once by (series, timestamp), not by request bytes.

A remote_write sender resends acknowledged samples in differently batched requests (a WAL
replay after its restart, a shard retrying): each request has its own batch id, so only the
sample's own key can tell a resend. Inside ``Store.append_many``'s transaction, with the batch
registered as ``_batch``, a round's rows whose key is already stored are left out:

- ``gpu_samples`` by (ts, gpu_id): a stored row keeps every value it holds; a blank cell of it
  that the batch has (another shard's series of the same GPU and scrape) is filled, and the
  (tick, node) sums those rows feed are computed again from the stored samples;
- ``gpu_samples_extra`` by (ts, gpu_id, field), ``targets`` by (ts, target), ``xid_events`` by
  (ts, host, gpu, xid).

Cost: one lookup of the batch's keys among the stored rows of its own time range (DuckDB's
zone maps skip every row group outside it), so a live round, newer than everything stored,
reads next to nothing; only a batch that overlaps pays for the anti-join.
"""

from __future__ import annotations

import duckdb

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.store import batch_sql

KEYS = {
    "gpu_samples": ("ts", "gpu_id"),
    "gpu_samples_extra": ("ts", "gpu_id", "field"),
    "targets": ("ts", "target"),
    "xid_events": ("ts", "host", "gpu", "xid"),
}


def insert(con: duckdb.DuckDBPyConnection, table: str, by_name: bool) -> tuple[int, bool]:
    """Insert the ``_batch`` rows of ``table`` whose key is not stored yet. (rows inserted,
    whether the batch overlapped stored rows: then ``gpu_samples``' node sums are done here)."""
    keys = ", ".join(KEYS[table])
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM _batch").fetchone()
    stored = f"(SELECT {keys} FROM {table} WHERE ts BETWEEN $lo AND $hi)"
    params = {"lo": lo, "hi": hi}
    overlap = con.execute(
        f"SELECT count(*) FROM _batch SEMI JOIN {stored} s USING ({keys})", params
    ).fetchone()[0]
    by = " BY NAME" if by_name else ""
    if not overlap:
        con.execute(f"INSERT INTO {table}{by} SELECT * FROM _batch")
        return _count(con), False
    if table == "gpu_samples":
        _fill(con, lo, hi)
    con.execute(f"INSERT INTO {table}{by} SELECT * FROM _batch ANTI JOIN {stored} s USING ({keys})",
                params)  # fmt: skip
    inserted = _count(con)
    if table == "gpu_samples":
        _retick(con, lo, hi)
    return inserted, True


def _count(con: duckdb.DuckDBPyConnection) -> int:
    row = con.fetchone()
    return int(row[0]) if row else 0


def _fill(con: duckdb.DuckDBPyConnection, lo: object, hi: object) -> None:
    """The stored rows' blank cells that the batch has, filled (values stored stay)."""
    cols = [c.name for c in SAMPLE_COLUMNS]
    sets = ", ".join(f"{c} = coalesce(s.{c}, b.{c})" for c in cols)
    blank = " OR ".join(f"(s.{c} IS NULL AND b.{c} IS NOT NULL)" for c in cols)
    con.execute(
        f"""UPDATE gpu_samples s SET {sets} FROM _batch b
            WHERE s.ts BETWEEN ? AND ? AND s.ts = b.ts AND s.gpu_id = b.gpu_id AND ({blank})""",
        [lo, hi],
    )


def _retick(con: duckdb.DuckDBPyConnection, lo: object, hi: object) -> None:
    """The node sums of every (tick, node) the batch touches, again from the stored rows."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _ticks AS SELECT DISTINCT b.ts, g.node_id "
        "FROM _batch b JOIN gpus g USING (gpu_id)"
    )
    con.execute(
        "DELETE FROM node_tick WHERE ts BETWEEN ? AND ? "
        "AND (ts, node_id) IN (SELECT ts, node_id FROM _ticks)",
        [lo, hi],
    )
    con.execute(batch_sql.RETICK_SQL, [lo, hi])
    con.execute("DROP TABLE _ticks")
