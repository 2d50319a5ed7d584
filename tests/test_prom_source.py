"""``ingest --prometheus URL`` against real Prometheus and VictoriaMetrics (Debian's packages)
that scrape dcgm-exporter endpoints through a file_sd file: every GPU, XID and value a direct
scrape stores also arrives through /federate; a ``--since`` backfill through query_range stores
what the server holds, once, across a server killed mid-backfill; a dead server is a source
marked down with its reason."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from telemetry.store import Store
from tests.conftest import ROOT, cli, free_port
from tests.faults import exporter_farm
from tests.prom_fixture import TsdbServer, _frozen_farm, secured, stored  # noqa: F401
from tests.test_exporters import FarmThread

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_every_gpu_xid_and_value_of_a_direct_scrape_arrives_through_the_server(
    kind: str, frozen_farm: tuple[FarmThread, Path], tmp_path: Path
) -> None:
    ft, targets = frozen_farm
    sim = ft.farm.sim
    up = sum(not sim.down(n) for n in range(sim.n_hosts))
    assert up < sim.n_hosts  # a node in repair: down both ways
    direct = tmp_path / "direct.duckdb"
    r = cli("ingest", "--store", str(direct), "--once", "--targets-file", str(targets))
    assert r.returncode == 0, r.stderr
    with TsdbServer(kind, tmp_path, targets) as server:
        server.wait_scraped(up)
        via = tmp_path / "via.duckdb"
        # exactly as a user writes it
        r = cli("ingest", "--store", str(via), "--once", "--prometheus", server.url)
        assert r.returncode == 0, r.stderr
    a, b = stored(direct), stored(via)
    assert len(a["samples"]) == 8 * up
    assert b["gpus"] == a["gpus"]
    assert b["samples"] == a["samples"]
    assert b["extras"] == a["extras"]
    assert a["xids"] and b["xids"] == a["xids"]
    assert b["targets"] == a["targets"] and list(a["targets"].values()).count(False) >= 1


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_a_since_backfill_stores_every_step_as_a_direct_scrape_would(
    kind: str, frozen_farm: tuple[FarmThread, Path], tmp_path: Path
) -> None:
    """``--once --since 8s --interval 1``: the steps of the last 8 s from query_range, then
    the live round; the farm holds still, so every round equals the direct scrape."""
    ft, targets = frozen_farm
    direct = tmp_path / "direct.duckdb"
    r = cli("ingest", "--store", str(direct), "--once", "--targets-file", str(targets))
    assert r.returncode == 0, r.stderr
    a = stored(direct)
    with TsdbServer(kind, tmp_path, targets) as server:
        server.wait_scraped(sum(not ft.farm.sim.down(n) for n in range(ft.farm.sim.n_hosts)))
        time.sleep(8)  # eight more seconds of history
        store = tmp_path / "since.duckdb"
        r = cli("ingest", "--store", str(store), "--once", "--prometheus", server.url,
                "--since", "8s", "--interval", "1", "--timeout", "0.5")  # fmt: skip
        assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        rounds = [t for (t,) in s.rows("SELECT DISTINCT ts FROM gpu_samples ORDER BY 1")]
    assert len(rounds) >= 8  # the backfilled steps and the live round
    assert sum(t.microsecond == 0 for t in rounds) >= 7  # steps on the query_range grid
    for ts in rounds:
        b = stored(store, ts)
        assert b["samples"] == a["samples"] and b["extras"] == a["extras"], ts
    assert stored(store)["xids"] == a["xids"]  # the XID once, from the first step


def test_tls_basic_auth_a_path_prefix_and_instant_queries(
    frozen_farm: tuple[FarmThread, Path], tmp_path: Path
) -> None:
    """Prometheus behind TLS and basic auth, under ``/select/0/prometheus`` (where
    VictoriaMetrics cluster serves a tenant): with the CA and the password file both live
    paths (``/federate`` and instant queries, as Thanos Query and Mimir are read) store what a
    direct scrape stores; a wrong password or an unknown CA is the source down, in words."""
    ft, targets = frozen_farm
    direct = tmp_path / "direct.duckdb"
    r = cli("ingest", "--store", str(direct), "--once", "--targets-file", str(targets))
    assert r.returncode == 0, r.stderr
    a = stored(direct)
    web, ca = secured(tmp_path, "ff", "s3cret")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("s3cret\n")
    bad.write_text("guess\n")
    prefix = "/select/0/prometheus"
    with TsdbServer("prometheus", tmp_path, targets, web_config=web, prefix=prefix) as server:
        assert server.url.startswith("https://") and server.url.endswith(prefix)
        auth = ["--prometheus", server.url, "--prometheus-user", "ff"]
        for mode in ("federate", "query"):
            deadline = time.monotonic() + 60
            while True:  # until the server has scraped every exporter twice
                store = tmp_path / f"{mode}-{time.monotonic_ns()}.duckdb"
                r = cli("ingest", "--store", str(store), "--once", *auth,
                        "--prometheus-password-file", str(good), "--prometheus-ca-file", str(ca),
                        "--prometheus-mode", mode)  # fmt: skip
                assert r.returncode == 0, r.stderr
                b = stored(store)
                if b["samples"] == a["samples"] or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert b["samples"] == a["samples"] and b["gpus"] == a["gpus"]
            assert b["extras"] == a["extras"] and b["xids"] == a["xids"]
        wrong = ["--prometheus-password-file", str(bad), "--prometheus-ca-file", str(ca)]
        r = cli("ingest", "--store", str(tmp_path / "x.duckdb"), "--once", *auth, *wrong)
        assert r.returncode == 1 and "HTTP 401 Unauthorized" in r.stderr
        r = cli("ingest", "--store", str(tmp_path / "y.duckdb"), "--once", *auth,
                "--prometheus-password-file", str(good))  # fmt: skip
        assert r.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in r.stderr


def test_an_unreachable_server_is_a_source_down_with_its_reason(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    url = f"http://127.0.0.1:{free_port()}"
    r = cli("ingest", "--store", str(store), "--once", "--prometheus", url)
    assert r.returncode == 1
    assert "connection refused" in r.stderr
    with Store(str(store), read_only=True) as s:
        rows = s.rows("SELECT target, up, error FROM targets")
    assert rows == [(f"prometheus:{url}", False, f"connection refused (127.0.0.1:{url[17:]})")]


def test_bad_prometheus_options_are_one_line_errors(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    for args, words in (
        (["--prometheus", "ftp://x"], "not an http(s) URL"),
        (["--prometheus", "http://127.0.0.1:1", "--since", "yesterday"], "a duration (6h, 7d)"),
        (["--since", "6h", "--target", "127.0.0.1:1"], "--since needs --prometheus URL or --slurm"),
        (["--prometheus", "http://h:1", "--prometheus-token-file", "/nonexistent"], "nonexist"),
    ):
        r = cli("ingest", "--store", store, "--once", *args)
        assert r.returncode == 2 or r.returncode == 1, (args, r.stderr)
        assert words in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)


def test_since_backfills_what_the_server_holds_once_across_a_server_killed_midway(
    tmp_path: Path,
) -> None:
    """The farm of ``replay --serve-exporters`` (live at 200x: seed 2's first XID comes 25 s
    in), scraped every second by Prometheus through its file_sd file; then ``ingest --since``
    backfills through query_range and Prometheus is SIGKILLed and restarted while it does.
    Every (step, GPU) the server answers for the backfilled steps is stored exactly once, with
    its value."""
    farm, targets = exporter_farm(tmp_path, "dev-64", "--speed", "200", "--seed", "2")
    server = TsdbServer("prometheus", tmp_path, targets)
    daemon = None
    log = tmp_path / "ingest.log"
    try:
        server.start()
        time.sleep(35)
        store = tmp_path / "b.duckdb"
        with open(log, "w") as fh:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "ingest", "--store", str(store), "--prometheus",
                 server.url, "--since", "30s", "--interval", "1", "--timeout", "0.5"],
                cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        _wait_log(log, "stored", daemon)
        server.stop(signal.SIGKILL)
        _wait_log(log, "down: connection refused", daemon)
        killed_after = log.read_text().count(" stored: ")
        time.sleep(3)  # rounds missed while it is down
        server.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _live_rounds(log) < 3:
            time.sleep(0.5)
        daemon.send_signal(signal.SIGINT)
        daemon.wait(timeout=60)
        assert _live_rounds(log) >= 3, log.read_text()[-3000:]
        with Store(str(store), read_only=True) as s:
            rows = s.rows(
                "SELECT epoch_ms(s.ts), g.host, g.gpu, s.util_pct FROM gpu_samples s "
                "JOIN gpus g USING (gpu_id)"
            )
            twice = s.scalar(
                "SELECT count(*) FROM (SELECT ts, gpu_id FROM gpu_samples GROUP BY ALL "
                "HAVING count(*) > 1)"
            )
            xids = set(s.rows("SELECT DISTINCT host, gpu, xid FROM xid_events"))
        got = {(t / 1000, h, g): u for t, h, g, u in rows}
        steps = sorted({k[0] for k in got if k[0] == int(k[0])})  # query_range's steps
        rounds = sorted({k[0] for k in got})
        answer = server.get(
            "/api/v1/query_range", query='DCGM_FI_DEV_GPU_UTIL{job="dcgm"}',
            start=str(steps[0]), end=str(steps[-1]), step="1",
        )["result"]  # fmt: skip
        gauges = server.get(
            "/api/v1/query_range", query='DCGM_EXP_XID_ERRORS_COUNT{job="dcgm"} > 0',
            start=str(steps[0]), end=str(steps[-1]), step="1",
        )["result"]  # fmt: skip
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        server.stop()
        farm.terminate()
        farm.wait(timeout=30)
    want = {
        (float(t), r["metric"]["Hostname"], int(r["metric"]["gpu"])): float(v)
        for r in answer
        for t, v in r["values"]
    }
    assert 0 < killed_after and steps[-1] - steps[0] >= 30  # it was killed mid-way
    assert twice == 0
    assert len(want) >= 30 * 80
    # every step the server answers is stored: that step, or a live round less than a step away
    aligned = {k: v for k, v in want.items() if k[0] in steps}
    assert aligned.keys() == {k for k in got if k[0] in steps}
    assert all(abs(got[k] - v) < 1e-3 for k, v in aligned.items())
    missed = [t for t in sorted({k[0] for k in want}) if min(abs(r - t) for r in rounds) >= 1]
    assert not missed, (missed, rounds)
    # the exporter's XID counts in its window, as the server holds them, are all events
    shown = {(r["metric"]["Hostname"], int(r["metric"]["gpu"]), int(r["metric"]["xid"]))
             for r in gauges}  # fmt: skip
    assert xids and shown <= xids


def _wait_log(log: Path, words: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while words not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {words!r} in:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def _live_rounds(log: Path) -> int:
    """Rounds stored at their own (not step-aligned) time: the live ones."""
    return len(re.findall(r"round \S+T\d\d:\d\d:\d\d\.\d+ stored", log.read_text()))
