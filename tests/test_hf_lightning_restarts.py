"""Restarts in the Hugging Face Trainer + DeepSpeed and Lightning formats (issue 56): the restore
lines are read, so the stop before them is found and its restore, lost steps and culprit are
right. The logs were recorded from the exam (``benchmarks/exam.py --only
exception_hf,sigkill_hf,exception_lightning``: two torchrun agents of 2 ranks, gloo, the
culprits on gpu-b43, gpu-b47, gpu-b57); the lines the training script wrote are the Trainer's,
DeepSpeed's and Lightning's verbatim (``benchmarks/exam_formats.py`` cites their sources), all
else came from the real software.
Before, none of ``Attempting to resume from``, ``[Torch] Loading checkpoint from .../
global_step5/...pt...`` nor ``Continuing training from global step 5`` was read: the job's one
restart was no interruption at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.exam_jobs import Case, truth
from telemetry.collect.logs import logline as ll
from telemetry.collect.logs.textlogs import parse_file
from tests.test_culprit import _import, _interruptions

HF = Path(__file__).with_name("fixtures") / "hf_exam"


@pytest.mark.parametrize(
    ("log", "rank", "host", "why", "cause"),
    [("exception", 3, "gpu-b43", "RuntimeError", "Software Bug"),
     ("sigkill", 1, "gpu-b47", "SIGKILL", "Unknown")],  # no line says who sent the SIGKILL
)
def test_an_hf_trainer_deepspeed_restart_is_one_interruption_with_its_restore(
    tmp_path: Path, log: str, rank: int, host: str, why: str, cause: str
) -> None:
    """Step 6 was the last the first launch logged; the second resumed from checkpoint-5
    (DeepSpeed's ``global_step5``) and its tqdm bar started again at 0."""
    store, _ = _import(tmp_path, HF / f"{log}.log")
    (row,) = _interruptions(
        store, "rank, host, component, restarts, restored_step, lost_steps, description"
    )
    assert (row["restarts"], row["restored_step"], row["lost_steps"]) == (1, 5, 1)
    assert (row["rank"], row["host"], row["component"]) == (rank, host, cause)
    assert why in row["description"] and "Restart loop" not in row["description"]


def test_the_restore_lines_of_hf_and_deepspeed_name_their_step() -> None:
    """Each file DeepSpeed reads is a ``[Torch] Loading``/``Loaded`` pair, under the tag's
    folder; the Trainer says where it resumes. One step, one restart (a load and its end)."""
    scan = parse_file(HF / "exception.log")
    loads = [e for e in scan.checkpoint_events if e.kind in ("load", "load_end")]
    assert {e.step for e in loads} == {5}
    assert any("Continuing training from global step 5" in e.line for e in loads)
    assert any("Attempting to resume from" in e.line for e in loads)


def test_a_lightning_restart_is_one_interruption_with_its_restore(tmp_path: Path) -> None:
    """Recorded from the exam's ``exception_lightning`` (Lightning 2.x lines under Hydra's log
    format; rank 2 on gpu-b57 raised at step 6). Lightning's progress is only its training bar
    (``Epoch 0:  50%|...| 6/12 [00:00<00:00, ...]``, no time of its own): before, no step was
    read, and the stop came out as "Unknown, no progress lines", its candidates every rank."""
    store, _ = _import(tmp_path, HF / "lightning_exception.log")
    (row,) = _interruptions(
        store, "rank, host, component, restarts, restored_step, lost_steps, description"
    )
    assert (row["restarts"], row["restored_step"], row["lost_steps"]) == (1, 5, 1)
    assert (row["rank"], row["host"], row["component"]) == (2, "gpu-b57", "Software Bug")


def test_lightnings_training_bar_is_read_as_steps() -> None:
    """Each batch the bar shows once is one point (a redraw of the same batch is not); the
    validation loss in the postfix is not the training loss."""
    scan = parse_file(HF / "lightning_exception.log")
    steps = [m["step"] for m in scan.metrics]
    assert steps == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10, 11, 12]  # resumed from 5
    assert ll.lightning_bar(
        "Epoch 77: 100%|███| 5005/5005 [37:53<00:00,  2.20it/s, v_num=3, metric.val.loss=2.070]"
    ) == (77, 5005, 5005, 37 * 60 + 53, None, 86)


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # lightning/pytorch/trainer/connectors/checkpoint_connector.py (resume_start, restore)
        ("Restoring states from the checkpoint path at /ckpt/epoch=0-step=5.ckpt",
         ("load", "start", 5, "/ckpt/epoch=0-step=5.ckpt")),
        ("INFO:lightning.pytorch.utilities.rank_zero:Restored all states from the checkpoint "
         "at /ckpt/epoch=0-step=5.ckpt", ("load", "finish", 5, "/ckpt/epoch=0-step=5.ckpt")),
        ("Restored all states from the checkpoint at /ckpt/last.ckpt",
         ("load", "finish", None, "/ckpt/last.ckpt")),
        # validate/test/predict load weights only: no training resumed
        ("Loaded model weights from the checkpoint at /ckpt/epoch=0-step=5.ckpt", None),
        # DeepSpeed's per-file loads: the step is the tag's folder
        ("[2026-12-06 21:48:06,734] [INFO] [torch_checkpoint_engine.py:27:load] [Torch] Loading "
         "checkpoint from /o/checkpoint-5/global_step5/mp_rank_00_model_states.pt...",
         ("load", "start", 5, "/o/checkpoint-5/global_step5/mp_rank_00_model_states.pt")),
        ("[INFO|trainer.py:2464] 2026-12-06 21:48:06,739 >>   Continuing training from global "
         "step 5", ("load", "finish", 5, None)),
        ("[INFO|trainer.py:2462] 2026-12-06 21:48:06,739 >>   Continuing training from "
         "checkpoint, will skip to saved global_step", None),
    ],
)  # fmt: skip
def test_lightning_and_deepspeed_restore_lines(line: str, want: tuple | None) -> None:
    assert ll.checkpoint(line) == want
    if want is not None:
        assert ll.PREFILTER_RE.search(line)


def test_lost_steps_are_counted_to_the_last_progress_the_log_shows(tmp_path: Path) -> None:
    """The preemption case: the job printed step 14 as Slurm stopped it, but torchrun's
    ``--tee`` tailer was ended before it relayed the line; the log shows 13. No reader of the
    log can know 14, so the exam's truth counts 3 lost steps (10 restored), the job's 4 beside."""
    tdir = tmp_path / "truth"
    tdir.mkdir()
    shown = "[titan] 2026-12-06 19:05:37,526 - root - INFO - step: 13  loss:  0.3168"
    (tmp_path / "job.log").write_text(f"0: [rank0]:{shown}\n")
    evs = [
        {"ev": "saved", "step": 10, "t": 1.0, "attempt": 1},
        {"ev": "progress", "step": 13, "t": 2.0, "attempt": 1},
        {"ev": "printed", "step": 13, "t": 2.0, "attempt": 1, "line": shown},
        {"ev": "progress", "step": 14, "t": 3.0, "attempt": 1},
        {"ev": "printed", "step": 14, "t": 3.0, "attempt": 1, "line": shown.replace("13", "14")},
        {"ev": "loaded", "step": 10, "t": 9.0, "attempt": 2},
        {"ev": "finished", "step": 60, "t": 20.0, "attempt": 2},
    ]
    (tdir / "rank0.jsonl").write_text(
        "".join(json.dumps(e | {"rank": 0, "host": "gpu-b29"}) + "\n" for e in evs))
    (stop,) = truth(Case("preempt", "preempt", fmt="titan", slurm="preempt"), tdir)["stops"]
    assert (stop["last_step"], stop["logged_step"], stop["restored_step"]) == (14, 13, 10)
    assert (stop["lost_steps"], stop["job_lost_steps"]) == (3, 4)


@pytest.mark.parametrize("log", ["exception", "lightning_exception"])
def test_a_victims_traceback_begun_on_a_bar_under_an_srun_label_is_whole(
    tmp_path: Path, log: str
) -> None:
    """``0: \\r 50%|...| 6/12 [...][rank0]: Traceback (most recent call last):``: srun's
    ``0:`` labels the whole line, tqdm's redraws included, so the traceback's next lines
    (``0: [rank0]:   File ...``, ending in gloo's ``Connection closed by peer``) are its own.
    Read without the label, it was a traceback cut before its exception, a failure of unknown
    kind beside the culprit's, which lowered the culprit's confidence (0.4, not the 0.8 of a
    rank named by its own line while the others wrote only their cascade)."""
    store, _ = _import(tmp_path, HF / f"{log}.log")
    (row,) = _interruptions(store, "rank, confidence, evidence")
    kinds = [e["kind"] for e in json.loads(row["evidence"])]
    assert "traceback_cut" not in kinds, kinds
    assert row["confidence"] >= 0.8
