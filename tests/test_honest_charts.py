"""Charts that do not lie and unknowns that are not zeros (issue 19), read at the level of what
the figures and the summary carry: a restart splits a run's line and starts its smoothing over,
a silence breaks a GPU's line, a run without tokens is drawn by step and says so, and a figure
the store does not know reads "–" or null, never 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.figures import gpus as gfig
from app.figures import training as tfig
from app.figures.failures import interruption_timeline, known
from app.figures.plot import check
from telemetry.ingest.records import store_records
from telemetry.metrics.summary import run_summary
from telemetry.queries import TimeRange, data_extent
from telemetry.queries import failures as failq
from telemetry.queries import gpus as gpuq
from telemetry.queries import outliers as outq
from telemetry.queries import training as trainq
from telemetry.store import Store
from tests.cluster_fixture import RUN as NIGHT_RUN
from tests.cluster_fixture import build
from tests.conftest import ROOT, bound_store, cli

DEV = "dev-64-s1"
NOW = datetime(2026, 11, 20, 12, 0, 0)


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A Megatron job's bad night imported from its files: steps only (no tokens, no
    throughput, no world size), two restarts (3400 -> 3001, 5200 -> 5001), attempt 0
    throughout."""
    tmp = tmp_path_factory.mktemp("night")
    path = tmp / "night.duckdb"
    r = cli(*build(tmp / "files", world=False).import_args(path))
    assert r.returncode == 0, r.stderr
    with Store(str(path), read_only=True) as s:
        yield s


def _whole(store: Store) -> TimeRange:
    ext = data_extent(store)
    assert ext is not None
    return ext


def _line(trace: Any) -> list[tuple[float, float]]:
    """The (x, y) points of a trace in drawing order, None where the line is broken."""
    return [
        (x, y) if y is not None and not pd.isna(y) else None  # type: ignore[misc]
        for x, y in zip(trace.x, trace.y, strict=True)
    ]


def _joined(points: list[Any]) -> list[tuple[Any, Any]]:
    """Pairs of consecutive points that plotly joins with a segment."""
    return [(a, b) for a, b in zip(points, points[1:], strict=False) if a and b]


def _pieces(points: list[Any]) -> int:
    """How many separate line pieces plotly draws."""
    return sum(1 for a, b in zip([None, *points], points, strict=False) if b and not a)


def _trace(fig: Any, name: str) -> Any:
    return next(t for t in fig.data if t.name == name)


# -- 1. a restart splits the line ---------------------------------------------------------
def test_restarts_are_marked_by_attempt_or_by_the_step_going_back() -> None:
    steps = [*range(1, 601), *range(401, 701), 700, *range(301, 321)]
    df = pd.DataFrame({"step": steps, "attempt": 0})
    marked = trainq.mark_restarts(df)
    # 600 -> 401 and 700 -> 301 are restarts; 700 logged twice is not
    assert marked.groupby("segment")["step"].agg(["min", "max"]).values.tolist() == [
        [1, 600],
        [401, 700],
        [301, 320],
    ]
    lost = marked[marked["rolled_back"]]
    # the restore to 301 threw away 301..600 of the first piece and all of the second
    assert set(lost.loc[lost["segment"] == 0, "step"]) == set(range(301, 601))
    assert (marked.loc[marked["segment"] == 1, "rolled_back"]).all()
    assert not marked.loc[marked["segment"] == 2, "rolled_back"].any()
    by_attempt = trainq.mark_restarts(pd.DataFrame({"step": [1, 2, 3, 4], "attempt": [0, 0, 1, 1]}))
    assert list(by_attempt["segment"]) == [0, 0, 1, 1]


def test_a_restart_splits_the_loss_line_and_restarts_its_smoothing(night: Store) -> None:
    tr = _whole(night)
    series = trainq.overlay_series(night, NIGHT_RUN, tr, None, "step")
    events = trainq.run_events(night, NIGHT_RUN, tr)
    fig = check(
        tfig.loss_figure(series, "step", 0.6, True, events, pd.DataFrame(), 0, "plotly_dark")
    )
    solid = _line(_trace(fig, NIGHT_RUN))
    # never drawn from step 3400 back to 3010, nor from 5200 back to 5010
    assert all(b[0] > a[0] for a, b in _joined(solid))
    assert _pieces(solid) == 3  # up to the first failure, between the two, after the second
    raw = _line(_trace(fig, f"{NIGHT_RUN} (raw)"))  # the faint unsmoothed line too
    assert all(b[0] > a[0] for a, b in _joined(raw)) and _pieces(raw) == 3
    # the work thrown away at each restart is drawn dotted, beside the line
    lost = _trace(fig, f"{NIGHT_RUN}: rolled back")
    assert lost.line.dash == "dot"
    dotted = [p[0] for p in _line(lost) if p]
    # steps 3010..3400 and 5010..5200 were trained again, each joined to the last step kept
    assert set(dotted) == set(range(3000, 3401, 10)) | set(range(5000, 5201, 10))
    # smoothing starts over at each restart: the first smoothed point of a piece is the raw loss
    logged = series[NIGHT_RUN].set_index("step")
    for first in (3010, 5010):
        y = next(p[1] for p in solid if p and p[0] == first)
        assert y == pytest.approx(float(logged.loc[first, "loss"].iloc[-1]), rel=1e-9)


def test_a_restart_splits_the_throughput_line(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        series = trainq.overlay_series(s, DEV, _whole(s), None, "step")[DEV]
    fig = check(tfig.throughput_figure(series, "step", "plotly_dark", "dev-64"))
    line = _line(fig.data[0])
    assert all(b[0] >= a[0] for a, b in _joined(line))  # no jump back to the restored step
    # a break at each of the 9 restarts (and where a row has no throughput)
    assert _pieces(line) >= series["segment"].max() + 1 == 10


def test_the_overview_loss_chart_breaks_at_each_restart(night: Store) -> None:
    """The small Overview chart is drawn over time: a restart there is a downtime and a step
    back, and the line must not ramp across it."""
    from app.figures.overview import loss_curve

    series = trainq.mark_restarts(trainq.thinned_metrics(night, NIGHT_RUN, "ts", *_span(night)))
    line = _line(check(loss_curve(series, "plotly_dark")).data[0])
    assert _pieces(line) == 3  # two restarts in the night: three pieces
    steps = series["step"].tolist()
    assert len([p for p in line if p]) == len(steps)  # every logged point is still drawn


def test_the_overview_loss_line_breaks_where_a_restart_logs_its_step_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that failed in step 6 and came back from the step-5 checkpoint three times logs
    step 6 four times: no step goes back and the attempt stays 0, so only the stop and the
    checkpoint loads between the lines tell the restarts. The Overview's line joined the four
    across the restarts' downtime; it breaks at each, and each retry's lone point is a dot.
    The Training page's pieces are the same ones."""
    from app.data import view
    from app.data.training import loss_series
    from app.figures.overview import loss_curve

    store, run = tmp_path / "s.duckdb", "loop"
    log = ROOT / "tests" / "fixtures" / "torchrun_exam" / "restart_loop.log"
    r = cli("import", "--store", str(store), "--run", run, str(log))
    assert r.returncode == 0, r.stderr
    for s in bound_store(store, monkeypatch):
        tr = view.view_range({"run": run, "range": "all"})
        assert tr is not None
        series = loss_series(run, tr)
        steps = trainq.overlay_series(s, run, tr, None, "step")[run]
    assert series["step"].tolist() == [1, 2, 3, 4, 5, 6, 6, 6, 6]
    trace = check(loss_curve(series, "plotly_dark")).data[0]
    line = _line(trace)
    assert _pieces(line) == 4  # the first attempt, then each of the three restarts
    assert len([p for p in line if p]) == len(series)  # every logged point is still drawn
    assert [bool(z) for z, p in zip(trace.marker.size, line, strict=True) if p] == [
        False] * 6 + [True] * 3  # fmt: skip
    assert steps["segment"].tolist() == series["segment"].tolist() == [0] * 6 + [1, 2, 3]
    # the step 6 of the first three attempts was trained again: rolled back
    assert steps["rolled_back"].tolist() == [False] * 5 + [True] * 3 + [False]


def _span(store: Store) -> tuple[datetime, datetime]:
    tr = _whole(store)
    return tr.start, tr.end


# -- 3. a run without tokens on the Tokens axis ---------------------------------------------
def test_a_run_without_tokens_is_drawn_by_step_and_says_so(night: Store) -> None:
    tr = _whole(night)
    series = trainq.overlay_series(night, NIGHT_RUN, tr, None, "tokens")
    fig = check(
        tfig.loss_figure(
            series, "tokens", 0.6, True, pd.DataFrame(), pd.DataFrame(), 0, "plotly_dark"
        )
    )
    assert fig.layout.title.subtitle.text == f"{NIGHT_RUN} has no tokens metric: shown by step"
    assert fig.layout.xaxis.title.text == "Step"
    assert sum(1 for p in _line(_trace(fig, NIGHT_RUN)) if p) > 500  # the loss line is there
    thr = check(tfig.throughput_figure(series[NIGHT_RUN], "tokens", "plotly_dark", NIGHT_RUN))
    # no tokens/s: its step time instead (#37, 3), from the progress lines' times, from zero
    assert thr.layout.title.text.startswith("Step time (the run logs no tokens/s)")
    assert thr.layout.yaxis.title.text == "Step time (s)" and thr.layout.yaxis.range[0] == 0
    y = [v for v in thr.data[0].y if v is not None and v == v]
    assert len(y) > 500 and all(abs(v - 2.0) < 0.01 for v in y)  # one step every 2 s
    assert len(y) < len(series[NIGHT_RUN])  # no step time across the restarts' downtime
    empty = check(
        tfig.throughput_figure(series[NIGHT_RUN].head(1), "tokens", "plotly_dark", NIGHT_RUN))
    assert "too few timed steps" in empty.layout.annotations[0].text  # a message, no axis


def test_an_overlay_run_without_tokens_is_left_out_by_name(dev_store: Path, night: Store) -> None:
    with Store(str(dev_store), read_only=True) as s:
        dev = trainq.overlay_series(s, DEV, _whole(s), None, "tokens")[DEV]
    steps_only = trainq.mark_restarts(trainq.train_series(night, NIGHT_RUN, _whole(night)))
    runs = {"dev-64": dev, NIGHT_RUN: steps_only}
    fig = check(
        tfig.loss_figure(
            runs, "tokens", 0.0, True, pd.DataFrame(), pd.DataFrame(), 4096, "plotly_dark"
        )
    )
    assert fig.layout.xaxis.title.text == "Tokens trained"
    assert fig.layout.title.subtitle.text == f"{NIGHT_RUN} has no tokens metric: not shown"
    assert NIGHT_RUN not in {t.name for t in fig.data}


def test_marks_on_the_tokens_axis_without_tokens_per_step_follow_the_logged_tokens(
    dev_store: Path,
) -> None:
    with Store(str(dev_store), read_only=True) as s:
        tr = _whole(s)
        dev = trainq.overlay_series(s, DEV, tr, None, "tokens")[DEV]
        events = trainq.run_events(s, DEV, tr)
    # tokens per step unknown (0): the marks still land where the run logged those steps
    fig = check(
        tfig.loss_figure(
            {"dev": dev}, "tokens", 0.0, True, events, pd.DataFrame(), 0.0, "plotly_dark"
        )
    )
    marks = [x for t in fig.data if t.name.endswith("interruption") for x in t.x]
    kept = dev[~dev["rolled_back"]]
    expect = np.interp(events["failed_step"], kept["step"], kept["tokens"])
    assert sorted(marks) == pytest.approx(sorted(expect))
    assert min(marks) > 0


# -- 2. a gap breaks the line ---------------------------------------------------------------
def test_a_silent_period_breaks_each_gpu_line(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        df = gpuq.node_gpu_series(s, "h100-0007", _whole(s))  # drained 12:30 -> 13:30
    bucket = float(df["bucket_s"].iloc[0])
    fig = check(gfig.node_metric(df, "util", "h100-0007"))
    assert len(fig.data) == 8
    for trace in fig.data:
        line = _line(trace)
        assert line.count(None) == 1, trace.name
        for a, b in _joined(line):  # no segment spans more than a few buckets
            span = (pd.Timestamp(b[0]) - pd.Timestamp(a[0])).total_seconds()
            assert span <= gfig.GAP_BUCKETS * bucket, trace.name


def test_break_gaps_leaves_a_steady_series_alone() -> None:
    ts = pd.date_range("2026-01-05", periods=50, freq="5min").to_numpy()
    v = np.arange(50.0)
    same_ts, same_v = gfig.break_gaps(ts, v, 300)
    assert (same_ts == ts).all() and (same_v == v).all()
    kept = np.r_[0:20, 30:50]  # ten buckets silent
    holed_ts, holed_v = gfig.break_gaps(ts[kept], v[kept], 300)
    assert len(holed_v) == 41 and np.isnan(holed_v).sum() == 1
    assert np.isnan(holed_v[20]) and holed_ts[20] == ts[29]  # a bucket before the next sample
    assert (np.diff(holed_ts) > np.timedelta64(0)).all()


# -- 4. log ticks ------------------------------------------------------------------------------
def test_the_distribution_labels_only_decades_when_it_spans_several(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        dist = gpuq.distribution(s, _whole(s), "util")
    fig = check(
        gfig.distribution(dist, key="util", label="GPU utilization", unit="%", bucket_s=300)
    )
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.dtick == 1
    few = gfig.log_ticks(pd.Series([2.0, 3.0, 8.0]))  # within a decade: 2 and 5 too
    assert few == {"dtick": "D2"}


# -- 5. unknown is "–", never 0 ----------------------------------------------------------------
@pytest.fixture
def posted(tmp_path: Path) -> Iterator[Store]:
    """A training job that posts its own records: a 64-GPU run with steps but no tokens, and
    an interruption down 4 minutes (1 min to detect, 3 to restart) without lost GPU-hours."""
    with Store(str(tmp_path / "posted.duckdb")) as s:
        t0 = NOW - timedelta(hours=2)
        store_records(s, "runs", [{"run": "llm", "gpus": 64, "nodes": 8}], now=NOW)
        metrics = [
            {"run": "llm", "step": k, "loss": 4 - k / 1000, "ts": (t0 + timedelta(seconds=10 * k))}
            for k in range(1, 400)
        ]
        store_records(s, "train_metrics", [m | {"ts": m["ts"].isoformat()} for m in metrics])
        down = {"run": "llm", "ts": (t0 + timedelta(minutes=30)).isoformat(), "detect_s": 60}
        down |= {"restart_s": 180, "component": "Faulty GPU", "category": "GPU"}
        store_records(s, "interruptions", [down], now=NOW)
        yield s


def test_lost_gpu_hours_of_a_posted_interruption_are_gpus_times_downtime(posted: Store) -> None:
    expect = 64 * 240 / 3600  # 4.27 GPU-hours, not 0 and not unknown
    assert posted.scalar("SELECT lost_gpu_hours FROM interruptions") is None  # as posted
    tr = _whole(posted)
    assert failq.reliability(posted, "llm", tr)["lost_gpu_hours"] == pytest.approx(expect)
    assert failq.timeline(posted, "llm", tr)["lost_gpu_hours"].iloc[0] == pytest.approx(expect)
    assert failq.lemons(posted, "llm", tr).empty  # posted without a node: no node to rank
    tax = failq.taxonomy(posted, "llm", tr).set_index("key")
    assert tax.loc["Faulty GPU", "lost_gpu_hours"] == pytest.approx(expect)
    assert run_summary(posted, "llm")["lost_gpu_hours"] == round(expect, 3)  # $ agrees with pages


def test_a_run_without_gpus_keeps_its_lost_gpu_hours_unknown(night: Store) -> None:
    tr = _whole(night)
    assert failq.reliability(night, NIGHT_RUN, tr)["lost_gpu_hours"] is None
    lemons = failq.lemons(night, NIGHT_RUN, tr)
    assert lemons.loc[lemons["unexpected"] > 0, "lost_gpu_hours"].isna().all()
    timeline = check(interruption_timeline(failq.timeline(night, NIGHT_RUN, tr), tr.start, tr.end))
    hover = [row[7] for t in timeline.data for row in t.customdata]
    assert hover == ["–", "–"]
    assert list(known(pd.Series([None, 4.2666]))) == ["–", 4.3]


def test_summary_json_says_null_for_what_the_store_does_not_know(
    posted: Store, tmp_path: Path
) -> None:
    s = run_summary(posted, "llm")
    assert s["tokens"] is None and s["steps"] == 399 and s["mfu"] is None
    path = posted.path
    posted.close()
    out = cli("summary", "--store", path, "--json")
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)["runs"]
    assert run["tokens"] is None and run["model_params"] is None and run["mfu"] is None
    assert run["gpus"] == 64 and run["lost_gpu_hours"] == 4.267
    text = cli("summary", "--store", path)
    assert "None" not in text.stdout and "?" not in text.stdout and "0.0 B" not in text.stdout
    assert "MFU –" in text.stdout and "4 GPU-h lost" in text.stdout


def test_a_run_posted_without_timestamps_has_no_ettr_rather_than_zero(tmp_path: Path) -> None:
    with Store(str(tmp_path / "flat.duckdb")) as s:
        # every record stamped on receipt: one time for all, so no step time is known
        store_records(
            s,
            "train_metrics",
            [{"run": "r", "step": k, "loss": 3.0} for k in range(1, 50)],
            now=NOW,
        )
        summary = run_summary(s, "r")
    assert summary["ettr"] is None and summary["tokens"] is None
    assert summary["interruptions"]["downtime_hours"] == 0.0  # no interruption: none down


def test_downtime_posted_without_durations_is_unknown(tmp_path: Path) -> None:
    with Store(str(tmp_path / "bare.duckdb")) as s:
        bare = {"run": "r", "ts": NOW.isoformat(), "component": "Faulty GPU", "category": "GPU"}
        store_records(s, "interruptions", [bare], now=NOW)
        r = failq.reliability(s, "r", TimeRange(NOW - timedelta(hours=1), NOW))
        assert r["unexpected"] == 1 and r["downtime_hours"] is None
        assert r["lost_gpu_hours"] is None
        assert run_summary(s, "r")["interruptions"]["downtime_hours"] is None


def test_outlier_reasons_give_durations_at_their_own_scale(dev_store: Path) -> None:
    assert [outq.duration_text(s) for s in (10, 180, 5400)] == ["10 s", "3 min", "1.5 h"]
    with Store(str(dev_store), read_only=True) as s:
        tr = _whole(s)
        short = TimeRange(tr.start + timedelta(hours=10), tr.start + timedelta(hours=10.4))
        hot = outq.outliers(s, short)
    details = list(hot.loc[hot["reason"] == "hot", "detail"])
    assert details and all("for 0.0 h" not in d for d in details)
    assert any(" min (" in d for d in details), details


# -- 6. the GPUs page opens on the worst node --------------------------------------------------
def test_the_worst_node_is_the_first_outlier_of_the_inventory(
    dev_store: Path, night: Store
) -> None:
    with Store(str(dev_store), read_only=True) as s:
        tr = _whole(s)
        first = outq.outliers(s, tr).iloc[0]
        assert outq.worst_node(s, tr) == (first["host"], f"{first['reason']} on GPU {first['gpu']}")
        assert outq.worst_node(s, tr) == ("h100-0007", "hot on GPU 5")
    assert outq.worst_node(night, _whole(night)) is None  # no GPU samples: nothing to open on


def test_the_worst_node_is_found_without_reading_xids_when_a_sample_names_it(
    dev_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hot, throttled or straggling GPU comes before any XID in the table, so the drill-down
    opens on it without the XID query (the first viewer after a write waits less)."""
    with Store(str(dev_store), read_only=True) as s:
        tr = _whole(s)
        want = outq.worst_node(s, tr)
        s.forget_results()
        monkeypatch.setattr(outq, "xid_gpus", lambda *_a: pytest.fail("XIDs were read"))
        assert outq.worst_node(s, tr) == want == ("h100-0007", "hot on GPU 5")


@pytest.mark.parametrize("axis", ["step", "time"])
def test_the_loss_and_throughput_charts_share_their_x_range_and_plot_area(
    dev_store: Path, axis: str
) -> None:
    """One above the other, a step (or a time) falls at the same place on both charts: the
    same x range and the same fixed side margins (each chart's own autorange and margins had
    put step 5,000 135 px apart)."""
    with Store(str(dev_store), read_only=True) as s:
        tr = _whole(s)
        series = trainq.overlay_series(s, DEV, tr, None, axis)
        events = trainq.run_events(s, DEV, tr)
    span = tfig.shared_x_range(series, axis)
    loss = check(
        tfig.loss_figure(
            series, axis, 0.6, True, events, pd.DataFrame(), 0, "plotly_dark", x_range=span
        )
    )
    thr = check(tfig.throughput_figure(series[DEV], axis, "plotly_dark", DEV, x_range=span))
    x = series[DEV]["ts" if axis == "time" else "step"]
    lo, hi = (pd.Timestamp(v) for v in span) if axis == "time" else span
    assert lo < x.min() and x.max() < hi and (hi - lo) < (x.max() - x.min()) * 1.03
    for fig in (loss, thr):
        assert list(fig.layout.xaxis.range) == span
        assert (fig.layout.margin.l, fig.layout.margin.r) == (72, 64)
        assert fig.layout.yaxis.automargin is False


def test_a_silence_of_the_whole_fleet_is_blank_in_the_heatmap() -> None:
    """Plotly sizes a heatmap cell up to its neighbours: with no column for the hours nobody
    reported, the cells before and after a fleet-wide outage were stretched across it."""
    hours = pd.to_datetime(["2026-11-27 00:00", "2026-11-27 01:00", "2026-11-27 02:00"])
    hours = hours.append(pd.to_datetime(["2026-11-27 07:00", "2026-11-27 08:00"]))
    cells = pd.DataFrame(
        {
            "ts": list(hours) * 2,
            "rank": [1] * 5 + [2] * 5,
            "host": ["h100-0001"] * 5 + ["h100-0002"] * 5,
            "value": [50.0, 51, 52, 70, 71, 40, 41, 42, 60, 61],
        }
    )
    heat = check(
        gfig.heatmap(
            cells, key="temp", label="Temperature", unit="°C", bucket_s=3600,
            nodes_total=2, nodes_shown=2,
        )
    )  # fmt: skip
    trace = heat.data[0]
    x = pd.to_datetime(list(trace.x))
    # a blank column an hour after the last report and an hour before the next
    assert list(x.strftime("%H:%M")) == [
        "00:00",
        "01:00",
        "02:00",
        "03:00",
        "06:00",
        "07:00",
        "08:00",
    ]
    z = np.asarray(trace.z, dtype=float)
    assert np.isnan(z[:, 3:5]).all() and not np.isnan(z[:, [0, 1, 2, 5, 6]]).any()
    assert z[0, 5] == 70 and z[1, 2] == 42  # the reported cells keep their values
    # one bucket missing (or a round come late) is not called a silence
    late = cells[cells["ts"] != pd.Timestamp("2026-11-27 01:00")].copy()
    late = late[late["ts"] <= pd.Timestamp("2026-11-27 02:00")]
    short = check(
        gfig.heatmap(
            late, key="temp", label="Temperature", unit="°C", bucket_s=3600,
            nodes_total=2, nodes_shown=2,
        )
    )  # fmt: skip
    assert len(short.data[0].x) == 2


def test_throughput_and_mfu_axes_start_at_zero(dev_store: Path) -> None:
    """#37, 4: a 1 % swing on an axis zoomed to the data looked like a crash; the MFU axis
    (the same line read on the right) had two ticks."""
    with Store(str(dev_store), read_only=True) as s:
        series = trainq.overlay_series(s, DEV, _whole(s), None, "step")[DEV]
    fig = check(tfig.throughput_figure(series, "step", "plotly_dark", "dev-64"))
    top = float(series["tokens_per_s"].max()) / 1e6
    assert fig.layout.yaxis.range[0] == 0 and top < fig.layout.yaxis.range[1] < top * 1.1
    mfu_top = float((series["mfu"] * 100).max())
    assert fig.layout.yaxis2.range[0] == 0 and fig.layout.yaxis2.range[1] > mfu_top


def test_a_heatmap_of_200_rows_names_rows_that_can_be_read() -> None:
    """199 nodes and the averaged row in 620 px: every row named drew 200 overlapping names,
    none readable. One row in a few is named, the worst first and the averaged last always,
    each at least a label's height apart, and a spare keeps its role in its name."""
    hours = pd.date_range("2026-11-27", periods=4, freq="h")
    hosts = [f"h100-{i:04d}" for i in range(199)] + [None]
    cells = pd.DataFrame(
        {
            "ts": list(hours) * 200,
            "rank": [r for r in range(1, 201) for _ in hours],
            "host": [h for h in hosts for _ in hours],
            "role_now": [("spare" if h == "h100-0005" else "job") for h in hosts for _ in hours],
            "value": np.linspace(0, 100, 800),
        }
    )
    heat = check(
        gfig.heatmap(cells, key="util", label="Utilization", unit="%", bucket_s=3600,
                     nodes_total=2064, nodes_shown=199)
    )  # fmt: skip
    y = heat.layout.yaxis
    named, text = list(y.tickvals), list(y.ticktext)
    rows = list(heat.data[0].y)
    assert len(rows) == 200 and named[0] == "h100-0000" and text[-1] == "other 1,865 nodes (mean)"
    step = rows.index(named[1])
    plot_px = heat.layout.height - 140
    assert step * plot_px / 200 >= gfig.ROW_LABEL_PX and len(named) <= 200 // step + 2
    assert "h100-0005 · spare" in text  # the 6th row: named with one row in 5
    assert f"one row in {step} named" in heat.layout.title.subtitle.text
