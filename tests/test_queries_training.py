"""Training queries against a replayed store: spikes, events, thinning, checkpoint marks."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from app.figures.training import ema
from telemetry.queries import TimeRange, data_extent
from telemetry.queries import training as q
from telemetry.replay.runner import replay
from telemetry.replay.scenarios import get_scenario
from telemetry.store import Store

RUN = "dev-64-s1"


def test_spikes_are_found_where_the_engine_put_them(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        tr = data_extent(s)
        spikes = q.loss_spikes(s, RUN, tr)
        assert len(spikes) >= 2
        assert (spikes["jump_pct"] > 5).all()
        for sp in spikes.itertuples():  # the peak is a real logged value, above its baseline
            peak = s.scalar(
                """SELECT max(loss) FROM train_metrics
                   WHERE run_id = ? AND attempt = ? AND step BETWEEN ? AND ?""",
                [RUN, sp.attempt, sp.step, sp.step + 99],
            )
            assert abs(peak - sp.loss) < 1e-4 and sp.loss > sp.baseline * 1.05
        quiet = q.loss_spikes(s, RUN, tr, z=1e6)  # an impossible threshold finds nothing
        assert quiet.empty


# What loss_spikes computed in SQL (DuckDB's framed windows), the reference for its pandas
# rolling windows.
SPIKES_SQL = """WITH w AS (
  SELECT ts, step, loss, attempt,
    avg(loss) OVER p AS mu, stddev_samp(loss) OVER p AS sd, count(*) OVER p AS n,
    max(loss) OVER (PARTITION BY attempt ORDER BY ts
                    ROWS BETWEEN CURRENT ROW AND {frame} FOLLOWING) AS ahead
  FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?
  WINDOW p AS (PARTITION BY attempt ORDER BY ts ROWS BETWEEN {frame} PRECEDING AND 1 PRECEDING)),
s AS (SELECT *, (n >= ? / 2 AND loss > mu + ? * sd AND loss > mu * (1 + ?)) AS hot FROM w),
g AS (SELECT *, sum(CASE WHEN hot AND NOT coalesce(prev_hot, false) THEN 1 ELSE 0 END)
                  OVER (PARTITION BY attempt ORDER BY ts) AS grp
      FROM (SELECT *, lag(hot) OVER (PARTITION BY attempt ORDER BY ts) AS prev_hot FROM s))
SELECT min(ts) AS ts, arg_min(step, ts) AS step, arg_min(ahead, ts) AS loss,
       arg_min(mu, ts) AS baseline, 100 * (arg_min(ahead, ts) / arg_min(mu, ts) - 1) AS jump_pct,
       attempt
FROM g WHERE hot GROUP BY attempt, grp ORDER BY ts LIMIT ?"""


def test_spikes_equal_the_sql_windows_they_replaced(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        tr = data_extent(s)
        assert tr is not None
        found = 0
        for window, z, jump, limit in ((100, 6.0, 0.05, 50), (20, 3.0, 0.01, 500), (50, 2, 0, 7)):
            got = q.loss_spikes(s, RUN, tr, window, z, jump, limit)
            want = s.df(SPIKES_SQL.format(frame=window), [RUN, tr.start, tr.end, window, z, jump,
                                                            limit])  # fmt: skip
            assert len(got) == len(want), (window, z)
            pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-9)
            found += len(got)
        assert found > 10  # spikes were found: the comparison is not of empty frames


def test_events_carry_the_rolled_back_span(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        ev = q.run_events(s, RUN, data_extent(s))
        assert len(ev) == s.scalar("SELECT count(*) FROM interruptions")
        assert (ev["failed_step"] >= ev["restored_step"]).all()
        assert (ev["resumed"] > ev["ts"]).all()


def test_series_by_steps_is_thinned_but_keeps_the_peak(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        full_max = s.scalar("SELECT max(loss) FROM train_metrics WHERE step > 5000")
        thin = q.series_by_steps(s, RUN, 5000, 20000, max_points=500)
        assert len(thin) <= 1100 and thin["step"].min() >= 5000
        assert thin["loss"].max() == full_max


def test_checkpoint_marks_are_capped_per_tier(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        marks = q.checkpoint_marks(s, RUN, data_extent(s), max_per_tier=50)
        per_tier = marks.groupby("tier").size()
        assert per_tier["nvme"] <= 60 and per_tier["object"] >= 1


def test_ema_matches_tensorboard_smoothing() -> None:
    xs = np.array([1.0, 2.0, 3.0, 4.0])
    out = ema(xs, 0.5)
    assert out[0] == 1.0  # debiased: the first point is the first value
    assert np.allclose(out, [1.0, 5 / 3, 17 / 7, 49 / 15])
    assert np.allclose(ema(xs, 0.0), xs)
    # the same as pandas' adjusted EWM on a long noisy series, and a NaN carries on to the end
    noisy = np.random.default_rng(3).normal(3.0, 0.5, 5000)
    want = pd.Series(noisy).ewm(alpha=1 - 0.95, adjust=True).mean().to_numpy()
    assert np.allclose(ema(noisy, 0.95), want, rtol=1e-12)
    holed = noisy[:10].copy()
    holed[4] = np.nan
    assert np.isfinite(ema(holed, 0.6)[:4]).all() and np.isnan(ema(holed, 0.6)[4:]).all()


def test_overview_alerts_name_what_needs_attention(dev_store: Path) -> None:
    from telemetry.metrics.alert_rules import active_alerts

    with Store(str(dev_store), read_only=True) as s:
        tr = data_extent(s)
        alerts = active_alerts(s, RUN, tr)
        names = " | ".join(alerts["alert"])
        xid_hosts = s.rows("SELECT DISTINCT xid FROM xid_events")
        assert any(f"XID {x}" in names for (x,) in xid_hosts)
        assert "not reporting" in names  # drained nodes are silent at the end of the day
        # Severity order: critical first.
        sev = list(alerts["severity"])
        assert sev == sorted(sev, key=lambda v: {"critical": 0, "warning": 1, "info": 2}[v])


def test_overlays_compare_over_the_same_steps_or_time(tmp_path: Path) -> None:
    sc = get_scenario("dev-64").with_overrides(days=0.1)
    with Store(str(tmp_path / "two.duckdb")) as s:
        replay(s, sc, 1)
        replay(s, sc, 2)  # a second run over the same hours, interrupted elsewhere
        other = "dev-64-s2"
        tr = data_extent(s)
        hour = TimeRange(tr.end - timedelta(hours=1), tr.end)
        junk = [RUN, 5, None, {"a": 1}, other, other, "no-such-run"]
        by_steps = q.overlay_series(s, RUN, hour, junk, "step")
        assert list(by_steps) == [RUN, other, "no-such-run"]  # junk and repeats skipped
        lo, hi = q.step_span(s, RUN, hour)
        assert by_steps[RUN]["step"].agg(["min", "max"]).tolist() == [lo, hi]
        steps = by_steps[other]["step"]
        assert not steps.empty and steps.min() >= lo and steps.max() <= hi  # the run's steps
        assert by_steps["no-such-run"].empty
        by_time = q.overlay_series(s, RUN, hour, [other], "time")[other]
        assert not by_time.empty
        assert by_time["ts"].min() >= hour.start and by_time["ts"].max() <= hour.end
        assert q.overlay_series(s, RUN, hour, "not a list", "time").keys() == {RUN}
