"""The Overview's "now" is every GPU's newest sample, not only the samples stamped with the
newest time: with two ingest daemons on one store, the newest round holds part of the fleet."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from telemetry.collect.scrape import Fetch, Target
from telemetry.collect.sink import StoreSink
from telemetry.queries import fleet_latest, hottest_gpus
from telemetry.store import Store
from tests.test_queries_targets import T0, _text

JOB, SPARE = "http://job:9400/metrics", "http://spare:9400/metrics"


def _idle(host: str) -> str:
    """The exporter text of a node whose eight GPUs are idle (utilization 0 %)."""
    lines = _text(host).splitlines()
    return (
        "\n".join(
            line.rsplit(" ", 1)[0] + " 0" if line.startswith("DCGM_FI_DEV_GPU_UTIL{") else line
            for line in lines
        )
        + "\n"
    )


def test_two_daemons_rounds_make_one_fleet(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        # One sink for both daemons' rounds (the store sees rounds of other targets at
        # other times, as from two daemons; two sinks on one store would number nodes twice).
        job = spare = StoreSink(store, 15.0)
        job.write(T0, [Fetch(Target(JOB), _text("job"), None, 0.03)])
        spare.write(T0 + timedelta(seconds=4), [Fetch(Target(SPARE), _idle("spare"), None, 0.03)])
        busy = store.scalar("SELECT avg(util_pct) FROM gpu_samples WHERE ts = ?", [T0])
        assert busy > 80
        fleet = fleet_latest(store)
        # Before: the spare's round alone, 8 of 16 GPUs reporting at 0.0 %.
        assert fleet["reporting"] == fleet["expected"] == 16 and fleet["failed"] == 0
        assert fleet["idle"] == 8 and fleet["healthy"] == 8
        assert abs(fleet["util_avg"] - busy / 2) < 1e-6
        assert fleet["ts"] == T0 + timedelta(seconds=4)
        hot = hottest_gpus(store, 16)
        assert sorted(set(hot["host"])) == ["job", "spare"] and len(hot) == 16
        # A node whose newest sample is older than one scrape interval is silent, not "now".
        spare.write(T0 + timedelta(seconds=19), [Fetch(Target(SPARE), _idle("spare"), None, 0.03)])
        fleet = fleet_latest(store)
        assert fleet["reporting"] == 8 and fleet["failed"] == 8 and fleet["util_avg"] == 0
        assert set(hottest_gpus(store, 16)["host"]) == {"spare"}
