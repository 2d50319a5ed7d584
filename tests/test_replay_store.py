"""The replay engine writing into a real store: determinism, dynamics, live pacing."""

from __future__ import annotations

import hashlib
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from telemetry.metrics.summary import store_summary
from telemetry.queries import TimeRange
from telemetry.queries.gpus import heatmap
from telemetry.replay.runner import replay
from telemetry.replay.scenarios import Scenario, get_scenario
from telemetry.store import Store
from tests.conftest import ROOT, build_store
from tests.slurm_fixture import wait_for

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

TABLES = (
    "gpu_samples",
    "train_metrics",
    "interruptions",
    "checkpoints",
    "xid_events",
    "node_rollup",
    "fleet_rollup",
    "gpus",
    "runs",
)


def fingerprint(path: Path) -> dict[str, str]:
    with Store(str(path), read_only=True) as s:
        out = {}
        for t in TABLES:
            df = s.df(f"SELECT * FROM {t}")
            df = df.sort_values(list(df.columns)).reset_index(drop=True)
            out[t] = hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()
        return out


def test_same_seed_identical_store_other_seed_different(tmp_path: Path) -> None:
    a = fingerprint(build_store(tmp_path / "a.duckdb", seed=5, days=0.3))
    b = fingerprint(build_store(tmp_path / "b.duckdb", seed=5, days=0.3))
    c = fingerprint(build_store(tmp_path / "c.duckdb", seed=6, days=0.3))
    assert a == b
    assert a["gpu_samples"] != c["gpu_samples"] and a["train_metrics"] != c["train_metrics"]


def test_loss_rolls_back_to_the_restored_step(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        its = s.df("SELECT * FROM interruptions WHERE lost_steps > 0 ORDER BY ts")
        assert not its.empty
        for it in its.itertuples():
            after = s.df(
                """SELECT step, attempt FROM train_metrics WHERE ts > ?
                            ORDER BY ts LIMIT 1""",
                [it.ts + __import__("datetime").timedelta(seconds=it.detect_s + it.restart_s)],
            )
            if after.empty:
                continue
            # The first step logged after the restart is just past the restored checkpoint.
            assert it.restored_step < after["step"][0] <= it.restored_step + 5
        # Steps re-trained after a rollback appear again under a later attempt.
        redone = s.scalar("""SELECT count(*) FROM (SELECT step FROM train_metrics
                             GROUP BY step HAVING count(DISTINCT attempt) > 1)""")
        assert redone > 0


def test_gpu_interruptions_show_up_in_the_xid_gauge(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        xids = s.df("SELECT * FROM xid_events")
        assert not xids.empty
        for x in xids.itertuples():
            last = s.scalar(
                """SELECT s.xid_last FROM gpu_samples s JOIN gpus g USING (gpu_id)
                               WHERE g.host = ? AND g.gpu = ? AND s.ts >= ?
                               ORDER BY s.ts LIMIT 1""",
                [x.host, x.gpu, x.ts],
            )
            assert last in (None, x.xid)  # None: node drained and silent


def test_telemetry_dynamics_an_sre_recognises(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        during = s.df("""SELECT avg(s.util_pct) AS u, avg(s.power_w) AS p
                         FROM gpu_samples s JOIN gpus g USING (gpu_id)
                         JOIN interruptions i ON s.ts > i.ts + INTERVAL 30 SECOND
                           AND s.ts < i.ts + to_seconds(i.detect_s + i.restart_s - 20)
                         JOIN nodes n ON n.node_id = g.node_id
                         WHERE n.role = 'job' AND NOT i.description LIKE '%NCCL%'""")
        normal = s.df("SELECT quantile_cont(util_pct, 0.5) AS u FROM gpu_samples")
        assert normal["u"][0] > 95  # a healthy job keeps GPUs busy
        assert during["u"][0] < 20  # ...and they go idle while it restarts
        hot = s.scalar("SELECT max(temp_c) FROM gpu_samples")
        assert 80 < hot < 95  # the throttled GPU runs hot but the slowdown caps it
        clocks = s.df("""SELECT gpu_id, median(sm_clock_mhz) AS c FROM gpu_samples
                         WHERE util_pct > 90 GROUP BY gpu_id ORDER BY c LIMIT 1""")
        assert clocks["c"][0] < 0.85 * 1980  # the straggler's SM clock stands out


def test_samples_are_stored_at_the_exporters_precision(dev_store: Path) -> None:
    """dcgm-exporter prints DCGM's int64 fields as whole numbers and power as NVML reads it
    (milliwatts): the replay stores no finer figure, which no exporter sends and which would
    cost bytes (``benchmarks/prom_bytes.py``)."""
    whole = ("util_pct", "temp_c", "mem_temp_c", "sm_clock_mhz", "fb_used_mib", "energy_mj")
    with Store(str(dev_store), read_only=True) as s:
        finer = s.rows(
            "SELECT "
            + ", ".join(f"count(*) FILTER ({c} <> round({c}))" for c in whole)
            + ", count(*) FILTER (length(split_part(power_w::VARCHAR, '.', 2)) > 3)"
            ", count(util_pct), count(power_w) FROM gpu_samples"
        )[0]
    assert finer[-2] > 1000 and finer[-1] > 1000
    # ... and so are the per-node sums of milliwatts and 3-decimal ratios (no float32 noise)
    with Store(str(dev_store), read_only=True) as s:
        noisy = s.rows(
            "SELECT count(*) FILTER (length(split_part(power_s::VARCHAR, '.', 2)) > 3), "
            "count(*) FILTER (length(split_part(tensor_s::VARCHAR, '.', 2)) > 3), count(*) "
            "FROM node_tick"
        )[0]
    assert noisy[2] > 1000 and noisy[:2] == (0, 0)
    assert dict(zip((*whole, "power_w"), finer[:-2], strict=True)) == dict.fromkeys(
        (*whole, "power_w"), 0
    )


def test_llama3_summary_from_the_store_matches_the_reference(tmp_path: Path) -> None:
    """The whole 54 days at a coarse sample interval: the summary is computed from stored rows."""
    path = tmp_path / "llama.duckdb"
    with Store(str(path)) as store:
        replay(store, get_scenario("llama3-405b"), 0, interval_s=21600)
        (run,) = store_summary(store)["runs"]
    assert run["gpus"] == 16384
    assert 0.90 < run["ettr"] < 0.97
    assert 0.38 <= run["mfu"] <= 0.43
    ints = run["interruptions"]
    assert 419 - 82 < ints["unexpected"] < 419 + 82
    assert 0.57 < ints["by_category"]["GPU"] / ints["unexpected"] < 0.71
    assert 2.4 < run["mtbf_hours"] < 4.2  # reference: 3.1 h
    assert run["restores"].get("pfs", 0) > 0 and run["restores"].get("nvme", 0) > 0


@contextmanager
def _live(store: Store, sc: Scenario, speed: float, prefill_s: float) -> Iterator[None]:
    """A live replay of ``sc`` into ``store`` on a thread, stopped and joined on exit."""
    stop = threading.Event()
    th = threading.Thread(
        target=replay,
        args=(store, sc, 1),
        kwargs={"speed": speed, "prefill_s": prefill_s, "stop": stop},
    )
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join(timeout=30)
    assert not th.is_alive()


def test_live_mode_is_paced_and_stops_cleanly(tmp_path: Path) -> None:
    sc = get_scenario("dev-64").with_overrides(days=0.05)
    with Store(str(tmp_path / "live.duckdb")) as store:
        with _live(store, sc, speed=100.0, prefill_s=600.0):
            time.sleep(1.5)
            first = store.scalar("SELECT max(ts) FROM gpu_samples")
            time.sleep(2.0)
            second = store.scalar("SELECT max(ts) FROM gpu_samples")
        advanced = (second - first).total_seconds()
        assert 100 <= advanced <= 300  # about 2 s x 100 simulated seconds per second
        assert (first - sc.start).total_seconds() >= 600  # prefill came first


def test_a_live_replays_prefill_is_in_the_rollups_before_its_first_live_tick(
    tmp_path: Path,
) -> None:
    """`make demo` backfills 20 hours, then streams at 1x: its GPUs heatmap and fleet charts
    (node and fleet levels) said "No GPU samples in this range" until the first live tick's
    refresh, ~15 s after the page had the per-GPU charts of the same hours."""
    sc = get_scenario("dev-64").with_overrides(days=0.25)
    with Store(str(tmp_path / "live.duckdb")) as store:
        with _live(store, sc, speed=0.001, prefill_s=7200.0):  # no live tick for hours
            t = wait_for("the 2-hour prefill, stored", lambda: (
                (n := store.scalar("SELECT max(ts) FROM gpu_samples")) is not None
                and (n - sc.start).total_seconds() >= 7000 and n), 60)  # fmt: skip

            def drawn() -> bool:  # the heatmap, read as the page reads it, up to the prefill
                cells = heatmap(store, TimeRange(sc.start, t), "util").cells
                return not cells.empty and cells["ts"].max() >= t - timedelta(minutes=10)

            wait_for("the heatmap's cells up to the prefill's end", drawn, 10)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_bad_interval_is_refused(tmp_path: Path, bad: float) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store, pytest.raises(ValueError):
        replay(store, get_scenario("dev-64").with_overrides(days=0.01), 0, interval_s=bad or -0.0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_a_stopped_live_replay_ends_after_its_window_with_its_rollups(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # `factoryfloor replay --speed 60`, as the README has it, stopped by a user: it stores the
    # window in progress and brings the rollups up to it, then says so and exits 0 (it printed
    # DuckDB's "Query interrupted" traceback from the middle of a rollup refresh before)
    path = tmp_path / "live.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "replay", "--scenario", "dev-64", "--store", str(path),
         "--speed", "60"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], 60)
    if not ready:
        proc.kill()
    started = proc.stderr.readline() if ready else ""  # written once the handlers are in place
    assert "replaying dev-64 (seed 0) live at 60x" in started, started
    time.sleep(3.0)  # some ticks stored, each followed by a rollup refresh
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"{sig.name}: stopping after the window in progress" in err
    assert "Traceback" not in err and "interrupted" not in err.lower(), err
    assert out.startswith("stopped dev-64-s0: "), out
    with Store(str(path), read_only=True) as s:
        samples = s.scalar("SELECT count(*) FROM gpu_samples")
        assert samples >= 64 * 3  # at least a few ticks of the 64 GPUs
        finest = s.scalar("SELECT min(bucket_s) FROM gpu_rollup")
        rolled = s.scalar("SELECT sum(samples) FROM gpu_rollup WHERE bucket_s = ?", [finest])
        assert rolled == samples  # the rollups reach the last sample stored
    assert f"{samples:,} GPU samples" in out
