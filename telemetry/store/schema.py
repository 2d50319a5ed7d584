"""The store's schema: table definitions, the in-place upgrade of older stores, and the check
that a DuckDB file is a Factory Floor store at all.

Kept apart from ``telemetry.store`` (which opens and writes) because the schema changes for
its own reasons: a new table or column is added here, with the upgrade that brings older
stores up to it, without touching how batches are written. Tables are only ever added, never
changed, so an upgrade touches no data; once, the per-GPU rollup's rows were moved from one
table into one per level (``_gpu_level_tables``), in one transaction.
"""

from __future__ import annotations

import re

import duckdb

from telemetry.catalog import OPTIONAL_COLUMNS, SAMPLE_COLUMNS, field_rows
from telemetry.store.batch_sql import FILL_NOW_SQL, NOW_COLUMNS, now_window_us
from telemetry.store.cellflags import FLAG_COLUMNS, set_flags
from telemetry.store.connection import rollback
from telemetry.store.rollups import (
    DAY_MARK,
    DAY_S,
    ENERGY_LEVEL_S,
    GPU_TABLE_LEVELS,
    GPU_VIEW,
    add_gpu_level,
    fill_energy_used,
    fill_fleet_energy,
    gpu_table,
    keep_days,
)
from telemetry.utilization import CLASS_SQL

SCHEMA_VERSION = "1"

_SAMPLE_COLS_SQL = ",\n  ".join(
    f"{c.name} {'DOUBLE' if c.kind == 'counter' else 'FLOAT'}"
    for c in SAMPLE_COLUMNS
    if c.name not in OPTIONAL_COLUMNS  # added by ADDED_COLUMNS, so every store has one order
)

_NOW_COLS_SQL = ", ".join(f"{c} FLOAT" for c in NOW_COLUMNS)

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
CREATE TABLE IF NOT EXISTS gpu_now (
  gpu_id INTEGER PRIMARY KEY, ts TIMESTAMP NOT NULL, {_NOW_COLS_SQL});
CREATE TABLE IF NOT EXISTS gpu_samples_extra (
  ts TIMESTAMP NOT NULL, gpu_id INTEGER NOT NULL, field VARCHAR NOT NULL, value DOUBLE);
CREATE TABLE IF NOT EXISTS node_tick (
  ts TIMESTAMP, node_id INTEGER, n INTEGER, util_s DOUBLE, util_min FLOAT, temp_s DOUBLE,
  temp_max FLOAT, mem_temp_max FLOAT, power_s DOUBLE, fb_s DOUBLE, clock_s DOUBLE,
  clock_min FLOAT, tensor_s DOUBLE);
CREATE TABLE IF NOT EXISTS node_rollup (
  bucket_s INTEGER, ts TIMESTAMP, node_id INTEGER, samples INTEGER, gpus INTEGER,
  util_avg FLOAT, util_min FLOAT, temp_avg FLOAT, temp_max FLOAT, mem_temp_max FLOAT,
  power_w FLOAT, fb_used_avg FLOAT, sm_clock_avg FLOAT, sm_clock_min FLOAT,
  tensor_avg FLOAT);
CREATE TABLE IF NOT EXISTS class_rollup (
  bucket_s INTEGER, ts TIMESTAMP, class VARCHAR, intervals INTEGER, sm INTEGER, occ INTEGER,
  real INTEGER);
CREATE TABLE IF NOT EXISTS goodput_exclusions (
  run_id VARCHAR, start_ts TIMESTAMP, end_ts TIMESTAMP, reason VARCHAR, created_by VARCHAR,
  created_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS alert_silences (
  id VARCHAR, matchers VARCHAR, starts_at TIMESTAMP, ends_at TIMESTAMP, created_by VARCHAR,
  comment VARCHAR);
CREATE TABLE IF NOT EXISTS alert_history (
  fingerprint VARCHAR, labels VARCHAR, summary VARCHAR, description VARCHAR,
  first_seen TIMESTAMP, resolved_at TIMESTAMP, acked_by VARCHAR, acked_at TIMESTAMP);
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
CREATE TABLE IF NOT EXISTS signals (
  ts TIMESTAMP, run_id VARCHAR, host VARCHAR, gpu SMALLINT, kind VARCHAR, xid SMALLINT,
  detail VARCHAR, origin VARCHAR, line VARCHAR, source VARCHAR);
CREATE TABLE IF NOT EXISTS checkpoint_events (
  ts TIMESTAMP, run_id VARCHAR, kind VARCHAR, step BIGINT, path VARCHAR, origin VARCHAR,
  line VARCHAR);
CREATE TABLE IF NOT EXISTS slurm_jobs (
  cluster VARCHAR NOT NULL, job_id_raw BIGINT NOT NULL, requeue INTEGER NOT NULL,
  job_id VARCHAR, array_job_id BIGINT, array_task_id INTEGER, name VARCHAR, user_name VARCHAR,
  partition VARCHAR, nodelist VARCHAR, hosts VARCHAR[], state VARCHAR, reason VARCHAR,
  exit_code INTEGER, exit_signal INTEGER, submit_ts TIMESTAMP, start_ts TIMESTAMP,
  end_ts TIMESTAMP, run_id VARCHAR, run_source VARCHAR, polled_ts TIMESTAMP,
  PRIMARY KEY (cluster, job_id_raw, requeue));
CREATE TABLE IF NOT EXISTS slurm_nodes (
  host VARCHAR PRIMARY KEY, state VARCHAR, reason VARCHAR, reason_user VARCHAR,
  reason_ts TIMESTAMP, polled_ts TIMESTAMP);
CREATE TABLE IF NOT EXISTS slurm_node_events (
  ts TIMESTAMP, host VARCHAR, state VARCHAR, reason VARCHAR, reason_user VARCHAR,
  reason_ts TIMESTAMP, polled_ts TIMESTAMP);
CREATE TABLE IF NOT EXISTS slurm_reservations (
  name VARCHAR NOT NULL, nodes VARCHAR[], start_ts TIMESTAMP NOT NULL, end_ts TIMESTAMP,
  flags VARCHAR, users VARCHAR, accounts VARCHAR, polled_ts TIMESTAMP,
  PRIMARY KEY (name, start_ts));
CREATE TABLE IF NOT EXISTS job_figures (
  key VARCHAR PRIMARY KEY, "start" TIMESTAMP, "end" TIMESTAMP, hosts VARCHAR[],
  label VARCHAR, finished BOOLEAN, settled_ts TIMESTAMP, level_s INTEGER, gpus_seen INTEGER,
  by_label BOOLEAN,
  sampled_gpu_hours DOUBLE, used_gpu_hours DOUBLE, used_dcp_gpu_hours DOUBLE,
  idle_gpu_hours DOUBLE, idle_max_min DOUBLE, util_pct DOUBLE, mem_peak_mib DOUBLE,
  power_w DOUBLE, energy_kwh DOUBLE, energy_basis VARCHAR, kept_ts TIMESTAMP);
CREATE TABLE IF NOT EXISTS remote_write_staging (
  request VARCHAR, ts_ms BIGINT, instance VARCHAR, name VARCHAR, labels VARCHAR, value DOUBLE,
  claim VARCHAR);
CREATE TABLE IF NOT EXISTS hangs (
  run_id VARCHAR, ts TIMESTAMP, process_group VARCHAR, pg_desc VARCHAR, seq_id BIGINT,
  op VARCHAR, input_sizes VARCHAR, dtypes VARCHAR, ranks INTEGER, missing_ranks INTEGER[],
  stuck_ranks INTEGER, culprit_rank INTEGER, culprit_host VARCHAR, hosts VARCHAR[],
  culprit_frames VARCHAR[], waiting_frames VARCHAR[], mismatched VARCHAR[], story VARCHAR,
  source VARCHAR);
CREATE TABLE IF NOT EXISTS rank_hosts (
  run_id VARCHAR, rank INTEGER, host VARCHAR, how VARCHAR, origin VARCHAR);
CREATE TABLE IF NOT EXISTS rank_perf (
  run_id VARCHAR, ts TIMESTAMP, rank INTEGER, host VARCHAR, source VARCHAR, metric VARCHAR,
  score DOUBLE, value_ms DOUBLE, origin VARCHAR);
CREATE TABLE IF NOT EXISTS run_settings (
  run_id VARCHAR, name VARCHAR, value VARCHAR, origin VARCHAR, line_no BIGINT);
CREATE TABLE IF NOT EXISTS log_files (
  label VARCHAR, path VARCHAR, run_id VARCHAR, bytes BIGINT, seen_ts TIMESTAMP);
CREATE TABLE IF NOT EXISTS gpu_job_spans (
  gpu_id INTEGER, label VARCHAR, start_ts TIMESTAMP, end_ts TIMESTAMP);
CREATE TABLE IF NOT EXISTS interruption_labels (
  run_id VARCHAR, ts TIMESTAMP, component VARCHAR, category VARCHAR, labelled_by VARCHAR,
  labelled_at TIMESTAMP);
"""

# The per-GPU rollup's columns as first released (``ADDED_COLUMNS`` adds the rest, in order):
# one table per level and the view ``gpu_rollup`` of them (``_gpu_level_tables``).
_GPU_ROLLUP_COLS = """bucket_s INTEGER, ts TIMESTAMP, gpu_id INTEGER, samples INTEGER,
  util_avg FLOAT, temp_avg FLOAT, power_w FLOAT, sm_clock_avg FLOAT, fb_used_avg FLOAT,
  mem_temp_avg FLOAT, temp_max FLOAT, xid_last FLOAT, energy_mj_max DOUBLE,
  energy_mj_min DOUBLE"""

# Columns added to tables after the first release, in table order (see ``create``).
ADDED_COLUMNS: dict[str, dict[str, str]] = {
    "targets": {"stale": "BOOLEAN", "digest": "BIGINT", "unchanged": "INTEGER"},
    # Interruptions derived from the signals a cluster produces (``telemetry.derive``): where
    # a row came from, how sure the inference is, its evidence (JSON), when progress resumed,
    # and an operator's correction of its cause (the inferred cause kept beside it).
    "interruptions": {
        "source": "VARCHAR",
        "confidence": "DOUBLE",
        "evidence": "VARCHAR",
        "end_ts": "TIMESTAMP",
        "labelled_by": "VARCHAR",
        "labelled_at": "TIMESTAMP",
        "orig_component": "VARCHAR",
        "orig_category": "VARCHAR",
        "rank": "INTEGER",  # the culprit's rank (the first failing one, not its cascade)
        "restarts": "INTEGER",  # restarts in it: more than one is a restart loop
        # an unknown culprit (no rank, no host): who it may be (JSON list) and why not named
        "culprit_candidates": "VARCHAR",
        "culprit_reason": "VARCHAR",
        # when the failure began (the hardware's line, the culprit's own) and when the job
        # noticed (its first watchdog or teardown line): issue 57, 4
        "failed_ts": "TIMESTAMP",
        "noticed_ts": "TIMESTAMP",
    },
    # the rank (training process) that wrote a log line, where the line or its prefix says
    "signals": {"rank": "INTEGER"},
    # Checkpoints found in directories name the path and the writer's format.
    "checkpoints": {"path": "VARCHAR", "format": "VARCHAR"},
    # Per-GPU rollups gained the energy counter's first and last reading per bucket, then the
    # profiling fields behind real utilization and workload classes (``telemetry.utilization``),
    # then the link traffic that splits communicating ranks from stalled ones, then what the
    # outlier table counts per sample (``rollups.GPU_COUNT``; NULL in buckets built before).
    "gpu_rollup": {
        "energy_mj_max": "DOUBLE",
        "energy_mj_min": "DOUBLE",
        "tensor_avg": "FLOAT",
        "sm_active_avg": "FLOAT",
        "sm_occupancy_avg": "FLOAT",
        "dram_avg": "FLOAT",
        "real_avg": "FLOAT",
        "energy_mj_used": "DOUBLE",
        "pcie_bps": "FLOAT",
        "nvlink_bps": "FLOAT",
        "hot_n": "INTEGER",
        "idle_n": "INTEGER",
        "busy_n": "INTEGER",
        "busy_clock": "FLOAT",
        "busy_temp": "FLOAT",
    },
    # The profiling and link sample columns (``catalog.OPTIONAL_COLUMNS``) and real
    # utilization's sums.
    "gpu_samples": {
        c.name: "DOUBLE" if c.kind == "counter" else "FLOAT"
        for c in SAMPLE_COLUMNS
        if c.name in OPTIONAL_COLUMNS
    },
    "node_tick": {"real_s": "DOUBLE"},
    # a Slurm job's account and allocated GPUs (AllocTRES gres/gpu; NULL when Slurm said none)
    "slurm_jobs": {"account": "VARCHAR", "gpus": "INTEGER"},
    # ... and each node's GPUs as Slurm configures them (Gres=gpu:8), the cluster's capacity
    "slurm_nodes": {"gpus": "INTEGER"},
    # remote_write's staged rows are claimed by the round being written (crash-safe promotion)
    "remote_write_staging": {"claim": "VARCHAR"},
    # ... and whether each cell is idle, slow or hot against the fleet in its bucket
    # (``telemetry.store.cellflags``: the outlier table's candidate search counts them).
    "node_rollup": {"real_avg": "FLOAT", **dict.fromkeys(FLAG_COLUMNS, "BOOLEAN")},
    # the fleet's GPU energy per hour, summed from the per-GPU hours as they are built
    # (``rollups.FLEET_ENERGY_SQL``): a run's energy reads its hours, not every GPU-hour
    "fleet_rollup": {
        "real_avg": "FLOAT",
        "gpu_hours": "INTEGER",
        "energy_gpu_hours": "INTEGER",
        "energy_mj_used": "DOUBLE",
    },
}
# Of those, the ones the dashboard reads. ``digest``/``unchanged`` are only read back by the
# ingest sink, which opens the store for writing and adds them itself, so a store that lacks
# only them is still served read-only without an upgrade (which would need write access).
READ_COLUMNS: dict[str, tuple[str, ...]] = {
    "targets": ("stale",),
    "interruptions": tuple(ADDED_COLUMNS["interruptions"]),
    "checkpoints": tuple(ADDED_COLUMNS["checkpoints"]),
    "gpu_rollup": tuple(ADDED_COLUMNS["gpu_rollup"]),
    "gpu_samples": tuple(ADDED_COLUMNS["gpu_samples"]),
    "node_tick": tuple(ADDED_COLUMNS["node_tick"]),
    "node_rollup": tuple(ADDED_COLUMNS["node_rollup"]),
    "fleet_rollup": tuple(ADDED_COLUMNS["fleet_rollup"]),
}
# Not read-required: ``slurm_jobs.account``/``gpus`` (a reader checks for them itself,
# ``telemetry.queries.accounting``), so an older read-only store is served without an upgrade.


def create(con: duckdb.DuckDBPyConnection) -> None:
    """Create what a store lacks (every statement is ``IF NOT EXISTS``), fill the field
    catalog of a new store and record the schema version. The caller holds the write lock."""
    had_now = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'gpu_now'"
    ).fetchone()[0]
    con.execute(SCHEMA)
    had_used = _has_column(con, "energy_mj_used", GPU_VIEW, gpu_table(ENERGY_LEVEL_S))
    had_fleet_energy = _has_column(con, "energy_mj_used", "fleet_rollup")
    had_flags = _has_column(con, FLAG_COLUMNS[0], "node_rollup")
    # Stores created before a column was added get it (appends to ``targets`` are positional,
    # so its columns must exist, in this order, before the first round). Names come from
    # ``ADDED_COLUMNS`` above, never from input.
    for table, columns in ADDED_COLUMNS.items():
        for column, kind in columns.items():
            if table != GPU_VIEW:  # its level tables get theirs in _gpu_level_tables
                con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
    _gpu_level_tables(con)
    _widen(con)
    if con.execute("SELECT count(*) FROM fields").fetchone()[0] == 0:
        con.executemany("INSERT INTO fields VALUES (?, ?, ?, ?, ?)", field_rows())
    else:  # an older store's catalog learns the columns added since
        con.executemany(
            "UPDATE fields SET column_name = ? WHERE field = ? AND column_name IS NULL",
            [(c.name, c.field) for c in SAMPLE_COLUMNS if c.name in OPTIONAL_COLUMNS],
        )
    con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
    # Per-GPU rollups (added after the first release) cover a new store from its first
    # sample; a store that had samples before it had the table, from the first whole hour
    # after the newest rollup watermark (each level is built from there on).
    # Hourly per-GPU buckets built before they kept the energy used get it once.
    if not had_used:
        fill_energy_used(con, "1970-01-01", "9999-12-31")
    elif not had_fleet_energy:  # the fleet's hours summed once from the per-GPU hours
        fill_fleet_energy(con, "1970-01-01", "9999-12-31")
    # Workload classes per per-GPU bucket (added after the per-GPU rollups): a store that has
    # those buckets gets its classes once, from them (``rollups.CLASS_SQL``).
    if con.execute("SELECT count(*) FROM class_rollup").fetchone()[0] == 0:
        con.execute(CLASS_SQL.format(where=f"WHERE bucket_s <> {DAY_S}"))  # days: no classes
    if not had_flags:  # cell flags (added after the node rollups) set once for every cell
        for (level,) in con.execute("SELECT DISTINCT bucket_s FROM node_rollup").fetchall():
            set_flags(con, level, "1970-01-01", "9999-12-31")
    # The 6-hour per-GPU level (added after the hourly one) is built once from the hourly.
    add_gpu_level(con, 21600, 3600)
    # Per-GPU days (added after the 6-hour level) are built once from the 6-hour buckets.
    if not con.execute("SELECT count(*) FROM meta WHERE key = ?", [DAY_MARK]).fetchone()[0]:
        newest = con.execute("SELECT max(ts) FROM node_tick").fetchone()[0]
        if newest is not None:
            keep_days(con, newest)
    if not had_now:  # each GPU's newest sample (added after the samples), from the samples
        con.execute(FILL_NOW_SQL, [now_window_us(con)])
    con.execute(
        """INSERT OR IGNORE INTO meta
           SELECT 'gpu_rollup_since', CASE WHEN (SELECT count(*) FROM gpu_samples) = 0
             THEN '1970-01-01 00:00:00'
             ELSE strftime(time_bucket(INTERVAL 1 hour, greatest(
               (SELECT max(value::TIMESTAMP) FROM meta WHERE key LIKE 'rollup_watermark_%'),
               (SELECT min(ts) FROM gpu_samples))) + INTERVAL 1 hour, '%Y-%m-%d %H:%M:%S') END"""
    )


# Columns first made narrower than what the ingest API accepts (a node of 32,768 GPUs
# overflowed a SMALLINT count, and every later rollup failed): widened in place.
WIDENED = {("node_rollup", "gpus"): "INTEGER"}


def _widen(con: duckdb.DuckDBPyConnection) -> None:
    for (table, column), kind in WIDENED.items():
        have = con.execute(
            "SELECT data_type FROM duckdb_columns() WHERE table_name = ? AND column_name = ?",
            [table, column],
        ).fetchone()
        if have is not None and have[0] != kind:
            con.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET DATA TYPE {kind}")


def _has_column(con: duckdb.DuckDBPyConnection, column: str, *tables: str) -> bool:
    """Whether one of ``tables`` (base tables, not views) has ``column``."""
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_columns() JOIN duckdb_tables() USING (table_name) "
            "WHERE list_contains(?, table_name) AND column_name = ?",
            [list(tables), column],
        ).fetchone()[0]
    )


def _gpu_level_tables(con: duckdb.DuckDBPyConnection) -> None:
    """One table per per-GPU level and the view ``gpu_rollup`` of them all (see
    ``rollups.GPU_VIEW``), each table with every column of ``ADDED_COLUMNS``. A store that kept
    every level in one table ``gpu_rollup`` has its rows moved into the level tables, and that
    table dropped, in one transaction: a failure leaves it as it was. The caller holds the
    write lock."""
    kind = con.execute(
        "SELECT table_type FROM information_schema.tables WHERE table_name = ?", [GPU_VIEW]
    ).fetchone()
    single = kind is not None and kind[0] == "BASE TABLE"
    tables = [gpu_table(level) for level in GPU_TABLE_LEVELS]
    con.begin()
    try:
        for table in ([GPU_VIEW] if single else []) + tables:
            con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({_GPU_ROLLUP_COLS})")
            for column, kind in ADDED_COLUMNS[GPU_VIEW].items():
                con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
        if single:
            move = f"SELECT * FROM {GPU_VIEW} WHERE bucket_s = ?"
            moved = sum(
                con.execute(f"INSERT INTO {table} BY NAME {move}", [level]).fetchone()[0]
                for level, table in zip(GPU_TABLE_LEVELS, tables, strict=True)
            )
            held = con.execute(f"SELECT count(*) FROM {GPU_VIEW}").fetchone()[0]
            if moved != held:  # a level this version does not know: keep the table as it is
                raise RuntimeError(f"{GPU_VIEW}: {held - moved} rows of an unknown level")
            con.execute(f"DROP TABLE {GPU_VIEW}")
        union = " UNION ALL ".join(f"SELECT * FROM {table}" for table in tables)
        con.execute(f"CREATE OR REPLACE VIEW {GPU_VIEW} AS {union}")
        con.commit()
    except BaseException:
        rollback(con)
        raise


# Tables added later that a read-only reader checks for itself (an operator's goodput
# exclusions, the logs' per-rank timing reports, Slurm's reservations, finished jobs' kept
# figures, delivered alerts' history, the log files evidence lines are in, the settings logs
# state, the spans each GPU held a job label): a store without them is served as it is, not
# upgraded first.
OPTIONAL_TABLES = frozenset(
    {
        "goodput_exclusions",
        "rank_perf",
        "slurm_reservations",
        "job_figures",
        "alert_history",
        "log_files",
        "run_settings",
        "gpu_job_spans",
    }
)


def outdated(con: duckdb.DuckDBPyConnection) -> list[str]:
    """What a store written by an older Factory Floor lacks that a read-only open needs:
    tables, and the added columns that the dashboard reads."""
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    want = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA)
    want += [gpu_table(level) for level in GPU_TABLE_LEVELS]  # readers name a level's table
    missing = [t for t in want if t not in have and t not in OPTIONAL_TABLES]
    for table, read in READ_COLUMNS.items():
        if table in have:
            cols = con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]
            ).fetchall()
            missing += [f"{table}.{c}" for c in read if (c,) not in cols]
    return missing


def foreign(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables of a DuckDB file that is not a Factory Floor store (it has tables, but not
    our ``meta``): empty for a new file or one of ours."""
    have = sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())
    return [] if not have or "meta" in have else have
