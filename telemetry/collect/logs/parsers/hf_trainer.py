"""Hugging Face Trainer (``trainer.py``): its log dicts (``{'loss': 2.1, 'learning_rate': ...}``),
the tqdm bar they are printed onto, its parameter count, checkpoint saves and resumes, and the
end of training."""

from __future__ import annotations

import re

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import (
    CheckpointRule,
    Failure,
    Keyed,
    LineFormat,
    number,
)

_PAIR = re.compile(r"""['"]([A-Za-z_][\w/.-]*)['"]\s*:\s*([^,}]+)""")
_TQDM = re.compile(r"(?:^|\s)\d{1,3}%\|[^|]*\|\s*(\d+)/(\d+) ?\[(?:(\d+):)?(\d+):(\d\d)[<,\]]?")
HF_FIELDS = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm",
             "num_input_tokens_seen": "tokens"}
# "  Number of trainable parameters = 124,439,808"
_PARAMS = re.compile(r"Number of trainable parameters = ([0-9,]+)")
_HF_LOAD = re.compile(r"Loading model from (?P<path>\S+?)\.?\s*$")


def hf_dict(segment: str) -> dict[str, float] | str | None:
    """A Hugging Face Trainer log dict (``{'loss': 2.1, 'learning_rate': 5e-05, ...}``) as
    fields; ``"summary"`` for the end-of-training ``train_runtime`` dict, ``"eval"`` for an
    evaluation dict, None for anything else."""
    s = segment[segment.find("{") :].strip()
    if not (s.startswith("{") and s.endswith("}")):
        return None
    pairs = dict(_PAIR.findall(s))
    if "train_runtime" in pairs:
        return "summary"
    if any(k.startswith("eval_") for k in pairs):
        return "eval"
    if "loss" not in pairs and "learning_rate" not in pairs:
        return None
    out: dict[str, float] = {}
    for key, name in HF_FIELDS.items():
        if key in pairs and (v := number(pairs[key].strip())) is not None:
            out[name] = v
    if "step" in pairs and (v := number(pairs["step"])) is not None and v >= 0:
        out["step"] = int(v)
    return out


def after_bar(segment: str) -> str:
    """What follows a tqdm bar's closing ``]`` on its line: a line another process (or the
    rank's error) printed onto the bar without a newline; "" when nothing does."""
    m = _TQDM.search(segment)
    if m is None:
        return ""
    end = segment.find("]", m.end() - 1)
    return segment[end + 1 :].strip() if end >= 0 else ""


def tqdm_step(segment: str) -> int | None:
    """The position of a tqdm bar without a description (``12%|█▏  | 120/1000 [...]``)."""
    bar = tqdm_bar(segment)
    return None if bar is None else bar[0]


def tqdm_bar(segment: str) -> tuple[int, int, float | None] | None:
    """(position, total, seconds since the bar started) of a tqdm bar without a description:
    ``12%|█▏  | 120/1000 [05:23<39:30,  2.69s/it]`` (tqdm's ``format_interval``: ``MM:SS``
    or ``H:MM:SS``); the seconds are None when the bar does not show them."""
    m = _TQDM.search(segment)
    if m is None or segment[: m.start()].strip():
        return None
    h, mm, ss = m.group(3), m.group(4), m.group(5)
    elapsed = None if mm is None else int(h or 0) * 3600 + int(mm) * 60 + int(ss)
    return int(m.group(1)), int(m.group(2)), elapsed


def _params(body: str) -> list[tuple[str, int]] | None:
    m = _PARAMS.search(body)
    return [("model_params", int(m.group(1).replace(",", "")))] if m else None


def _completed(body: str) -> Failure | None:
    """"Training completed" (TorchTitan's train.py prints it too): the planned end."""
    if "Training completed" in body:
        return sig.PLANNED_EXIT, "Training completed", None, None, None, None, None
    return None


FORMAT = LineFormat(
    name="hf_trainer",
    prefilter=(
        r"Number of trainable parameters",
        r"checkpoint to ",  # Saving model checkpoint to
        r"Loading model from",
        r"Continuing training from global step|Attempting to resume from",  # resumes
        r"\{['\"]",  # log dicts
        r"%\|",  # tqdm progress bars (the step of a log dict)
        r"Training completed",
    ),
    plan=(Keyed(62, "arameters", _params),),
    checkpoint_keys=("heckpoint", "Loading model from", "global step", "resume from"),
    checkpoints=(
        CheckpointRule(90, re.compile(r"Saving model checkpoint to (?P<path>\S+)"), "save_start",
                       None),
        CheckpointRule(120, _HF_LOAD, "load", "start", needs_folder=True),
        # integrations/deepspeed.py deepspeed_load_checkpoint ("Attempting to resume from
        # {checkpoint_path}"), trainer.py ("  Continuing training from global step {}")
        CheckpointRule(150, re.compile(r"Attempting to resume from (?P<path>\S+/\S+?)\s*$"),
                       "load", "start"),
        CheckpointRule(160, re.compile(r"Continuing training from global step (?P<step>\d+)"),
                       "load", "finish"),
    ),
    failures=(Keyed(11, "Training completed", _completed),),
)
