"""Bytes per sample, like for like: every DCGM field the store holds loaded into Prometheus's
TSDB too, and both sizes divided by the samples they hold (``benchmarks/prometheus.py``).

Prometheus side: each stored sample of every ``gpu_samples`` column that has any, as
OpenMetrics under its dcgm-exporter family and labels, written by DuckDB. The value is the
column's own text (a FLOAT's shortest round-trip form: the exporter's figure, not a widened
float32), so both sides hold the same numbers. ``promtool tsdb create-blocks-from openmetrics``
parses its whole input once per 2-hour block, so the export is one file per 2-hour window,
each loaded on its own into the same directory (the blocks Prometheus's head would cut).

Store side: each table's bytes from DuckDB's own segment map (``pragma_storage_info``: a
segment runs to the next one's offset in its block, or the block's end), so the raw samples
and the rollups are told apart in one file.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.store import Store

BLOCK_S = 7200  # promtool's block length (Prometheus's head block)
RAW = ("gpu_samples", "gpu_samples_extra", "gpus")  # the samples and their labels
# ... and what the store derives from them for the panels (Prometheus would recompute it per
# query); the other tables (runs, training metrics, events) hold what Prometheus does not.
DERIVED = ("node_tick", "gpu_now", "node_rollup", "fleet_rollup", "class_rollup")
_LABELS = """'{Hostname="' || g.host || '",UUID="' || g.uuid || '",device="' || g.device
  || '",gpu="' || g.gpu || '",instance="' || g.host || ':9400",job="dcgm",modelName="'
  || g.model || '"} '"""


def stored_columns(s: Store) -> list[tuple[str, str]]:
    """(column, family) of every sample column holding at least one value."""
    counts = s.rows(
        "SELECT " + ", ".join(f"count({c.name})" for c in SAMPLE_COLUMNS) + " FROM gpu_samples"
    )[0]
    return [(c.name, c.field) for c, n in zip(SAMPLE_COLUMNS, counts, strict=True) if n]


def stored_samples(s: Store) -> int:
    """Values held: each non-NULL cell of a sample column, and each long-form extra row."""
    wide = s.rows(
        "SELECT " + " + ".join(f"count({c.name})" for c in SAMPLE_COLUMNS) + " FROM gpu_samples"
    )[0][0]
    return int(wide) + int(s.scalar("SELECT count(*) FROM gpu_samples_extra"))


def load_windows(store_path: Path, tmp: Path, data: Path) -> int:
    """Every stored sample into Prometheus blocks under ``data``, one 2-hour window at a time
    (exported while promtool loads the one before, each file removed once loaded); the
    samples exported."""
    lines, loading = 0, None
    con = duckdb.connect(str(store_path), read_only=True)
    try:
        with Store(str(store_path), read_only=True) as s:
            cols = stored_columns(s)
        lo, hi = con.execute("SELECT epoch(min(ts)), epoch(max(ts)) FROM gpu_samples").fetchone()
        for w0 in range(int(lo) // BLOCK_S * BLOCK_S, int(hi) + 1, BLOCK_S):
            part = tmp / f"w{w0}.om"
            n = con.execute(_window_sql(cols, w0, part)).fetchone()[0] - len(cols) - 1
            loading = _wait(loading)
            if n:
                lines += n
                loading = (_promtool(part, data), part)
            else:
                part.unlink()
        _wait(loading)
    finally:
        con.close()
    return lines


def _window_sql(cols: list[tuple[str, str]], w0: int, part: Path) -> str:
    selects = [
        f"""SELECT {i} AS f, 0 AS t, -1 AS g, '# TYPE {fam} gauge' AS line
            UNION ALL SELECT {i}, epoch_us(s.ts), s.gpu_id, '{fam}' || {_LABELS}
              || s.{col}::VARCHAR || ' ' || (epoch_ms(s.ts) / 1000.0)::VARCHAR
            FROM gpu_samples s JOIN gpus g USING (gpu_id)
            WHERE s.{col} IS NOT NULL AND s.ts >= make_timestamp({w0 * 10**6})
              AND s.ts < make_timestamp({(w0 + BLOCK_S) * 10**6})"""
        for i, (col, fam) in enumerate(cols)  # names from the catalog, not input
    ]
    body = " UNION ALL ".join(selects)
    return f"""COPY (SELECT line FROM ({body} UNION ALL SELECT {len(cols)}, 0, 0, '# EOF')
        ORDER BY f, t, g) TO '{part}'
        (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '|')"""


def _promtool(part: Path, data: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [shutil.which("promtool") or "promtool", "tsdb", "create-blocks-from", "openmetrics",
         str(part), str(data)], stdout=subprocess.DEVNULL,
    )  # fmt: skip


def _wait(loading: tuple[subprocess.Popen, Path] | None) -> None:
    if loading is not None:
        proc, part = loading
        if proc.wait() != 0:
            raise RuntimeError(f"promtool failed on {part.name}")
        part.unlink()


def wait_compacted(data: Path, quiet_s: float = 75.0, limit_s: float = 1800.0) -> float:
    """Wait while a running Prometheus compacts the 2-hour blocks into longer ones (as it does
    with any TSDB it is given: each minute, up to a tenth of its retention), until the blocks
    are unchanged for ``quiet_s`` (its compaction runs once a minute); the seconds waited."""
    t0 = last_change = time.monotonic()
    seen: frozenset[str] = frozenset()
    while time.monotonic() - last_change < quiet_s:
        if time.monotonic() - t0 > limit_s:
            raise RuntimeError(f"Prometheus still compacting after {limit_s:.0f} s")
        now = frozenset(p.name for p in data.iterdir() if p.is_dir())
        if now != seen:
            seen, last_change = now, time.monotonic()
        time.sleep(5)
    return time.monotonic() - t0


def prometheus_bytes(data: Path) -> tuple[int, int]:
    """(every block file, the chunk files alone) in bytes: compaction into longer blocks
    shrinks the index toward nothing, never the chunks. Not the write-ahead log nor the head's
    chunks (empty: nothing is scraped)."""
    skip = {"wal", "chunks_head"}
    files = [p for p in data.rglob("*") if p.is_file() and not skip & set(p.parts)]
    return sum(p.stat().st_size for p in files), sum(
        p.stat().st_size for p in files if p.parent.name == "chunks"
    )


def table_bytes(s: Store) -> dict[str, int]:
    """Each table's bytes on disk, from DuckDB's segment map."""
    tables = [r[0] for r in s.rows("SELECT table_name FROM duckdb_tables()")]
    bs = int(s.scalar("SELECT block_size FROM pragma_database_size()"))
    info = " UNION ALL ".join(
        f"SELECT '{t}' AS t, block_id, block_offset, len(additional_block_ids) AS more "
        f"FROM pragma_storage_info('{t}') WHERE block_id >= 0"
        for t in tables  # names from the catalog, not input
    )
    rows = s.rows(
        f"""SELECT t, sum(size) FROM (
              SELECT t, coalesce(lead(block_offset) OVER (PARTITION BY block_id
                       ORDER BY block_offset), {bs}) - block_offset + more * {bs} AS size
              FROM ({info})) GROUP BY t"""
    )
    return {t: int(b) for t, b in rows}


def report(
    store_path: Path, data: Path, prom_samples: int, blocks: str, figures: dict[str, float]
) -> list[str]:
    """The bytes-per-sample lines, Prometheus's blocks being ``blocks`` (how they were made);
    the figures also into ``figures``, named by ``blocks``' first word."""
    with Store(str(store_path), read_only=True) as s:
        ours = stored_samples(s)
        sizes = table_bytes(s)
    raw = sum(sizes.get(t, 0) for t in RAW)
    rolled = raw + sum(b for t, b in sizes.items() if t in DERIVED or t.startswith("gpu_rollup"))
    total = sum(sizes.values())
    prom, chunks = prometheus_bytes(data)
    per = prom / prom_samples
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    key = blocks.split()[0].strip(",")
    figures |= {
        "samples": ours,
        f"baseline_prometheus_{key}_bytes_per_sample": per,
        "ours_raw_bytes_per_sample": raw / ours,
        "ours_rollups_bytes_per_sample": rolled / ours,
        "ours_every_table_bytes_per_sample": total / ours,
        f"ratio_rollups_over_prometheus_{key}": rolled / ours / per,
    }
    return [
        f"samples: Prometheus {prom_samples:,}, Factory Floor {ours:,}"
        + ("" if prom_samples == ours else " (NOT the same: the comparison is off)"),
        f"Prometheus blocks ({blocks}): {prom / 2**20:,.1f} MB, {per:.2f} B/sample "
        f"(chunks alone {chunks / prom_samples:.2f} B/sample)",
        f"Factory Floor raw (gpu_samples, extra, gpus): {raw / 2**20:,.1f} MB, "
        f"{raw / ours:.2f} B/sample",
        f"Factory Floor with rollups (+ node_tick, gpu_now, every rollup level): "
        f"{rolled / 2**20:,.1f} MB, {rolled / ours:.2f} B/sample",
        f"Factory Floor, every table (+ runs, training metrics, events): {total / 2**20:,.1f} MB"
        f", {total / ours:.2f} B/sample; the file {store_path.stat().st_size / 2**20:,.1f} MB",
        "largest tables: " + ", ".join(f"{t} {b / 2**20:,.1f} MB" for t, b in top),
        f"ours / Prometheus ({blocks}) per sample: raw {raw / ours / per:.2f}, with rollups "
        f"{rolled / ours / per:.2f}, every table {total / ours / per:.2f} "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
    ]
