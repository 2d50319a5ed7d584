"""DeepSpeed: the pipeline engine's progress line (``runtime/pipe/engine.py`` train_batch), the
checkpoint engine's saves and loads (``runtime/checkpoint_engine/torch_checkpoint_engine.py``,
by version) and its launcher tearing the workers down and saying how the one that failed
exited (``launcher/launch.py``)."""

from __future__ import annotations

import re

from telemetry import signals as sig
from telemetry.collect.logs import logranks as lr
from telemetry.collect.logs.parsers.common import (
    CheckpointRule,
    Failure,
    Keyed,
    LineFormat,
    number,
    to_float,
)

# no time of its own: "steps: 100 loss: 2.1234 iter time (s): 1.234 samples/sec: 103.511"
_DS_STEPS = re.compile(r"steps: (\d+) loss: ([-+]?[\w.]+) iter time \(s\): ([0-9.]+)")
_DS_KILL = re.compile(r"sigkill_handler\] Killing subprocess (\d+)")
_DS_EXIT = re.compile(r"sigkill_handler\] .* exits with return code = (-?\d+)\s*$")


def deepspeed_steps(body: str) -> dict[str, float | None] | None:
    """DeepSpeed's ``steps: N loss: X iter time (s): T`` line as {step, loss, iter_s}."""
    m = _DS_STEPS.search(body)
    if m is None:
        return None
    return {"step": int(m.group(1)), "loss": number(m.group(2)), "iter_s": to_float(m.group(3))}


def _killed(body: str) -> Failure | None:
    """``[launch.py:318:sigkill_handler] Killing subprocess 80``: teardown, never a cause."""
    if m := _DS_KILL.search(body):
        detail = f"launcher killed pid {m.group(1)} (DeepSpeed)"
        return sig.LAUNCHER_SIGNAL, detail, None, None, None, None, None
    return None


def _exited(body: str) -> Failure | None:
    """``[launch.py:321:sigkill_handler] ['python', '-u', 'main.py', '--local_rank=1', ...]
    exits with return code = -9``: a worker of this node exited so (the launcher then killed
    the rest). Which worker, the line does not say: the command it prints is the launcher's
    last one spawned (launch.py logs its loop variable ``cmd``), not the failed worker's, so
    its ``--local_rank`` is no culprit. A signal other than a stop's (SIGTERM, SIGINT, SIGHUP:
    someone stopped the job) is that worker's own death, as torchrun's ``exitcode: -9``."""
    if (m := _DS_EXIT.search(body)) is None:
        return None
    code = int(m.group(1))
    name = lr.signal_name(-code) if code < 0 else None
    detail = (f"DeepSpeed launcher: a worker exited with code {code}"
              + (f" ({name})" if name else "") + "; which local rank the line does not say "
              "(the command it prints is its last worker's)")  # fmt: skip
    kind = sig.WORKER_KILLED if name and name not in lr.TEARDOWN_SIGNALS else sig.WORKER_EXIT
    return kind, detail, None, None, None, None, None


FORMAT = LineFormat(
    name="deepspeed",
    prefilter=(
        r"steps: [0-9]+ loss: ",  # the pipeline engine's progress
        r"Checkpoint global_step",  # the checkpoint engine
        r"checkpoint from ",  # [Torch] Loading checkpoint from
        r"Killing subprocess [0-9]",  # the launcher tearing its workers down
        r"exits with return code = ",  # ... and which code the worker that failed exited with
    ),
    progress=(Keyed(30, "steps:", deepspeed_steps),),
    checkpoint_keys=("heckpoint",),
    checkpoints=(
        CheckpointRule(100, re.compile(r"Checkpoint (?P<path>global_step(?P<step>\d+)) is (?:begin"
                                       r" to save|about to be saved)"), "save_start", None),
        CheckpointRule(110, re.compile(r"Checkpoint (?P<path>global_step(?P<step>\d+)) is ready "
                                       r"now"), "save_end", None),
        # load(), each file of a tag, on every rank: "[Torch] Loading checkpoint from
        # {path}..." / "[Torch] Loaded checkpoint from {path}."
        CheckpointRule(130, re.compile(r"\[Torch\] Loading checkpoint from (?P<path>\S+?)"
                                       r"(?:\.\.\.)?\s*$"), "load", "start"),
        CheckpointRule(140, re.compile(r"\[Torch\] Loaded checkpoint from (?P<path>\S+?)\.?\s*$"),
                       "load", "finish"),
    ),
    failures=(Keyed(50, "Killing subprocess", _killed),
              Keyed(51, "exits with return code", _exited)),
)
