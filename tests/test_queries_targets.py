"""Scrape-target health queries over an ingest store written by the real sink."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Fetch, Target
from telemetry.metrics.alert_rules import active_alerts
from telemetry.queries import TimeRange, data_extent
from telemetry.queries import targets as tq
from telemetry.queries.overview import fleet_latest, hottest_gpus
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES

T0 = datetime(2026, 3, 1, 12, 0, 0)
TEXT = (DCGM_FIXTURES / "default_h100.txt").read_text()
STEADY, MOVING, FLAKY = (f"http://{n}:9400/metrics" for n in ("steady", "moving", "flaky"))


def _text(host: str, k: int = 0) -> str:
    return TEXT.replace("dgx-h100-017", host).rstrip("\n") + f"{k}\n"


def _round(k: int) -> list[Fetch]:
    flaky = (
        Fetch(Target(FLAKY), _text("flaky", k), None, 0.02)
        if k < 2
        else Fetch(Target(FLAKY), None, "HTTP 500 Internal Server Error", 0.01)
    )
    return [
        Fetch(Target(STEADY), _text("steady"), None, 0.03),
        Fetch(Target(MOVING), _text("moving", k), None, 0.04),
        flaky,
    ]


def _store(path: Path, rounds: int = 5) -> Store:
    store = Store(str(path))
    sink = StoreSink(store)
    for k in range(rounds):
        sink.write(T0 + timedelta(seconds=15 * k), _round(k))
    return store


def test_latest_health_per_target_with_since(tmp_path: Path) -> None:
    with _store(tmp_path / "s.duckdb") as store:
        end = T0 + timedelta(seconds=60)
        health = tq.target_health(store, end)
        assert health["status"].tolist() == ["down", "stale", "up"]
        assert health["target"].tolist() == [FLAKY, STEADY, MOVING]
        down, stale, up = (r for _, r in health.iterrows())
        assert down["error"] == "HTTP 500 Internal Server Error" and down["samples"] == 0
        assert down["since"] == T0 + timedelta(seconds=30)  # first failed scrape
        assert stale["since"] == T0 + timedelta(seconds=45)  # its 4th identical scrape
        assert pd.isna(up["since"]) and up["last_scrape"] == end and up["samples"] > 0
        assert tq.status_counts(health) == {"down": 1, "stale": 1, "up": 1}
        # as of an earlier time: the state then
        then = tq.target_health(store, T0 + timedelta(seconds=15))
        assert then["status"].tolist() == ["up", "up", "up"]


def test_health_only_looks_back_a_window(tmp_path: Path) -> None:
    with _store(tmp_path / "s.duckdb") as store:
        later = T0 + timedelta(hours=3)
        assert tq.target_health(store, later).empty
        assert tq.status_counts(tq.target_health(store, later)) == {"down": 0, "stale": 0, "up": 0}
        # a live view ending at the last GPU sample still sees rounds stored after it
        last_gpu = T0 + timedelta(seconds=15)
        assert tq.report_time(store, last_gpu, live=True) == T0 + timedelta(seconds=60)
        assert tq.report_time(store, last_gpu, live=False) == last_gpu


def test_targets_down_and_stale_are_active_alerts(tmp_path: Path) -> None:
    with _store(tmp_path / "s.duckdb") as store:
        tr = TimeRange(T0, T0 + timedelta(seconds=60))
        alerts = active_alerts(store, None, tr)
        by = dict(zip(alerts["alert"], alerts["detail"], strict=True))
        assert "flaky:9400 (HTTP 500 Internal Server Error)" in by["1 scrape target down"]
        assert by["1 scrape target stale"].startswith("steady:9400")
        assert "Job not training" not in by  # no run in an ingest store: no run alerts


def test_a_store_without_targets(tmp_path: Path) -> None:
    with Store(str(tmp_path / "empty.duckdb")) as store:
        assert not tq.has_targets(store)
        assert tq.target_alerts(store, T0) == []


def test_when_every_exporter_is_down_nobody_is_reporting(tmp_path: Path) -> None:
    """Rounds that reach no exporter still move the data range on, and the fleet's latest
    state is "nobody reporting", not the values of the last round that answered."""
    down = [Fetch(Target(u), None, "connection refused", 0.01) for u in (STEADY, MOVING, FLAKY)]
    with _store(tmp_path / "s.duckdb") as store:
        sink = StoreSink(store)
        last_sample = T0 + timedelta(seconds=60)
        for k in range(5, 9):
            sink.write(T0 + timedelta(seconds=15 * k), down)
        end = T0 + timedelta(seconds=120)
        assert data_extent(store) == TimeRange(T0, end)
        fleet = fleet_latest(store)
        assert fleet["reporting"] == 0 and fleet["failed"] == fleet["expected"] == 24
        assert fleet["ts"] == end and fleet["last_sample"] == last_sample
        assert fleet.get("util_avg") is None  # unknown, not 0 %
        alerts = active_alerts(store, None, TimeRange(T0, end))
        by = dict(zip(alerts["alert"], alerts["severity"], strict=True))
        assert by["All 24 GPU(s) not reporting"] == "critical"
        assert "3 scrape targets down" in by
        assert not any("°C" in a for a in by)  # no alerts from the stale samples
        # before the outage, the state then
        then = active_alerts(store, None, TimeRange(T0, last_sample))
        assert "All 24 GPU(s) not reporting" not in set(then["alert"])


def test_one_daemons_dead_exporters_do_not_hide_another_daemons_gpus(tmp_path: Path) -> None:
    """Two ingest daemons on one store: the newer round of one finds its exporters all down,
    while the other's exporters answered a few seconds earlier. GPUs are still reporting (the
    other daemon's), and the hottest-GPU table still has rows; when both are down, it is empty."""
    other = "http://other:9400/metrics"
    with _store(tmp_path / "s.duckdb", rounds=1) as store:
        a, b = StoreSink(store), StoreSink(store)
        a.write(T0 + timedelta(seconds=15), [Fetch(Target(STEADY), _text("steady"), None, 0.03)])
        b.write(T0 + timedelta(seconds=20), [Fetch(Target(other), None, "timed out", 5.0)])
        fleet = fleet_latest(store)
        assert fleet["reporting"] == 8 and fleet["ts"] == T0 + timedelta(seconds=15)
        end = T0 + timedelta(seconds=20)
        alerts = set(active_alerts(store, None, TimeRange(T0, end))["alert"])
        assert not any(a.startswith("All ") for a in alerts), alerts
        assert len(hottest_gpus(store)) == 8
        a.write(T0 + timedelta(seconds=30), [Fetch(Target(STEADY), None, "refused", 0.01)])
        assert fleet_latest(store)["reporting"] == 0
        assert hottest_gpus(store).empty
