"""Interruption inference from a run's step stream, its log signals, XID events and checkpoints.

Hand-built frames for each rule a user would notice on the Failures page, then the engine
against the replay simulator's own ground truth in a real store.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from telemetry.derive.evidence import CAUSES, xid_rule
from telemetry.derive.inference import (
    COLUMNS,
    current_stall,
    infer_interruptions,
    stall_threshold_s,
)
from telemetry.reference import llama3_interruptions
from telemetry.replay.runner import replay
from telemetry.replay.scenarios import get_scenario
from telemetry.replay.timeline import _BEHAVIOUR
from telemetry.store import Store

T0 = datetime(2026, 3, 2, 8, 0, 0)
HOSTS = {"node-1", "node-2", "node-7"}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def stream(*segments: tuple[float, int, int, int | None], dt: float = 10.0, every: int = 1):
    """Metrics from (start second, first step, rows, attempt) segments: one row per ``every``
    steps, ``dt`` seconds apart."""
    rows = []
    for t, step, n, attempt in segments:
        for i in range(n):
            rows.append(
                {
                    "run_id": "atlas",
                    "ts": at(t + i * dt),
                    "step": step + i * every,
                    "attempt": attempt,
                }
            )
    return pd.DataFrame(rows)


def sig(
    t: float,
    kind: str,
    host: str | None = None,
    gpu: int | None = None,
    xid: int | None = None,
    line: str = "",
    origin: str = "slurm-81234.out:1",
    detail: str = "",
):
    return {
        "ts": at(t),
        "run_id": "atlas",
        "host": host,
        "gpu": gpu,
        "kind": kind,
        "xid": xid,
        "detail": detail,
        "origin": origin,
        "line": line or kind,
        "source": "log",
    }


def ckpt(step: int, tier: str, end: float, status: str = "ok", path: str | None = None):
    return {
        "run_id": "atlas",
        "step": step,
        "tier": tier,
        "start_ts": at(end - 5),
        "end_ts": at(end),
        "status": status,
        "path": path or f"/{tier}/ckpt/iter_{step:07d}",
    }


def evidence(row: pd.Series) -> list[dict]:
    return json.loads(row["evidence"])


# 100 steps at 10 s (steps 0..99, last progress at 990 s), a stop, then attempt 1 from 41.
TWO_SEGMENTS = ((0, 0, 100, 0), (990 + 840, 41, 60, 1))


def test_a_job_that_failed_twice_with_different_causes() -> None:
    m = stream((0, 0, 100, 0), (1830, 41, 100, 1), (1830 + 990 + 600, 131, 50, 2))
    signals = pd.DataFrame(
        [
            sig(
                992,
                "xid",
                "node-7",
                3,
                79,
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                "node-7-kern.log:88",
            ),
            sig(
                1590, "nccl_timeout", "node-2", line="Watchdog caught collective operation timeout"
            ),
            sig(2823, "ib_error", "node-1", line="NET/IB : Got completion with error 12"),
            sig(2830, "traceback", None, detail="RuntimeError: NCCL error"),
        ]
    )
    cks = pd.DataFrame([ckpt(40, "nvme", 410), ckpt(40, "pfs", 450), ckpt(130, "nvme", 1830 + 900)])
    df = infer_interruptions(m, signals, checkpoints=cks, run_hosts=HOSTS, gpus=64)
    assert list(df.columns) == list(COLUMNS) and len(df) == 2
    first, second = df.iloc[0], df.iloc[1]
    assert (first["component"], first["category"], first["xid"]) == ("Faulty GPU", "GPU", 79)
    assert (first["host"], first["gpu"]) == ("node-7", 3)
    assert first["ts"] == at(990) and first["end_ts"] == at(1830)
    # XID 79 drains the node: its NVMe copy is gone, so step 40 comes back from the PFS.
    assert bool(first["node_lost"]) and first["restored_tier"] == "pfs"
    assert (first["restored_step"], first["lost_steps"]) == (40, 59)
    assert first["rework_s"] == pytest.approx(590.0)
    # the GPU failed at the XID (992 s); the job noticed at the watchdog (1590 s: issue 57, 4)
    assert first["failed_ts"] == at(992) and first["noticed_ts"] == at(1590)
    # training resumed when step 41 began, 10 s before its line (issue 57, 8): 830 s down
    assert first["detect_s"] == pytest.approx(600.0) and first["restart_s"] == pytest.approx(230.0)
    assert first["lost_gpu_hours"] == pytest.approx(64 * (830 + 590) / 3600)
    assert first["recovery"] == "automated" and first["source"] == "inferred"
    assert first["confidence"] == pytest.approx(0.9)
    assert first["description"] == (
        "Step stalled at 99 for 14 min; XID 79 on node-7 GPU 3 (GPU has fallen off the bus) "
        "(+1 symptom); resumed from step 40 (pfs), 59 steps lost"
    )
    assert (second["component"], second["category"]) == ("Network Switch/Cable", "Network")
    # an IB completion error is written by the rank that lost its peer: it places no culprit
    assert pd.isna(second["host"]) and pd.isna(second["xid"]) and not second["node_lost"]
    assert json.loads(second["culprit_candidates"]) == ["node-1"] and second["culprit_reason"]
    assert (second["restored_tier"], second["restored_step"], second["lost_steps"]) == (
        "nvme",
        130,
        10,
    )
    roles = [(e["kind"], e["role"]) for e in evidence(second)]
    assert roles[:2] == [("ib_error", "cause"), ("traceback", "cascade")]  # its NCCL error


def test_a_watchdog_ten_minutes_after_an_xid_is_its_cascade() -> None:
    signals = pd.DataFrame(
        [
            sig(995, "xid", "node-7", 5, 79, origin="node-7-kern.log:12"),
            sig(1595, "nccl_timeout", "node-1", origin="slurm-81234.out:4410"),
        ]
    )
    row = infer_interruptions(stream(*TWO_SEGMENTS), signals, run_hosts=HOSTS).iloc[0]
    assert row["component"] == "Faulty GPU" and row["confidence"] >= 0.85
    ev = evidence(row)
    assert [(e["kind"], e["role"], e["origin"]) for e in ev[:2]] == [
        ("xid", "cause", "node-7-kern.log:12"),
        ("nccl_timeout", "cascade", "slurm-81234.out:4410"),
    ]
    assert ev[0]["ts"] == "2026-03-02T08:16:35" and ev[0]["gpu"] == 5


def test_a_bare_watchdog_is_an_nccl_watchdog_timeout() -> None:
    signals = pd.DataFrame([sig(1590, "nccl_timeout", "node-2"), sig(1600, "traceback", None)])
    row = infer_interruptions(stream(*TWO_SEGMENTS), signals, run_hosts=HOSTS).iloc[0]
    assert (row["component"], row["category"]) == ("NCCL Watchdog Timeouts", "Unknown")
    assert 0.5 <= row["confidence"] <= 0.6 and pd.isna(row["gpu"])
    assert row["detect_s"] == pytest.approx(600.0) and row["restart_s"] == pytest.approx(230.0)


def test_nothing_at_all_is_unknown_with_low_confidence() -> None:
    row = infer_interruptions(stream(*TWO_SEGMENTS), None, run_hosts=HOSTS).iloc[0]
    assert (row["component"], row["category"]) == ("Unknown", "Unknown")
    assert row["confidence"] == pytest.approx(0.2)
    assert row["host"] is None and pd.isna(row["detect_s"]) and not row["planned"]
    # No checkpoint either: the restored step is the first one after minus the log interval.
    assert (row["restored_step"], row["lost_steps"]) == (40, 59) and row["restored_tier"] is None
    assert [e["kind"] for e in evidence(row)] == ["restore_estimate"]
    assert "resumed from step ~40 (estimated)" in row["description"]


def test_evidence_off_the_runs_hosts_or_outside_the_window_is_ignored() -> None:
    signals = pd.DataFrame(
        [
            sig(995, "xid", "node-99", 0, 79),  # another job's node
            sig(990 - 600, "ib_error", "node-1"),  # ten minutes before the last progress
            sig(1000, "nccl_timeout", "node-1"),
        ]
    )
    row = infer_interruptions(stream(*TWO_SEGMENTS), signals, run_hosts=HOSTS).iloc[0]
    assert row["component"] == "NCCL Watchdog Timeouts"
    assert [e["kind"] for e in evidence(row)] == ["nccl_timeout", "restore_estimate"]
    # With the run's hosts unknown the other node's XID counts, at a lower confidence.
    row = infer_interruptions(stream(*TWO_SEGMENTS), signals).iloc[0]
    assert row["component"] == "Faulty GPU" and row["confidence"] == pytest.approx(0.75)


def test_a_dcgm_xid_repeating_a_kernel_line_is_one_piece_of_evidence() -> None:
    signals = pd.DataFrame([sig(993, "xid", "node-7", None, 48, origin="node-7-kern.log:3")])
    xev = pd.DataFrame({"ts": [at(995)], "host": ["node-7"], "gpu": [6], "xid": [48]})
    row = infer_interruptions(stream(*TWO_SEGMENTS), signals, xid_events=xev).iloc[0]
    assert (row["component"], row["gpu"], row["xid"]) == ("GPU HBM3 Memory", 6, 48)
    assert [e["kind"] for e in evidence(row)] == ["xid", "restore_estimate"]
    # Alone, the XID event is the evidence, with its decoded message as the line.
    row = infer_interruptions(stream(*TWO_SEGMENTS), None, xid_events=xev).iloc[0]
    assert evidence(row)[0]["line"] == "XID 48 on node-7 GPU 6: Double Bit ECC Error"


def test_step_regression_restores_from_the_load_line_and_its_tier() -> None:
    # No attempt column at all: only the step going back from 99 to 71 shows the restart.
    m = stream((0, 0, 100, None), (1000, 71, 30, None)).drop(columns="attempt")
    cks = pd.DataFrame(
        [
            ckpt(70, "nvme", 705, path="/local_nvme/ckpt/atlas/iter_0000070"),
            ckpt(70, "pfs", 760, path="/lustre/ckpt/atlas/iter_0000070"),
        ]
    )
    events = pd.DataFrame(
        [
            {
                "ts": at(995),
                "kind": "load",
                "step": None,
                "path": "/lustre/ckpt/atlas/iter_0000070",
                "origin": "slurm-81234.out:9001",
                "line": "loading checkpoint from /lustre/ckpt/atlas at iteration 70",
            }
        ]
    )
    roots = {"nvme": ["/local_nvme/ckpt/atlas"], "pfs": ["/lustre/ckpt/atlas"]}
    row = infer_interruptions(m, None, checkpoints=cks, ckpt_events=events, tier_roots=roots)
    assert len(row) == 1
    row = row.iloc[0]
    # NVMe would be faster, but the load line names the PFS copy.
    assert (row["restored_step"], row["restored_tier"], row["lost_steps"]) == (70, "pfs", 29)
    assert row["recovery"] == "automated"  # restarted (load line) within minutes
    load = [e for e in evidence(row) if e["kind"] == "ckpt_load"]
    assert load and load[0]["origin"] == "slurm-81234.out:9001"
    # Without the load line, the fastest tier holding step 70 is taken.
    row = infer_interruptions(m, None, checkpoints=cks, tier_roots=roots).iloc[0]
    assert (row["restored_step"], row["restored_tier"]) == (70, "nvme")


def test_a_lost_node_takes_its_nvme_copy_with_it() -> None:
    cks = pd.DataFrame([ckpt(40, "nvme", 410), ckpt(40, "pfs", 500), ckpt(20, "pfs", 300)])
    failure = sig(
        991,
        "slurm_node_failure",
        "node-7",
        line="slurmstepd: error: *** JOB 81234 ON node-7 CANCELLED AT 2026-03-02T08:16:31 "
        "DUE TO NODE FAILURE ***",
    )
    row = infer_interruptions(stream(*TWO_SEGMENTS), pd.DataFrame([failure]), checkpoints=cks)
    row = row.iloc[0]
    assert bool(row["node_lost"]) and row["restored_tier"] == "pfs"
    assert (row["component"], row["category"]) == ("Host Maintenance", "Unplanned Maintenance")
    # Had the PFS copy of step 40 not been written, the NVMe copy could not be used either.
    only_nvme = pd.DataFrame([ckpt(40, "nvme", 410), ckpt(20, "pfs", 300)])
    m = stream((0, 0, 100, 0), (1830, 21, 60, 1))
    row = infer_interruptions(m, pd.DataFrame([failure]), checkpoints=only_nvme).iloc[0]
    assert (row["restored_step"], row["restored_tier"], row["lost_steps"]) == (20, "pfs", 79)


def test_the_first_step_after_the_restart_says_which_copy_was_loaded() -> None:
    cks = pd.DataFrame([ckpt(40, "nvme", 410), ckpt(60, "nvme", 610), ckpt(40, "pfs", 500)])
    # An XID 79 suggests the node was lost, yet the job resumed at 61: the NVMe copy survived.
    m = stream((0, 0, 100, 0), (1830, 61, 60, 1))
    signals = pd.DataFrame([sig(995, "xid", "node-7", 1, 79)])
    row = infer_interruptions(m, signals, checkpoints=cks).iloc[0]
    assert (row["restored_step"], row["restored_tier"], bool(row["node_lost"])) == (
        60,
        "nvme",
        False,
    )
    # Resuming at 41 although step 60 was on NVMe: the NVMe copy was gone, so step 40 came
    # from the PFS, and a node was lost even with no signal saying so.
    row = infer_interruptions(stream(*TWO_SEGMENTS), None, checkpoints=cks).iloc[0]
    assert (row["restored_step"], row["restored_tier"], bool(row["node_lost"])) == (40, "pfs", True)


def test_a_record_posted_by_the_job_wins() -> None:
    m = stream((0, 0, 100, 0), (1830, 41, 100, 1), (1830 + 990 + 600, 131, 50, 2))
    posted = pd.DataFrame(
        {"ts": [at(1000)], "component": ["Faulty GPU"], "source": ["api"], "run_id": ["atlas"]}
    )
    df = infer_interruptions(m, None, posted=posted)
    assert list(df["ts"]) == [at(1830 + 990)]
    # An inferred row passed back in does not hide its own stop.
    again = infer_interruptions(m, None, posted=df.assign(source="inferred"))
    assert len(again) == 2


def test_unknown_gpu_count_leaves_lost_gpu_hours_unknown() -> None:
    row = infer_interruptions(stream(*TWO_SEGMENTS), None).iloc[0]
    assert pd.isna(row["lost_gpu_hours"])
    row = infer_interruptions(stream(*TWO_SEGMENTS), None, gpus=16).iloc[0]
    assert row["lost_gpu_hours"] == pytest.approx(16 * (830 + 590) / 3600)


def test_a_still_stalled_run_is_an_alert_not_an_interruption() -> None:
    m = stream((0, 0, 100, 0))
    assert infer_interruptions(m, None).empty
    assert current_stall(m, at(990 + 30)) is None
    stall = current_stall(m, at(990 + 900))
    assert stall == {
        "run_id": "atlas",
        "since": at(990),
        "step": 99,
        "stalled_s": 900.0,
        "threshold_s": 60.0,
    }
    assert current_stall(stream(*TWO_SEGMENTS), at(1830 + 590 + 10)) is None
    # An aware clock is the same instant: 09:31:30+01:00 is 08:31:30 UTC, 15 min after 08:16:30.
    aware = pd.Timestamp(at(990 + 900)).tz_localize("UTC").tz_convert("Europe/Berlin")
    assert current_stall(m, aware.to_pydatetime())["stalled_s"] == 900.0  # type: ignore[index]


def test_one_line_per_100_steps_is_not_a_stall_but_a_crash_is() -> None:
    m = stream((0, 0, 60, 0), (3600 + 900, 5_000, 40, 1), dt=60.0, every=100)
    assert stall_threshold_s(m) == pytest.approx(300.0)
    df = infer_interruptions(m, None)
    assert len(df) == 1 and df["ts"].iloc[0] == at(3540)
    assert (df["restored_step"].iloc[0], df["lost_steps"].iloc[0]) == (4_900, 1_000)
    assert df["rework_s"].iloc[0] == pytest.approx(1_000 * 0.6)


def test_a_blocking_checkpoint_save_is_not_an_interruption() -> None:
    m = stream((0, 0, 100, 0), (990 + 240, 100, 50, 0))  # 4 min without progress, same attempt
    events = pd.DataFrame(
        [
            {"ts": at(992), "kind": "save_start", "step": 99, "path": "/lustre/ckpt/iter_0000099"},
            {"ts": at(1228), "kind": "save_end", "step": 99, "path": "/lustre/ckpt/iter_0000099"},
        ]
    )
    assert infer_interruptions(m, None, ckpt_events=events).empty
    assert len(infer_interruptions(m, None)) == 1  # without the save lines it is a stall


def test_preemption_is_planned_and_a_cancel_is_not_automated() -> None:
    pre = sig(991, "slurm_preempted", "node-1")
    row = infer_interruptions(stream(*TWO_SEGMENTS), pd.DataFrame([pre])).iloc[0]
    assert bool(row["planned"]) and row["category"] == "Planned"
    assert row["recovery"] == "automated"
    cancel = sig(991, "slurm_cancelled", "node-1")
    row = infer_interruptions(stream(*TWO_SEGMENTS), pd.DataFrame([cancel])).iloc[0]
    assert row["recovery"] is None and row["component"] == "Unknown"
    assert [e["role"] for e in evidence(row)] == ["context", "context"]
    # A restart after hours is not called automated either.
    long = stream((0, 0, 100, 0), (990 + 3 * 3600, 41, 10, 1))
    assert infer_interruptions(long, None).iloc[0]["recovery"] is None


def test_evidence_is_capped_with_a_count_of_the_rest() -> None:
    signals = pd.DataFrame(
        [sig(1500 + i, "nccl_timeout", f"node-{i}") for i in range(50)]
        + [sig(995, "cuda_illegal_address", "node-3")]
    )
    row = infer_interruptions(stream(*TWO_SEGMENTS), signals).iloc[0]
    ev = evidence(row)
    assert row["component"] == "Software Bug" and row["category"] == "Dependency"
    assert len(ev) == 21 and ev[0]["role"] == "cause" and ev[-1]["count"] == 51 - 19
    assert ev[-2]["kind"] == "restore_estimate"
    assert "(+50 symptoms)" in row["description"]


def test_same_inputs_same_rows_in_any_input_order() -> None:
    m = stream((0, 0, 100, 0), (1830, 41, 100, 1), (1830 + 990 + 600, 131, 50, 2))
    signals = pd.DataFrame(
        [
            sig(992, "xid", "node-7", 3, 79),
            sig(1000, "xid", "node-2", 1, 79),
            sig(1590, "nccl_timeout", "node-2"),
            sig(2823, "ib_error", "node-1"),
            sig(2823, "ib_error", "node-2"),
        ]
    )
    cks = pd.DataFrame([ckpt(40, "nvme", 410), ckpt(40, "pfs", 450), ckpt(130, "pfs", 2700)])
    a = infer_interruptions(m, signals, checkpoints=cks, gpus=8)
    rng = np.random.default_rng(3)
    b = infer_interruptions(
        m.sample(frac=1, random_state=rng),
        signals.sample(frac=1, random_state=rng),
        checkpoints=cks.sample(frac=1, random_state=rng),
        gpus=8,
    )
    pd.testing.assert_frame_equal(a, b)
    assert a["host"].iloc[0] == "node-7" and pd.isna(a["host"].iloc[1])  # IB: no culprit
    assert json.loads(a["culprit_candidates"].iloc[1]) == ["node-1", "node-2"]  # by time, host


def test_every_simulated_xid_maps_to_its_components_category() -> None:
    cats = {c.component: c.category for c in llama3_interruptions()}
    for component, (_, _, codes) in _BEHAVIOUR.items():
        for code in codes:
            rule = xid_rule(code)
            assert rule is not None and rule.category == cats[component] == "GPU"
    unique = {
        79: "Faulty GPU",
        48: "GPU HBM3 Memory",
        140: "GPU SRAM Memory",
        119: "GPU System Processor",
        120: "GPU System Processor",
    }
    assert {c: xid_rule(c).component for c in unique} == unique  # type: ignore[union-attr]
    assert xid_rule(92) is None  # a warning never explains a stop
    known = {c.component for c in llama3_interruptions()} | {"Planned maintenance", "Unknown"}
    assert {r.component for r in CAUSES.values()} <= known


def test_a_54_day_stream_is_searched_vectorised() -> None:
    n = 1_000_000  # ~54 days of one line per 4.7 s
    ts = np.arange(n, dtype=np.int64) * 4_000_000_000
    step = np.arange(n, dtype=np.int64) * 10
    for at_row in (200_000, 500_000, 800_000):
        ts[at_row:] += 1800 * 10**9
        step[at_row:] -= 500
    start = np.datetime64(T0, "ns").astype(np.int64)
    m = pd.DataFrame({"run_id": "big", "ts": pd.to_datetime(ts + start), "step": step})
    rng = np.random.default_rng(0)
    signals = pd.DataFrame(
        {
            "ts": pd.to_datetime(np.sort(rng.integers(0, ts[-1], 100_000)) + start),
            "host": [f"node-{i}" for i in rng.integers(0, 2048, 100_000)],
            "gpu": 0,
            "kind": "nccl_error",
            "xid": None,
            "detail": "",
            "origin": "x:1",
            "line": "NCCL WARN",
        }
    )
    t = time.perf_counter()
    df = infer_interruptions(m, signals, gpus=16_384)
    took = time.perf_counter() - t
    assert list(df["lost_steps"]) == [500, 500, 500] and took < 10.0, took


# -- against the simulator's ground truth -----------------------------------------------------


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two days of dev-64 at 600x the Llama 3 failure rates (~40 interruptions), metrics
    logged every 10 steps; GPU samples every 5 min keep the replay short."""
    path = tmp_path_factory.mktemp("sim") / "sim.duckdb"
    sc = get_scenario("dev-64").with_overrides(days=2.0, failure_scale=600.0, log_every_steps=10)
    with Store(str(path)) as store:
        replay(store, sc, 3, interval_s=300)
    return path


def agreement(inf: pd.DataFrame, truth: pd.DataFrame) -> dict[str, float]:
    """Inferred rows against the simulator's: a true stop is found when its time falls in an
    inferred stop's window (a minute of slack before the last progress)."""
    t = truth["ts"].to_numpy()[:, None]
    inside = (inf["ts"].to_numpy()[None, :] - np.timedelta64(60, "s") <= t) & (
        t <= inf["end_ts"].to_numpy()[None, :]
    )
    unplanned, found = ~truth["planned"].to_numpy(), inside.any(axis=1)
    match = inside.argmax(axis=1)
    gpu = unplanned & truth["xid"].notna().to_numpy() & found
    first = np.r_[True, np.diff(match) != 0] & found  # one true stop per inferred one

    def same(col: str, rows: np.ndarray) -> float:
        return float((inf[col].to_numpy()[match[rows]] == truth[col].to_numpy()[rows]).mean())

    return {
        "unplanned": int(unplanned.sum()),
        "inferred": len(inf),
        "recall": float(found[unplanned].mean()),
        "precision": float(inside.any(axis=0).mean()),
        "xid_stops": int(gpu.sum()),
        "category": float((inf["category"].to_numpy()[match[gpu]] == "GPU").mean()),
        "component": same("component", gpu),
        "restored_step": same("restored_step", first),
        "restored_tier": same("restored_tier", first),
    }


def test_agrees_with_the_simulators_ground_truth(sim_store: Path) -> None:
    with Store(str(sim_store), read_only=True) as s:
        m = s.df("SELECT run_id, ts, step, attempt FROM train_metrics")
        xev, cks = s.df("SELECT * FROM xid_events"), s.df("SELECT * FROM checkpoints")
        truth = s.df("SELECT * FROM interruptions ORDER BY ts")
        gpus = int(s.scalar("SELECT gpus FROM runs"))
    # A stop the run has not resumed from by the end of the data is a live stall, not a row.
    resumed = truth["ts"] + pd.to_timedelta(truth["detect_s"] + truth["restart_s"], unit="s")
    truth = truth[resumed < m["ts"].max()]
    runs = {
        "with attempts": infer_interruptions(m, None, checkpoints=cks, xid_events=xev, gpus=gpus),
        # A plain log has no attempt column: stalls and steps going back must do.
        "no attempts": infer_interruptions(
            m.drop(columns="attempt"), None, checkpoints=cks, xid_events=xev, gpus=gpus
        ),
        "no attempts, k=3": infer_interruptions(
            m.drop(columns="attempt"), None, checkpoints=cks, xid_events=xev, gpus=gpus, k=3.0
        ),
    }
    got = {name: agreement(inf, truth) for name, inf in runs.items()}
    print(f"\nsimulator agreement ({len(truth)} true stops):")
    for name, a in got.items():
        print(
            f"  {name}: "
            + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in a.items()
            )
        )
    full = got["with attempts"]
    assert full["unplanned"] >= 20 and full["xid_stops"] >= 10
    assert full["recall"] >= 0.95 and full["precision"] >= 0.95
    assert full["category"] == 1.0 and full["component"] >= 0.8
    assert full["restored_step"] >= 0.9 and full["restored_tier"] >= 0.75
    assert got["no attempts"]["recall"] >= 0.8 and got["no attempts"]["category"] == 1.0
    assert got["no attempts, k=3"]["recall"] >= 0.95
    assert min(a["precision"] for a in got.values()) >= 0.95


def test_bad_input_is_one_clear_error_and_unknown_kinds_are_only_context() -> None:
    with pytest.raises(ValueError, match=r"metrics lack column\(s\) \['step'\]"):
        infer_interruptions(stream(*TWO_SEGMENTS).drop(columns="step"))
    two_runs = pd.concat([stream(*TWO_SEGMENTS), stream(*TWO_SEGMENTS).assign(run_id="other")])
    with pytest.raises(ValueError, match="metrics hold 2 runs; infer one run at a time"):
        infer_interruptions(two_runs)
    odd = pd.DataFrame([sig(1000, "gremlins", "node-1"), sig(1001, "xid", "node-1", 0, 92)])
    row = infer_interruptions(stream(*TWO_SEGMENTS), odd).iloc[0]
    assert row["component"] == "Unknown"
    assert [e["role"] for e in evidence(row)] == ["context"] * 3


def test_rows_store_with_unknowns_as_nulls(tmp_path: Path) -> None:
    df = infer_interruptions(stream(*TWO_SEGMENTS), None)
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.append("interruptions", df)  # by name: the columns it has, the rest NULL
        got = store.rows(
            """SELECT component, lost_steps, lost_gpu_hours IS NULL, detect_s IS NULL,
                      host IS NULL, gpu IS NULL FROM interruptions"""
        )
    assert got == [("Unknown", 59, True, True, True, True)]


def test_a_quick_restart_shows_by_its_load_line() -> None:
    # Last logged step 990 (a line per 10 steps, 30 s apart), a checkpoint at 995, a crash, and
    # the job is back 110 s later at 1000: no stall beyond 150 s, no step going back.
    m = stream((0, 0, 100, None), (2970 + 110, 1000, 20, None), dt=30.0, every=10)
    m = m.drop(columns="attempt")
    assert infer_interruptions(m, None).empty
    events = pd.DataFrame(
        [
            {"ts": at(2972), "kind": "save_end", "step": 995, "path": "/lustre/ckpt/iter_0000995"},
            {"ts": at(3070), "kind": "load", "step": 995, "path": "/lustre/ckpt/iter_0000995"},
        ]
    )
    df = infer_interruptions(m, None, ckpt_events=events, tier_roots={"pfs": ["/lustre/ckpt"]})
    assert len(df) == 1 and df["ts"].iloc[0] == at(2970) and df["end_ts"].iloc[0] == at(3080)
    assert (df["restored_step"].iloc[0], df["restored_tier"].iloc[0]) == (995, "pfs")
    assert df["lost_steps"].iloc[0] == 0 and df["recovery"].iloc[0] == "automated"
