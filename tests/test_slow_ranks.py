"""The slow rank named (#38, 2): per-rank timing reports, in the formats Megatron-LM's timers and
NVIDIA's resiliency extension print, imported with the user's command; the slowest ranks of a
run, chronic or one-off, with their hosts and what their GPUs did."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from telemetry.collect.logs import rankperf as rp
from telemetry.collect.logs.textlogs import parse_file
from telemetry.metrics.goodput import goodput
from telemetry.queries import TimeRange
from telemetry.queries.slow_ranks import EWMA_ALPHA, SLOW_SCORE, rank_spread, slow_ranks
from telemetry.store import Store
from tests.conftest import cli, imported_night

T0 = datetime(2026, 3, 2, 10, 0, 0)
MEGA, BRIDGE = "mega-8", "bridge-16"
WINDOWS = 12


def _iteration(t: datetime, step: int) -> str:
    """Megatron-LM's progress line (``training_log``)."""
    return (
        f"[{t:%Y-%m-%d %H:%M:%S}] iteration {step:>8}/  100000 | consumed samples: "
        f"{step * 512:>12} | elapsed time per iteration (ms): 2000.0 | learning rate: 3.000E-04 | "
        "global batch size:   512 | lm loss: 2.500000E+00 | loss scale: 1.0 | grad norm: 0.900 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def _all_ranks(times: dict[str, dict[int, str]]) -> list[str]:
    """``Timers._get_all_ranks_time_string``: 'times across ranks (ms):', then '\\n  {}:' per
    timer and '\\n     rank {:2d}: {:.2f}' per rank."""
    out = ["times across ranks (ms):"]
    for name, by_rank in times.items():
        out.append(f"  {name}:")
        out += [f"     rank {r:2d}: {ms}" for r, ms in by_rank.items()]
    return out


def _minmax(times: dict[str, tuple[float, float]]) -> list[str]:
    """``_get_global_min_max_time_string``: '(min, max) time across ranks (ms):' then
    '\\n    {}: ({:.2f}, {:.2f})'.format((name + ' ').ljust(48, '.'), min, max)."""
    out = ["(min, max) time across ranks (ms):"]
    for name, (lo, hi) in times.items():
        out.append(f"    {(name + ' ').ljust(48, '.')}: ({lo:.2f}, {hi:.2f})")
    return out


def _nvrx(kind: str, scores: dict[int, float], node: dict[int, str], shown: int = 3) -> list[str]:
    """``StragglerDetectionCallback._print_gpu_scores``: logger.info(f"\\nGPU relative
    performance:\\n{rel_perf_str}") with ' Worst performing {n}/{N} ranks:' and
    '  Rank={r} Node={node} Score={s:.2f}' lines (``_format_gpu_scores``)."""
    ranked = sorted(((s, r) for r, s in scores.items()), reverse=True)
    out = [f"GPU {kind} performance:", f" Worst performing {shown}/{len(scores)} ranks:"]
    out += [f"  Rank={r} Node={node[r]} Score={s:.2f}" for s, r in reversed(ranked[-shown:])]
    out.append(f" Best performing {shown}/{len(scores)} ranks:")
    out += [f"  Rank={r} Node={node[r]} Score={s:.2f}" for s, r in ranked[:shown]]
    return [*out, ""]


def megatron_log(path: Path) -> Path:
    """8 ranks on two nodes (NCCL says where), the last rank (srun task 7) printing the timers
    of every rank every 10 steps: rank 6 always 40 % slower in compute, rank 3 once; window 3
    carries lines no one should believe."""
    out = [f"{r}: node-{r // 4}:{4000 + r}:{4100 + r} [{r % 4}] NCCL INFO comm 0x55d5c8e0 rank {r} "
           f"nranks 8 cudaDev {r % 4} busId 1b000 - Init COMPLETE" for r in range(8)]  # fmt: skip
    for w in range(WINDOWS):
        t = T0 + timedelta(seconds=20 * (w + 1))
        out.append(f"7: {_iteration(t, 10 * (w + 1))}")
        compute = {r: f"{100.0 + r * 0.5:.2f}" for r in range(8)}
        compute[6] = "140.00"
        if w == 5:
            compute[3] = "170.00"
        if w == 3:
            compute[5], compute[2] = "1e308", "-12.00"
        block = _all_ranks({"forward-compute": compute,
                            "forward-backward": {r: "2000.00" for r in range(8)}})  # fmt: skip
        if w == 3:
            block.insert(4, "     rank x1: 12.0")  # garbage among the ranks
            block.insert(6, "0: a line of another rank in between")
        out += [ln if ln.startswith("0: ") else f"7: {ln}" for ln in block]
    path.write_text("\n".join(out) + "\n")
    return path


def bridge_log(path: Path) -> Path:
    """16 ranks (torchrun --tee's ``[default0]:``), Megatron's (min, max) timers and the NVRx
    callback's scores every window: rank 11 on gpu-a02 always at 0.62 (and warned), rank 4 at
    0.80 once."""
    node = {r: f"gpu-a0{1 + r // 8}" for r in range(16)}
    out = []
    for w in range(WINDOWS):
        t = T0 + timedelta(seconds=20 * (w + 1))
        out.append(_iteration(t, 10 * (w + 1)))
        out += _minmax({"forward-backward": (1000.0, 1450.0), "optimizer": (20.0, 21.0)})
        rel = {r: 0.97 + 0.002 * (r % 5) for r in range(16)}
        rel[11] = 0.62
        if w == 6:
            rel[4] = 0.80
        out.append(f"[NeMo I {t:%Y-%m-%d %H:%M:%S} straggler_det_callback:126] ")
        out.append(
            "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected "
            f"ranks: {{StragglerId(rank=11, node='{node[11]}')}}"
        )
        out += _nvrx("relative", rel, node)
        out += _nvrx("individual", {r: 0.99 for r in range(16)}, node)
        out.append(" Straggler report processing time: 0.042 sec.")
    path.write_text("\n".join(f"[default0]:{ln}" for ln in out) + "\n")
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow")
    store = root / "s.duckdb"
    for run, log in ((MEGA, megatron_log(root / "slurm-900.out")),
                     (BRIDGE, bridge_log(root / "slurm-901.out"))):  # fmt: skip
        r = cli("import", "--store", str(store), "--run", run, str(log))
        assert r.returncode == 0, r.stderr
        assert "per-rank timing scores" in r.stdout
    return store


def test_megatron_all_ranks_timers_name_the_chronic_and_the_one_off_rank(imported: Path) -> None:
    with Store(str(imported), read_only=True) as s:
        block = goodput(s, MEGA)
    assert block is not None
    slow = block["slow_ranks"]
    assert [(e["rank"], e["pattern"]) for e in slow] == [(6, "chronic"), (3, "one-off")]
    six, three = slow
    assert six["host"] == "node-1" and three["host"] == "node-0"  # from NCCL's rank_hosts
    assert six["chronic"] and not three["chronic"]
    assert six["windows"] == WINDOWS and three["windows"] == 1 and six["seen"] == WINDOWS
    median = (100.0 + 3 * 0.5 + 100.0 + 4 * 0.5) / 2  # of 8 ranks: ranks 3 and 4 in the middle
    assert six["score"] == pytest.approx(median / 140.0, abs=1e-3)
    assert six["source"] == "megatron" and six["gpu_note"] is None  # no GPU samples stored


def test_the_ewma_is_the_documented_one() -> None:
    """alpha 0.3, started at the first window: a rank slow once at 0.6 in window 6 of 12."""
    e = 1.0
    for w in range(1, WINDOWS):
        e = EWMA_ALPHA * (0.6 if w == 5 else 1.0) + (1 - EWMA_ALPHA) * e
    assert e > SLOW_SCORE  # one window does not make it chronic


def test_hostile_rank_lines_are_refused_and_the_rest_kept(imported: Path, tmp_path: Path) -> None:
    scan = parse_file(megatron_log(tmp_path / "slurm-900.out"), run=MEGA)
    reasons = [b.reason for b in scan.bad]
    assert any("'1e308' is out of range" in r for r in reasons)
    assert any("'-12.00' is out of range" in r for r in reasons)
    assert any("rank line not read: 'rank x1: 12.0'" in r for r in reasons)
    assert scan.counts["rank_report_lines_refused"] == 3
    with Store(str(imported), read_only=True) as s:
        per_window = s.rows(
            """SELECT ts, count(*) FROM rank_perf WHERE run_id = ? AND metric = 'forward-compute'
               GROUP BY ts ORDER BY ts""",
            [MEGA],
        )
    counts = [n for _, n in per_window]
    assert len(counts) == WINDOWS and counts[3] == 6 and set(counts[:3] + counts[4:]) == {8}


def test_nvrx_scores_name_the_node_and_the_minmax_spread_is_a_run_row(imported: Path) -> None:
    with Store(str(imported), read_only=True) as s:
        block = goodput(s, BRIDGE)
        spread = s.rows(
            """SELECT count(*), min(score), max(value_ms) FROM rank_perf
               WHERE run_id = ? AND rank IS NULL AND metric = 'forward-backward'""",
            [BRIDGE],
        )[0]
        hosts = dict(s.rows("SELECT rank, host FROM rank_hosts WHERE run_id = ?", [BRIDGE]))
    assert block is not None
    slow = block["slow_ranks"]
    assert [(e["rank"], e["pattern"]) for e in slow] == [(11, "chronic"), (4, "one-off")]
    assert slow[0]["host"] == "gpu-a02" and slow[0]["score"] == 0.62
    assert slow[0]["source"] == "nvrx" and slow[0]["windows"] == WINDOWS
    assert slow[1]["worst"] == 0.8 and slow[1]["score"] == 0.98 and slow[1]["host"] == "gpu-a01"
    assert spread == (WINDOWS, pytest.approx(1000.0 / 1450.0), 1450.0)  # min/max, rank NULL
    assert hosts[11] == "gpu-a02"  # the report's Node fills rank_hosts too


def test_summary_names_the_slow_rank(imported: Path) -> None:
    r = cli("summary", "--store", str(imported))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "slow ranks:" in ln]
    assert len(lines) == 2  # one per run with reports
    assert "rank 11 on gpu-a02 (score 0.62, chronic, flagged in 12 report window(s))" in lines[1]
    assert "rank 3 on node-0 (worst 0.60, now 1.00, one-off, flagged in 1" in lines[0]
    j = cli("summary", "--store", str(imported), "--json")
    runs = {x["run_id"]: x for x in json.loads(j.stdout)["runs"]}
    assert runs[MEGA]["goodput"]["slow_ranks"][0]["rank"] == 6


def test_a_run_without_reports_has_no_slow_ranks(tmp_path: Path) -> None:
    from tests.cluster_fixture import RUN

    with Store(str(imported_night(tmp_path)), read_only=True) as s:
        block = goodput(s, RUN)
    assert block is not None and block["slow_ranks"] == []


def test_a_throttled_gpu_on_the_slow_ranks_host_is_said(imported: Path, tmp_path: Path) -> None:
    """GPU samples of both nodes while the job ran: gpu-a02's GPU 3 busy at 1410 MHz and 88 °C
    while the fleet runs at 1980."""
    path = tmp_path / "gpus.duckdb"
    path.write_bytes(imported.read_bytes())
    ticks = [T0 + timedelta(seconds=15 * i) for i in range(40)]
    with Store(str(path)) as s:
        with s.transaction(["nodes", "gpus"]) as con:
            for n in (1, 2):
                con.execute("INSERT INTO nodes (node_id, host, role) VALUES (?, ?, 'job')",
                            [n, f"gpu-a0{n}"])  # fmt: skip
                for g in range(8):
                    con.execute("INSERT INTO gpus (gpu_id, node_id, host, gpu) VALUES (?, ?, ?, ?)",
                                [n * 8 + g, n, f"gpu-a0{n}", g])  # fmt: skip
        slow = [(t, n * 8 + g, 1410.0 if (n, g) == (2, 3) else 1980.0,
                 88.0 if (n, g) == (2, 3) else 60.0)
                for t in ticks for n in (1, 2) for g in range(8)]  # fmt: skip
        cols = ("ts", "gpu_id", "sm_clock_mhz", "temp_c")
        frame = pd.DataFrame(slow, columns=list(cols)).assign(util_pct=98.0)
        s.append("gpu_samples", frame)
        s.refresh_rollups()
    with Store(str(path), read_only=True) as s:
        ranks = slow_ranks(s, BRIDGE, TimeRange(T0, T0 + timedelta(hours=1)))
    note = ranks[0]["gpu_note"]
    assert note is not None and note.startswith("gpu-a02 GPU 3: SM clock 1,410 MHz vs fleet 1,980")
    assert note.endswith("(throttled)")
    assert ranks[1]["gpu_note"] is None  # rank 4's gpu-a01 ran like the fleet


def test_report_formats_read_alone() -> None:
    assert rp.header("(min, max) time across ranks (ms):") == "minmax"
    assert rp.header("[2026-03-02 10:00:20] times across ranks (ms):") == "all"
    assert rp.header("max time across ranks (ms):") == "max"
    assert rp.header("GPU individual performance:") == "individual"
    assert rp.header("iteration 10/ 100") is None
    assert rp.split_key("63:      rank  3: 1.00") == ("63:", "     rank  3: 1.00")
    dropped = "STRAGGLER DETECTION WARNING: Some GPUs performance dropped. Affected ranks: "
    assert rp.warning(dropped + "[162, 79]") == ("straggler_individual", [(162, None), (79, None)])
    with pytest.raises(ValueError, match="names no rank"):
        rp.warning(dropped + "?")


def test_a_store_from_before_the_table_is_served_as_it_is(imported: Path, tmp_path: Path) -> None:
    """No upgrade forced on a read-only open (``schema.OPTIONAL_TABLES``): no slow ranks."""
    from telemetry.store import schema

    path = tmp_path / "old.duckdb"
    path.write_bytes(imported.read_bytes())
    with Store(str(path)) as s, s.transaction(["rank_perf"]) as con:
        con.execute("DROP TABLE rank_perf")
    with Store(str(path), read_only=True) as s:
        assert schema.outdated(s._con) == []
        block = goodput(s, BRIDGE)
    assert block is not None and block["slow_ranks"] == []


def test_the_checkpoints_page_table_and_its_note(imported: Path, tmp_path: Path) -> None:
    """The page's adapter: a row per slow rank with the columns shown; without reports, the
    note names the log reports that would fill it."""
    from app.data import checkpoints as data
    from tests.cluster_fixture import RUN

    with Store(str(imported), read_only=True) as s:
        frame, note = data.slow_ranks(goodput(s, BRIDGE))
    assert list(frame.columns) == list(data.SLOW_RANK_COLUMNS)
    assert frame[["rank", "host"]].values.tolist() == [[11, "gpu-a02"], [4, "gpu-a01"]]
    assert frame["pattern"].iloc[0].startswith("chronic (EWMA 0.6")
    # a one-off rank recovered (score now 1.0): its worst window says why it is listed
    assert (frame["worst"] <= frame["score"]).all() and frame["worst"].max() < 0.9
    assert note.startswith(f"Slow ranks: from {WINDOWS} per-rank timing reports")
    with Store(str(imported_night(tmp_path)), read_only=True) as s:
        frame, note = data.slow_ranks(goodput(s, RUN))
    assert frame.empty and note == data.NO_RANK_REPORTS
    assert "times across ranks (ms):" in note and "GPU relative performance:" in note


# -- the straggler callback's scores logged as Lightning metrics (``ptlperf``) ---------------------
PTL = "ptl-16"
PTL_T0 = 1_795_000_000.0  # unix seconds of step 0


def _ptl_scores(w: int) -> dict[str, float]:
    """``_log_gpu_perf_scores``' ``scores_log`` of report ``w`` (every 50 steps): rank 11's GPU
    at 0.62 of the best from the fourth report on, the individual scores steady."""
    lo = 0.62 if w >= 3 else 0.96
    return {"gpu_relative_perf/min": lo, "gpu_relative_perf/median": 0.98,
            "gpu_relative_perf/max": 1.0, "gpu_individual_perf/min": 0.97,
            "gpu_individual_perf/median": 0.99, "gpu_individual_perf/max": 1.0}  # fmt: skip


def ptl_tensorboard(logdir: Path) -> Path:
    """Lightning's TensorBoardLogger: ``SummaryWriter.add_scalar(k, v, step)`` per logged key
    (``train_loss`` every 10 steps, the callback's six every 50), plus values no one should
    believe: NaN (a report without scores), a negative and a huge score, a min above the max."""
    from torch.utils.tensorboard import SummaryWriter  # a test dependency: missing fails

    w = SummaryWriter(str(logdir))
    for step in range(0, 400, 10):
        w.add_scalar("train_loss", 3.0 - step / 1000, step, walltime=PTL_T0 + step)
        if step % 50 == 49 - 9:  # steps 40, 90, ...: the callback's on_train_batch_end
            for k, v in _ptl_scores(step // 50).items():
                w.add_scalar(k, v, step, walltime=PTL_T0 + step + 0.5)
    w.add_scalar("gpu_relative_perf/min", float("nan"), 400, walltime=PTL_T0 + 400)
    w.add_scalar("gpu_individual_perf/min", -0.5, 410, walltime=PTL_T0 + 410)
    w.add_scalar("gpu_individual_perf/median", 1e9, 410, walltime=PTL_T0 + 410)
    w.add_scalar("gpu_relative_perf/min", 0.99, 420, walltime=PTL_T0 + 420)
    w.add_scalar("gpu_relative_perf/max", 0.5, 420, walltime=PTL_T0 + 420)
    w.add_scalar("gpu_individual_perf/max", 1.0, 420, walltime=PTL_T0 + 420)
    w.close()
    return logdir


def test_ptl_straggler_metrics_in_tensorboard_are_the_runs_spread(tmp_path: Path) -> None:
    store, logdir = tmp_path / "s.duckdb", ptl_tensorboard(tmp_path / "tb")
    r = cli("import", "--store", str(store), "--run", PTL, str(logdir))
    assert r.returncode == 0, r.stderr
    assert "40 train_metrics records stored, 4 rejected" in r.stdout  # no record of 400..420
    assert "49 straggler scores (min/median/max over the ranks) stored" in r.stdout
    assert "step 400 (attempt 0): gpu_relative_perf/min is NaN" in r.stdout
    assert "step 410 (attempt 0): gpu_individual_perf/min -0.5 is out of range" in r.stdout
    assert "gpu_individual_perf/median 1e+09 is out of range" in r.stdout
    assert "gpu_relative_perf: min 0.99, max 0.5 are not in min <= median <= max order" in r.stdout
    assert "ignored:" not in r.stdout  # the six tags are read, not ignored
    with Store(str(store), read_only=True) as s:
        rows = s.rows("SELECT DISTINCT rank, source FROM rank_perf")
        block = goodput(s, PTL)
    assert rows == [(None, "nvrx-ptl")]  # 8 reports x 6 + step 420's individual max
    assert block is not None and block["slow_ranks"] == []  # no rank named: none taken
    rel, ind = block["rank_spread"]
    assert rel["metric"] == "gpu_relative_perf" and rel["windows"] == 8
    assert (rel["min"], rel["median"], rel["max"]) == (0.62, 0.98, 1.0)
    assert rel["worst_min"] == 0.62 and rel["slow_windows"] == 5
    newest = datetime(1970, 1, 1) + timedelta(seconds=PTL_T0 + 390)  # the step's earliest
    assert rel["at"] == newest.isoformat()
    # step 420's lone individual max is stored, but after the run's last step (its window)
    assert ind["metric"] == "gpu_individual_perf" and ind["windows"] == 8
    assert (ind["min"], ind["median"], ind["max"]) == (0.97, 0.99, 1.0)
    assert ind["worst_min"] == 0.97 and ind["slow_windows"] == 0
    wide = TimeRange(newest, newest + timedelta(minutes=1))
    with Store(str(store), read_only=True) as s:
        late = rank_spread(s, PTL, wide)
    assert [(x["metric"], x["min"], x["max"]) for x in late] == [
        ("gpu_relative_perf", 0.62, 1.0),
        ("gpu_individual_perf", None, 1.0),  # step 420: the max alone
    ]
    again = cli("import", "--store", str(store), "--run", PTL, str(logdir))
    assert "0 straggler scores (min/median/max over the ranks) stored (already imported)" in (
        again.stdout
    )
    j = json.loads(cli("summary", "--store", str(store), "--json").stdout)
    (run,) = [x for x in j["runs"] if x["run_id"] == PTL]
    assert run["goodput"]["rank_spread"][0]["worst_min"] == 0.62
    text = cli("summary", "--store", str(store)).stdout
    assert (
        "gpu_relative_perf over the ranks (logged, no rank named): min 0.62 / median 0.98 / "
        "max 1.00 in the newest of 8 report(s); lowest min 0.62, below 0.9 in 5"
    ) in text
    from app.data import checkpoints as data

    frame, note = data.slow_ranks(block)
    assert frame.empty and "gpu_relative_perf min fell to 0.62 (below 0.9) in 5 of them" in note


def test_ptl_straggler_metrics_in_lightning_metrics_csv(tmp_path: Path) -> None:
    """Lightning's CSVLogger: ``metrics.csv`` with a column per logged key, ``epoch`` and
    ``step`` (no time), a step's other keys empty (the module logs ``self.log("loss", ...)``:
    a CSV's columns are record fields)."""
    store, p = tmp_path / "s.duckdb", tmp_path / "metrics.csv"
    names = list(_ptl_scores(0))
    lines = [",".join(["loss", *names, "epoch", "step"])]
    for step in range(0, 200, 10):
        lines.append(",".join([f"{3.0 - step / 1000}", *[""] * 6, "0", str(step)]))
        if step % 50 == 40:
            scores = map(str, _ptl_scores(step // 50).values())
            lines.append(",".join(["", *scores, "0", str(step)]))
    lines.append(",".join(["", "abc", "0.9", "1.0", "0.9", "1.2", "0.95", "0", "200"]))
    p.write_text("\n".join(lines) + "\n")
    r = cli("import", "--store", str(store), "--run", PTL, str(p))
    assert r.returncode == 0, r.stderr
    assert "20 train_metrics records stored, 2 rejected" in r.stdout
    assert f"{p}:{len(lines)}: gpu_relative_perf/min 'abc' is not a number" in r.stdout
    assert "gpu_individual_perf: min 0.9, median 1.2, max 0.95 are not in" in r.stdout
    assert "26 straggler scores (min/median/max over the ranks) stored" in r.stdout
    wide = TimeRange(datetime(2000, 1, 1), datetime.now() + timedelta(days=1))
    with Store(str(store), read_only=True) as s:
        got = s.rows(
            "SELECT metric, score FROM rank_perf WHERE origin = ? ORDER BY metric",
            [f"{p}:{len(lines)}"],
        )
        stamps = s.rows("SELECT DISTINCT r.ts = m.ts FROM rank_perf r, train_metrics m")
        spread = rank_spread(s, PTL, wide)
        slow = slow_ranks(s, PTL, wide)
    assert got == [("gpu_relative_perf/max", 1.0), ("gpu_relative_perf/median", 0.9)]
    assert stamps == [(True,)]  # undated: dated at the import, its metrics and scores alike
    assert slow == []  # rank NULL rows name no rank
    rel = spread[0]
    assert rel["metric"] == "gpu_relative_perf" and rel["worst_min"] == 0.62
    assert rel["windows"] == 1 and rel["slow_windows"] == 1  # one time: one report window


def test_ptl_straggler_metrics_in_json_lines_read_alone(tmp_path: Path) -> None:
    """A JSON-lines log: keys in any case or under ``train/``; a step of scores alone is no
    record; a run that is no id refuses the step's scores, not the file's others."""
    from telemetry.collect.logs.formats import read_log

    p = tmp_path / "m.jsonl"
    recs = [
        {"step": 40, "ts": PTL_T0, "loss": 2.5, "train/GPU_Relative_Perf/min": 0.7},
        {"step": 40, "ts": PTL_T0, "gpu_relative_perf/median": 0.9, "gpu_relative_perf/max": 1},
        {"run": ["x"], "step": 90, "ts": PTL_T0 + 50, "gpu_relative_perf/min": 0.5},
        {"step": 90, "ts": PTL_T0 + 50, "gpu_individual_perf/max": True},
    ]
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    log = read_log(str(p), "train_metrics", "j-1")
    at = datetime(1970, 1, 1) + timedelta(seconds=PTL_T0)
    assert [(run, r.metric, r.score, r.ts, r.rank) for run, r in log.rank_perf] == [
        ("j-1", "gpu_relative_perf/min", 0.7, at, None),
        ("j-1", "gpu_relative_perf/median", 0.9, at, None),
        ("j-1", "gpu_relative_perf/max", 1.0, at, None),
    ]
    assert [r["step"] for r in log.records] == [40]  # the loss's; 2 and 4 held scores alone
    assert [(b.origin, b.reason) for b in log.bad_lines] == [
        (f"{p}:3", "straggler scores not stored: run \"['x']\" is not a run id"),
        (f"{p}:4", "gpu_individual_perf/max True is not a number"),
    ]
    assert log.records[0].get("train/GPU_Relative_Perf/min") is None  # not an ignored field


_MINMAX_SHAPES = [
    "    forward-backward ...............................: (5012.11, 5013.40)",
    "    optimizer ......: (45.10, 46.21)   ",
    "    bad ...........: (46.21, 45.10)",  # no range: refused
    "    zero ..........: (0.00, 0.00)",  # refused
    "    big ...........: (1.0, 100000001.0)",  # refused: out of range
    "    huge ..........: (1.0, " + "9" * 400 + ".0)",  # inf: refused
    "    nan ...........: (nan, 1.0)",  # not a plain decimal: left to the line path
    "    exp ...........: (1e3, 2E3)",
    "    naïve ünïcode and . dots .....: (1.5, 2.5)",
    "    a name with  spaces....: (1.00, 2.00)",
    "    noDots: (1.0, 2.0)",
    "    b ....: (1.0,2.0)",
    "    c ....: (1.0, 2.0) extra",
    "    d ....: (1.0, 2.0)\r",
    "\t tabbed ....: (1.0, 2.0)",
    "    \x1b[31mred\x1b[0m ....: (1.0, 2.0)",
    "0:     labelled ....: (1.00, 2.00)",
    "    " + "x" * 100 + " ....: (1.0, 2.0)",
]


@pytest.mark.parametrize("line", _MINMAX_SHAPES)
def test_minmax_lines_read_each_line_as_the_report_reads_it(line: str) -> None:
    """The parse's fast path for Megatron's (min, max) timer lines (``minmax_lines``) gives the
    row ``Report.line`` gives for the same line, and takes no line that one refuses."""
    ts = datetime(2026, 3, 1, 10)
    fast, slow = (rp.Report("minmax", "", ts, "f:1") for _ in range(2))
    end, n = fast.minmax_lines((line + "\n").encode(), 0, 1 << 16)
    try:
        took = slow.line(line.removesuffix("\r"))
    except ValueError:
        took = False
    assert fast.finish() == (slow.finish() if n else [])
    assert n <= took and end == (len(line.encode()) + 1 if n else 0)
    if line in _MINMAX_SHAPES[:2]:  # Megatron's own lines are taken
        assert n == 1


def test_a_timers_block_parses_the_same_by_the_fast_path_and_line_by_line(tmp_path: Path) -> None:
    from telemetry.collect.logs.textlogs import LogParser

    class LineByLine(LogParser):
        def _timer_lines(self, block: bytes, s: int, lineno: int) -> tuple[int, int]:
            return s, lineno  # every line to the line path

    it = (" [2026-03-01 10:00:{:02d}.000000] iteration {:8d}/  500000 | consumed samples: 4096 "
          "| learning rate: 3.0E-04 | lm loss: 2.5E+00 | grad norm: 0.900 | number of nan "
          "iterations:   0 |")
    lines = []
    for k, shape in enumerate(_MINMAX_SHAPES):
        lines += [it.format(k, k + 1), "(min, max) time across ranks (ms):", _MINMAX_SHAPES[0],
                  shape, _MINMAX_SHAPES[1], "some noise"]
    data = ("\n".join(lines) * 3 + "\n").encode()
    scans = []
    for cls in (LogParser, LineByLine):
        p = cls(tmp_path / "slurm-1.out", window=None)
        p.feed_block(data, 1, final=True)
        p.finish()
        scans.append(p.scan())
    fast, slow = scans
    assert fast.rank_perf == slow.rank_perf and len(fast.rank_perf) > 3 * len(_MINMAX_SHAPES)
    reader = LogParser(tmp_path / "slurm-1.out", window=None, keep=False)  # import, follow: the
    reader.feed_block(data, 1, final=True)  # runs of (min, max) lines kept as columns (#56)
    reader.finish()
    batch = reader.drain()
    assert batch.timer_runs and len(batch.rank_perf) < len(slow.rank_perf)
    kept = batch.rank_perf + [r for run in batch.timer_runs for r in run.rows()]
    assert sorted(kept, key=repr) == sorted(slow.rank_perf, key=repr)
    assert reader.counts["rank_perf_rows"] == slow.counts["rank_perf_rows"] == len(kept)
    assert (fast.counts, fast.bad, fast.unread) == (slow.counts, slow.bad, slow.unread)
    assert (fast.metrics, fast.signals) == (slow.metrics, slow.signals)


_MORE_SHAPES = [
    "  a . b ..: (1.0, 2.0)",  # the lazy name stops at the first " ...: ("
    "  x .... y ....: (3.25, 4.5)",
    "  z: (1.0, 2.0) ....: (5.0, 6.0)",
    "  tail spaces ..: (1.0, 2.0) \t ",
    "  ..: (1.0, 2.0)",  # no name
    "(min, max) time across ranks (ms):",
]


@pytest.mark.parametrize("line", _MINMAX_SHAPES + _MORE_SHAPES)
def test_the_sieves_timer_regex_matches_as_the_parsers_does(line: str) -> None:
    """RE2's reading of a (min, max) line in the sieve (``logfast._MINMAX``) is Python's
    (``rankperf.MINMAX_LINE``): the same lines, the same name and times (#56)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from telemetry.collect.logs import logfast
    from telemetry.collect.logs.rankperf import MINMAX_LINE

    raw = (line + "\n").encode()
    want = MINMAX_LINE.match(raw)
    got = pc.extract_regex(pa.array([raw.decode()], pa.large_string()), logfast._MINMAX)[0]
    if want is None or want.end() != len(raw):
        assert not got.is_valid
    else:
        assert [got[k].as_py() for k in ("name", "lo", "hi")] == [
            g.decode() for g in want.groups()]


def test_timer_runs_read_in_the_sieve_are_what_the_parser_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of (min, max) lines read in the sieve's thread are taken whole by the parse (the
    parser's own regex never runs on them) and give the rows the line path gives; a run with
    a time the parser refuses is left to the parser."""
    from telemetry.collect.logs import rankperf as rp
    from telemetry.collect.logs.textlogs import LogParser

    class LineByLine(LogParser):
        def _timer_lines(self, block: bytes, s: int, lineno: int) -> tuple[int, int]:
            return s, lineno

    good = [s for s in _MINMAX_SHAPES + _MORE_SHAPES if rp.MINMAX_LINE.match(f"{s}\n".encode())
            and not any(w in s for w in ("bad", "zero", "big", "huge"))]  # runs of 6 to 8
    lines = []
    for k in range(40):
        lines += [f" [2026-03-01 10:00:{k:02d}] noise {k}", "(min, max) time across ranks (ms):",
                  *good[k % 3 :], "after the run"]
    data = ("\n".join(lines) + "\n").encode()
    slow = LineByLine(tmp_path / "slurm-1.out", window=None)
    slow.feed_block(data, 1, final=True)
    slow.finish()
    with monkeypatch.context() as m:
        m.setattr(rp.Report, "minmax_lines", lambda *a: pytest.fail("the parser's regex ran"))
        fast = LogParser(tmp_path / "slurm-1.out", window=None)
        fast.feed_block(data, 1, final=True)
        fast.finish()
    a, b = fast.scan(), slow.scan()
    assert a.rank_perf == b.rank_perf and len(a.rank_perf) > 40 * 5
    assert (a.counts, a.bad, a.unread) == (b.counts, b.bad, b.unread)
    refused = data.replace(b"(45.10, 46.21)", b"(46.21, 45.10)")  # no range: the parser's
    mixed = LogParser(tmp_path / "slurm-1.out", window=None)
    mixed.feed_block(refused, 1, final=True)
    mixed.finish()
    line_by_line = LineByLine(tmp_path / "slurm-1.out", window=None)
    line_by_line.feed_block(refused, 1, final=True)
    line_by_line.finish()
    assert mixed.scan().rank_perf == line_by_line.scan().rank_perf


def test_a_reimport_claims_no_timing_scores_it_did_not_store(tmp_path: Path) -> None:
    """The import's account says what it stored: the timing scores of a log imported before
    (nothing written) were still told as if stored, beside "already imported"."""
    log, store = megatron_log(tmp_path / "slurm-900.out"), tmp_path / "s.duckdb"
    told = []
    for _ in range(2):
        r = cli("import", "--store", str(store), "--run", MEGA, str(log))
        assert r.returncode == 0, r.stderr
        told.append(r.stdout)
    with Store(str(store), read_only=True) as s:
        stored = int(s.scalar("SELECT count(*) FROM rank_perf"))
    assert "(already imported: nothing written)" in told[1], told[1]
    assert "per-rank timing scores" not in told[1], told[1]
    assert stored > 0
    assert f"  {stored:,} per-rank timing scores (slow ranks) stored" in told[0], told[0]
