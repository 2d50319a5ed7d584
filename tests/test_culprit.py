"""The culprit, not the cascade (issue 36, 1): on a multi-node job one rank fails and every
other rank logs "remote process exited" and IB completion errors; the interruption names the
rank that failed first and its host, sets the cascade and the launcher's teardown aside with
their roles, and does not believe torchrun's summary, which names whichever rank exited first.
The logs are written as the frameworks write them (``tests/cascade_fixture.py`` cites each
format); the import is the user's command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from telemetry.collect.logs import logranks as lr
from telemetry.collect.logs.textlogs import LogParser, parse_file
from tests import cascade_fixture as cf

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

CLI = [sys.executable, "-m", "app.cli"]


def _import(tmp_path: Path, *files: Path, extra: tuple[str, ...] = ()) -> tuple[Path, str]:
    store = tmp_path / "s.duckdb"
    args = [*CLI, "import", "--store", str(store), "--run", cf.RUN, *extra, *map(str, files)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return store, done.stdout


def _interruptions(
    store: Path, cols: str = "ts, host, rank, component, description, evidence"
) -> list[dict]:
    with duckdb.connect(str(store), read_only=True) as con:
        cur = con.execute(f"SELECT {cols} FROM interruptions ORDER BY ts")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@pytest.mark.parametrize(
    ("kind", "component", "words"),
    [("oom", "Software Bug", "CUDA out of memory"),
     ("illegal", "Software Bug", "CUDA illegal memory access")],
)  # fmt: skip
def test_the_first_failing_rank_is_the_cause_not_the_network_cascade(
    tmp_path: Path, kind: str, component: str, words: str
) -> None:
    log = cf.build(tmp_path / "slurm-81234.out", kind=kind, culprit=5)
    store, out = _import(tmp_path, log)
    (row,) = _interruptions(store)
    # before: the seven ranks' "remote process exited" and IB errors outranked it: "Network"
    assert row["component"] == component and row["rank"] == 5
    assert row["host"] == cf.host(1)  # rank 5 of 4 per node, by NCCL's communicator lines
    assert f"{words} on rank 5 on {cf.host(1)}" in row["description"]
    assert "cascade on 7 other ranks" in row["description"] and words in out
    ev = json.loads(row["evidence"])
    assert ev[0]["role"] == "cause" and ev[0]["rank"] == 5
    roles = {(e["kind"], e["role"]) for e in ev if e["kind"] != "more"}
    assert ("nccl_error", "cascade") in roles and ("ib_error", "cascade") in roles
    assert not any(e["role"] == "cause" for e in ev[1:])
    summary = subprocess.run([*CLI, "summary", "--store", str(store), "--json"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    (run,) = json.loads(summary.stdout)["runs"]
    (listed,) = run["interruptions"]["list"]
    assert (listed["rank"], listed["host"]) == (5, cf.host(1))
    more = ev[-1]
    assert more["kind"] == "more" and "teardown worker_exit" in more["line"]


def test_the_bad_node_ranking_counts_the_culprit_not_the_nodes_that_waited(
    tmp_path: Path,
) -> None:
    from telemetry.queries import TimeRange
    from telemetry.queries.failures import lemons
    from telemetry.store import Store

    store, _ = _import(tmp_path, cf.build(tmp_path / "job.out", nodes=4, culprit=13))
    with Store(str(store), read_only=True) as s:
        lo, hi = s.rows("SELECT min(ts), max(ts) FROM train_metrics")[0]
        ranked = lemons(s, cf.RUN, TimeRange(lo, hi))
    assert ranked[["host", "unexpected"]].values.tolist() == [[cf.host(3), 1]]


def test_torchruns_summary_is_teardown_and_places_its_rank(tmp_path: Path) -> None:
    log = cf.build(tmp_path / "job.out", culprit=6)
    scan = parse_file(log)
    exits = [s for s in scan.signals if s.kind == "worker_exit" and s.rank is not None]
    (summary,) = exits  # the ChildFailedError entry: rank 0 on node 0, at its own time
    assert (summary.rank, summary.host) == (0, cf.host(0))
    assert summary.ts.strftime("%H:%M:%S") == "07:13:34"
    summary_only = [ln for ln in log.read_text().splitlines() if ln.startswith("0:   ")]
    parser = LogParser("torchrun.out")
    for n, text in enumerate(summary_only, 1):
        parser.feed(text, n)
    assert [r[:3] for r in parser.scan().rank_hosts] == [(0, cf.host(0), "torchrun summary")]
    # every rank placed by NCCL's communicator lines
    nccl = {r[0]: r[1] for r in scan.rank_hosts if r[2] == "nccl nranks=8"}
    assert nccl == {r: cf.host(r // 4) for r in range(8)}
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert (row["rank"], row["host"]) == (6, cf.host(1))  # not torchrun's "first observed"


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[rank3]:[E218 07:34:53.624109 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog", 3),
        ("1: [default1]:[rank5]: Traceback (most recent call last):", 5),  # excepthook
        ("12: node-2:1:1 [1] NCCL WARN x", 12),  # srun --label, one task per rank
        ("1: [default3]:some text", None),  # srun's node number and torchrun's local rank
        ("[default5]:Traceback (most recent call last):", 5),  # one node: local = global
        ("[rank0]:[titan] 2025-02-18 07:34:53,123 - root - INFO - step: 10", 0),
    ],
)
def test_the_rank_a_line_names(line: str, rank: int | None) -> None:
    assert lr.split_prefix(line)[2] == rank


def test_pg_ranks_of_subgroups_are_not_global_ranks() -> None:
    assert lr.rank_in("[PG ID 0 PG GUID 0(default_pg) Rank 7] Exception (either an error") == 7
    assert lr.rank_in("[PG ID 2 PG GUID 9 Rank 4] Timeout at NCCL work: 610") is None


@pytest.mark.parametrize(("given", "node"), [((), 0), (("--ranks-per-node", "2"), 2)])
def test_ranks_no_log_placed_take_their_place_in_the_slurm_node_list(
    tmp_path: Path, given: tuple[str, ...], node: int
) -> None:
    """Without NCCL's communicator lines the culprit's host comes from the run's Slurm job:
    its node list in order, ``--ranks-per-node`` ranks to a node (default 8)."""
    from telemetry.store import Store

    log = cf.build(tmp_path / "job.out", culprit=5, nccl_lines=False)
    store = tmp_path / "s.duckdb"
    with Store(str(store)) as s, s.transaction(["slurm_jobs"]) as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, run_id, run_source) VALUES ('c', 81234, 0, '81234', ['n0', 'n1', 'n2', "
            "'n3'], 'FAILED', TIMESTAMP '2025-02-18 07:00:00', ?, 'mapped')",  # --run-from-job
            [cf.RUN],
        )
    _import(tmp_path, log, extra=given)
    (row,) = _interruptions(store)
    assert (row["rank"], row["host"]) == (5, f"n{node}")


def test_ranks_per_node_is_kept_before_the_dumps_and_derives_nothing(tmp_path: Path) -> None:
    """``import --ranks-per-node N DUMPS`` keeps N for the run before the dumps' ranks are
    placed by the Slurm node list (which reads it): a ``Derive`` of no run only remembers, so
    no step (the Slurm refresh re-attaching jobs to runs) runs before the dumps are read."""
    from telemetry.ingest.seam import Derive
    from telemetry.ingest.writer import StoreWriter
    from telemetry.store import Store
    from telemetry.store.run_meta import given_ranks_per_node

    with Store(str(tmp_path / "s.duckdb")) as store:
        with store.transaction(["slurm_jobs"]) as con:
            con.execute(
                "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
                "start_ts, run_id) VALUES ('c', 7, 0, '7', ['n0', 'n1'], 'RUNNING', "
                "TIMESTAMP '2025-02-18 07:00:00', 'r')"
            )
        got = StoreWriter(store).write(Derive((), run="r", ranks_per_node=3))
        assert got.ok and got.report == []
        assert given_ranks_per_node(store, "r") == 3
        assert "slurm_refreshed" not in store.meta()  # no step ran


def test_ranks_per_node_must_be_a_sensible_number(tmp_path: Path) -> None:
    log = cf.build(tmp_path / "job.out")
    store = tmp_path / "s.duckdb"
    done = subprocess.run(
        [*CLI, "import", "--store", str(store), "--run", cf.RUN, "--ranks-per-node", "0",
         str(log)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "--ranks-per-node 0" in done.stderr
    assert "Traceback" not in done.stderr and not store.exists()


# -- progress lines without a time of their own (issue 36, 3) ------------------------------------


def test_untimed_iteration_lines_are_timed_by_their_pace_not_the_last_stamp(
    tmp_path: Path,
) -> None:
    """Megatron-DeepSpeed prints its iteration lines without a time; the last time the log
    showed is the job's start. The stop is when the last progress happened (its steps x the
    logged time per iteration after the previous point), not the start carried forward."""
    lines = ["[2025-02-18 07:00:00,000] [INFO] [launch.py:256:main] process 4242 spawned"]
    for step in range(10, 610, 10):  # 5.0 s per iteration: step 600 at ~07:50
        lines.append(
            f" iteration {step:>8}/  100000 | consumed samples: {step * 512:>10} | "
            "elapsed time per iteration (ms): 5000.0 | learning rate: 1.000E-04 | "
            "global batch size:   512 | lm loss: 2.500000E+00 | loss scale: 4096.0 |"
        )
    log = tmp_path / "megatron-deepspeed.out"
    log.write_text("\n".join(lines) + "\n")
    scan = parse_file(log)
    last = scan.metrics[-1]
    assert last["step"] == 600 and last["ts"].strftime("%H:%M:%S") == "07:49:10"  # 590 x 5 s
    assert scan.counts["metrics_ts_from_pace"] == 59


def test_hf_log_dicts_take_the_time_of_the_bar_before_them(tmp_path: Path) -> None:
    """Hugging Face Trainer's log dicts carry neither time nor step; tqdm's bar before each
    (``120/1000 [05:23<39:30, ...]``) gives both, its clock counted from when it started."""
    bar = " {pct:>3}%|█▏        | {n}/1000 [{mm:02d}:{ss:02d}<39:30,  2.69s/it]"
    parts = []
    for n in range(0, 301, 100):
        secs = int(n * 2.69)
        parts.append(bar.format(pct=n // 10, n=n, mm=secs // 60, ss=secs % 60))
        if n:
            parts.append(f"{{'loss': 2.{n // 100}, 'grad_norm': 0.9, 'learning_rate': 5e-05, "
                         "'epoch': 0.1}\n")  # fmt: skip
    text = ("[INFO|trainer.py:2134] 2025-02-18 07:00:00,123 >> ***** Running training *****\n"
            + "\r".join(parts))  # fmt: skip
    log = tmp_path / "hf.out"
    log.write_text(text + "\n")
    scan = parse_file(log)
    got = [(m["step"], m["ts"].strftime("%H:%M:%S")) for m in scan.metrics]
    assert got == [(100, "07:04:29"), (200, "07:08:58"), (300, "07:13:27")]


def test_a_step_printed_by_several_ranks_is_one_point(tmp_path: Path) -> None:
    """TorchTitan without --local-ranks-filter: every rank prints each step (tee prefixes)."""
    lines = []
    for step in (1, 2, 3):
        for rank in range(4):
            lines.append(
                f"[rank{rank}]:[titan] 2025-02-18 07:00:0{step},000 - root - INFO - "
                f"step: {step}  loss:  7.0{rank}  memory: 33.12GiB(41.86%)  tps: 6,123"
            )
    log = tmp_path / "titan.out"
    log.write_text("\n".join(lines) + "\n")
    scan = parse_file(log)
    assert [m["step"] for m in scan.metrics] == [1, 2, 3]
    assert scan.counts["metrics_repeated_by_ranks"] == 9


# -- stops that are not failures, and stops at the end (issue 36, 4) -----------------------------


def _megatron(start: str, steps: range, step_s: float = 2.0, origin: int = 0) -> list[str]:
    """Megatron-LM iteration lines, step ``origin`` at ``start``."""
    from datetime import datetime, timedelta

    t0 = datetime.fromisoformat(start)
    return [
        f" [{t0 + timedelta(seconds=(s - origin) * step_s):%Y-%m-%d %H:%M:%S}] iteration "
        f"{s:>8}/  100000 | "
        f"consumed samples: {s * 512:>10} | elapsed time per iteration (ms): {step_s * 1000:.1f}"
        " | learning rate: 1.000E-04 | global batch size:   512 | lm loss: 2.500000E+00 | "
        "loss scale: 1.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |"
        for s in steps
    ]


def test_a_time_limit_kill_at_the_end_of_the_log_is_its_own_planned_stop(tmp_path: Path) -> None:
    lines = _megatron("2025-02-18 07:00:00", range(10, 1010, 10))
    lines.insert(50, "  [2025-02-18 07:16:41.000000] successfully saved checkpoint from iteration "
                     "    500 to /lustre/ckpt/orion [ t 1/1, p 1/1 ]")  # fmt: skip
    lines.append("slurmstepd: error: *** JOB 81234 ON gpu-node-000 CANCELLED AT "
                 "2025-02-18T07:33:31 DUE TO TIME LIMIT ***")  # fmt: skip
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store, out = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert row["component"] == "Planned maintenance" and "Slurm time limit" in row["description"]
    assert "Run stopped at step 1,000" in row["description"]
    assert "500 steps since the last checkpoint (step 500) to redo" in row["description"]
    summary = subprocess.run([*CLI, "summary", "--store", str(store), "--json"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    (run,) = json.loads(summary.stdout)["runs"]
    assert run["interruptions"]["unexpected"] == 0  # planned: MTBF is left alone
    (listed,) = run["interruptions"]["list"]
    assert listed["lost_steps"] == 500 and listed["end_ts"] is None
    # the Overview says the run stopped, and why; not that it has been stalling since 2025
    from datetime import datetime

    from telemetry.metrics.alert_rules import active_alerts
    from telemetry.queries import TimeRange
    from telemetry.store import Store

    with Store(str(store), read_only=True) as s:
        lo, hi = s.rows("SELECT min(ts), max(ts) FROM train_metrics")[0]
        found = active_alerts(s, cf.RUN, TimeRange(lo, hi), targets_at=datetime(2026, 1, 1))
        got = {r.alert: r for r in found.itertuples()}
    assert "Run stalled" not in got and got["Run stopped"].severity == "warning"
    assert "Slurm time limit" in got["Run stopped"].detail


def test_a_planned_exit_is_no_failure(tmp_path: Path) -> None:
    """Megatron-LM's --exit-interval, then the job resubmitted: a planned stop; and a run that
    ends with 'exiting program' is finished, not interrupted."""
    lines = _megatron("2025-02-18 07:00:00", range(10, 510, 10))
    lines.append("[exiting program at iteration 500] datetime: 2025-02-18 07:16:41 ")
    lines += _megatron("2025-02-18 07:10:00", range(510, 1010, 10))  # resubmitted, 10 min later
    lines.append("[exiting program at iteration 1000] datetime: 2025-02-18 07:43:21 ")
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)  # the first exit; the last one ended the run
    assert row["component"] == "Planned maintenance"
    assert "planned exit of the trainer" in row["description"]


def test_a_crash_nobody_restarted_is_an_interruption_at_the_end(tmp_path: Path) -> None:
    log = cf.build(tmp_path / "job.out", culprit=2)
    kept = log.read_text().split("loading checkpoint from")[0].rsplit("\n", 1)[0]
    log.write_text(kept + "\n")  # the job never came back
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert (row["component"], row["rank"], row["host"]) == ("Software Bug", 2, cf.host(0))
    assert "Run stopped at step 400" in row["description"]
    # no checkpoint: every step since its first is lost (issue 57, 3), not "unknown"
    assert "no checkpoint known: all 400 steps since step 0 to redo" in row["description"], \
        row["description"]


# -- restart loops (issue 36, 7) -----------------------------------------------------------------


def test_three_restarts_from_one_checkpoint_are_one_restart_loop(tmp_path: Path) -> None:
    """The job crashes soon after each restore from step 300 and is restarted three times:
    one incident, 'restart loop', with an alert; not three unrelated interruptions."""
    load = ("{t} loading checkpoint from /lustre/ckpt/orion at iteration 300",
            "{t} successfully loaded checkpoint from /lustre/ckpt/orion [ t 0/1, p 0/1 ] at "
            "iteration 300")  # fmt: skip
    oom = ["[rank3]: Traceback (most recent call last):",
           '[rank3]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 245, in <module>',
           "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    lines = _megatron("2025-02-18 07:00:00", range(10, 410, 10))  # to 07:13:20
    for k, start in enumerate(("07:20:00", "07:30:00", "07:40:00", "07:50:00")):
        lines += oom if k < 3 else []
        t = f"[2025-02-18 {start}]"
        lines += [x.format(t=t) for x in load]
        upto = 340 if k < 3 else 600
        lines += _megatron(f"2025-02-18 {start}", range(310, upto, 10), origin=300)
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert row["description"].startswith("Restart loop: 4 restarts")
    assert "never got past step 300" in row["description"]
    with duckdb.connect(str(store), read_only=True) as con:
        restarts, recovery = con.execute("SELECT restarts, recovery FROM interruptions").fetchone()
    assert restarts == 4 and recovery is None
    from telemetry.metrics.alert_rules import active_alerts
    from telemetry.queries import TimeRange
    from telemetry.store import Store

    with Store(str(store), read_only=True) as s:
        lo, hi = s.rows("SELECT min(ts), max(ts) FROM train_metrics")[0]
        found = active_alerts(s, cf.RUN, TimeRange(lo, hi), targets_at=hi)
    loop = found[found["alert"] == "Restart loop"]
    assert len(loop) == 1 and loop["severity"].iloc[0] == "critical"


def test_the_same_gpu_failing_again_right_after_a_restore_is_one_incident() -> None:
    import pandas as pd

    from telemetry.derive.inference import infer_interruptions
    from tests.test_inference import HOSTS, at, sig, stream

    m = stream((0, 0, 100, 0), (1200, 91, 30, 1), (2100, 111, 50, 2))
    xid = "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (Double Bit ECC Error)."
    signals = pd.DataFrame([sig(995, "xid", "node-7", 3, 48, xid, "kern.log:1"),
                            sig(1495, "xid", "node-7", 3, 48, xid, "kern.log:2")])  # fmt: skip
    df = infer_interruptions(m, signals, run_hosts=HOSTS, gpus=64)
    (row,) = df.to_dict("records")
    assert row["restarts"] == 2 and row["ts"] == at(990) and row["end_ts"] == at(2100)
    assert "node-7 GPU 3 failed again after each restore" in row["description"]


def test_a_deepspeed_save_the_log_started_and_never_finished_is_a_failed_write(
    tmp_path: Path,
) -> None:
    """(#36, 5) DeepSpeed's checkpoint engine logs the start and end of each save; the job
    died during the save of step 600 and came back from step 400."""
    ds = "[{t},000] [INFO] [logging.py:128:log_dist] [Rank 0] [Torch] Checkpoint global_step{s} "
    lines = _megatron("2025-02-18 07:00:00", range(10, 610, 10))
    lines.insert(40, ds.format(t="2025-02-18 07:13:21", s=400) + "is begin to save!")
    lines.insert(41, ds.format(t="2025-02-18 07:13:25", s=400) + "is ready now!")
    lines.append(ds.format(t="2025-02-18 07:20:01", s=600) + "is begin to save!")
    lines += _megatron("2025-02-18 07:30:00", range(410, 700, 10), origin=400)
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    torn = [e for e in json.loads(row["evidence"]) if e["kind"] == "ckpt_save_unfinished"]
    assert len(torn) == 1 and "the save of step 600 never finished" in torn[0]["line"]


def _watchdogs(ranks: list[int], t: Any) -> list[str]:
    """ProcessGroupNCCL's watchdog timeout of each of ``ranks`` on one all-reduce (verbatim
    format, pytorch/pytorch and LlamaFactory issue reports), 4 ranks per node."""
    from datetime import timedelta

    out = []
    for r in ranks:
        at = t + timedelta(microseconds=4000 * r)
        node, local = divmod(r, 4)
        out.append(
            f"{node}: [default{local}]:[rank{r}]:[E{at:%m%d %H:%M:%S}.{at.microsecond:06d} "
            f"ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
            "Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
        )
    return out


def test_the_rank_every_other_rank_waited_for_from_their_watchdog_lines(tmp_path: Path) -> None:
    """A hang without flight-recorder dumps: seven of eight ranks log ProcessGroupNCCL's
    watchdog timeout on the same all-reduce (verbatim format, pytorch/pytorch and LlamaFactory
    issue reports); rank 5 logs none. It is the rank they waited for, on its host, at the
    time they entered the collective; their timeouts are its cascade."""
    from datetime import datetime

    full = cf.build(tmp_path / "full.out", culprit=5).read_text().splitlines()
    head = [ln for ln in full if "NCCL INFO comm" in ln]  # where each rank runs
    head += _megatron("2025-02-18 07:00:00", range(10, 410, 10))  # step 400 at 07:13:20
    waits = _watchdogs([0, 1, 2, 3, 4, 6, 7], datetime(2025, 2, 18, 7, 23, 30))
    tail = ["[2025-02-18 07:30:00] loading checkpoint from /lustre/ckpt at iteration 300"]
    tail += _megatron("2025-02-18 07:30:00", range(310, 500, 10), origin=300)
    hang = tmp_path / "slurm-81234.out"
    hang.write_text("\n".join([*head, *waits, *tail]) + "\n")
    store, _ = _import(tmp_path, hang)
    (row,) = _interruptions(store)
    assert (row["rank"], row["host"], row["component"]) == (5, cf.host(1), "NCCL Watchdog Timeouts")
    assert "rank 5 never completed ALLREDUCE #1580; 7 of 8 ranks timed out" in row["description"]
    ev = json.loads(row["evidence"])
    assert ev[0]["role"] == "cause"
    assert ev[0]["ts"].startswith("2025-02-18T07:13:29.94")  # they waited 600.06 s
    assert {e["role"] for e in ev if e["kind"] == "nccl_timeout"} == {"cascade"}


def test_the_gpu_heatmap_marks_where_each_failure_began(tmp_path: Path) -> None:
    """(#36, 2) The culprit's node is marked on the fleet heatmap at the failure's time; a
    culprit without a row of its own is marked on the averaged row, named in the hover."""
    import pandas as pd

    from app.figures.gpus import heatmap

    t0 = pd.Timestamp("2025-02-18 07:00")
    cells = pd.DataFrame({
        "ts": [t0, t0, t0], "rank": [1, 2, 3], "host": ["n1", "n2", None],
        "value": [90.0, 5.0, 80.0]})  # fmt: skip
    culprits = pd.DataFrame({
        "ts": [t0, t0], "host": ["n2", "n9"], "rank": [13, None],
        "what": ["Software Bug", "hang: nccl:all_reduce #11"]})  # fmt: skip
    fig = heatmap(cells, key="util", label="GPU utilization", unit="%", bucket_s=3600,
                  nodes_total=10, nodes_shown=2, culprits=culprits)  # fmt: skip
    (marks,) = [t for t in fig.data if t.get("name") == "culprit"]
    assert list(marks["y"]) == ["n2", "other 8 nodes (mean)"]
    assert list(marks["text"]) == ["Software Bug · n2 · rank 13", "hang: nccl:all_reduce #11 · n9"]


def test_megatron_deepspeeds_consumed_tokens_fill_tokens(tmp_path: Path) -> None:
    """(#36, 3) Megatron-DeepSpeed's iteration line counts tokens (training.py training_log:
    ``consumed tokens: N |``): the same records whether a block is read column-wise (timed
    lines) or line by line."""
    lines = []
    for k, step in enumerate((10, 20, 30)):
        lines.append(
            f" [2025-02-18 07:00:{k * 10:02d}] iteration {step:>8}/  100000 | consumed samples: "
            f"{step * 512:>12} | consumed tokens: {step * 512 * 2048:>14} | elapsed time per "
            "iteration (ms): 5000.0 | learning rate: 1.000E-04 | global batch size:   512 | "
            "lm loss: 2.500000E+00 | loss scale: 4096.0 | grad norm: 0.900 | number of skipped "
            "iterations:   0 | number of nan iterations:   0 |"
        )
    log = tmp_path / "mds.out"
    log.write_text("\n".join(lines * 8) + "\n")  # enough lines for the column-wise read
    block = parse_file(log).metrics
    parser = LogParser(log)
    for n, text in enumerate(log.read_text().splitlines(), 1):
        parser.feed(text, n)
    assert block == parser.scan().metrics
    assert [m["tokens"] for m in block[:3]] == [10 * 512 * 2048, 20 * 512 * 2048, 30 * 512 * 2048]


def test_tokens_from_the_sizes_the_trainer_states_once(tmp_path: Path) -> None:
    """(#36, 3) Megatron-LM prints its arguments (``seq_length .... 4096``) and then consumed
    samples per iteration; TorchTitan states its global batch and sequence length when training
    starts. Either way every progress point gets its tokens (column-wise and line by line)."""
    meg = ["------------------------ arguments ------------------------",
           "  seq_length ...................................... 4096",
           "-------------------- end of arguments ---------------------"]  # fmt: skip
    meg += _megatron("2025-02-18 07:00:00", range(10, 310, 10)) * 1
    log = tmp_path / "megatron.out"
    log.write_text("\n".join(meg) + "\n")
    block = parse_file(log).metrics
    parser = LogParser(log)
    for n, text in enumerate(meg, 1):
        parser.feed(text, n)
    assert block == parser.scan().metrics
    assert block[0]["tokens"] == 10 * 512 * 4096 and block[-1]["tokens"] == 300 * 512 * 4096
    titan = [
        "[rank0]:[titan] 2025-02-18 07:00:00,000 - root - INFO - Training starts at step 1, with "
        "local batch size 8, global batch size 64, gradient accumulation steps 1, sequence length "
        "8192, total steps 1000 (warmup 200)"
    ] + [
        f"[rank0]:[titan] 2025-02-18 07:00:{s:02d},000 - root - INFO - step: {s}  loss:  7.01  "
        "memory: 33.12GiB(41.86%)  tps: 6,123  tflops: 250.1  mfu: 25.29%"
        for s in range(1, 6)
    ]
    log = tmp_path / "titan.out"
    log.write_text("\n".join(titan) + "\n")
    assert [m["tokens"] for m in parse_file(log).metrics] == [s * 64 * 8192 for s in range(1, 6)]


@pytest.mark.parametrize("exc", ["torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"])
def test_an_untimed_oom_traceback_under_srun_and_rank_prefixes_is_the_cause(
    tmp_path: Path, exc: str
) -> None:
    """(#56, 4) Megatron-DeepSpeed under torchrun under ``srun --label`` (no ``--tee``): its
    iteration lines carry no time (timed by their pace from ``[before the start of training
    step] datetime: ...``), nor does rank 5's OOM traceback, each line prefixed ``1: [rank5]: ``
    (srun's node number, PyTorch's excepthook; torch 2.x names the exception
    ``torch.OutOfMemoryError``, older 2.x ``torch.cuda.OutOfMemoryError``). The other ranks'
    cascade carries ProcessGroupNCCL's own times, 3 s later. Before: the traceback took the
    training start's time, 13 minutes before, and the network was blamed."""
    import re
    from datetime import datetime, timedelta

    from tests.test_goodput_frameworks import _megatron_deepspeed

    t0 = datetime(2025, 2, 18, 7, 0, 0)
    lines = [f"{r // 4}: [default{r % 4}]:{cf.host(r // 4)}:{20000 + r}:{20099 + r} [{r % 4}] "
             f"NCCL INFO comm 0x55d5c8e{r:05x} rank {r} nranks 8 cudaDev {r % 4} nvmlDev {r % 4} "
             "busId 1000 commId 0x7c1e9a3b5d2f4e60 - Init COMPLETE" for r in range(8)]  # fmt: skip
    lines += [f"1: {ln}" for ln in _megatron_deepspeed(t0, 0, 700, every=10)]  # to 07:14:00
    fail = t0 + timedelta(seconds=700 * 1.2 + 1)
    lines += [f"1: [rank5]: {x}" for x in (
        "Traceback (most recent call last):",
        '  File "/workspace/Megatron-DeepSpeed/pretrain_gpt.py", line 350, in <module>',
        "    pretrain(train_valid_test_datasets_provider,",
        f"{exc}: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
        "79.10 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has "
        "78.07 GiB memory in use.")]  # fmt: skip
    for r in (0, 1, 2, 3, 4, 6, 7):  # the cascade, as cascade_fixture writes it, without --tee
        at = fail + timedelta(seconds=3, microseconds=137 * r)
        lines += [re.sub(r"\[default\d\]:", "", ln)
                  for ln in cf._cascade_lines(r, 4, 20000 + r, at)]  # fmt: skip
    back = fail + timedelta(minutes=8)
    lines += [f"1: [after model, optimizer, and learning rate scheduler are built] datetime: "
              f"{back:%Y-%m-%d %H:%M:%S} ",
              "1:   successfully loaded checkpoint from /lustre/ckpt/orion at iteration 600"]
    lines += [f"1: {ln}" for ln in _megatron_deepspeed(back, 600, 800, every=10)]
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert (row["component"], row["rank"], row["host"]) == ("Software Bug", 5, cf.host(1))
    assert row["ts"] == datetime(2025, 2, 18, 7, 14)  # step 700, by its pace
    ev = json.loads(row["evidence"])
    assert ev[0]["role"] == "cause" and "OutOfMemoryError" in ev[0]["line"]
    assert ev[0]["ts"] == "2025-02-18T07:14:00"  # the time of the progress line before it
    assert {e["role"] for e in ev if e["kind"] in ("nccl_error", "ib_error")} == {"cascade"}


def test_an_untimed_oom_printed_after_the_others_cascade_is_still_the_cause(
    tmp_path: Path,
) -> None:
    """(#56, 4) ``srun --label`` interleaves the nodes' output: rank 5's untimed OOM traceback
    (``1: [rank5]: ``) reaches the log after node 0's cascade, whose NCCL ``WARN NET/IB``
    lines carry no time either, only ProcessGroupNCCL's lines after them do. Before: those
    WARN lines took the last progress line's time, 11 s before the time the traceback took,
    so the network was blamed on a victim (rank 0). An untimed network error is placed no
    earlier than the log proves: the next time it shows."""
    import re

    lines = cf.build(tmp_path / "full.out", culprit=5).read_text().splitlines()
    oom = [ln for ln in lines if ln.startswith("1: [default1]:[rank5]:")]
    rest = [re.sub(r"\[default\d\]:", "", ln) for ln in lines if ln not in oom]
    after = max(k for k, ln in enumerate(rest) if "WorkNCCL destructor" in ln) + 1
    oom = [ln.replace("1: [default1]:[rank5]: ", "1: [rank5]: ") for ln in oom]
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(rest[:after] + oom + rest[after:]) + "\n")
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert (row["component"], row["rank"], row["host"]) == ("Software Bug", 5, cf.host(1))
    assert "CUDA out of memory on rank 5" in row["description"]
