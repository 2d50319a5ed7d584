"""Real utilization and workload classes (``telemetry.utilization``) from what a cluster's
exporters serve, over real HTTP on 127.0.0.1; from dcgm-exporter's default counters (no SM
fields); without any profiling field; from the replay engine; and rollups equal to raw SQL."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from telemetry.collect.dcgm.scrape import scrape_round
from telemetry.ingest.seam import Round
from telemetry.ingest.targets import Target
from telemetry.ingest.writer import StoreWriter
from telemetry.metrics.summary import run_summary
from telemetry.queries import TimeRange, gpu_node, gpu_rollup, workload
from telemetry.queries import gpus as gpuq
from telemetry.reference import GPU_MODELS
from telemetry.replay.exporter_text import (
    GpuCounters,
    GpuLabels,
    exporter_values,
    render_host,
)
from telemetry.replay.scenarios import get_scenario
from telemetry.replay.synth import Synthesizer
from telemetry.replay.timeline import HUNG, RUNNING, simulate
from telemetry.store import Store
from telemetry.utilization import REAL_SQL, class_sql
from tests.conftest import DCGM_FIXTURES, ExporterHandler

T0 = datetime(2026, 3, 1, 12, 0, 0)
# One GPU per class (GPU_UTIL %, framebuffer MiB, tensor, DRAM, SM active, SM occupancy); the
# last two repeat training. GPU 2 is the case GPU_UTIL hides: 100 % busy, doing nothing.
CASES = {
    0: ("tensor-bound", 98, 70000, 0.55, 0.30, 0.93, 0.25),
    1: ("memory-bound", 95, 60000, 0.05, 0.70, 0.85, 0.50),
    2: ("communication-stalled", 100, 70000, 0.00, 0.01, 0.12, 0.02),
    3: ("busy-but-light", 60, 30000, 0.10, 0.10, 0.50, 0.10),
    4: ("idle-but-allocated", 0, 70000, 0.0, 0.0, 0.0, 0.0),
    5: ("unallocated", 0, 0, 0.0, 0.0, 0.0, 0.0),
    6: ("tensor-bound", 99, 70000, 0.60, 0.35, 0.95, 0.30),
    7: ("communicating", 100, 70000, 0.01, 0.15, 0.20, 0.05),
}
# GPU 7 moves a collective's data over NVLink: its counter grows by this much per second of
# scrape time (every request is the next 15 s round); the others' links stay quiet. Without
# the link fields, GPU 7 would read busy-but-light (HBM at 15 % is not "nearly idle").
NVLINK_BPS = 50e9
ROUND_S = 15.0


def _exporter_text(with_sm: bool = True, round_no: int = 0) -> str:
    """dcgm-exporter text for one host whose eight GPUs do the ``CASES`` at round
    ``round_no``; without the SM fields when ``with_sm`` is False (dcgm-exporter's default
    counters)."""
    rows = [CASES[g] for g in range(8)]
    cols = {
        "util_pct": [r[1] for r in rows],
        "temp_c": [60.0] * 8,
        "mem_temp_c": [65.0] * 8,
        "power_w": [500.0] * 8,
        "sm_clock_mhz": [1980.0] * 8,
        "fb_used_mib": [r[2] for r in rows],
        "fb_free_mib": [80000.0 - r[2] for r in rows],
        "tensor_active": [r[3] for r in rows],
        "energy_mj": [1.0e10] * 8,
        "xid_last": [0.0] * 8,
        "dram_active": [r[4] for r in rows],
    }
    if with_sm:
        cols |= {"sm_active": [r[5] for r in rows], "sm_occupancy": [r[6] for r in rows]}
    gpus = [
        GpuLabels(
            g, f"GPU-0000000{g}-aaaa", f"00000000:{g:02X}:00.0", f"nvidia{g}", "NVIDIA H100",
            "node-a", "550.90.07",
        )
        for g in range(8)
    ]  # fmt: skip
    counters = GpuCounters.zeros(8)
    counters.nvlink_bytes[7] = 1e12 + NVLINK_BPS * ROUND_S * round_no
    return render_host(gpus, exporter_values(cols, GPU_MODELS["H100"], counters))


def _rounds(with_sm: bool) -> Callable[[], str]:
    """A route serving the next round's text at each request (the NVLink counter advances)."""
    served = itertools.count()
    return lambda: _exporter_text(with_sm, next(served))


@pytest.fixture(scope="module")
def exporters(exporter: str) -> str:
    """conftest's exporter server on 127.0.0.1 with three more routes: ``/profiling/metrics``
    with the SM fields enabled, ``/default/metrics`` with dcgm-exporter's default counters,
    ``/bare/metrics`` without any DCGM_FI_PROF field (a recorded default scrape with those
    lines removed)."""
    bare = "\n".join(
        ln
        for ln in (DCGM_FIXTURES / "default_h100.txt").read_text().splitlines()
        if "DCGM_FI_PROF_" not in ln
    )
    ExporterHandler.routes |= {
        "/profiling/metrics": _rounds(True),
        "/default/metrics": _rounds(False),
        "/bare/metrics": bare + "\n",
    }
    return exporter


def _scraped(tmp: Path, url: str, rounds: int = 4) -> Store:
    store = Store(str(tmp / "s.duckdb"))
    sink = StoreWriter(store)  # the rollups follow each round there
    for i in range(rounds):
        report = sink.write(
            Round(T0 + timedelta(seconds=15 * i), scrape_round([Target(url)], 2.0), 0)
        ).report
        assert report.up == 1, report
    return store


RANGE = TimeRange(T0, T0 + timedelta(minutes=1))


def _classes_per_gpu(store: Store) -> dict[int, str]:
    """Each GPU's class over the whole scrape, from its raw samples; link traffic is the mean
    PCIe rate plus the NVLink counter's first-to-last slope."""
    cls = class_sql("u", "fb", "t", "d", "sm", "l")
    rows = store.rows(
        f"""SELECT g.gpu, any_value({cls}) FROM (
              SELECT gpu_id, avg(util_pct) AS u, avg(fb_used_mib) AS fb, avg(tensor_active) AS t,
                     avg(dram_active) AS d, avg(sm_active) AS sm,
                     avg(pcie_rx_bps + pcie_tx_bps) + (max(nvlink_bytes) - min(nvlink_bytes))
                       / epoch(max(ts) - min(ts)) AS l
              FROM gpu_samples GROUP BY ALL)
            JOIN gpus g USING (gpu_id) GROUP BY ALL"""
    )
    return {int(g): c for g, c in rows}


def test_a_scraped_exporter_with_sm_fields_gives_real_utilization_and_every_class(
    tmp_path: Path, exporters: str
) -> None:
    with _scraped(tmp_path, f"{exporters}/profiling/metrics") as store:
        assert _classes_per_gpu(store) == {g: c[0] for g, c in CASES.items()}
        per_gpu = dict(
            store.rows(
                f"""SELECT g.gpu, avg({REAL_SQL}) FROM gpu_samples
                    JOIN gpus g USING (gpu_id) GROUP BY ALL"""
            )
        )
        # SM activity x min(1, occupancy / 0.125): training counts whole, the stalled rank
        # (12 % of SMs, 2 % occupancy) reads 1.9 % while GPU_UTIL says 100 %
        assert per_gpu[0] == pytest.approx(93.0, abs=0.01)
        assert per_gpu[2] == pytest.approx(100 * 0.12 * 0.02 / 0.125, abs=0.01)
        assert per_gpu[3] == pytest.approx(40.0, abs=0.01) and per_gpu[4] == 0.0  # 0.5 x 0.8
        basis = workload.basis(store, RANGE)
        assert basis.key == "sm_occupancy" and basis.covered == basis.total == 32
        assert basis.text == "basis real utilization: SM activity × occupancy"
        df = workload.classes(store, RANGE)
        mean = df.groupby("class")["gpus"].sum() * df["bucket_s"].iloc[0] / 60.0
        # GPU 7's first round has no NVLink rate yet (a counter needs two readings): its HBM
        # at 15 % reads busy-but-light then, communicating in the three rounds after
        assert mean.round(2).to_dict() == {
            "busy-but-light": 1.25,
            "communicating": 0.75,
            "communication-stalled": 1.0,
            "idle-but-allocated": 1.0,
            "memory-bound": 1.0,
            "tensor-bound": 2.0,
            "unallocated": 1.0,
        }
        # the per-GPU 5-min bucket judges the same (its NVLink rate from first to last reading)
        rolled = store.rows(
            "SELECT class, sum(intervals) FROM class_rollup WHERE bucket_s = 300 GROUP BY 1"
        )
        assert dict(rolled) == {c: n for c, n in Counter(c[0] for c in CASES.values()).items()}
        # the hour's GPUs under 80 %: GPU_UTIL would count 3 (60 %, 0 %, 0 %), real
        # utilization adds the stalled and the communicating rank (SMs idle while links work)
        below = gpu_rollup.gpus_below_per_hour(store, RANGE)
        assert below[["gpus", "below"]].values.tolist() == [[8, 5]]
        real = gpuq.heatmap(store, RANGE, "real").cells
        assert real["value"].round(1).unique().tolist() == [
            round((93 + 85 + 1.92 + 40 + 0 + 0 + 95 + 8) / 8, 1)
        ]


def test_link_traffic_tells_a_communicating_rank_from_a_stalled_one(
    tmp_path: Path, exporters: str
) -> None:
    """Both ranks show a kernel resident with no math; the one whose NVLink counter grows is
    moving a collective's data, the one whose links are quiet is waiting. The drill-down shows
    the NVLink rate and the PCIe rates the exporter served."""
    with _scraped(tmp_path, f"{exporters}/profiling/metrics") as store:
        nv = gpu_node.node_gpu_metric(store, "node-a", RANGE, "nvlink")
        per_gpu = nv.groupby("gpu")["nvlink_bps"].mean()
        assert per_gpu[7] == pytest.approx(NVLINK_BPS, rel=1e-6)
        assert per_gpu.drop(7).eq(0).all() and len(per_gpu) == 8
        rx = gpu_node.node_gpu_metric(store, "node-a", RANGE, "pcie_rx")
        assert rx.groupby("gpu")["pcie_rx_bps"].mean()[2] == pytest.approx(1.21e8)  # at 100 %
        # without the link fields (an older exporter config), GPU 7 has nothing to tell it
        # from a light kernel, and no rank is called communicating
        with store.transaction() as con:
            con.execute("UPDATE gpu_samples SET nvlink_bytes = NULL, pcie_rx_bps = NULL")
            con.execute("UPDATE gpu_samples SET pcie_tx_bps = NULL")
        assert _classes_per_gpu(store)[7] == "busy-but-light"
        assert "communicating" not in set(workload.classes(store, RANGE)["class"])


def test_pcie_rates_kept_as_extras_by_an_older_store_still_reach_the_drill_down(
    tmp_path: Path, exporters: str
) -> None:
    with _scraped(tmp_path, f"{exporters}/profiling/metrics") as store:
        want = gpu_node.node_gpu_metric(store, "node-a", RANGE, "pcie_tx")
        # as a store written before the PCIe columns kept them: long rows, columns empty
        with store.transaction() as con:
            con.execute(
                """INSERT INTO gpu_samples_extra SELECT ts, gpu_id,
                     'DCGM_FI_PROF_PCIE_TX_BYTES', pcie_tx_bps FROM gpu_samples"""
            )
            con.execute("UPDATE gpu_samples SET pcie_tx_bps = NULL")
        got = gpu_node.node_gpu_metric(store, "node-a", RANGE, "pcie_tx")
        assert len(want) == 8 * 4 and want["pcie_tx_bps"].gt(0).all()
        pd.testing.assert_frame_equal(got, want)


def test_default_counters_degrade_to_the_graphics_engine(tmp_path: Path, exporters: str) -> None:
    """dcgm-exporter's default counters comment out SM_ACTIVE and SM_OCCUPANCY: real
    utilization is then the graphics engine's activity, and says so; classes still come from
    the tensor and DRAM fields it does ship."""
    with _scraped(tmp_path, f"{exporters}/default/metrics") as store:
        assert store.scalar("SELECT count(sm_active) FROM gpu_samples") == 0
        basis = workload.basis(store, RANGE)
        assert basis.key == "gr" and basis.text == (
            "basis real utilization: graphics engine active"
        )
        gr = store.rows(f"SELECT avg({REAL_SQL}), avg(util_pct) FROM gpu_samples")[0]
        assert gr[0] == pytest.approx(gr[1], abs=0.01)  # the simulated exporter's GR = util
        got = _classes_per_gpu(store)
        assert got[0] == "tensor-bound" and got[1] == "memory-bound" and got[5] == "unallocated"
        # without SM activity, the stalled rank is known by idle tensor pipes and HBM alone
        assert got[2] == "communication-stalled"


def test_without_profiling_fields_gpu_util_is_the_basis_and_there_are_no_classes(
    tmp_path: Path, exporters: str
) -> None:
    with _scraped(tmp_path, f"{exporters}/bare/metrics") as store:
        basis = workload.basis(store, RANGE)
        assert not basis.real and "no GPU reported DCGM profiling fields" in basis.text
        assert workload.classes(store, RANGE).empty
        assert gpuq.heatmap(store, RANGE, "real").cells.empty
        below = gpu_rollup.gpus_below_per_hour(store, RANGE)  # GPU_UTIL's answer
        utils = store.rows("SELECT count(*) FILTER (WHERE util_pct < 80) FROM gpu_samples")
        assert below["below"].iloc[0] * 4 == utils[0][0]


def _hung_scenario() -> tuple[Synthesizer, float, float]:
    """A dev-64 timeline with a hang (a rank spinning until the NCCL watchdog fires) and the
    synthesiser over it; returns the hang's start and end (seconds)."""
    sc = get_scenario("dev-64").with_overrides(days=3.0)
    for seed in range(1, 40):
        tl = simulate(sc, seed)
        spans = [(a, b) for a, b, s in tl.states if s == HUNG and b - a >= 120]
        if spans:
            return Synthesizer(tl, seed, 10.0, "r"), *spans[0]
    raise AssertionError("no seed of dev-64 hangs for 2 minutes in 3 days")


def test_the_replay_produces_the_fields_and_a_hang_reads_as_communication_stalled() -> None:
    syn, start, end = _hung_scenario()
    running = next(a for a, b, s in syn.tl.states if s == RUNNING and b - a > 600) + 300
    hung = np.arange(start + 20, end - 10, 10.0)
    ticks = np.concatenate([[running], hung])
    samples, _ = syn.samples(ticks)
    con = duckdb.connect()
    con.register("s", samples)  # the replay leaves GR engine active out (stored NULL)
    cls = class_sql("util_pct", "fb_used_mib", "tensor_active", "dram_active", "sm_active", "0")
    job = syn.sc.nodes * syn.sc.gpus_per_node
    got = con.execute(
        f"""SELECT ts = min(ts) OVER () AS first, {cls} AS c, util_pct, {REAL_SQL} AS real
            FROM (SELECT *, NULL::FLOAT AS gr_active FROM s) WHERE gpu_id < ?""",
        [job],
    ).df()
    train, hang = got[got["first"]], got[~got["first"]]
    assert train["c"].eq("tensor-bound").mean() > 0.95 and train["real"].median() > 85
    # the job's GPUs (nodes swapped out for repair by then sit idle, unallocated)
    hang = hang[hang["c"] != "unallocated"]
    assert len(hang) >= 40 * len(ticks[1:]) and hang["c"].eq("communication-stalled").all()
    assert hang["util_pct"].min() > 90 and hang["real"].max() < 5  # busy by GPU_UTIL, idle SMs


def test_rollups_of_real_utilization_equal_raw_sql(store: Store) -> None:
    """Per-GPU 5-min buckets (the class chart's intervals, the under-80 % hours) and the node
    and fleet levels (heatmap, fleet series) hold what raw SQL computes."""
    cols = ("tensor_active", "sm_active", "sm_occupancy", "dram_active")
    raw = store.df(
        f"""SELECT time_bucket(INTERVAL 5 minutes, ts) AS ts, gpu_id,
              {", ".join(f"avg({c}) AS {c}" for c in cols)}, avg({REAL_SQL}) AS real
            FROM gpu_samples GROUP BY ALL ORDER BY 1, 2"""
    )
    rolled = store.df(
        """SELECT ts, gpu_id, tensor_avg AS tensor_active, sm_active_avg AS sm_active,
                  sm_occupancy_avg AS sm_occupancy, dram_avg AS dram_active, real_avg AS real
           FROM gpu_rollup WHERE bucket_s = 300 ORDER BY 1, 2"""
    )
    merged = raw.merge(rolled, on=["ts", "gpu_id"], suffixes=("", "_r"))
    assert len(merged) == len(rolled) > 1000 and merged["real"].notna().all()
    for c in (*cols, "real"):
        np.testing.assert_allclose(merged[c], merged[f"{c}_r"], rtol=1e-4, atol=1e-4)
    node = store.df(
        f"""SELECT time_bucket(INTERVAL 1 hour, s.ts) AS ts, g.node_id,
                   avg({REAL_SQL}) AS raw FROM gpu_samples s JOIN gpus g USING (gpu_id)
            GROUP BY ALL"""
    ).merge(
        store.df("SELECT ts, node_id, real_avg FROM node_rollup WHERE bucket_s = 3600"),
        on=["ts", "node_id"],
    )
    np.testing.assert_allclose(node["raw"], node["real_avg"], rtol=1e-4)
    fleet = store.df(
        f"""SELECT time_bucket(INTERVAL 1 hour, ts) AS ts, avg({REAL_SQL}) AS raw
            FROM gpu_samples GROUP BY ALL"""
    ).merge(store.df("SELECT ts, real_avg FROM fleet_rollup WHERE bucket_s = 3600"), on="ts")
    assert len(fleet) >= 20
    np.testing.assert_allclose(fleet["raw"], fleet["real_avg"], rtol=1e-4)


@pytest.mark.parametrize("level", [300, 3600])
def test_class_rollups_hold_what_classifying_raw_samples_gives(
    store: Store, whole: TimeRange, level: int
) -> None:
    """``class_rollup`` (what the class chart and the basis read at fleet scale) equals
    classifying the raw samples' per-GPU means of each bucket, counts of reporting GPUs too."""
    sql, params = workload._per_class(store, whole, level)
    assert "class_rollup" in sql
    q = "SELECT ts, class, intervals, sm, occ, real FROM ({}) ORDER BY ts, class NULLS FIRST"
    rolled = store.df(q.format(sql), params)
    raw_sql, raw_params = workload._raw_classes(store, whole, level)
    raw = store.df(q.format(raw_sql), raw_params)
    pd.testing.assert_frame_equal(rolled, raw, check_dtype=False)
    assert set(rolled["class"].dropna()) >= {"tensor-bound", "unallocated", "busy-but-light"}


def test_a_store_from_before_class_rollups_gets_them_from_its_per_gpu_buckets(
    day: Path,
) -> None:
    with Store(str(day)) as s:
        before = s.df("SELECT * FROM class_rollup ORDER BY ALL")
    con = duckdb.connect(str(day))
    con.execute("DROP TABLE class_rollup")  # as a store written before the table
    con.close()
    with Store(str(day)) as s:  # opened for writing: the schema upgrade fills it
        after = s.df("SELECT * FROM class_rollup ORDER BY ALL")
    assert len(before) > 100
    pd.testing.assert_frame_equal(before, after)


def test_summary_json_states_real_utilization_and_gpu_hours_per_class(store: Store) -> None:
    (run_id,) = [r[0] for r in store.rows("SELECT run_id FROM runs")]
    u = run_summary(store, run_id)["utilization"]
    assert u["basis"] == "sm_occupancy" and "SM activity" in u["basis_text"]
    assert 60 < u["real_util_pct"] < u["gpu_util_pct"] < 90
    hours = u["class_gpu_hours"]
    assert hours["tensor-bound"] > 10 * hours.get("busy-but-light", 0) > 0
    # every GPU-interval that reported is classified: GPU-hours add up to the samples' time
    # (judged on 5-minute buckets over the whole run: ``interval_s``)
    assert u["interval_s"] == 300
    sampled = store.scalar("SELECT count(*) FROM gpu_samples") * store.sample_interval_s() / 3600
    assert sum(hours.values()) == pytest.approx(sampled, rel=0.01)


def test_a_mixed_fleet_is_judged_per_gpu_and_says_how_much_had_the_fields(
    tmp_path: Path, exporters: str
) -> None:
    """One node's exporter sends the SM fields, another sends none: each GPU is judged on its
    own fields, and the basis says what share of the GPU-time it covers."""
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreWriter(store)  # the rollups follow each round there
        urls = [f"{exporters}/profiling/metrics", f"{exporters}/bare/metrics"]
        for i in range(4):
            report = sink.write(Round(T0 + timedelta(seconds=15 * i), scrape_round(
                [Target(u) for u in urls], 2.0), 0)).report  # fmt: skip
            assert report.up == 2, report
        basis = workload.basis(store, RANGE)
        assert basis.key == "sm_occupancy" and basis.covered * 2 == basis.total
        assert basis.text.endswith("(50 % of GPU-time; the rest by GPU_UTIL)")
        below = gpu_rollup.gpus_below_per_hour(store, RANGE)
        bare_low = store.scalar(
            "SELECT count(DISTINCT gpu_id) FROM gpu_samples WHERE sm_active IS NULL "
            "AND gr_active IS NULL AND util_pct < 80"
        )
        # the stalled and the communicating rank by real utilization, the bare node's GPUs
        # by GPU_UTIL
        assert below["below"].tolist() == [5 + bare_low]
