"""GPUs with an XID in a range, from the event log and from the exporter's last-XID gauge.

Apart from ``telemetry.queries.gpus`` (whose outlier table lists them) to keep that module
within its size; the SQL is fixed and parameterised.
"""

from __future__ import annotations

import pandas as pd

from telemetry.queries import TimeRange
from telemetry.store import Store


def xid_gpus(store: Store, tr: TimeRange, limit: int = 200) -> pd.DataFrame:
    """GPUs with an XID in the range: from ``xid_events`` (count, last time) and from the
    exporter's sticky last-XID gauge where it changed between the range's first and last
    sample. Columns host, gpu, xid, count, last_ts, source."""
    return store.df(
        """WITH ev AS (
             SELECT host, gpu, xid, count(*) AS count, max(ts) AS last_ts, 'event' AS source
             FROM xid_events WHERE ts >= ? AND ts <= ? GROUP BY ALL),
           ends AS (SELECT min(ts) AS t0, max(ts) AS t1 FROM node_tick WHERE ts >= ? AND ts <= ?),
           first AS (SELECT gpu_id, xid_last FROM gpu_samples, ends WHERE ts = ends.t0),
           last AS (SELECT gpu_id, xid_last, ts FROM gpu_samples, ends WHERE ts = ends.t1),
           gauge AS (
             SELECT g.host, g.gpu, l.xid_last::SMALLINT AS xid, 1 AS count, l.ts AS last_ts,
                    'exporter' AS source
             FROM last l LEFT JOIN first f USING (gpu_id) JOIN gpus g USING (gpu_id)
             WHERE l.xid_last > 0 AND l.xid_last IS DISTINCT FROM f.xid_last)
           SELECT * FROM ev
           UNION ALL
           SELECT * FROM gauge
           WHERE NOT EXISTS (SELECT 1 FROM ev WHERE ev.host = gauge.host
                             AND ev.gpu = gauge.gpu AND ev.xid = gauge.xid)
           ORDER BY last_ts DESC LIMIT ?""",
        [tr.start, tr.end, tr.start, tr.end, int(limit)],
    )
