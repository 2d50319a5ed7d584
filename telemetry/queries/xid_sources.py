"""Which stored sources could have reported an XID for a run and range: what makes a count of
XIDs a count ("0 XIDs") rather than no figure at all ("–": nothing that reports XIDs stored).

- ``dcgm``: GPU samples in the range carrying DCGM's XID field (``xid_last``: dcgm-exporter's
  or Prometheus' ``DCGM_FI_DEV_XID_ERRORS``, the replay's), in the raw samples or, once those
  are let go (``--raw-retention``), in the per-GPU rollups. Samples name no run: they cover the
  range, whichever run is viewed.
- ``kernel``: a kernel log read for the run (signals the log source stored with source
  ``kernel``, timed or not: the log covers the run it was imported for; a run not named, every
  run's). A kernel log with no line of note stores nothing, so it cannot be told from none.
- ``events``: an XID event stored in the range (any source, the ingest API's too), which
  reports itself.

Apart from ``telemetry.queries.failures`` to keep that module within its size; the SQL is fixed
and parameterised.
"""

from __future__ import annotations

from telemetry.queries import TimeRange
from telemetry.store import Store

# What the pages say where no source covers a range (a card's subtitle, a table's note)
NO_XID_SOURCE = "no kernel log or DCGM XID data stored for this range"


def xid_sources(store: Store, run_id: str | None, tr: TimeRange) -> list[str]:
    """The sources that cover ``run_id`` (None: every run) in ``tr`` and would have reported
    an XID: some of ``dcgm``, ``kernel``, ``events``, in that order; empty when none does (a
    count of XIDs is then unknown, not 0)."""
    row = store.rows(
        """SELECT
             (SELECT 1 FROM gpu_samples WHERE ts BETWEEN ? AND ? AND xid_last IS NOT NULL
              LIMIT 1) IS NOT NULL
             OR (SELECT 1 FROM gpu_rollup WHERE ts <= ? AND ts + to_seconds(bucket_s) > ?
                 AND xid_last IS NOT NULL LIMIT 1) IS NOT NULL,
             (SELECT 1 FROM signals WHERE source = 'kernel'
              AND (? IS NULL OR run_id = ? OR run_id IS NULL) LIMIT 1) IS NOT NULL,
             (SELECT 1 FROM xid_events WHERE (? IS NULL OR run_id = ? OR run_id IS NULL)
              AND ts BETWEEN ? AND ? LIMIT 1) IS NOT NULL""",
        [tr.start, tr.end, tr.end, tr.start, run_id, run_id, run_id, run_id, tr.start, tr.end],
    )
    flags = row[0] if row else (False, False, False)
    return [name for name, on in zip(("dcgm", "kernel", "events"), flags, strict=True) if on]
