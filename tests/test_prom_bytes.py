"""The bytes-per-sample comparison (``benchmarks/prom_bytes.py``) puts the same samples in a real
Prometheus TSDB as in the store, and counts the store's bytes table by table."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from benchmarks.prom_bytes import RAW, load_windows, stored_samples, table_bytes
from telemetry.store import Store
from tests.helpers.stores import build_store


def test_prometheus_blocks_hold_every_stored_sample(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s.duckdb", days=0.1, interval_s=60.0)
    data = tmp_path / "prom"
    exported = load_windows(store, tmp_path, data)
    with Store(str(store), read_only=True) as s:
        held = stored_samples(s)
        sizes = table_bytes(s)
    listing = subprocess.run(
        [shutil.which("promtool") or "promtool", "tsdb", "list", str(data)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    # BLOCK ULID, MIN TIME, MAX TIME, DURATION, NUM SAMPLES, NUM CHUNKS, NUM SERIES, SIZE
    in_blocks = sum(int(re.split(r"\s+", line.strip())[4]) for line in listing.splitlines()[1:])
    assert held > 100_000 and exported == held == in_blocks
    assert not list(tmp_path.glob("*.om"))  # each window's text removed once loaded
    # every table's segments, no more than the file holds
    assert 0 < sizes["gpu_samples"] <= sum(sizes.get(t, 0) for t in RAW)
    assert sum(sizes.values()) <= store.stat().st_size
