"""remote_write against the real server: a 2xx means every sample of the request is stored,
exactly once, whatever order the sender's shards arrive in, and one bad request never stops the
ones after it. Each test posts real snappy'd WriteRequests to ``serve --accept-ingest`` and
reads the store file after a clean stop (SIGTERM: the server writes what it still staged)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from telemetry.ingest.remote_write import Policy, encode
from telemetry.ingest.rw_receiver import Busy, Receiver
from telemetry.store import Store
from tests.conftest import Server, start_server
from tests.test_prom_remote_write import post as post_as

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

INTERVAL_MS = 15_000


def post(srv: Server, body: bytes) -> tuple[int, dict[str, Any]]:
    return post_as(srv, body, token=None)  # these servers are on loopback with no token


def scrape(host: str, ts_ms: int, temps: list[float], gpu0: int = 0) -> list[Any]:
    """One scrape of ``host`` as Prometheus forwards it: ``up`` and one series per GPU, every
    sample stamped with the scrape's time."""
    inst = {"instance": f"{host}:9400", "job": "dcgm"}
    series: list[Any] = [({"__name__": "up", **inst}, [(1.0, ts_ms)])]
    for i, t in enumerate(temps):
        labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": str(gpu0 + i), "Hostname": host}
        series.append(({**labels, **inst}, [(t, ts_ms)]))
    return series


def t0_ms(hours_ago: float = 2.0) -> int:
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    return (now_ms - int(hours_ago * 3_600_000)) // INTERVAL_MS * INTERVAL_MS


def serve(tmp_path: Path, *extra: str) -> Server:
    store = tmp_path / "rw.duckdb"
    return start_server(
        ["serve", "--store", str(store), "--accept-ingest", *extra], tmp_path / "serve.log"
    )


def temps_stored(path: Path) -> list[tuple[str, int, float]]:
    with Store(str(path), read_only=True) as s:
        return s.rows(
            "SELECT g.host, g.gpu, s.temp_c FROM gpu_samples s JOIN gpus g USING (gpu_id) "
            "WHERE s.temp_c IS NOT NULL ORDER BY ALL"
        )


def test_scrapes_out_of_order_are_all_stored_once(tmp_path: Path) -> None:
    """Parallel shards deliver scrapes 0, 2, 1, 3, 5, 4, ...: every one of the 20 is stored,
    once (the receiver used to learn a 30 s window from the first gap and keep one scrape of
    each pair)."""
    srv = serve(tmp_path)
    t0 = t0_ms()
    order = [0, 2, 1, 3, 5, 4, 6, 8, 7, 9, 11, 10, 12, 14, 13, 15, 17, 16, 18, 19]
    try:
        for k in order:
            body = encode(scrape("n1", t0 + k * INTERVAL_MS, [30.0 + k, 60.0 + k]))
            status, reply = post(srv, body)
            assert status == 200 and reply["samples"] == 3, reply
    finally:
        srv.stop()
    got = temps_stored(tmp_path / "rw.duckdb")
    want = [("n1", 0, 30.0 + k) for k in range(20)] + [("n1", 1, 60.0 + k) for k in range(20)]
    assert got == want


def test_a_sender_scraping_faster_than_the_window_loses_nothing(tmp_path: Path) -> None:
    """Two ``up`` samples 1 ms apart, then a sender scraping every 5 s into 15 s windows: each
    scrape is a round of its own, and four targets scraped at their own offsets share one round
    per interval (a 1 ms window once spread them over rounds of one target each)."""
    srv = serve(tmp_path)
    t0 = t0_ms()
    try:
        assert post(srv, encode(scrape("fast", t0, [1.0])))[0] == 200
        assert post(srv, encode(scrape("fast", t0 + 1, [2.0])))[0] == 200
        for k in range(1, 12):
            assert post(srv, encode(scrape("fast", t0 + k * 5000, [2.0 + k])))[0] == 200
        for k in range(6):
            for j, host in enumerate(("a", "b", "c", "d")):
                ts = t0 + k * INTERVAL_MS + 1000 + 3000 * j  # each target its own offset
                assert post(srv, encode(scrape(host, ts, [10.0 * k + j])))[0] == 200
    finally:
        srv.stop()
    path = tmp_path / "rw.duckdb"
    fast = [r for r in temps_stored(path) if r[0] == "fast"]
    assert [r[2] for r in fast] == [1.0, 2.0] + [2.0 + k for k in range(1, 12)]
    with Store(str(path), read_only=True) as s:
        per_round = s.rows(
            "SELECT ts, count(DISTINCT g.host) FROM gpu_samples s JOIN gpus g USING (gpu_id) "
            "WHERE g.host IN ('a', 'b', 'c', 'd') GROUP BY ts ORDER BY ts"
        )
    assert [n for _, n in per_round] == [4] * 6, per_round


def test_samples_outside_the_clock_window_are_refused_and_later_requests_stored(
    tmp_path: Path,
) -> None:
    """Samples at -1 ms, in 1970, in 2200 and at int64's end are refused with the reason
    (400 when nothing else is left), a request mixing them keeps its good samples (200), and
    every later request is stored, across a restart; the store's data never spans 1970."""
    t0 = t0_ms()
    srv = serve(tmp_path)
    try:
        for bad_ms in (-1, 0, 7_258_118_400_000, 2**63 - 1):
            status, reply = post(srv, encode(scrape("bad", bad_ms, [50.0])))
            assert status == 400, reply
            assert "accepted window" in reply["error"] and reply["refused"] == 2, reply
        mixed = scrape("n1", t0, [60.0]) + scrape("bad", -1, [70.0])
        status, reply = post(srv, encode(mixed))
        assert status == 200 and reply["samples"] == 2 and reply["refused"] == 2, reply
        assert "1969-12-31" in reply["refused_reason"]
        for k in range(1, 4):
            assert post(srv, encode(scrape("n1", t0 + k * INTERVAL_MS, [60.0 + k])))[0] == 200
    finally:
        srv.stop()
    srv = serve(tmp_path)
    try:  # after a restart, nothing left over poisons the receiver
        for k in range(4, 8):
            status, reply = post(srv, encode(scrape("n1", t0 + k * INTERVAL_MS, [60.0 + k])))
            assert status == 200, reply
    finally:
        srv.stop()
    path = tmp_path / "rw.duckdb"
    assert [r[2] for r in temps_stored(path)] == [60.0 + k for k in range(8)]
    with Store(str(path), read_only=True) as s:
        lo, hi = s.rows("SELECT min(ts), max(ts) FROM gpu_samples")[0]
        assert (hi - lo).total_seconds() < 3600
        health = s.rows("SELECT up, error FROM targets WHERE target = 'remote_write'")
    assert any(up and err and "accepted window" in err for up, err in health), health


def test_a_narrower_accepted_window_is_configurable(tmp_path: Path) -> None:
    srv = serve(tmp_path, "--rw-max-age", "1h")
    try:
        status, reply = post(srv, encode(scrape("n1", t0_ms(hours_ago=2), [1.0])))
        assert status == 400 and "--rw-max-age" in reply["error"], reply
        assert post(srv, encode(scrape("n1", t0_ms(hours_ago=0.5), [1.0])))[0] == 200
    finally:
        srv.stop()


def test_32768_gpus_under_one_hostname_do_not_stop_the_rollups(tmp_path: Path) -> None:
    """A node of 32,768 GPUs overflowed a 16-bit column of the node rollup: that write and
    every later one failed, also after a restart."""
    srv = serve(tmp_path)
    t0 = t0_ms()
    try:
        big = scrape("big", t0, [40.0] * 32_768)
        status, reply = post(srv, encode(big))
        assert status == 200 and reply["samples"] == 32_769, reply
        for k in range(1, 4):
            status, reply = post(srv, encode(scrape("n1", t0 + k * INTERVAL_MS, [50.0 + k])))
            assert status == 200, reply
        time.sleep(0.5)
    finally:
        srv.stop()
    path = tmp_path / "rw.duckdb"
    with Store(str(path), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM gpu_samples s JOIN gpus g USING (gpu_id) "
                        "WHERE g.host = 'big'") == 32_768  # fmt: skip
        assert s.scalar("SELECT max(gpus) FROM node_rollup") == 32_768
        assert s.scalar("SELECT count(*) FROM gpu_samples s JOIN gpus g USING (gpu_id) "
                        "WHERE g.host = 'n1'") == 3  # fmt: skip


def test_decodes_beyond_the_budget_wait_then_get_busy(tmp_path: Path) -> None:
    """At most ``Policy.decoders`` bodies are decoded at once (each may cost ~2.5 s and
    hundreds of MB); one more waits ``decode_wait_s`` and is then told to retry (503 over
    HTTP, which Prometheus resends), never decoded beside them."""
    with Store(str(tmp_path / "s.duckdb")) as store:
        rec = Receiver(store, lambda batch: None, Policy(decoders=1, decode_wait_s=0.2))
        assert rec.decoding.acquire(timeout=1)  # another request is decoding
        with pytest.raises(Busy, match="1 remote_write bodies already being decoded"):
            rec.accept(encode(scrape("n1", t0_ms(), [40.0])))
        rec.decoding.release()
        assert rec.accept(encode(scrape("n1", t0_ms(), [40.0])))["samples"] == 2
