"""Record files (``.jsonl``, ``.csv``) are bounded like text logs: one that is no regular file
(a FIFO would block ``import`` for ever, a symlink to ``/dev/zero`` would grow without end) is
refused in one line, and a line too long to be a record (a sparse file, a runaway writer) is
skipped in bounded memory while the rest of that file, and every other file, is stored (issue
55). Through the real CLI, in a subprocess with a deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from telemetry.collect.logs.importers import MAX_RECORD_LINE_BYTES
from telemetry.store import Store
from tests.conftest import ROOT, cli

GOOD = '{"run": "a", "step": %d, "loss": 2.0, "ts": "2026-12-01T00:0%d:00"}\n'


Done = subprocess.CompletedProcess[str]


def _import(store: Path, *files: Path, timeout: float) -> tuple[Done, int]:
    """The real import under ``/usr/bin/time``: its result and its peak memory (KiB)."""
    peak = store.with_suffix(".rss")
    r = subprocess.run(
        ["/usr/bin/time", "-o", str(peak), "-f", "%M", sys.executable, "-m", "app.cli",
         "import", "--store", str(store), *map(str, files)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return r, int(peak.read_text().split()[-1])


def _steps(store: Path) -> list[int]:
    with Store(str(store), read_only=True) as s:
        return [r[0] for r in s.rows("SELECT step FROM train_metrics ORDER BY step")]


def test_a_fifo_or_a_device_is_refused_in_one_line_and_never_read(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(GOOD % (1, 1))
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    for bad in (fifo, zero):
        began = time.monotonic()  # the FIFO blocked for ever before: the deadline kills it
        r = cli("import", "--store", str(tmp_path / "s.duckdb"), str(bad), str(good), timeout=30)
        assert time.monotonic() - began < 20
        assert r.returncode == 1 and "Traceback" not in r.stderr
        assert r.stderr.strip() == f"factoryfloor: error: {bad}: not a regular file (a FIFO, " \
            "device or socket)"
        assert not (tmp_path / "s.duckdb").exists()  # refused before the store was opened


def test_a_line_too_long_to_be_a_record_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.jsonl"  # 1 GiB of NULs, no newline: one line
    with open(sparse, "wb") as fh:
        fh.truncate(1 << 30)
    long = tmp_path / "long.jsonl"
    with open(long, "w") as fh:
        fh.write(GOOD % (2, 2) + "x" * (3 * MAX_RECORD_LINE_BYTES) + "\n" + GOOD % (3, 3))
    csv = tmp_path / "m.csv"
    csv.write_text("run,step,loss\na,4,1.0\na," + "9" * (2 * MAX_RECORD_LINE_BYTES) + "\na,5,1.0\n")
    good = tmp_path / "good.jsonl"
    good.write_text(GOOD % (1, 1))
    store = tmp_path / "s.duckdb"
    r, peak_kib = _import(store, sparse, long, csv, good, timeout=240)
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    assert peak_kib < 400 * 1024, f"{peak_kib / 1024:.0f} MiB for a 1 GiB line"
    over = f"bytes, over the {MAX_RECORD_LINE_BYTES:,} a record may be: skipped"
    assert f"rejected {sparse}:1: line of {1 << 30:,} {over}" in r.stdout
    assert f"rejected {long}:2: line of {3 * MAX_RECORD_LINE_BYTES + 1:,} {over}" in r.stdout
    assert f"rejected {csv}:3: line of " in r.stdout
    # the sparse file gave nothing, so the command says so; every other record is stored
    assert r.returncode == 1 and f"nothing stored from {sparse}: no valid records" in r.stderr
    assert _steps(store) == [1, 2, 3, 4, 5]
