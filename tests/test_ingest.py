"""The ingest daemon against real HTTP endpoints on 127.0.0.1 serving dcgm-exporter text
(``exporter``: conftest's fixture server)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.collect.dcgm.scrape import load_targets, scrape_round
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Target, normalise
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES as FIXTURES
from tests.conftest import ROOT, cli
from tests.faults import exporter_farm

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


def _round(
    store: Store,
    urls: list[str],
    timeout: float = 1.0,
    sink: StoreSink | None = None,
    at: datetime = datetime(2026, 3, 1, 12, 0, 0),
) -> object:
    sink = sink or StoreSink(store)
    return sink.write(at, scrape_round([Target(u) for u in urls], timeout))


def test_a_scrape_lands_as_gpu_samples(tmp_path: Path, exporter: str) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        report = _round(store, [f"{exporter}/default_h100/metrics"])
        assert report.up == 1 and report.samples == 8
        got = store.df("""SELECT g.host, g.gpu, g.uuid, g.model, s.util_pct, s.temp_c, s.power_w
                          FROM gpu_samples s JOIN gpus g USING (gpu_id) ORDER BY g.gpu""")
        assert got["gpu"].tolist() == list(range(8))
        assert got["model"].str.contains("H100").all() and got["uuid"].str.startswith("GPU-").all()
        assert got["util_pct"].between(0, 100).all() and got["power_w"].gt(0).all()
        # fields without a column of their own are kept, not dropped
        assert store.scalar("SELECT count(DISTINCT field) FROM gpu_samples_extra") >= 5
        assert store.scalar("SELECT count(*) FROM node_tick") == 1  # rollups follow
        # Target health counts the samples stored (column values + extra fields), not GPU rows.
        cols = [c.name for c in SAMPLE_COLUMNS]
        in_columns = sum(store.scalar(f"SELECT count({c}) FROM gpu_samples") for c in cols)
        extras = store.scalar("SELECT count(*) FROM gpu_samples_extra")
        assert store.scalar("SELECT samples FROM targets") == in_columns + extras > 8 * 20


def test_variants_all_parse(tmp_path: Path, exporter: str) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        names = ["no_type_lines", "mig", "pod_labels", "hostname_lowercase", "sentinels"]
        report = _round(store, [f"{exporter}/{n}/metrics" for n in names])
        assert report.up == len(names)
        hosts = {h for (h,) in store.rows("SELECT DISTINCT host FROM gpus")}
        assert len(hosts) >= 2  # Hostname and hostname both understood
        assert store.scalar("SELECT count(*) FROM gpus WHERE mig_instance IS NOT NULL") > 0
        assert store.scalar("SELECT count(*) FROM gpus WHERE pod IS NOT NULL") > 0
        # blank sentinels (>= 9.2e18) are missing values, never stored as numbers
        assert store.scalar("SELECT max(power_w) FROM gpu_samples") < 1e6


def test_xid_becomes_a_decodable_event(tmp_path: Path, exporter: str) -> None:
    text = (FIXTURES / "xid.txt").read_text()
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)
        report = _round(store, [f"{exporter}/xid/metrics"], sink=sink)
        assert report.xid_events >= 1
        for (x,) in store.rows("SELECT xid FROM xid_events"):
            assert f'"{x}"' in text or f" {x}\n" in text  # each event is an XID the scrape had
        again = _round(
            store, [f"{exporter}/xid/metrics"], sink=sink, at=datetime(2026, 3, 1, 12, 0, 15)
        )
        assert again.xid_events == 0  # an unchanged gauge and count are not new XIDs


def test_bad_targets_are_down_with_a_reason_and_do_not_stall_others(
    tmp_path: Path, exporter: str
) -> None:
    dead = "http://127.0.0.1:9/metrics"  # nothing listens on the discard port
    urls = [
        f"{exporter}/default_h100/metrics",
        dead,
        f"{exporter}/error/metrics",
        f"{exporter}/truncated/metrics",
        f"{exporter}/slow/metrics",
    ]
    t0 = time.monotonic()
    with Store(str(tmp_path / "s.duckdb")) as store:
        report = _round(store, urls, timeout=1.0)
        elapsed = time.monotonic() - t0
        health = dict(store.rows("SELECT target, error FROM targets"))
        assert report.up == 1 and report.samples == 8
    assert elapsed < 2.5  # the 3 s slow target is cut at the 1 s timeout, others in parallel
    assert "Connection refused" in health[dead] or "refused" in health[dead].lower()
    assert "HTTP 500" in health[f"{exporter}/error/metrics"]
    assert "truncated" in health[f"{exporter}/truncated/metrics"].lower()
    assert "timed out" in health[f"{exporter}/slow/metrics"].lower()


def test_targets_from_file_sd(tmp_path: Path) -> None:
    f = tmp_path / "targets.json"
    f.write_text(
        json.dumps(
            [{"targets": ["node1:9400", "http://node2:9400/metrics"], "labels": {"rack": "r1"}}]
        )
    )
    ts = load_targets(str(f))
    assert [t.url for t in ts] == ["http://node1:9400/metrics", "http://node2:9400/metrics"]
    assert ts[0].labels == {"rack": "r1"} and ts[0].host == "node1"
    y = tmp_path / "targets.yaml"
    y.write_text("- targets: ['node3:9400']\n")
    assert load_targets(str(y))[0].url == "http://node3:9400/metrics"
    bad = tmp_path / "bad.json"
    bad.write_text('{"targets": "x"}')
    with pytest.raises(ValueError, match="list of target groups"):
        load_targets(str(bad))
    for hostile in ["", "ftp://x", "a b", "javascript:alert(1)"]:
        with pytest.raises(ValueError):
            normalise(hostile)


def test_ingest_cli_once(tmp_path: Path, exporter: str) -> None:
    store = tmp_path / "cli.duckdb"
    r = cli(
        "ingest", "--target", f"{exporter}/default_h100/metrics", "--store", str(store), "--once"
    )
    assert r.returncode == 0, r.stderr
    assert "1/1 targets up, 8 GPU samples" in r.stderr
    assert cli("ingest", "--store", str(store)).returncode == 1  # no targets: one line
    missing = cli("ingest", "--targets-file", str(tmp_path / "nope.json"), "--store", str(store))
    assert missing.returncode == 1 and "nope.json" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_an_ingest_run_leaves_every_rollup_level_whole(tmp_path: Path, exporter: str) -> None:
    """A round builds the per-GPU hours and 6 hours only when a 5-minute bucket closes; an
    ingest process that stops brings them up to its last round, so a store at rest (here two
    runs from cron within one 5-minute bucket) counts every sample at every level."""
    left = 300 - time.time() % 300
    if left < 30:  # both runs within one 5-minute bucket, or the second would build them
        time.sleep(left + 1)
    store = tmp_path / "s.duckdb"
    for _ in range(2):
        target = f"{exporter}/default_h100/metrics"
        r = cli("ingest", "--target", target, "--store", str(store), "--once")
        assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        samples = s.scalar("SELECT count(*) FROM gpu_samples")
        levels = dict(s.rows("SELECT bucket_s, sum(samples) FROM gpu_rollup GROUP BY ALL"))
    assert samples == 16
    assert levels == {300: 16, 3600: 16, 21600: 16}


def test_replay_exporters_to_store_end_to_end(tmp_path: Path) -> None:
    """The whole path without a GPU: simulated exporters -> ingest -> store."""
    farm, targets = exporter_farm(tmp_path, "dev-64", "--speed", "10")
    try:
        store = tmp_path / "e2e.duckdb"
        r = cli("ingest", "--targets-file", str(targets), "--store", str(store), "--once")
        assert r.returncode == 0, r.stderr
    finally:
        farm.terminate()
        farm.wait(timeout=10)
    with Store(str(store), read_only=True) as s:
        assert s.scalar("SELECT count(DISTINCT host) FROM gpus") >= 8
        assert s.scalar("SELECT count(*) FROM gpu_samples") >= 64
        assert s.scalar("SELECT count(*) FROM targets WHERE up") >= 8
        assert s.scalar("SELECT avg(util_pct) FROM gpu_samples") > 10  # a running job


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stopped_daemon_stores_the_round_in_progress_first(
    tmp_path: Path, exporter: str, sig: signal.Signals
) -> None:
    # Stopped while its scrape of a 3 s exporter is in flight: the round is stored, then the
    # daemon exits 0 (killed mid-round it stored nothing: that scrape cannot be taken again).
    store = tmp_path / "s.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "ingest", "--store", str(store),
         "--target", f"{exporter}/slow/metrics", "--interval", "30", "--timeout", "10"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(2.0)  # started (~1 s) and inside the scrape, which answers at 3 s
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"{sig.name}: stopping after the round in progress" in err
    with Store(str(store), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM gpu_samples") == 8  # the default fixture's GPUs
        assert s.scalar("SELECT count(DISTINCT ts) FROM targets") == 1
