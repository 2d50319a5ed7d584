"""remote_write exactly once by (series, timestamp), not by request bytes: acknowledged samples
sent again in differently batched requests (Prometheus replaying its WAL, a shard retrying) are
stored once, a late shard's other fields of the same scrape still fill the round, and samples
whose ``gpu`` label is not a GPU index are counted as refused with the reason. Real server
(``serve --accept-ingest``), real snappy'd WriteRequests, a real Prometheus for the resend of
what it sent; the store file is read after a clean stop."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from telemetry.ingest.remote_write import encode
from telemetry.store import Store
from tests.prom_fixture import TsdbServer, _frozen_farm, hosts_up  # noqa: F401 (a fixture)
from tests.test_exporters import FarmThread
from tests.test_prom_remote_write import forwarding, token_server
from tests.test_prom_remote_write import post as post_as
from tests.test_remote_write_loss import INTERVAL_MS, post, scrape, serve, t0_ms

HOSTS = ("n1", "n2", "n3")


def _dupes(path: Path) -> dict[str, int]:
    """Rows stored more than once, per table, by each table's (series, time) key."""
    with Store(str(path), read_only=True) as s:
        return {
            t: s.scalar(
                f"SELECT count(*) FROM (SELECT {k} FROM {t} GROUP BY ALL HAVING count(*) > 1)"
            )
            for t, k in (
                ("gpu_samples", "ts, gpu_id"),
                ("gpu_samples_extra", "ts, gpu_id, field"),
                ("targets", "ts, target"),
            )
        }


def _scrapes(t0: int, k: int) -> list[Any]:
    """Scrape ``k`` of the three hosts, each at its own offset in the 15 s interval."""
    out: list[Any] = []
    for j, host in enumerate(HOSTS):
        temps = [40.0 + 10 * j + k + i / 4 for i in range(4)]  # exact in float32
        out += scrape(host, t0 + k * INTERVAL_MS + 1000 + 4000 * j, temps)
    return out


def test_a_resend_batched_differently_is_stored_once(tmp_path: Path) -> None:
    """Eight scrapes of three hosts, one request each, then the first six again after their
    windows were written: all at once, then per series in reverse order, then one host's only
    (its round's time is another host's scrape). Each (GPU, time) is stored once, with the
    first values; a late shard's power readings of scrape 2 fill that round's rows."""
    srv = serve(tmp_path)
    t0 = t0_ms()
    try:
        for k in range(8):
            status, reply = post(srv, encode(_scrapes(t0, k)))
            assert status == 200 and reply["samples"] == 15, reply
        first = _scrapes(t0, 0) + _scrapes(t0, 1) + _scrapes(t0, 2)
        assert post(srv, encode(first))[0] == 200  # windows 0-2 again, one request
        resend = [s for k in range(3, 6) for s in _scrapes(t0, k)]
        for series in reversed(resend):  # windows 3-5 again, one series a request
            series = (series[0], [(v + 1000.0, t) for v, t in series[1]])  # other values
            assert post(srv, encode([series]))[0] == 200
        n2 = [s for s in _scrapes(t0, 4) if s[0].get("instance") == "n2:9400"]
        assert post(srv, encode(n2))[0] == 200
        power = [
            ({"__name__": "DCGM_FI_DEV_POWER_USAGE", "gpu": str(i), "Hostname": "n1",
              "instance": "n1:9400", "job": "dcgm"}, [(100.0 + i, t0 + 2 * INTERVAL_MS + 1000)])
            for i in range(4)
        ]  # fmt: skip
        assert post(srv, encode(power))[0] == 200  # a shard late with scrape 2's power
        for k in range(8, 11):  # the data moves on: every resent window is written again
            assert post(srv, encode(_scrapes(t0, k)))[0] == 200
    finally:
        srv.stop()
    path = tmp_path / "rw.duckdb"
    assert _dupes(path) == {"gpu_samples": 0, "gpu_samples_extra": 0, "targets": 0}
    with Store(str(path), read_only=True) as s:
        rows = s.rows(
            "SELECT g.host, g.gpu, s.temp_c, s.power_w FROM gpu_samples s JOIN gpus g "
            "USING (gpu_id) ORDER BY s.ts, g.host, g.gpu"
        )
        assert s.scalar("SELECT count(*) FROM remote_write_staging") == 0
        ticks = s.scalar("SELECT sum(n) FROM node_tick")
    assert len(rows) == 11 * 3 * 4, Counter(r[:2] for r in rows).most_common(3)
    assert ticks == len(rows)  # the node sums count every GPU once too
    temps = sorted(r[2] for r in rows)
    assert temps == sorted(40.0 + 10 * j + k + i / 4
                           for k in range(11) for j in range(3) for i in range(4))  # fmt: skip
    assert sorted(r[3] for r in rows if r[3] is not None) == [100.0, 101.0, 102.0, 103.0]


def test_gpu_labels_that_are_no_gpu_index_are_refused_with_the_reason(tmp_path: Path) -> None:
    """``gpu`` labels 32768, -1, 1e3 and an Arabic-Indic digit: 4 samples refused, named in the
    reply with why, and the 3 good ones stored (it answered "refused 0" and stored 3 of 7)."""
    srv = serve(tmp_path)
    t0 = t0_ms()
    inst = {"instance": "n1:9400", "job": "dcgm", "Hostname": "n1"}
    gpus = ["0", "1", "32767", "32768", "-1", "1e3", "\u0663"]
    series = [
        ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": g, **inst}, [(50.0, t0)]) for g in gpus
    ]
    try:
        status, reply = post(srv, encode(series))
        later = post(srv, encode(scrape("n1", t0 + 3 * INTERVAL_MS, [1.0])))
    finally:
        srv.stop()
    assert status == 200 and reply["samples"] == 3 and reply["refused"] == 4, reply
    assert "4 with a gpu label that is not a GPU index 0..32,767" in reply["refused_reason"]
    assert later[0] == 200
    with Store(str(tmp_path / "rw.duckdb"), read_only=True) as s:
        got = s.rows("SELECT g.gpu FROM gpu_samples JOIN gpus g USING (gpu_id) "
                     "WHERE temp_c = 50 ORDER BY 1")  # fmt: skip
        health = s.scalar("SELECT max(rejected_lines) FROM targets WHERE target = 'remote_write'")
    assert got == [(0,), (1,), (32767,)]
    assert health == 4  # the receiver's row counts them too


def _prom_samples(prom: TsdbServer) -> list[Any]:
    """Every DCGM and ``up`` sample Prometheus holds for the last 40 s, as WriteRequest
    series (the values and timestamps it stored, which it sent us)."""
    out = []
    for r in prom.query('{job="dcgm", __name__=~"DCGM_.*|up"}[40s]'):
        samples = [(float(v), round(float(t) * 1000)) for t, v in r["values"]]
        out.append((r["metric"], samples))
    return out


def test_prometheus_samples_sent_again_rebatched_are_stored_once(
    frozen_farm: tuple[FarmThread, Path], tmp_path: Path
) -> None:
    """A real Prometheus forwards the farm's scrapes (2 s scrapes into 15 s windows); then
    everything it holds is sent again, 250 series a request in reverse order, as a replay of
    its WAL after a restart would: no (GPU, time) is stored twice, and no GPU has more rows
    in a window than Prometheus has scrapes of it there (the first and last windows of the
    40 s asked for are partly outside it: not judged)."""
    ft, targets = frozen_farm
    store = tmp_path / "rw.duckdb"
    srv = token_server(store)
    try:
        with forwarding(srv, targets) as prom:
            prom.wait_scraped(hosts_up(ft))
            time.sleep(24)  # windows are written once the data is 5 s past them
            held = _prom_samples(prom)
            again = list(reversed(held))
            for i in range(0, len(again), 250):
                status, reply = post_as(srv, encode(again[i : i + 250]))
                assert status == 200, reply
    finally:
        srv.proc.terminate()  # it writes what it still staged: given the time that takes
        srv.proc.wait(timeout=180)
    assert _dupes(store) == {"gpu_samples": 0, "gpu_samples_extra": 0, "targets": 0}
    scrapes: Counter[tuple[str, int, int]] = Counter()
    for metric, samples in held:
        if metric["__name__"] == "DCGM_FI_DEV_GPU_TEMP":
            for _, t in samples:
                scrapes[(metric["Hostname"], int(metric["gpu"]), t // INTERVAL_MS)] += 1
    assert scrapes
    first, last = min(w for *_, w in scrapes), max(w for *_, w in scrapes)
    with Store(str(store), read_only=True) as s:
        rows = s.rows(
            "SELECT g.host, g.gpu, epoch_ms(s.ts) // ?, count(*) FROM gpu_samples s "
            "JOIN gpus g USING (gpu_id) GROUP BY ALL",
            [INTERVAL_MS],
        )
    over = [(h, g, w, n, scrapes[(h, g, w)]) for h, g, w, n in rows
            if first < w < last and (h, g, w) in scrapes and n > scrapes[(h, g, w)]]  # fmt: skip
    assert not over, over[:5]
