"""The DuckDB store: round trips, atomic batches, rollups, and the one-owner lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

from telemetry.errors import StoreError, StoreLockedError
from telemetry.replay.scenarios import get_scenario
from telemetry.replay.synth import Synthesizer
from telemetry.replay.timeline import simulate
from telemetry.store import Store


def _gpus(n_nodes: int = 2, per_node: int = 2) -> pd.DataFrame:
    rows = []
    for node in range(n_nodes):
        for g in range(per_node):
            rows.append(
                {
                    "gpu_id": node * per_node + g,
                    "node_id": node,
                    "host": f"n{node}",
                    "gpu": g,
                    "uuid": f"GPU-{node}-{g}",
                    "model": "NVIDIA H100 80GB HBM3",
                    "pci_bus_id": "",
                    "device": f"nvidia{g}",
                    "driver_version": "550",
                    "mig_profile": None,
                    "mig_instance": None,
                    "namespace": None,
                    "pod": None,
                    "container": None,
                    "hpc_job": None,
                }
            )
    return pd.DataFrame(rows).astype({"gpu_id": "int32", "node_id": "int32", "gpu": "int16"})


def _samples(ts: list[datetime], n_gpus: int, util: float) -> pd.DataFrame:
    rows = [
        {
            "ts": t,
            "gpu_id": g,
            "util_pct": util + g,
            "temp_c": 60.0 + g,
            "mem_temp_c": 70.0,
            "power_w": 500.0 + g,
            "sm_clock_mhz": 1980.0,
            "fb_used_mib": 1000.0,
            "fb_free_mib": 80000.0,
            "tensor_active": 0.5,
            "energy_mj": 1e9,
            "xid_last": 0.0,
        }
        for t in ts
        for g in range(n_gpus)
    ]
    return pd.DataFrame(rows).astype({"gpu_id": "int32"})


def test_round_trip_and_rollups(tmp_path: Path) -> None:
    path = str(tmp_path / "s.duckdb")
    t0 = datetime(2026, 3, 1)
    ticks = [t0 + timedelta(seconds=15 * i) for i in range(8)]  # two minutes
    with Store(path) as store:
        store.set_meta({"sample_interval_s": "15"})
        store.append(
            "nodes",
            pd.DataFrame(
                {
                    "node_id": [0, 1],
                    "host": ["n0", "n1"],
                    "rack": ["r0", "r0"],
                    "role": ["job", "job"],
                }
            ),
        )
        store.append("gpus", _gpus())
        assert store.append("gpu_samples", _samples(ticks, 4, 90.0)) == 32
        store.refresh_rollups()
    with Store(path) as store:  # reopened: everything persisted
        assert store.scalar("SELECT count(*) FROM gpu_samples") == 32
        got = store.df("SELECT * FROM node_rollup WHERE bucket_s = 60 ORDER BY ts, node_id")
        assert len(got) == 4  # 2 nodes x 2 minutes
        assert got["util_avg"].tolist() == pytest.approx([90.5, 92.5, 90.5, 92.5])
        assert got["power_w"].tolist() == pytest.approx([1001.0, 1005.0, 1001.0, 1005.0])
        fleet = store.df("SELECT * FROM fleet_rollup WHERE bucket_s = 60 ORDER BY ts")
        assert fleet["power_w"].tolist() == pytest.approx([2006.0, 2006.0])
        assert fleet["gpus"].tolist() == [4, 4]


def test_a_bad_batch_is_rejected_whole(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append("gpus", _gpus())
        good = _samples([datetime(2026, 3, 1)], 4, 50.0)
        bad = good.drop(columns=["xid_last"])
        with pytest.raises(duckdb.Error):
            store.append_many({"gpu_samples": good, "train_metrics": bad})
        assert store.scalar("SELECT count(*) FROM gpu_samples") == 0
        with pytest.raises(ValueError, match="not appendable"):
            store.append("meta; DROP TABLE runs", good)


def test_replay_node_partials_equal_the_store_sql(tmp_path: Path) -> None:
    """The replay engine hands over per-node sums; they must equal what SQL computes."""
    sc = get_scenario("dev-64").with_overrides(days=0.1)
    syn = Synthesizer(simulate(sc, 4), 4, 10.0, "r")
    samples, node_tick = syn.samples(np.arange(1, 31) * 10.0)
    with Store(str(tmp_path / "a.duckdb")) as a, Store(str(tmp_path / "b.duckdb")) as b:
        for st in (a, b):
            st.append("gpus", syn.gpus_frame())
        a.append_many({"gpu_samples": samples, "node_tick": node_tick})
        b.append_many({"gpu_samples": samples})
        q = "SELECT * FROM node_tick ORDER BY ts, node_id"
        pd.testing.assert_frame_equal(a.df(q), b.df(q), check_dtype=False, rtol=1e-5)


def test_second_process_gets_a_clear_lock_error(tmp_path: Path) -> None:
    path = str(tmp_path / "owned.duckdb")
    with Store(path):
        code = (
            "import sys\nfrom telemetry.store import Store\nfrom telemetry.errors import "
            "StoreLockedError\ntry:\n    Store(sys.argv[1])\nexcept StoreLockedError as e:\n"
            "    print(e)\n    sys.exit(3)\n"
        )
        r = subprocess.run(
            [sys.executable, "-c", code, path],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent.parent,
            timeout=60,
        )
    assert r.returncode == 3, r.stderr
    assert path in r.stdout and "in use by another process" in r.stdout
    assert "PID" in r.stdout  # names the holder


def test_missing_directory_and_read_only_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(str(tmp_path / "nope" / "s.duckdb"))
    with pytest.raises(StoreError, match="no such store"):
        Store(str(tmp_path / "absent.duckdb"), read_only=True)
    assert issubclass(StoreLockedError, Exception)


def test_late_data_is_rolled_up_and_newer_buckets_survive(tmp_path: Path) -> None:
    """A round older than the rollup watermark (one daemon's spool delivered after another
    daemon's fresh rounds) lands in its bucket; the newer buckets stay."""
    t0 = datetime(2026, 3, 1)
    fresh = [t0 + timedelta(minutes=m) for m in range(10)]
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.set_meta({"sample_interval_s": "60"})
        store.append("gpus", _gpus())
        node0 = _samples(fresh, 2, 50.0)  # gpu_id 0, 1 = node n0
        store.append("gpu_samples", node0)
        store.refresh_rollups(until=fresh[-1], since=fresh[0])
        late = _samples([t0 + timedelta(minutes=2)], 4, 50.0)
        late = late[late["gpu_id"] >= 2]  # node n1's backlog, delivered now
        store.append("gpu_samples", late)
        store.refresh_rollups(until=t0 + timedelta(minutes=2), since=t0 + timedelta(minutes=2))
        fleet = store.df("SELECT ts, nodes FROM fleet_rollup WHERE bucket_s = 300 ORDER BY ts")
        assert fleet["nodes"].tolist() == [2, 1]  # 10:00-10:05 has both nodes, 10:05- one
        assert store.scalar(
            "SELECT max(ts) FROM fleet_rollup WHERE bucket_s = 300"
        ) == t0 + timedelta(minutes=5)


def test_query_results_are_cached_until_the_next_write(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append("gpus", _gpus())
        sql = "SELECT gpu_id, host FROM gpus WHERE node_id = ? ORDER BY gpu_id"
        first = store.df(sql, [0])
        first.loc[0, "host"] = "mutated by a caller"  # callers get their own copy
        hits = store._cache.hits
        again = store.df(sql, [0])
        assert store._cache.hits == hits + 1 and again["host"].tolist() == ["n0", "n0"]
        assert store.scalar("SELECT count(*) FROM gpus") == 4
        more = _gpus(3)
        store.append("gpus", more[more["node_id"] == 2])  # a write: the next read is fresh
        assert store.scalar("SELECT count(*) FROM gpus") == 6
        assert store.rows("SELECT count(*) FROM gpus WHERE node_id = ?", [2]) == [(2,)]


def test_a_failing_query_is_shared_with_its_waiters_then_retried() -> None:
    from telemetry.store.cache import ResultCache

    cache, calls = ResultCache(), []

    def boom() -> None:
        calls.append(1)
        raise RuntimeError("disk hiccup")

    for _ in range(3):  # callers right after the failure get it without rerunning the query
        with pytest.raises(RuntimeError, match="hiccup"):
            cache.get("q", 0, boom)
    assert len(calls) == 1
    assert cache.get("q", 1, lambda: 42) == 42  # a write (new version) retries at once


def test_the_cache_drops_results_of_older_versions() -> None:
    from telemetry.store.cache import ResultCache

    cache = ResultCache()
    for v in range(50):  # a live store: each write moves the range, so every key is new
        cache.get(("fleet", v), v, lambda: list(range(1000)))
    assert len(cache._items) == 1  # only the newest version's result is kept


def _age(path: Path) -> None:
    """Make ``path`` look like a store written before the targets/ingest_batches tables."""
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE targets")
    con.execute("DROP TABLE ingest_batches")
    con.close()


def test_an_older_store_opened_read_only_is_upgraded_and_keeps_its_data(tmp_path: Path) -> None:
    """`serve` without a writer opens read-only; a store from an earlier version then lacked
    the targets table and the Overview failed on every refresh."""
    path = tmp_path / "old.duckdb"
    with Store(str(path)) as store:
        store.append("gpus", _gpus())
    _age(path)
    with Store(str(path), read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM targets") == 0
        assert store.scalar("SELECT count(*) FROM gpus") == 4
        assert store.read_only
        with pytest.raises(StoreError, match="read-only"):
            store.append("gpus", _gpus(3).iloc[4:])


def test_a_store_lacking_only_ingest_columns_is_served_read_only_untouched(tmp_path: Path) -> None:
    """Columns only the ingest sink reads (targets.digest/unchanged) do not force an upgrade on
    a read-only open: that would need write access, which `serve` on a shared or read-only
    file does not have. The file is not written at all."""
    import hashlib

    path = tmp_path / "old.duckdb"
    with Store(str(path)) as store:
        store.append("gpus", _gpus())
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE targets DROP COLUMN unchanged")
    con.execute("ALTER TABLE targets DROP COLUMN digest")
    con.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with Store(str(path), read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM targets WHERE stale") == 0
        assert store.scalar("SELECT count(*) FROM gpus") == 4
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_failure_shared_with_many_waiters_keeps_a_short_traceback() -> None:
    """The shared exception is re-raised per caller: each gets its own copy, so its traceback
    does not grow with every caller (it did, to hundreds of frames in a server log)."""
    import traceback

    from telemetry.store.cache import ResultCache

    cache = ResultCache()

    def boom() -> None:
        raise RuntimeError("disk hiccup")

    lengths = []
    for _ in range(20):
        try:
            cache.get("q", 0, boom)
        except RuntimeError as exc:
            lengths.append(len(traceback.format_exception(exc)))
    assert max(lengths) <= lengths[0] + 2, lengths


def test_a_shared_store_error_reaches_every_caller_as_a_store_error() -> None:
    """Callers that share a failed query get the same kind of error, with its path and reason
    (it became a RuntimeError before, so callers catching StoreError missed it)."""
    from telemetry.store.cache import ResultCache

    cache = ResultCache()

    def full() -> None:
        raise StoreError("/data/ff.duckdb", "No space left on device")

    caught = []
    for _ in range(3):
        with pytest.raises(StoreError) as info:
            cache.get("q", 0, full)
        caught.append(info.value)
    assert all(e.path == "/data/ff.duckdb" for e in caught)
    assert all(str(e) == "store /data/ff.duckdb: No space left on device" for e in caught)
    assert caught[1] is not caught[0]  # copies: their tracebacks do not pile up


@pytest.mark.parametrize("read_only", [False, True])
def test_a_duckdb_file_that_is_not_a_store_is_refused_and_left_untouched(
    tmp_path: Path, read_only: bool
) -> None:
    """Pointing `--store` at someone else's DuckDB file must not add our tables to it."""
    path = tmp_path / "finance.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE ledger AS SELECT 42 AS amount")
    con.close()
    with pytest.raises(StoreError, match="not a Factory Floor store.*ledger"):
        Store(str(path), read_only=read_only)
    con = duckdb.connect(str(path), read_only=True)
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
    assert tables == ["ledger"] and con.execute("SELECT amount FROM ledger").fetchone() == (42,)
    con.close()


def test_a_shared_os_error_keeps_its_errno_and_file_name() -> None:
    """Callers that catch ``OSError`` read ``errno``/``filename`` (ENOSPC names the full disk);
    the per-caller copy keeps them, and a decode error keeps its position."""
    import errno

    from telemetry.store.cache import ResultCache

    cache = ResultCache()

    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/ff.duckdb.wal")

    for _ in range(2):
        with pytest.raises(OSError) as info:
            cache.get("q", 0, full)
        assert info.value.errno == errno.ENOSPC
        assert info.value.filename == "/data/ff.duckdb.wal"

    def bad_bytes() -> None:
        b"ok \xff".decode("utf-8")

    with pytest.raises(UnicodeDecodeError) as info:
        cache.get("u", 0, bad_bytes)
    assert info.value.start == 3 and "0xff" in str(info.value)


def test_a_result_computed_across_a_clear_is_not_kept() -> None:
    """A query under way when another store is bound finishes for its caller, but its result
    (of the old store) is not served afterwards to callers of the new one."""
    from telemetry.store.cache import ResultCache

    cache = ResultCache()
    started, release = threading.Event(), threading.Event()

    def old_store() -> str:
        started.set()
        release.wait(5)
        return "old"

    got: list[str] = []
    worker = threading.Thread(target=lambda: got.append(cache.get("q", 1, old_store)))
    worker.start()
    assert started.wait(5)
    cache.clear()  # another store bound while the query runs
    release.set()
    worker.join(5)
    assert got == ["old"]
    assert cache.get("q", 1, lambda: "new") == "new"


def test_no_progress_bar_can_land_in_a_commands_output(tmp_path: Path) -> None:
    """DuckDB draws a progress bar on stdout for any query past 2 s (a big store's upgrade):
    inside `summary --json` that is broken JSON. Every store connection turns it off."""
    with Store(str(tmp_path / "s.duckdb")) as s:
        assert s.scalar("SELECT current_setting('enable_progress_bar')") is False
    with Store(str(tmp_path / "s.duckdb"), read_only=True) as s:
        assert s.scalar("SELECT current_setting('enable_progress_bar')") is False


# A query that keeps a cursor busy for about a second on this machine.
_LONG = "SELECT count(*) FROM range(300000000) t(i) WHERE i % 7 = 3"


def _reading(store: Store) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    started = threading.Event()

    def read() -> None:
        started.set()
        out.append(store.scalar(_LONG))

    thread = threading.Thread(target=read)
    thread.start()
    started.wait()
    time.sleep(0.1)  # inside the query by now
    return thread, out


def test_close_waits_for_a_reader_inside_a_query(tmp_path: Path) -> None:
    # A server stopped while a request reads: DuckDB refused the close ("connection is
    # busy") and the process aborted at exit with the thread still inside DuckDB.
    store = Store(str(tmp_path / "s.duckdb"))
    thread, out = _reading(store)
    assert thread.is_alive()
    store.close()
    thread.join()
    assert out == [42857143]  # the reader's answer arrived whole before the close


def test_close_gives_up_on_a_reader_that_does_not_finish(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.duckdb"))
    thread, _ = _reading(store)
    with pytest.raises(StoreError, match="a reader was still inside a query after 0.05 s"):
        store.close(wait_s=0.05)
    thread.join()
    store.close()


def test_a_result_s_bytes_are_what_pandas_says(tmp_path: Path) -> None:
    """The cache's byte bound counts a frame as ``memory_usage`` does, read from its blocks."""
    import pandas as pd

    from telemetry.store.cache import _frame_bytes

    with Store(str(tmp_path / "s.duckdb")) as store:
        frames = [
            store.df(
                "SELECT range AS i, range * 1.5 AS x, 'gpu-' || range AS host, "
                "TIMESTAMP '2026-03-01' + to_seconds(range) AS ts, "
                "CASE WHEN range % 2 = 0 THEN NULL ELSE range END AS maybe "
                "FROM range(1000)"
            ),
            store.df("SELECT 1 AS a WHERE false"),
        ]
    frames += [
        pd.DataFrame({"c": pd.Categorical(["a", "b"] * 50), "n": pd.array(range(100), "Int64")}),
        pd.DataFrame(),
    ]
    for df in frames:
        assert _frame_bytes(df) == int(df.memory_usage(index=True, deep=False).sum())
    assert _frame_bytes(frames[0]) > 1000 * 8 * 3  # the columns' buffers, not a constant
