"""The Overview's figures computed in telemetry: healthy GPUs on the fleet card and the
interruptions of the last 24 hours on the run card."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from telemetry.queries import TimeRange, interruptions
from telemetry.queries import overview as q
from telemetry.queries.overview import fleet_latest
from telemetry.store import Store
from tests.test_queries_targets import _store

RUN = "dev-64-s1"


def test_busy_gpus_are_healthy_and_idle_ones_are_not(store: Store, tmp_path: Path) -> None:
    with _store(tmp_path / "s.duckdb") as ingest:  # 16 GPUs answering, all busy and cool
        fleet = fleet_latest(ingest)
        assert fleet["reporting"] == fleet["healthy"] == 16 and fleet["idle"] == 0
    fleet = fleet_latest(store)  # the replay's last round: the run has ended, every GPU idles
    assert fleet["reporting"] == fleet["idle"] > 0 and fleet["healthy"] == 0


def test_recent_interruptions_count_the_last_hours(store: Store, whole: TimeRange) -> None:
    ints = interruptions(store, RUN, whole)
    for hours in (24.0, 6.0, 1.0):
        since = whole.end - timedelta(hours=hours)
        expected = store.scalar(
            "SELECT count(*) FROM interruptions WHERE run_id = ? AND ts > ? AND ts <= ?",
            [RUN, since, whole.end],
        )
        assert q.recent_interruptions(ints, whole.end, hours) == expected
    assert q.recent_interruptions(ints, whole.end) == len(ints) == 10  # a one-day replay
    assert q.recent_interruptions(ints.iloc[:0], whole.end) == 0
