"""SQL an append runs inside its transaction, with the batch registered as ``_batch``
(``Store.append_many``): each GPU's newest sample into ``gpu_now``, the batch's per-(tick,
node) sums into ``node_tick``, and a producer's whole per-GPU buckets into their levels'
tables. What a refresh builds later from these is ``telemetry.store.rollups``."""

from __future__ import annotations

import duckdb

from telemetry.store.rollups import GPU_LEVELS_S, gpu_table
from telemetry.utilization import REAL_SQL

# The fleet "now" (``gpu_now``): each GPU's newest sample, for every GPU that sent one in the
# last two sample intervals before the newest sample stored, with the columns the Overview's
# "now" cards, hottest GPUs and alerts read; kept as batches arrive, so those read 16 K rows
# instead of planning a scan of 256 M (~10 ms a statement at 54 days of 16,384 GPUs). Each
# batch offers its own last two intervals (a GPU with a newer sample there replaces its row):
# a sample within two intervals of the newest stored is within two of its own batch's newest.
# Older rows (a GPU silent since) are left as they were; nothing reads them.
NOW_COLUMNS = (
    "util_pct", "temp_c", "power_w", "sm_clock_mhz", "sm_active", "sm_occupancy", "gr_active"
)  # fmt: skip
NOW_SQL = f"""INSERT INTO gpu_now
  SELECT gpu_id, ts, {", ".join(NOW_COLUMNS)}
  FROM ((SELECT * FROM gpu_samples LIMIT 0) UNION ALL BY NAME (SELECT * FROM _batch))
  WHERE ts >= (SELECT max(ts) FROM _batch) - to_microseconds(?)
  QUALIFY row_number() OVER (PARTITION BY gpu_id ORDER BY ts DESC) = 1
ON CONFLICT (gpu_id) DO UPDATE SET ts = excluded.ts,
  {", ".join(f"{c} = excluded.{c}" for c in NOW_COLUMNS)}
  WHERE excluded.ts > gpu_now.ts"""
# The same from the stored samples (a store from before ``gpu_now``).
FILL_NOW_SQL = f"""INSERT OR REPLACE INTO gpu_now
  SELECT gpu_id, ts, {", ".join(NOW_COLUMNS)} FROM gpu_samples
  WHERE ts >= (SELECT max(ts) FROM gpu_samples) - to_microseconds(?)
  QUALIFY row_number() OVER (PARTITION BY gpu_id ORDER BY ts DESC) = 1"""


def now_window_us(con: duckdb.DuckDBPyConnection) -> int:
    """Two sample intervals (microseconds): how far before its newest sample a batch offers
    samples to ``gpu_now``."""
    row = con.execute("SELECT value FROM meta WHERE key = 'sample_interval_s'").fetchone()
    return int(2 * float(row[0] if row else 15) * 1e6)


# A batch's per-(tick, node) partial sums, run by ``Store.append_many`` with the batch
# registered as ``_batch``.
_TICK_SUMS = f"""SELECT b.ts, g.node_id, count(*), sum(util_pct), min(util_pct), sum(temp_c),
    max(temp_c), max(mem_temp_c), sum(power_w), sum(fb_used_mib), sum(sm_clock_mhz),
    min(sm_clock_mhz), sum(tensor_active), sum({REAL_SQL})"""
NODE_TICK_SQL = f"""INSERT INTO node_tick {_TICK_SUMS}
  FROM ((SELECT * FROM gpu_samples LIMIT 0) UNION ALL BY NAME (SELECT * FROM _batch)) b
  JOIN gpus g USING (gpu_id) GROUP BY b.ts, g.node_id"""
# The sums of the (tick, node) pairs a batch touches, again from the stored samples (after an
# append that filled blank cells of stored rows: ``telemetry.store.once``); ? ?: its ts range.
RETICK_SQL = f"""INSERT INTO node_tick {_TICK_SUMS}
  FROM gpu_samples b JOIN gpus g USING (gpu_id)
  WHERE b.ts BETWEEN ? AND ? AND (b.ts, g.node_id) IN (SELECT DISTINCT ts, node_id FROM _ticks)
  GROUP BY b.ts, g.node_id"""


def insert_gpu_buckets(con: duckdb.DuckDBPyConnection, rows: int) -> None:
    """A producer's whole per-GPU buckets (``rows`` of them, registered as ``_batch``, see
    ``Store.append_many``), each into its level's table. A row of no kept level is refused
    (``ValueError``; the caller rolls the batch back). The caller holds the write lock."""
    stored = 0
    for level in GPU_LEVELS_S:
        sql = f"INSERT INTO {gpu_table(level)} BY NAME SELECT * FROM _batch WHERE bucket_s = ?"
        stored += int(con.execute(sql, [level]).fetchone()[0])
    if stored != rows:
        raise ValueError(f"gpu_buckets: {rows - stored} rows of no per-GPU level {GPU_LEVELS_S}")
