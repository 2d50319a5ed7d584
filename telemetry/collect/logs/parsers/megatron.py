"""Megatron-LM, and the forks that print its lines (Megatron-DeepSpeed, BigScience's, NeMo's
Megatron-Bridge): ``training.py`` ``training_log``'s iteration lines, ``print_datetime``,
``arguments.py``'s argument block, ``checkpointing.py``'s saves and loads, the timers' per-rank
reports (``rankperf``) and NVIDIA Resiliency Extension's straggler reports beside them.

Megatron-DeepSpeed has no module of its own: its lines are Megatron-LM's iteration line with
two fields more (``consumed tokens``; BigScience's ``elapsed time per iteration (s)``), read
here, and DeepSpeed's engine lines (``deepspeed``)."""

from __future__ import annotations

import re

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import (
    CheckpointRule,
    Failure,
    Keyed,
    LineFormat,
    to_float,
)

_ITER = re.compile(r"iteration\s+(\d+)/\s*\d+\s*\|")
_MEG_FIELDS = re.compile(
    r"\| (learning rate|lm loss|grad norm|number of nan iterations|elapsed time per iteration "
    r"\(m?s\)|consumed tokens|consumed samples|[A-Za-z0-9_ -]*loss): +([^ |]+)"
)
# The planned steps as each progress line states them: "iteration  990/ 1000 |"
_ITER_OF = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|")
# training.py train(): print_datetime('before the start of training step') right after
# starting the timer that its first "elapsed time per iteration" measures
TRAIN_START = "[before the start of training step] datetime: "


def megatron(body: str) -> dict[str, float | None] | None:
    """A Megatron-LM iteration line as {step, loss, lr, grad_norm, nan_iterations}; the loss is
    ``lm loss``, else the first other ``... loss`` the model reports."""
    m = _ITER.search(body)
    if m is None:
        return None
    f = dict(_MEG_FIELDS.findall(body, m.end() - 1))
    loss = f.get("lm loss")
    if loss is None:
        loss = next((v for k, v in f.items() if k.endswith("loss")), None)
    ms = to_float(f.get("elapsed time per iteration (ms)"))
    if ms is None and (sec := to_float(f.get("elapsed time per iteration (s)"))) is not None:
        ms = sec * 1000.0  # BigScience's Megatron-DeepSpeed prints seconds
    return {"step": int(m.group(1)), "loss": to_float(loss), "lr": to_float(f.get("learning rate")),
            "grad_norm": to_float(f.get("grad norm")),
            "nan_iterations": to_float(f.get("number of nan iterations")),
            "iter_s": None if ms is None else ms / 1000.0,
            "tokens": to_float(f.get("consumed tokens")),  # Megatron-DeepSpeed counts them
            "samples": to_float(f.get("consumed samples"))}


def iteration_of(line: str) -> tuple[int, int] | None:
    """(step, planned steps) of a Megatron-LM progress line, else None."""
    m = _ITER_OF.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


# arguments.py (_print_args): "  seq_length ...................... 4096", "  train_iters
# ......... 500000"; on rank 0 "using world size: 64, data-parallel ..."
_SEQ_ARG = re.compile(r"^\s*seq_length \.+ (\d+)\s*$")
_ITERS_ARG = re.compile(r"^\s*train_iters \.+ (\d+)\s*$")
_WORLD = re.compile(r"using world size: (\d+), data-parallel|^\s*world_size \.+ (\d+)\s*$")
# theoretical_memory_usage.py: "Total number of parameters in billions: 6.96"
_PARAMS = re.compile(r"Total number of parameters in billions: *([0-9.]+)")


def _seq_length(body: str) -> list[tuple[str, int]] | None:
    return [("seq_length", int(m.group(1)))] if (m := _SEQ_ARG.match(body)) else None


def _train_iters(body: str) -> list[tuple[str, int]] | None:
    return [("train_steps", int(m.group(1)))] if (m := _ITERS_ARG.match(body)) else None


def _world(body: str) -> list[tuple[str, int]] | None:
    m = _WORLD.search(body)
    return [("world_size", int(m.group(1) or m.group(2)))] if m else None


def _params(body: str) -> list[tuple[str, int]] | None:
    m = _PARAMS.search(body)
    return [("model_params", round(float(m.group(1)) * 1e9))] if m else None


# training.py (print_datetime): "[exiting program at iteration 1000] datetime: ...", "[exiting
# program after 230.0 minutes] datetime: ...", "exiting program after receiving SIGTERM.", and
# at the end of its planned steps "[after training is done] datetime: ..."
_PLANNED_EXIT = re.compile(r"exiting program (?:at iteration \d+|after [^\]]+?)(?=\]|\.?\s*$)"
                           r"|after training is done")


def _planned_exit(body: str) -> Failure | None:
    if ("exiting program" in body or "training is done" in body) and (
            m := _PLANNED_EXIT.search(body)):
        return sig.PLANNED_EXIT, m.group(0), None, None, None, None, None
    return None


FORMAT = LineFormat(
    name="megatron",
    prefilter=(
        r"iteration +[0-9]+/",  # progress
        r"before the start of training step",  # training (re)starts, timed
        r"seq_length \.\.\.",  # tokens per sample
        r"train_iters \.\.\.",  # the planned steps
        r"number of parameters in billions",
        r"using world size: |world_size \.\.\.",  # how many GPUs the job has
        r"checkpoint (?:at|from|to) ",
        r"exiting program|after training is done",
        r"time(?:s)? across ranks \(ms\):",  # the timers (rankperf: the slow rank)
        r"GPU (?:relative|individual) performance:|STRAGGLER DETECTION WARNING",  # NVRx
    ),
    progress=(Keyed(10, "iteration", megatron),),
    plan=(Keyed(20, "seq_length", _seq_length), Keyed(30, "train_iters", _train_iters),
          Keyed(40, "world", _world), Keyed(60, "arameters", _params)),
    checkpoint_keys=("heckpoint",),
    checkpoints=(  # checkpointing.py
        CheckpointRule(10, re.compile(r"successfully saved checkpoint (?:at|from) iteration\s+"
                                      r"(?P<step>\d+) to (?P<path>\S+)"), "save_end", None),
        CheckpointRule(20, re.compile(r"saving checkpoint at iteration\s+(?P<step>\d+) to "
                                      r"(?P<path>\S+)"), "save_start", None),
        CheckpointRule(30, re.compile(r"successfully loaded checkpoint from (?P<path>\S+).*? at "
                                      r"iteration (?P<step>\d+)"), "load", "finish"),
        CheckpointRule(40, re.compile(r"loading (?:distributed )?checkpoint from (?P<path>\S+) at"
                                      r" iteration (?P<step>\d+)"), "load", "start"),
    ),
    failures=(Keyed(10, "", _planned_exit),),
)
