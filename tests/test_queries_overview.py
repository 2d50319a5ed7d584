"""The Overview's figures computed in telemetry: healthy GPUs on the fleet card and the
interruptions of the last 24 hours on the run card."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from telemetry.metrics import alert_rules as q
from telemetry.queries import TimeRange, data_extent, gpu_rollup, gpus, interruptions
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


def test_spares_and_nodes_out_of_the_job_are_not_under_used_job_gpus(tmp_path: Path) -> None:
    """At the day's end of the seed-0 replay h100-0004, whose GPU fell off the bus, is back among
    the spares (its GPUs idle, no process memory) and the spare h100-0008 runs the job in its
    place: the '< 80 % utilized' alert counted h100-0004's 8 idle GPUs as the job's (#37).
    Each GPU's job label follows: the drill-down names no job on a node out of the job, and the
    job on the spare that took over. A node Slurm drained leaves the hourly count."""
    from tests.conftest import build_store

    path = build_store(tmp_path / "s0.duckdb", seed=0, days=1.0)
    with Store(str(path)) as store:
        whole = data_extent(store)
        assert whole is not None
        jobs = dict(store.rows("SELECT host, any_value(hpc_job) FROM gpus GROUP BY host"))
        assert jobs["h100-0004"] is None and jobs["h100-0008"] == "dev-64-s0"
        assert jobs["h100-0009"] is None and jobs["h100-0000"] == "dev-64-s0"
        u = dict(store.rows(
            """SELECT g.host, avg(s.util_pct) FROM gpu_samples s JOIN gpus g USING (gpu_id)
               WHERE s.ts = (SELECT max(ts) FROM gpu_samples) GROUP BY g.host"""))  # fmt: skip
        assert u["h100-0004"] == 0 and u["h100-0008"] > 80  # out of the job; the spare trains
        alerts = q.active_alerts(store, "dev-64-s0", whole)
        assert not alerts["alert"].str.contains("utilized").any(), alerts.to_dict("records")
        # the heatmap's rows say what each node does now, not only how it was scheduled
        cells = gpus.heatmap(store, whole, "util").cells
        now = dict(zip(cells["host"], cells["role_now"], strict=False))
        assert (now["h100-0004"], now["h100-0009"], now["h100-0008"]) == (
            "out of the job", "spare", "job")  # fmt: skip
        from app.figures.gpus import heatmap

        fig = heatmap(cells, key="util", label="Utilization", unit="%", bucket_s=300,
                      nodes_total=10, nodes_shown=10)  # fmt: skip
        ticks = fig.to_dict()["layout"]["yaxis"]["ticktext"]
        assert "h100-0004 · out of the job" in ticks and "h100-0008" in ticks
        before = gpu_rollup.gpus_below_per_hour(store, whole)
        with store.transaction(["slurm_nodes"]) as con:
            con.execute("INSERT INTO slurm_nodes (host, state, reason) VALUES "
                        "('h100-0003', 'DRAINED', 'XID 79')")  # fmt: skip
        below = gpu_rollup.gpus_below_per_hour(store, whole)
    assert (before["gpus"] - below["gpus"]).max() == 8  # h100-0003's GPUs left out
