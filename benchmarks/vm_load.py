"""A store's per-GPU samples loaded into a real VictoriaMetrics (Debian's ``victoria-metrics``).

The TSDB-backed setup (``serve --prometheus URL --raw-retention 0``, docs/scaling.md) keeps the
raw per-GPU series in the TSDB; the benchmark (``benchmarks/tsdb.py``) and its test
(``tests/test_tsdb_backed.py``) need one that holds a known fleet. Each 2-hour window of the
store's samples is written by DuckDB as Prometheus text with millisecond timestamps (the
labels dcgm-exporter prints, and the ``instance``/``job`` a scrape adds) and posted to
``/api/v1/import/prometheus``; with ``up=True`` each host also gets the ``up`` series a scrape
records, which the Prometheus source reads to tell its targets apart.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import duckdb

from telemetry.catalog import SAMPLE_COLUMNS

WINDOW_S = 7200
# The drill-down's four charts, its framebuffer and its XID marks (prom_history.SERIES).
DRILL_COLUMNS = ("util_pct", "temp_c", "power_w", "sm_clock_mhz", "fb_used_mib", "xid_last")
_FIELD = {c.name: c.field for c in SAMPLE_COLUMNS}
_LABELS = """'{Hostname="' || g.host || '",UUID="' || g.uuid || '",gpu="' || g.gpu
  || '",instance="' || g.host || ':9400",job="dcgm",modelName="' || g.model || '"} '"""


class VictoriaMetrics:
    """``victoria-metrics`` on 127.0.0.1:``port`` over ``data`` (a fresh directory)."""

    def __init__(self, data: Path, port: int) -> None:
        self.data, self.port = data, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> VictoriaMetrics:
        binary = shutil.which("victoria-metrics")
        if binary is None:
            raise RuntimeError("victoria-metrics missing: apt-get install victoria-metrics")
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.data.parent / "vm.log", "ab") as log:
            self.proc = subprocess.Popen(
                [binary, f"-storageDataPath={self.data}", f"-httpListenAddr=127.0.0.1:{self.port}",
                 "-retentionPeriod=100y", "-search.latencyOffset=0s",
                 "-search.maxPointsPerTimeseries=100000"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited: see {self.data.parent / 'vm.log'}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2).read()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"victoria-metrics not ready within {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> VictoriaMetrics:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data.rglob("*") if p.is_file())


def load(
    store_path: Path, url: str, tmp: Path, columns: tuple[str, ...] = DRILL_COLUMNS,
    up: bool = False,
) -> int:  # fmt: skip
    """Every non-NULL sample of ``columns`` in the store at ``store_path`` posted to the
    VictoriaMetrics at ``url``; the samples sent (``up`` lines not counted)."""
    con = duckdb.connect(str(store_path), read_only=True)
    sent = 0
    try:
        lo, hi = con.execute("SELECT epoch(min(ts)), epoch(max(ts)) FROM gpu_samples").fetchone()
        if lo is None:
            return 0
        for w0 in range(int(lo) // WINDOW_S * WINDOW_S, int(hi) + 1, WINDOW_S):
            within = (
                f"s.ts >= make_timestamp({w0 * 10**6}) "
                f"AND s.ts < make_timestamp({(w0 + WINDOW_S) * 10**6})"
            )
            lines = [_sample_sql(col, within) for col in columns]
            sent += _copy_post(con, url, " UNION ALL ".join(lines), tmp / f"vm-{w0}.prom")
            if up:
                _copy_post(con, url, _UP_SQL.format(within=within), tmp / f"up-{w0}.prom")
    finally:
        con.close()
    with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=60) as r:
        r.read()  # what was imported is searchable now, not in a few seconds
    return sent


_UP_SQL = """SELECT 'up{{instance="' || g.host || ':9400",job="dcgm"}} 1 '
  || epoch_ms(s.ts)::VARCHAR AS line
FROM gpu_samples s JOIN gpus g USING (gpu_id) WHERE g.gpu = 0 AND {within}"""


def _sample_sql(col: str, within: str) -> str:
    """One column's samples as Prometheus text lines (``col`` is a catalog name, not input)."""
    return f"""SELECT '{_FIELD[col]}' || {_LABELS} || s.{col}::VARCHAR || ' '
                 || epoch_ms(s.ts)::VARCHAR AS line
               FROM gpu_samples s JOIN gpus g USING (gpu_id)
               WHERE s.{col} IS NOT NULL AND {within}"""


def _copy_post(con: duckdb.DuckDBPyConnection, url: str, select: str, part: Path) -> int:
    """The lines ``select`` gives, written to ``part`` and posted; how many there were."""
    row = con.execute(
        f"""COPY ({select}) TO '{part}'
            (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '|')"""
    ).fetchone()
    n = int(row[0]) if row else 0
    try:
        if n:
            with open(part, "rb") as fh:
                req = urllib.request.Request(
                    f"{url}/api/v1/import/prometheus", data=fh, method="POST",
                    headers={"Content-Type": "text/plain",
                             "Content-Length": str(part.stat().st_size)},
                )  # fmt: skip
                with urllib.request.urlopen(req, timeout=600) as r:
                    r.read()
    finally:
        part.unlink(missing_ok=True)
    return n
