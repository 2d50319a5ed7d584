"""Goodput against an independent truth (issue 57, 8): a Megatron-LM job's log generated with
every second known by construction, imported with the user's command, and each goodput
category pinned to the second (off by more than 1 s fails), each dollar figure to a hand
computation at the run's price.

The job (``Job``): 16 GPUs, one step every 2 s, a progress line every 10 steps; steps 401-500
take 3 s (1 s each beyond the ideal: slowdown); synchronous saves (training waits: Megatron's
``saving checkpoint`` to ``successfully saved``) of 15 s at steps 500, 1000 and 1500, and
of 25 s at step 2000. At step 1200 node-b's GPU falls off the bus (kernel XID 79); NCCL's
watchdog fires 10 minutes later and Slurm cancels the job; 15 minutes after the failure the
new attempt loads iteration 1,000 (40 s) and trains from step 1001: steps 1001-1200 are done
twice. At step 1800 an InfiniBand link fails (the job's own NCCL line), the job exits and its
next attempt loads iteration 1,500 five minutes later (20 s): steps 1501-1800 twice. The run
ends at step 2300. The window is the log's span: from the first progress line (step 10) to
the last.

The truth is the generator's own bookkeeping, second by second as it writes the log: each
step's 2 s is productive, or wasted progress when a failure later throws it away (the steps
after the restored checkpoint, before the failure); a slow step's extra second is slowdown;
a save's wait is checkpoint save; a load is checkpoint restore; from the failure (the last
progress line) to the new attempt's first step, less its load, is recovery."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from tests.conftest import cli

RUN, GPUS, PRICE = "truth-16", 16, 2.40  # USD per GPU-hour: the run's own (--run-price)
T0 = datetime(2026, 11, 21, 0, 0, 0)
STEP_S, EVERY = 2.0, 10
SAVES = {500: 15.0, 1000: 15.0, 1500: 15.0, 2000: 25.0}
SLOW = range(401, 501)  # steps that take 3 s
CKPT = "/lustre/ck/truth"
# (the last step before the failure, the checkpoint restored, failure -> load start, load s)
FAILURES = ((1200, 1000, 900.0, 40.0), (1800, 1500, 300.0, 20.0))
LAST_STEP = 2300
CATS = ("productive", "checkpoint_save", "checkpoint_restore", "wasted_progress", "recovery",
        "slowdown", "startup", "planned", "other")  # fmt: skip


@dataclass
class Job:
    """The log's lines and the seconds of each category, as the job spent them."""

    job: list[str] = field(default_factory=list)
    kern: list[str] = field(default_factory=list)
    secs: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATS, 0.0))
    t: float = 0.0  # seconds from T0
    started: float | None = None  # the window's start: the first progress line
    wasted: set[tuple[int, int]] = field(default_factory=set)  # (attempt, step) thrown away

    def at(self, dt: float = 0.0) -> str:
        return f"[{T0 + timedelta(seconds=self.t + dt):%Y-%m-%d %H:%M:%S}]"

    def spend(self, cat: str, s: float) -> None:
        if self.started is not None:  # before the first progress line is outside the window
            self.secs[cat] += s
        self.t += s


def _steps(job: Job, attempt: int, first: int, last: int) -> None:
    for step in range(first, last + 1):
        lost = (attempt, step) in job.wasted
        job.spend("wasted_progress" if lost else "productive", STEP_S)
        if step in SLOW:
            job.spend("wasted_progress" if lost else "slowdown", 1.0)
        if step % EVERY == 0:
            job.job.append(
                f"{job.at()} iteration {step:>8}/    5000 | consumed samples: {step * 512:>10} | "
                f"elapsed time per iteration (ms): {STEP_S * 1000:.1f} | learning rate: "
                "3.000E-04 | global batch size:   512 | lm loss: 2.512345E+00 | loss scale: 1.0 "
                "| grad norm: 0.912 | number of skipped iterations:   0 | number of nan "
                "iterations:   0 |"
            )  # fmt: skip
            job.started = job.t if job.started is None else job.started
        if step in SAVES and (attempt, step) not in job.wasted:
            job.job.append(f"{job.at()} saving checkpoint at iteration {step:>7} to {CKPT}")
            job.spend("checkpoint_save", SAVES[step])
            job.job.append(f"{job.at()}   successfully saved checkpoint from iteration "
                           f"{step:>7} to {CKPT} [ t 1/1, p 1/1 ]")  # fmt: skip


def build_job() -> Job:
    job = Job()
    job.job.append("using world size: 16, data-parallel size: 2, context-parallel size: 1, "
                   "hierarchical context-parallel sizes: None, tensor-model-parallel size: 8, "
                   "pipeline-model-parallel size: 1")  # fmt: skip
    ends = [f[0] for f in FAILURES] + [LAST_STEP]
    starts = [1] + [f[1] + 1 for f in FAILURES]
    for attempt, (last, (_, restored, _, _)) in enumerate(zip(ends, FAILURES, strict=False)):
        job.wasted |= {(attempt, s) for s in range(restored + 1, last + 1)}
    for attempt, (first, last) in enumerate(zip(starts, ends, strict=True)):
        _steps(job, attempt, first, last)
        if attempt == len(FAILURES):
            break
        _fail(job, attempt, *FAILURES[attempt])
    return job


def _fail(job: Job, attempt: int, last: int, restored: int, wait: float, load: float) -> None:
    """The failure at the last progress line, its lines, the wait and the new attempt's load."""
    if attempt == 0:  # the GPU falls off the bus; the watchdog; Slurm cancels the job
        stamp = T0 + timedelta(seconds=job.t)
        job.kern.append(f"{stamp:%b %e %H:%M:%S} node-b kernel: [12345.678] NVRM: Xid "
                        "(PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.")  # fmt: skip
        wd = stamp + timedelta(seconds=600)
        job.job += [f"[rank{r}]:[E{wd:%m%d %H:%M:%S}.{100 + r:06d} ProcessGroupNCCL.cpp:616] "
                    f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
                    "4211, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)="
                    "600000) ran for 600021 milliseconds before timing out."
                    for r in range(16) if r != 11]  # fmt: skip
        job.job.append(f"slurmstepd: error: *** JOB 91234 ON node-a CANCELLED AT "
                       f"{wd + timedelta(seconds=20):%Y-%m-%dT%H:%M:%S} ***")  # fmt: skip
    else:  # an InfiniBand link fails on node-a: the job's own NCCL line, then it exits
        job.job += [f"{job.at()} node-a:5512:5601 [3] NCCL WARN NET/IB : Got completion from peer "
                    "10.0.0.13<48211> with error 12, opcode 0, len 0, vendor err 129",
                    "srun: error: node-a: task 3: Exited with exit code 1"]  # fmt: skip
    job.spend("recovery", wait)
    job.job.append(f"{job.at()} loading checkpoint from {CKPT} at iteration {restored}")
    job.spend("checkpoint_restore", load)
    job.job.append(f"{job.at()}  successfully loaded checkpoint from {CKPT} [ t 1/1, p 1/1 ] "
                   f"at iteration {restored}")  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Job, dict]:
    root = tmp_path_factory.mktemp("truth")
    job = build_job()
    log, kern = root / "slurm-91234.out", root / "node-b-kern.log"
    log.write_text("\n".join(job.job) + "\n")
    kern.write_text("\n".join(job.kern) + "\n")
    store = root / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, str(log), str(kern))
    assert r.returncode == 0, r.stderr
    r = cli("summary", "--store", str(store), "--json", "--run-price", f"{RUN}={PRICE}")
    assert r.returncode == 0, r.stderr
    (summary,) = json.loads(r.stdout)["runs"]
    return job, summary


def test_the_truth_is_what_the_story_says(run: tuple[Job, dict]) -> None:
    """The generator's bookkeeping, checked against the story told in words (a wrong truth
    would pin goodput to it)."""
    job, _ = run
    secs = job.secs
    assert secs["checkpoint_save"] == 15 * 3 + 25 and secs["checkpoint_restore"] == 40 + 20
    assert secs["slowdown"] == 100.0 and secs["recovery"] == 900 + 300
    assert secs["wasted_progress"] == (200 + 300) * STEP_S
    assert secs["productive"] == (LAST_STEP - EVERY) * STEP_S  # each step from 11 once


def test_each_category_to_the_second(run: tuple[Job, dict]) -> None:
    job, summary = run
    block = summary["goodput"]
    got = block["seconds"]
    assert block["ideal_step_s"] == STEP_S
    assert block["window_s"] == pytest.approx(sum(job.secs.values()), abs=1e-3)
    off = {c: (got[c], job.secs[c]) for c in CATS if abs(got[c] - job.secs[c]) > 1.0}
    assert not off, off  # (goodput's, the truth's)
    assert block["goodput"] == pytest.approx(job.secs["productive"] / block["window_s"],
                                             abs=1e-4)  # fmt: skip


def test_each_dollar_figure_by_hand(run: tuple[Job, dict]) -> None:
    """GPU-hours = seconds x 16 / 3600, dollars = GPU-hours x $2.40, per category."""
    job, summary = run
    block = summary["goodput"]
    assert summary["cost"]["gpu_hour_usd"] == PRICE
    for cat in CATS:
        hours = job.secs[cat] * GPUS / 3600.0
        assert block["gpu_hours"][cat] == pytest.approx(hours, abs=1.0 * GPUS / 3600), cat
        assert block["usd"][cat] == pytest.approx(hours * PRICE, abs=0.011 + PRICE * GPUS / 3600
                                                  ), cat  # fmt: skip
    # by hand: productive 4,580 s x 16 GPUs = 20.356 GPU-h, x $2.40 = $48.85
    assert block["usd"]["productive"] == pytest.approx(48.85, abs=0.011)
    # wasted progress 1,000 s x 16 = 4.444 GPU-h = $10.67; recovery 1,200 s = 5.333 h = $12.80
    assert block["usd"]["wasted_progress"] == pytest.approx(10.67, abs=0.011)
    assert block["usd"]["recovery"] == pytest.approx(12.80, abs=0.011)
    # checkpoint saves 70 s = 0.311 GPU-h = $0.75; restores 60 s = 0.267 GPU-h = $0.64
    assert block["usd"]["checkpoint_save"] == pytest.approx(0.75, abs=0.011)
    assert block["usd"]["checkpoint_restore"] == pytest.approx(0.64, abs=0.011)
    # the interruptions' cost: down from the failure to the first redone step (recovery and
    # load: 940 + 320 s), their lost steps redone (1,000 s); the first progress line after a
    # restart holds redone steps, counted once (was 40 s more: in the downtime and the redo)
    cost = summary["cost"]
    assert summary["interruptions"]["downtime_hours"] == pytest.approx(1260 / 3600, abs=1e-3)
    assert cost["downtime_usd"] == pytest.approx(1260 * GPUS / 3600 * PRICE, abs=0.011)  # 13.44
    assert cost["rework_usd"] == pytest.approx(1000 * GPUS / 3600 * PRICE, abs=0.011)  # 10.67
    assert summary["lost_gpu_hours"] == pytest.approx(2260 * GPUS / 3600, abs=1e-3)  # 10.044
    assert cost["lost_usd"] == pytest.approx(24.11, abs=0.011)
