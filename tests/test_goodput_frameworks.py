"""Goodput of imported runs of the three trainers whose logs Factory Floor reads (#38, "real
parts in tests"): Megatron-LM, TorchTitan and the Hugging Face Trainer, each log written as the
framework prints it and imported with the user's command into a store that also holds a replayed
run. Each run: 600 steps of 2 s, steps 301-400 taking 3 s (a slow stretch: 100 s beyond the
ideal). Each run's categories add up to its window exactly, its ideal step time is the log's
2 s, the slow stretch is its slowdown, and the replayed run beside them is accounted as alone."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.metrics.goodput import CATEGORIES, goodput
from telemetry.store import Store
from tests.conftest import build_store, cli

T0 = datetime(2026, 1, 5, 6, 0, 0)  # inside the replay's day: both in one store and range
STEPS, EVERY = 600, 10


def _at(step: int) -> datetime:
    """When ``step`` finished: 2 s a step, 3 s for steps 301-400."""
    slow = min(max(step - 300, 0), 100)
    return T0 + timedelta(seconds=2.0 * step + 1.0 * slow)


def _megatron() -> list[str]:
    """Megatron-LM training.py's training_log lines (rank 0, with its datetime prefix)."""
    out = []
    for s in range(EVERY, STEPS + 1, EVERY):
        ms = (_at(s) - _at(s - EVERY)).total_seconds() / EVERY * 1000
        out.append(
            f" [{_at(s):%Y-%m-%d %H:%M:%S}] iteration {s:>8}/{STEPS:>8} | consumed samples: "
            f"{s * 512:>10} | elapsed time per iteration (ms): {ms:.1f} | learning rate: "
            "1.000E-04 | global batch size:   512 | lm loss: 2.500000E+00 | loss scale: 1.0 | "
            "grad norm: 0.900 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
    return out


def _titan() -> list[str]:
    """TorchTitan train.py's start line and its logger's step lines (log_freq 10)."""
    out = [f"[titan] {T0:%Y-%m-%d %H:%M:%S},000 - root - INFO - Training starts at step 1, with "
           f"local batch size 8, global batch size 64, sequence length 8192, total steps "
           f"{STEPS} (warmup 20)"]  # fmt: skip
    for s in range(EVERY, STEPS + 1, EVERY):
        out.append(f"[titan] {_at(s):%Y-%m-%d %H:%M:%S},123 - root - INFO - step: {s:3}  loss:  "
                   "7.1234  grad_norm:  1.2345  memory: 30.12GiB(38.01%)  tps: 3,456  "
                   "tflops: 160.12  mfu: 16.19%")  # fmt: skip
    return out


def _hugging_face() -> list[str]:
    """The Trainer's log dicts (logging_steps 10), each line dated by the job's wrapper."""
    return [
        f"[{_at(s):%Y-%m-%d %H:%M:%S}] {{'loss': 1.{s:03d}, 'grad_norm': 0.5, "
        f"'learning_rate': 1e-05, 'epoch': {s / STEPS:.2f}, 'step': {s}}}"
        for s in range(EVERY, STEPS + 1, EVERY)
    ]


LOGS = {"megatron": _megatron, "titan": _titan, "hf": _hugging_face}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A dev-64 replay's day and the three runs imported into it; the replay's block before."""
    root = tmp_path_factory.mktemp("frameworks")
    store = build_store(root / "s.duckdb", seed=1, days=1.0)
    with Store(str(store), read_only=True) as s:
        alone = goodput(s, "dev-64-s1")
    for name, lines in LOGS.items():
        log = root / f"{name}.log"
        log.write_text("\n".join(lines()) + "\n")
        r = cli("import", "--store", str(store), "--run", name, str(log))
        assert r.returncode == 0, r.stderr
    return store, alone


@pytest.mark.parametrize("run", list(LOGS))
def test_an_imported_runs_categories_add_up_and_name_its_slow_stretch(
    both: tuple[Path, dict], run: str
) -> None:
    store, _ = both
    with Store(str(store), read_only=True) as s:
        block = goodput(s, run)
    assert block is not None, run
    secs = block["seconds"]
    assert set(secs) == set(CATEGORIES) and all(v >= 0 for v in secs.values())
    assert round(sum(secs.values()), 3) == block["window_s"]
    assert block["ideal_step_s"] == pytest.approx(2.0)
    assert secs["slowdown"] == pytest.approx(100.0, abs=1.0)  # steps 301-400: 1 s each
    assert secs["recovery"] == secs["planned"] == secs["wasted_progress"] == 0
    # every logged step after the first progress point at the ideal step time
    assert secs["productive"] == pytest.approx((STEPS - EVERY) * 2.0, abs=1.0)


def test_the_replayed_run_beside_them_is_accounted_as_alone(both: tuple[Path, dict]) -> None:
    store, alone = both
    with Store(str(store), read_only=True) as s:
        beside = goodput(s, "dev-64-s1")
    assert beside == alone
    runs = {r["run_id"]: r for r in json.loads(cli("summary", "--store", str(store),
                                                   "--json").stdout)["runs"]}  # fmt: skip
    assert {"dev-64-s1", *LOGS} <= set(runs)
    for run in LOGS:
        assert runs[run]["goodput"]["seconds"]["slowdown"] == pytest.approx(100.0, abs=1.0)


def _megatron_deepspeed(start: datetime, first: int, last: int, every: int = 100,
                        unit: str = "ms") -> list[str]:
    """Megatron-DeepSpeed's own lines (microsoft/Megatron-DeepSpeed megatron/training.py):
    ``print_datetime('before the start of training step')`` when training (re)starts, then
    ``training_log``'s iteration lines every ``--log-interval``, which carry no time of their
    own, only the mean ``elapsed time per iteration (ms)`` since the last one (BigScience's fork
    prints ``(s)``), and count ``consumed tokens``. 1.2 s a step, 2,048 tokens a sample, 512
    samples a step."""
    took = "(ms): 1200.0" if unit == "ms" else "(s): 1.20"
    out = [f"[before the start of training step] datetime: {start:%Y-%m-%d %H:%M:%S} "]
    for s in range(first + every - first % every, last + 1, every):
        out.append(
            f" iteration {s:8d}/{100000:8d} | consumed samples: {s * 512:12d} | consumed tokens: "
            f"{s * 512 * 2048:12d} | elapsed time per iteration {took} | learning rate: "
            "1.000E-04 | global batch size:   512 | lm loss: 2.500000E+00 | loss scale: 4096.0 | "
            "grad norm: 0.900 | actual seqlen:  2048 | number of skipped iterations:   0 | number "
            "of nan iterations:   0 | samples per second: 426.667 | tokens per gpu per second "
            "(tgs): 13653.333 | TFLOPs: 150.00 |"
        )
    return out


@pytest.mark.parametrize("unit", ["ms", "s"])
def test_a_megatron_deepspeed_stop_is_timed_when_progress_stopped(
    tmp_path: Path, unit: str
) -> None:
    """(#56, 4) Iteration lines every 100 steps of 1.2 s, timed only by their pace from the
    training start; a crash right after step 2,000 (08:40:00), the requeued job loads
    iteration 1,500 and starts again at 08:50:00. Before: the stop was put at the previous
    line's pace (2 minutes early: the first line was taken to be at the start), the
    restart's time line was not read (a Megatron ``[after ...] datetime:`` stamp past the
    80th character), and the untimed traceback took the training start's time, hours before,
    so the stop had no cause; with BigScience's ``(s)`` the lines were not paced at all: one
    time for all of them, and no ETTR."""
    t0 = datetime(2026, 3, 1, 8, 0, 0)
    back = datetime(2026, 3, 1, 8, 50, 0)
    lines = ["using world size: 64, data-parallel size: 8, tensor-model-parallel size: 8, "
             "pipeline-model-parallel size: 1 ",
             *_megatron_deepspeed(t0, 0, 2000, unit=unit)]  # fmt: skip
    lines += ["[rank3]: Traceback (most recent call last):",
              '[rank3]:   File "/workspace/Megatron-DeepSpeed/pretrain_gpt.py", line 350, in '
              "<module>",
              "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
              "GPU 3 has a total capacity of 79.10 GiB of which 1.02 GiB is free."]  # fmt: skip
    lines += [f"[after model, optimizer, and learning rate scheduler are built] datetime: "
              f"{back - timedelta(seconds=20):%Y-%m-%d %H:%M:%S} ",
              " loading checkpoint from /lustre/ckpt/mds at iteration 1500",
              "  successfully loaded checkpoint from /lustre/ckpt/mds at iteration 1500",
              *_megatron_deepspeed(back, 1500, 3000, unit=unit)]  # fmt: skip
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "mds", str(log))
    assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        rows = s.rows("SELECT ts, end_ts, component, restored_step, lost_steps FROM interruptions")
        tokens = s.rows("SELECT tokens FROM train_metrics ORDER BY ts DESC LIMIT 1")
    assert rows == [(datetime(2026, 3, 1, 8, 40), back + timedelta(seconds=120), "Software Bug",
                     1500, 500)]  # fmt: skip
    assert tokens == [(3000 * 512 * 2048,)]
    (run,) = json.loads(cli("summary", "--store", str(store), "--json").stdout)["runs"]
    # steps 100 to 3,000 logged, 1.2 s each, over the 78 minutes from 08:02 to 09:20
    assert run["ettr"] == pytest.approx(2900 * 1.2 / (78 * 60), abs=0.002)
