"""The store: one DuckDB file, one owning process, batched appends (``store``), and what it is
made of: the tables and their upgrades (``schema``), opening the file and the SQL audit
(``connection``), the batch SQL and the rollups kept beside the raw rows (``batch_sql``,
``rollups``, ``cellflags``), what each cached result was read from (``versions``, ``cache``),
raw retention (``retention``) and the Slurm tables' SQL (``slurm_store``).

Its public face is ``Store`` and ``open_store``; everything else imports those from here.
"""

from telemetry.store.store import Store, open_store

__all__ = ["Store", "open_store"]
