"""The Overview's "now" is every GPU's newest sample, not only the samples stamped with the
newest time: with two ingest daemons on one store, the newest round holds part of the fleet."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Fetch, Target
from telemetry.queries.overview import fleet_latest, hottest_gpus
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
        job = spare = StoreSink(store)
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


def test_the_kept_now_is_every_gpus_newest_sample_however_rounds_arrive(tmp_path: Path) -> None:
    """``gpu_now`` (what the Overview's "now" reads instead of scanning every sample) holds
    each GPU's newest sample, whatever order rounds arrive in: in parts, late, a backlog."""
    newest_raw = """SELECT gpu_id, ts, temp_c, util_pct FROM gpu_samples
        WHERE ts >= (SELECT max(ts) FROM gpu_samples) - INTERVAL 30 SECOND
        QUALIFY row_number() OVER (PARTITION BY gpu_id ORDER BY ts DESC) = 1 ORDER BY gpu_id"""
    kept = """SELECT gpu_id, ts, temp_c, util_pct FROM gpu_now
        WHERE ts >= (SELECT max(ts) FROM gpu_samples) - INTERVAL 30 SECOND ORDER BY gpu_id"""
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)
        sink.write(T0, [Fetch(Target(JOB), _text("job"), None, 0.03),
                        Fetch(Target(SPARE), _idle("spare"), None, 0.03)])  # fmt: skip
        sink.write(T0 + timedelta(seconds=15), [Fetch(Target(JOB), _text("job"), None, 0.03)])
        assert store.rows(kept) == store.rows(newest_raw)  # the spare's T0 is still its newest
        # the spare's round of T0 + 10 s comes after the job's of T0 + 15 s (another daemon)
        sink.write(T0 + timedelta(seconds=10), [Fetch(Target(SPARE), _idle("spare"), None, 0.03)])
        # and a backlog of the job's, older than what is kept, changes nothing
        sink.write(T0 - timedelta(minutes=5), [Fetch(Target(JOB), _idle("job"), None, 0.03)])
        rows = store.rows(kept)
        assert rows == store.rows(newest_raw) and len(rows) == 16
        assert {r[1] for r in rows} == {T0 + timedelta(seconds=15), T0 + timedelta(seconds=10)}
        fleet = fleet_latest(store)
        assert fleet["reporting"] == 16 and fleet["idle"] == 8  # the spare's idle GPUs are now
        # a restart of the store reads the same: the table is on disk, not in the process
    with Store(str(tmp_path / "s.duckdb")) as store:
        assert store.rows(kept) == rows
