"""Per-node cell flags, kept with the node rollups: whether each (bucket, node) cell is idle,
slow or hot against the fleet in the same bucket.

The outlier table and the GPU drill-down start from the nodes likely to hold an outlier GPU
(``telemetry.queries.outliers``): a node with a hot cell, one as busy as the fleet but slower,
or a job node well below the fleet's utilization. Judged at query time that is three passes
with joins over every node cell of the range (447 K six-hour cells for 54 days of 2,064
nodes, ~25 ms cold); kept here, it is one scan that counts flags per node. A cell's flags
depend only on its own bucket (the fleet's mean and busy clock in it), so they are set
whenever a refresh writes the bucket's node rows, for every node of the bucket at once: a late
round that rebuilds a bucket sets them again.

Apart from ``telemetry.store.rollups`` because what counts as a candidate is the outlier table's
definition; the refresh only calls ``set_flags`` after it writes node rows.
"""

from __future__ import annotations

import duckdb

from telemetry.vocabulary import BUSY_PCT, HOT_C

SLOW_NODE_RATIO = 0.985  # a busy node's SM clock below this share of the fleet's busy nodes'
IDLE_GAP_PCT = 10.0  # a job node this far below the fleet's mean utilization is idle
BUSY_GAP_PCT = 5.0  # within this of the fleet's mean a node counts as busy as the fleet
# The columns kept (``schema.ADDED_COLUMNS``) and the counts the candidate search sums.
FLAG_COLUMNS = ("idle_cell", "slow_cell", "hot_cell")

# Each cell of ``cells`` (ts, node_id, eff_avg: real utilization where reported, else
# GPU_UTIL, temp_max, sm_clock_avg) with its flags against the fleet in the same bucket (mu:
# the nodes' mean utilization; mc: the SM clock of the nodes as busy as the fleet).
JUDGED_SQL = f"""WITH c AS MATERIALIZED ({{cells}}),
f AS (SELECT ts, avg(eff_avg) AS mu FROM c GROUP BY ts),
g AS (SELECT c.ts, avg(c.sm_clock_avg) AS mc FROM c JOIN f USING (ts)
      WHERE c.eff_avg >= f.mu - {BUSY_GAP_PCT} GROUP BY c.ts)
SELECT c.ts, c.node_id,
  coalesce(f.mu >= {BUSY_PCT} AND c.eff_avg < f.mu - {IDLE_GAP_PCT}, false) AS idle_cell,
  coalesce(f.mu >= {BUSY_PCT} AND c.eff_avg >= f.mu - {BUSY_GAP_PCT}
           AND c.sm_clock_avg < {SLOW_NODE_RATIO} * g.mc, false) AS slow_cell,
  coalesce(c.temp_max >= {HOT_C}, false) AS hot_cell
FROM c JOIN f USING (ts) LEFT JOIN g USING (ts)"""

# The node rollup's cells of one level in a range, as ``JUDGED_SQL`` reads them.
_ROLLED_CELLS = """SELECT ts, node_id, coalesce(real_avg, util_avg) AS eff_avg, temp_max,
  sm_clock_avg FROM node_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ?"""

_SET_SQL = f"""UPDATE node_rollup AS n
SET idle_cell = x.idle_cell, slow_cell = x.slow_cell, hot_cell = x.hot_cell
FROM ({JUDGED_SQL.format(cells=_ROLLED_CELLS)}) x
WHERE n.bucket_s = ? AND n.ts = x.ts AND n.node_id = x.node_id"""


def set_flags(con: duckdb.DuckDBPyConnection, level: int, since: object, until: object) -> None:
    """Flag every node cell of ``level`` in [since, until] (whole buckets, every node of each:
    the fleet's figures are per bucket). The caller holds the write lock."""
    con.execute(_SET_SQL, [level, since, until, level])
