"""A small fleet whose raw per-GPU series live in a real VictoriaMetrics (Debian's package) and
whose store keeps only rollups: the TSDB-backed setup of docs/scaling.md, for its tests.

A dev-64 replay (4 job nodes and the 2 hot spares: 48 GPUs, 30 s samples) ending a minute ago
is loaded into VictoriaMetrics on 127.0.0.1 (``benchmarks.vm_load``), then the real
``factoryfloor ingest --prometheus URL --raw-retention 0`` reads it back into a fresh store,
as a site moving to this setup would: the store rolls each 5-minute bucket up and lets its raw
rows go once the bucket closes.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.vm_load import VictoriaMetrics, load
from tests.conftest import cli
from tests.helpers.procs import free_port

MINUTES = 144  # a shorter replay of dev-64 fails ("high - low < 0"): left alone


@dataclass
class Fleet:
    vm: VictoriaMetrics
    store: Path  # rollups only (raw retention 0)
    start: datetime  # the replay's first sample (naive UTC)
    end: datetime  # its last

    def export(self, field: str, host: str) -> pd.DataFrame:
        """What VictoriaMetrics holds of ``field`` for ``host``: every raw sample (ts, gpu,
        value), read with ``/api/v1/export`` (no PromQL in between)."""
        q = urllib.parse.urlencode({"match[]": f'{field}{{Hostname="{host}"}}'})
        with urllib.request.urlopen(f"{self.vm.url}/api/v1/export?{q}", timeout=30) as r:
            lines = [json.loads(x) for x in r.read().splitlines() if x.strip()]
        frames = [
            pd.DataFrame(
                {
                    "ts": pd.to_datetime(d["timestamps"], unit="ms"),
                    "gpu": int(d["metric"]["gpu"]),
                    "value": [float(v) for v in d["values"]],
                }
            )
            for d in lines
        ]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@pytest.fixture(scope="module", name="fleet")
def _fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("tsdb")
    now = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0)
    start = now - timedelta(minutes=MINUTES + 1)
    raw = tmp / "raw.duckdb"
    r = cli("replay", "--scenario", "dev-64", "--nodes", "4", "--days", f"{MINUTES / 1440}",
            "--interval", "30", "--start", start.isoformat(), "--store", str(raw),
            "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    with VictoriaMetrics(tmp / "vm-data", free_port()) as vm:
        assert load(raw, vm.url, tmp, up=True) > 0
        store = tmp / "rollups.duckdb"
        r = cli("ingest", "--store", str(store), "--once", "--prometheus", vm.url,
                "--since", f"{MINUTES + 3}m", "--interval", "30", "--raw-retention", "0",
                timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "raw rows before" in r.stderr, r.stderr
        yield Fleet(vm, store, start, start + timedelta(minutes=MINUTES))
