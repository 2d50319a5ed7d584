"""Issue 15, part 3: a drill-down into a range older than the store's raw window reads those
per-GPU series from the Prometheus source, against a real Prometheus (Debian's package)
scraping the frozen exporter farm. The part the store expired comes back with the values the
store had; the part it still holds stays local; a dead server leaves the local part alone."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from telemetry.collect.prometheus.prom_client import PromClient
from telemetry.collect.prometheus.prom_history import SERIES, PromHistory, merged_node_series
from telemetry.queries import TimeRange
from telemetry.queries import gpus as gpuq
from telemetry.store import Store
from tests.conftest import cli
from tests.prom_fixture import TsdbServer, _frozen_farm, hosts_up  # noqa: F401
from tests.test_exporters import FarmThread

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

COMPARED = ["util_pct", "temp_c", "power_w", "sm_clock_mhz", "fb_used_mib"]


def _means(df: pd.DataFrame) -> pd.DataFrame:
    return df.astype({"gpu": "int64"}).groupby("gpu")[COMPARED].mean().round(3)


def test_an_expired_drill_down_is_read_back_from_prometheus(
    frozen_farm: tuple[FarmThread, Path], tmp_path: Path
) -> None:
    ft, targets = frozen_farm
    store = tmp_path / "s.duckdb"
    with TsdbServer("prometheus", tmp_path, targets) as server:
        server.wait_scraped(hosts_up(ft))
        time.sleep(10)  # ten more seconds of history
        r = cli("ingest", "--store", str(store), "--once", "--prometheus", server.url,
                "--since", "10s", "--interval", "1", "--timeout", "0.5")  # fmt: skip
        assert r.returncode == 0, r.stderr
        with Store(str(store)) as s:
            host = s.rows("SELECT min(host) FROM gpu_samples_v")[0][0]
            rounds = [t for (t,) in s.rows("SELECT DISTINCT ts FROM gpu_samples ORDER BY 1")]
            assert len(rounds) >= 8
            whole = TimeRange(rounds[0], rounds[-1])
            bucket = gpuq.nice_bucket(s, whole, gpuq.NODE_POINTS)
            before = gpuq.node_gpu_series(s, host, whole)
            cut = rounds[len(rounds) // 2]
            # as raw retention leaves a store: the older raw rows gone, the horizon recorded
            with s.transaction() as con:
                for table in ("gpu_samples", "gpu_samples_extra", "node_tick"):
                    con.execute(f"DELETE FROM {table} WHERE ts < ?", [cut])
                con.execute("INSERT OR REPLACE INTO meta VALUES ('raw_since', ?)",
                            [cut.isoformat()])  # fmt: skip
            local = gpuq.node_gpu_series(s, host, whole)
            assert local["ts"].min() >= cut and len(local) < len(before)

            history = PromHistory([PromClient(server.url)])
            merged = merged_node_series(local, history, host, whole.start, cut, bucket)

    assert list(merged.columns) == ["ts", "gpu", *SERIES, "bucket_s"]
    older = merged[merged["ts"] < cut]
    assert not older.empty, history.last_error
    assert set(older["gpu"]) == set(before["gpu"]) == set(range(8))
    # what Prometheus gives for the expired part is what the store had (the farm holds still)
    pd.testing.assert_frame_equal(_means(older), _means(before[before["ts"] < cut]))
    # the part the store still holds is the store's own, row for row
    kept = merged[merged["ts"] >= cut].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, local.reset_index(drop=True), check_dtype=False)

    # a server that does not answer: the local part as it is, the reason kept, no error
    dead = PromHistory([PromClient("http://127.0.0.1:9")])
    same = merged_node_series(local, dead, host, whole.start, cut, bucket)
    pd.testing.assert_frame_equal(same, local)
    assert dead.last_error is not None and "127.0.0.1:9" in dead.last_error
