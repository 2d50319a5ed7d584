"""Goodput you can audit (#38, 1 and 2): every second of a run's wall time in one category,
from the records the store holds; the categories add up to the window exactly, on replayed and
imported runs; a replayed run's categories match the simulation's own timeline (downtime,
blocking saves, redone work) within 1 % of its wall time."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from telemetry.metrics.goodput import CATEGORIES, goodput, ideal_step_s
from telemetry.replay.scenarios import get_scenario
from telemetry.replay.timeline import DOWN, HUNG, simulate
from telemetry.store import Store
from tests.cluster_fixture import RUN as NIGHT_RUN
from tests.conftest import cli, imported_night


def _adds_up(block: dict) -> None:
    assert set(block["seconds"]) == set(CATEGORIES)
    assert all(v >= 0 for v in block["seconds"].values()), block
    assert round(sum(block["seconds"].values()), 3) == block["window_s"]


@pytest.mark.parametrize(
    ("scenario", "seed", "days", "interval"),
    [("dev-64", 0, 1.0, None), ("dev-64", 1, 1.0, None), ("llama3-405b", 0, 2.0, 900.0)],
)
def test_a_replayed_run_matches_its_timeline(
    tmp_path: Path, scenario: str, seed: int, days: float, interval: float | None
) -> None:
    """The replay's own timeline is the truth: downtime, blocking saves, redone work and the
    planned stops, each within 1 % of the wall time (llama3-405b: two days of 16,384 GPUs and
    their ~8 interruptions a day, sampled every 15 min to stay quick)."""
    from tests.conftest import build_store

    path = build_store(tmp_path / "s.duckdb", scenario=scenario, seed=seed, days=days,
                       **({"interval_s": interval} if interval else {}))  # fmt: skip
    with Store(str(path), read_only=True) as s:
        block = goodput(s, f"{scenario}-s{seed}")
    assert block is not None
    _adds_up(block)
    secs, wall = block["seconds"], block["window_s"]
    tl = simulate(get_scenario(scenario).with_overrides(days=days), seed)
    assert len([i for i in tl.interruptions if i.t < wall]) >= 3  # something to account
    down = sum(min(b, wall) - a for a, b, st in tl.states if st in (DOWN, HUNG) and a < wall)
    blocking = sum(min(b, wall) - a for a, b in tl.blocking if a < wall)
    rework = sum(i.rework_s for i in tl.interruptions if i.t < wall)
    assert abs(secs["recovery"] + secs["planned"] - down) <= 0.01 * wall, (secs, down)
    assert abs(secs["checkpoint_save"] - blocking) <= 0.01 * wall, (secs, blocking)
    assert abs(secs["wasted_progress"] - rework) <= 0.01 * wall, (secs, rework)
    planned = sum(i.detect_s + i.restart_s for i in tl.interruptions if i.planned and i.t < wall)
    assert abs(secs["planned"] - planned) <= 0.01 * wall


def test_energy_per_category_is_each_hours_draw_while_it_lasted(tmp_path: Path) -> None:
    """#38, 4: each category's kWh adds up to the run's measured GPU energy over its window, and
    an hour of downtime is charged what the GPUs drew while down (idle power), not the run's
    mean: the replay's GPUs idle while a run is down."""
    from telemetry.queries import TimeRange
    from telemetry.queries.energy import energy
    from tests.conftest import build_store

    path = build_store(tmp_path / "s.duckdb", seed=0, days=1.0)
    with Store(str(path), read_only=True) as s:
        block = goodput(s, "dev-64-s0", energy=True)
        assert block is not None
        win = TimeRange(pd.Timestamp(block["start"]).to_pydatetime(),
                        pd.Timestamp(block["end"]).to_pydatetime())  # fmt: skip
        whole = energy(s, win).kwh
    e, secs = block["energy"], block["seconds"]
    assert e["basis"] == "energy counter" and set(e["kwh"]) == set(CATEGORIES)
    assert whole is not None and sum(e["kwh"].values()) == pytest.approx(whole, rel=0.02)
    per_hour = {k: e["kwh"][k] / (secs[k] / 3600) for k in ("productive", "recovery")}
    assert per_hour["recovery"] < 0.6 * per_hour["productive"], per_hour
    text = cli("summary", "--store", str(path)).stdout
    assert " kWh" in text.split("  recovery ")[1].splitlines()[0]


def test_an_imported_night_is_accounted_for(tmp_path: Path) -> None:
    store = imported_night(tmp_path)
    with Store(str(store), read_only=True) as s:
        block = goodput(s, NIGHT_RUN)
    assert block is not None
    _adds_up(block)
    secs = block["seconds"]
    assert block["ideal_step_s"] == 2.0  # one step every 2 s, as the log says
    assert secs["wasted_progress"] == (400 + 200) * 2.0  # the two restores' lost steps, redone
    # the two downtimes: last progress to training resumed (its first redone step: #57, 8),
    # less the loads: 600 + 480 + 60 - 40 and 15 + 360 + 30 - 15 s
    assert secs["recovery"] == 1100.0 + 390.0
    assert secs["productive"] / block["window_s"] == pytest.approx(block["goodput"], abs=1e-4)
    s = cli("summary", "--store", str(store), "--json")
    run = json.loads(s.stdout)["runs"][0]
    assert run["goodput"]["seconds"] == secs  # the summary's block is the same
    # money per category (#38, 4): the run's 64 GPUs (the log states them) at $2.00/GPU-h
    assert run["goodput"]["gpu_hours"]["wasted_progress"] == pytest.approx(
        1200 / 3600 * 64, abs=0.001
    )
    assert run["goodput"]["usd"]["wasted_progress"] == pytest.approx(1200 / 3600 * 64 * 2.0,
                                                                     abs=0.01)  # fmt: skip
    text = cli("summary", "--store", str(store)).stdout
    assert "  wasted_progress " in text and "  recovery " in text  # one line per category


def test_the_ideal_step_time_leaves_slow_steps_out() -> None:
    dt = np.array([2.0] * 50 + [2.1] * 10 + [60.0, 30.0])  # two stalls
    ds = np.ones_like(dt)
    ideal = ideal_step_s(dt, ds)
    assert ideal is not None and 2.0 <= ideal < 2.05
    assert ideal_step_s(np.array([]), np.array([])) is None


def test_each_day_adds_up_and_the_days_make_the_run(tmp_path: Path) -> None:
    from tests.conftest import build_store

    path = build_store(tmp_path / "s.duckdb", seed=2, days=3.0, interval_s=60.0)
    with Store(str(path), read_only=True) as s:
        block = goodput(s, "dev-64-s2")
    assert block is not None and len(block["days"]) == 3
    for day in block["days"]:
        _adds_up(day)
    assert sum(d["window_s"] for d in block["days"]) == pytest.approx(block["window_s"])
    for k in ("recovery", "planned", "checkpoint_save", "startup"):  # intervals: cut exactly
        assert sum(d["seconds"][k] for d in block["days"]) == pytest.approx(
            block["seconds"][k], abs=0.01
        )
    assert [d["day"] for d in block["days"]] == ["2026-01-05", "2026-01-06", "2026-01-07"]


def test_the_day_chart_stacks_each_day_to_its_whole(tmp_path: Path) -> None:
    """#38, 3: the Checkpoints page's day chart: each day's bars make 100 % of its hours, the
    productive share at the base, the rolling 7-day goodput beside them."""
    from app.figures.checkpoints import goodput_days
    from tests.conftest import build_store

    path = build_store(tmp_path / "s.duckdb", seed=2, days=3.0, interval_s=60.0)
    with Store(str(path), read_only=True) as s:
        block = goodput(s, "dev-64-s2")
    fig = goodput_days(block, "plotly_dark").to_dict()
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert bars[0]["name"] == "Productive"
    totals = np.sum([np.asarray(t["y"], float) for t in bars], axis=0)
    assert np.allclose(totals, 100.0, atol=0.01)
    line = next(t for t in fig["data"] if t["name"] == "Goodput, rolling 7 days")
    assert line["y"][0] == pytest.approx(block["days"][0]["goodput"] * 100, abs=0.01)
    assert goodput_days(None, "plotly_dark").to_dict()["layout"]["annotations"]  # a message
    # whole days on the axis: half a day either side, a date a tick (one day alone was
    # autoscaled to a millisecond, ticked '23:59:59.9996')
    axis = fig["layout"]["xaxis"]
    assert axis["range"] == ["2026-01-04T12:00:00", "2026-01-07T12:00:00"]
    assert axis["tickformat"] == "%b %d" and axis["dtick"] == 86_400_000
    one = goodput_days(block | {"days": block["days"][:1]}, "plotly_dark").to_dict()
    assert one["layout"]["xaxis"]["range"] == ["2026-01-04T12:00:00", "2026-01-05T12:00:00"]
    assert {t["width"] for t in one["data"] if t["type"] == "bar"} == {0.9 * 86_400_000}


def test_goodput_below_the_alerts_files_threshold_is_an_alert(tmp_path: Path) -> None:
    """#38, 3: ``[rules] goodput_below`` in the alerts file: the imported night's goodput over
    its last day of data (81.2 % of its wall time, which ends with its failed last save's end,
    as MTBF's does; timed saves counted, redone steps not downtime) is below 0.9, above 0.8;
    the Overview and the receivers get the same alert, naming what cost most."""
    from telemetry.alerting import load_config, store_alerts
    from telemetry.metrics.alert_rules import active_alerts
    from telemetry.queries import data_extent

    store = imported_night(tmp_path)
    f = tmp_path / "alerts.toml"
    f.write_text('[rules]\ngoodput_below = 0.9\ngoodput_window = "1d"\n'
                 '[[receiver]]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\n')  # fmt: skip
    rules = load_config(str(f)).rules
    assert rules.goodput_below == 0.9 and rules.goodput_window_s == 86400
    with Store(str(store), read_only=True) as s:
        tr = data_extent(s)
        assert tr is not None
        got = active_alerts(s, NIGHT_RUN, tr, rules=rules)
        row = got[got["key"] == "GoodputLow"].iloc[0]
        assert row["detail"].startswith("81.2 % over the last 4.1 h of data (below 90 %)")
        assert "most lost: recovery 10.1 %" in row["detail"]  # 55 s of it are the restores
        low = rules.__class__(goodput_below=0.8)
        assert "GoodputLow" not in set(active_alerts(s, NIGHT_RUN, tr, rules=low)["key"])
        assert "GoodputLow" not in set(active_alerts(s, NIGHT_RUN, tr)["key"])  # no rule: none
        sent = store_alerts(s, rules=rules)
    assert any(a.labels == {"alertname": "GoodputLow", "severity": "warning", "run": NIGHT_RUN}
               for a in sent)  # fmt: skip


def test_a_live_replay_is_running_and_accounted_to_its_newest_data(tmp_path: Path) -> None:
    """A live replay's run record ends at its planned end, in the future: the demo's Overview
    said "finished" and counted the hours not yet simulated as slowdown (goodput 71.6 % beside
    an ETTR of 86.0 %)."""
    from telemetry.metrics.summary import run_summary
    from telemetry.replay.runner import replay

    with Store(str(tmp_path / "s.duckdb")) as s:
        replay(s, get_scenario("dev-64").with_overrides(days=1.0), 0, until_s=12 * 3600,
               interval_s=60.0)  # fmt: skip
        run, block = run_summary(s, "dev-64-s0"), goodput(s, "dev-64-s0")
    assert run["state"] == "running" and run["ended"] is None
    assert block is not None and block["window_s"] <= 12 * 3600
    assert block["goodput"] == pytest.approx(run["ettr"], abs=0.01)


def test_restores_the_log_times_are_their_own_category(tmp_path: Path) -> None:
    """#38, 1: the night's two restarts log their loads' start and finish (Megatron's
    ``loading checkpoint from`` and ``successfully loaded checkpoint``: 40 s from the PFS,
    15 s from NVMe): those 55 s are ``checkpoint_restore``, taken out of the recovery, and
    the categories still add up to the window."""
    store = imported_night(tmp_path)
    with Store(str(store), read_only=True) as s:
        block = goodput(s, NIGHT_RUN)
    assert block is not None
    secs = block["seconds"]
    assert secs["checkpoint_restore"] == pytest.approx(55.0, abs=0.01)
    assert secs["recovery"] > 0
    assert round(sum(secs.values()), 3) == pytest.approx(block["window_s"], abs=0.001)
    assert sum(d["seconds"]["checkpoint_restore"] for d in block["days"]) == pytest.approx(55.0)


def test_megatron_timers_give_evaluation_and_data_loading(tmp_path: Path) -> None:
    """#38, 1: Megatron-LM's timers, where the log prints them, split evaluation and data
    loading out of a run's time: ``evaluate`` after each evaluation (its whole time) and
    ``batch-generator`` per iteration (the slowest rank's wait for its batch)."""
    from tests.test_slow_ranks import T0, _all_ranks, _iteration, _minmax

    out, t = [], T0
    for w in range(30):
        t += timedelta(seconds=20)  # 10 steps of 2.0 s
        out.append(_iteration(t, 10 * (w + 1)))
        batch = {r: "100.00" for r in range(4)} | {2: "300.00"}  # rank 2 waits 0.3 s a step
        out += _all_ranks({"forward-compute": {r: "1500.00" for r in range(4)},
                           "batch-generator": batch})  # fmt: skip
        if w == 14:  # an evaluation of 30 s after step 150, as Megatron prints it
            out += _minmax({"evaluate": (29000.0, 30000.0)})
            out += ["-" * 100, " validation loss at iteration 150 | lm loss value: 2.4E+00 |",
                    "-" * 100]  # fmt: skip
            t += timedelta(seconds=30)
    log = tmp_path / "slurm-77.out"
    log.write_text("\n".join(out) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "mega-eval", str(log))
    assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        block = goodput(s, "mega-eval")
    assert block is not None
    _adds_up(block)
    secs = block["seconds"]
    assert block["ideal_step_s"] == 2.0
    assert secs["evaluation"] == pytest.approx(30.0, abs=0.01)
    fed = secs["data_loading"] / (secs["productive"] + secs["data_loading"])
    assert fed == pytest.approx(0.3 / 2.0, abs=1e-6)  # 0.3 s of each 2.0-s step
    assert secs["slowdown"] < 1.0  # the evaluation is no longer "slow steps"


def test_each_hours_step_time_against_the_ideal_shows_a_slow_hour_and_a_stall(
    tmp_path: Path,
) -> None:
    """#38, 2: step-time deviation over time. Three hours of 2 s steps, the second hour's steps
    3 s (50 % slower), a 10-minute stall in the third: the chart's median line says +50 % in
    the slow hour and ~0 elsewhere; the mean line carries the stall, and the axis is not
    flattened by it."""
    from datetime import datetime

    from app.figures.checkpoints import step_time_hours

    t0 = datetime(2026, 3, 1)
    rows, t, step = [], 0.0, 0
    while t < 3 * 3600:
        step += 1
        t += 3.0 if 3600 <= t < 7200 else 2.0
        if step == 4000:
            t += 600.0  # a stall in the third hour
        rows.append({"run_id": "r", "ts": t0 + timedelta(seconds=t), "step": step, "attempt": 0})
    frame = pd.DataFrame(rows)  # noqa: F841 (read by DuckDB by name)
    with Store(str(tmp_path / "s.duckdb")) as s:
        with s.transaction(["runs", "train_metrics"]) as con:
            con.execute("INSERT INTO runs (run_id, start_ts, end_ts) VALUES ('r', ?, ?)",
                        [t0, t0 + timedelta(seconds=t)])  # fmt: skip
            con.execute("INSERT INTO train_metrics (run_id, ts, step, attempt) "
                        "SELECT run_id, ts, step, attempt FROM frame")  # fmt: skip
        block = goodput(s, "r", steps=True)
    assert block is not None and block["ideal_step_s"] == pytest.approx(2.0, rel=0.01)
    hours = block["step_time"]
    assert [h["hour"][11:16] for h in hours] == ["00:00", "01:00", "02:00", "03:00"][: len(hours)]
    assert hours[0]["median_pct"] == pytest.approx(0.0, abs=1)
    assert hours[1]["median_pct"] == pytest.approx(50.0, abs=1)  # the slow hour
    stalled = hours[2]
    assert stalled["median_pct"] == pytest.approx(0.0, abs=1)
    assert stalled["mean_pct"] > 10  # 600 s over the hour's ~1,500 steps of 2 s
    fig = step_time_hours(block, "plotly_dark").to_dict()
    assert [tr["name"] for tr in fig["data"]] == ["Median step", "Mean (stalls included)"]
    assert fig["layout"]["yaxis"]["range"][1] >= 50  # the slow hour is on the chart
