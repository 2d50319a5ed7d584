"""Checkpoints page queries against the seeded dev-64 store, cross-checked with direct SQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry.metrics.summary import run_summary
from telemetry.queries import TimeRange
from telemetry.queries import checkpoints as ckq
from telemetry.queries.run_time import run_wall
from telemetry.store import Store
from telemetry.vocabulary import TIERS

RUN = "dev-64-s1"


def test_tier_stats_match_direct_sql(store: Store, whole: TimeRange) -> None:
    df = ckq.tier_stats(store, RUN, whole)
    assert list(df["tier"]) == list(TIERS)  # all three tiers, in storage order
    for row in df.itertuples():
        n, failed, mean_w, p95_w, total_b, total_w, blk = store.rows(
            """SELECT count(*), count(*) FILTER (WHERE status <> 'ok'), avg(write_s),
                      quantile_cont(write_s, 0.95), sum(bytes), sum(write_s), sum(blocking_s)
               FROM checkpoints WHERE run_id = ? AND tier = ? AND start_ts BETWEEN ? AND ?""",
            [RUN, row.tier, whole.start, whole.end],
        )[0]
        assert (row.n, row.failed) == (n, failed)
        assert row.write_mean_s == pytest.approx(mean_w)
        assert row.write_p95_s == pytest.approx(p95_w)
        assert row.gbps == pytest.approx(total_b / total_w / 1e9)
        assert row.blocking_s == pytest.approx(blk)
    nvme = df.iloc[0]
    # A day of 5-minute NVMe checkpoints, interrupted by 10 restarts; every 6th goes to PFS.
    assert 240 <= nvme["n"] <= 288
    assert df.iloc[1]["n"] == pytest.approx(nvme["n"] / 6, abs=3)
    assert nvme["bytes_avg"] == pytest.approx(74.9e9)  # 7B params: weights + optimizer state
    assert nvme["interval_s"] == pytest.approx(300, rel=0.15)


def test_ages_and_blocking_share(store: Store, whole: TimeRange) -> None:
    df = ckq.tier_stats(store, RUN, whole).set_index("tier")
    last = store.scalar(
        "SELECT max(end_ts) FROM checkpoints WHERE run_id = ? AND tier = 'nvme' AND status = 'ok'",
        [RUN],
    )
    assert df.loc["nvme", "age_s"] == pytest.approx((whole.end - last).total_seconds())
    assert df.loc["nvme", "age_s"] < df.loc["object", "age_s"]  # the object tier lags
    # the run's wall time as every page and ``summary`` take it: to its newest record
    win = run_wall(store, RUN, whole)
    assert win is not None
    wall = (win.end - win.start).total_seconds()
    assert df.loc["nvme", "blocking_pct"] == pytest.approx(
        df.loc["nvme", "blocking_s"] / wall * 100
    )
    assert 0.3 < df.loc["nvme", "blocking_pct"] < 1.0  # ~2 s stall per 5 min
    assert df.loc["object", "blocking_s"] == 0.0  # object copies drain asynchronously


def test_a_narrow_range_counts_only_its_checkpoints(store: Store, whole: TimeRange) -> None:
    hour = TimeRange(whole.end - timedelta(hours=1), whole.end)
    df = ckq.tier_stats(store, RUN, hour).set_index("tier")
    assert 5 <= df.loc["nvme", "n"] <= 12
    assert df.loc["object", "n"] == 0  # none written in the last hour...
    assert df.loc["object", "age_s"] > 3600  # ...but the last one still has an age


def test_timeline_rows_and_buckets(store: Store, whole: TimeRange) -> None:
    total = store.scalar("SELECT count(*) FROM checkpoints WHERE run_id = ?", [RUN])
    raw = ckq.timeline(store, RUN, whole)
    assert len(raw) == total and (raw["n"] == 1).all()
    small = ckq.timeline(store, RUN, whole, max_points=50)
    assert small.groupby("tier").size().max() <= 50
    assert small["n"].sum() == total  # every checkpoint counted in some bucket
    assert small["step"].max() == raw["step"].max()


def test_restores_match_interruptions(store: Store, whole: TimeRange) -> None:
    rs = ckq.restores(store, RUN, whole)
    n, steps, gh = store.rows(
        """SELECT count(*), sum(lost_steps), sum(lost_gpu_hours) FROM interruptions
           WHERE run_id = ? AND restored_tier IS NOT NULL""",
        [RUN],
    )[0]
    assert len(rs) == n == 10  # 7 unexpected + 3 planned, each restored from a tier
    assert rs["lost_steps"].sum() == steps
    assert rs["lost_gpu_hours"].sum() == pytest.approx(gh)
    assert set(rs["restored_tier"]) <= {"nvme", "pfs", "object", "none"}
    assert rs["ts"].is_monotonic_increasing


def test_model_inputs_agree_with_the_run_summary(store: Store, whole: TimeRange) -> None:
    m = ckq.model_inputs(store, RUN, whole)
    assert m is not None
    s = run_summary(store, RUN)
    assert m.unexpected == s["interruptions"]["unexpected"] == 7
    assert m.mtbf_s is not None
    assert m.mtbf_s / 3600 == pytest.approx(s["mtbf_hours"], rel=0.01)
    assert m.failures_per_node_day == pytest.approx(7 / (8 * m.wall_s / 86400))
    assert m.interval_tier == "nvme"
    assert m.write_s == pytest.approx(s["checkpoints"]["nvme"]["blocking_hours"] * 3600 / 265, 0.01)
    assert m.configured_interval_s == 300.0  # runs.ckpt_policy nvme_interval_s
    u0 = store.scalar(
        "SELECT avg(detect_s + restart_s) FROM interruptions WHERE run_id = ? AND NOT planned",
        [RUN],
    )
    assert m.restart_s == pytest.approx(u0)


def test_model_inputs_outside_the_run(store: Store, whole: TimeRange) -> None:
    before = TimeRange(whole.start - timedelta(days=3), whole.start - timedelta(days=2))
    assert ckq.model_inputs(store, RUN, before) is None
    assert ckq.model_inputs(store, "no-such-run", whole) is None


def test_configured_interval_per_tier() -> None:
    policy = {"nvme_interval_s": 300.0, "pfs_every": 6, "object_every": 8}
    assert ckq.configured_interval_s(policy, "nvme") == 300.0
    assert ckq.configured_interval_s(policy, "pfs") == 1800.0
    assert ckq.configured_interval_s(policy, "object") == 14400.0
    assert ckq.configured_interval_s({}, "nvme") is None


def test_figures_over_these_queries(store: Store, whole: TimeRange) -> None:
    from app.figures import checkpoints as ckfig
    from app.figures.plot import check

    fig = check(
        ckfig.timeline(
            ckq.timeline(store, RUN, whole, max_points=100), ckq.restores(store, RUN, whole)
        )
    )
    assert max(len(t.x) for t in fig.data) <= 100 * 3  # restore lines: 3 values per restore
    assert "Write time (s" in fig.layout.yaxis.title.text
    before = TimeRange(whole.start - timedelta(days=3), whole.start - timedelta(days=2))
    empty = check(
        ckfig.timeline(ckq.timeline(store, RUN, before), ckq.restores(store, RUN, before))
    )
    assert "No checkpoints or restores" in empty.layout.annotations[0].text
    table = ckfig.tier_table(ckq.tier_stats(store, RUN, before))
    assert list(table["n"]) == [0, 0, 0] and list(table["age"]) == ["never"] * 3


def test_verdict_without_failures_says_what_is_missing(store: Store, whole: TimeRange) -> None:
    from app.figures import checkpoints as ckfig
    from telemetry import reliability

    quiet = TimeRange(whole.start + timedelta(hours=4), whole.start + timedelta(hours=8))
    m = ckq.model_inputs(store, RUN, quiet)
    assert m is not None and m.unexpected == 0 and m.mtbf_s is None
    assert m.write_s is not None and m.configured_interval_s is not None
    advice = reliability.advise(m.nodes, m.gpus, 0.0, m.restart_s, m.write_s, 300.0)
    basis, verdict, note = ckfig.interval_verdict(advice, m.as_dict())
    assert (basis, verdict) == ("", "") and "No unexpected interruption in these 4.0 h" in note


def test_advice_compares_the_measured_job_with_its_configured_interval(
    store: Store, whole: TimeRange
) -> None:
    from telemetry import reliability

    model = ckq.model_inputs(store, RUN, whole).as_dict()  # as the page keeps it
    assert ckq.model_interval_s(model) == model["configured_interval_s"] == 300.0
    advice = ckq.interval_advice(model)
    assert advice is not None and advice.configured_s == 300.0
    assert advice.write_s == model["write_s"] and advice.mtbf_s is not None
    job = (model["nodes"], model["failures_per_node_day"], model["restart_s"])
    assert advice.ettr_configured == pytest.approx(
        reliability.expected_ettr(*job, 300.0, model["write_s"])
    )
    # Without a policy the measured spacing stands in; without a write time there is no advice.
    measured = model | {"configured_interval_s": None}
    assert ckq.interval_advice(measured).configured_s == model["measured_interval_s"]
    assert ckq.interval_advice(model | {"write_s": None}) is None
    assert ckq.interval_advice(None) is None


def test_what_if_projects_another_interval_and_write_time(store: Store, whole: TimeRange) -> None:
    model = ckq.model_inputs(store, RUN, whole).as_dict()
    same = ckq.what_if(model, 300.0, model["write_s"])
    assert same.what == same.base
    assert set(same.marks) == {"Configured", "Optimum"}  # nothing to compare: no what-if point
    assert list(same.curves["curve"].unique()) == [f"write {model['write_s']:.2f} s (measured)"]

    hourly = ckq.what_if(model, 3600.0, model["write_s"])
    assert hourly.base == same.base and hourly.what.configured_s == 3600.0
    assert hourly.what.ettr_configured < hourly.base.ettr_configured  # more recomputation
    assert hourly.marks["What-if"] == (3600.0, hourly.what.ettr_configured)
    grid = hourly.curves["interval_s"]
    assert grid.min() <= 300.0 / 4 * 1.01 and grid.max() >= 3600.0 * 4 * 0.99  # both in view

    slow = ckq.what_if(model, 300.0, 30.0)  # a 30 s stall per checkpoint
    assert set(slow.marks) == {"Configured", "What-if", "Optimum", "What-if optimum"}
    assert slow.what.ettr_optimum_s > slow.base.ettr_optimum_s  # dearer writes: write less often
    assert list(slow.curves["curve"].unique()) == [
        f"write {model['write_s']:.2f} s (measured)",
        "write 30.00 s (what-if)",
    ]
    assert ckq.what_if(model | {"write_s": None}, 300.0, 30.0) is None
