"""TorchTitan: ``metrics.py``'s step lines, ``train.py``'s start line and model size, and its
checkpointer's saves and loads (``checkpoint.py``)."""

from __future__ import annotations

import re

from telemetry.collect.logs.parsers.common import CheckpointRule, Keyed, LineFormat, number

_TITAN = re.compile(r"(?<!validate )step:\s*(\d+)\s+loss:\s*([-+]?[\w.]+)")
# train.py: "Training starts at step 1, with local batch size 8, global batch size 64,
# [gradient accumulation steps 1, ]sequence length 8192, total steps 1000 (warmup 200)"
_TITAN_PLAN = re.compile(r"Training starts at step \d+, with local batch size \d+, global batch "
                         r"size (\d+),(?: gradient accumulation steps \d+,)? sequence length (\d+)"
                         r"(?:, total steps (\d+))?")
# train.py: "Model llama3 8B size: 8,030,261,248 total parameters"
_PARAMS = re.compile(r"size: ([0-9,]+) total parameters")


def _word_after(line: str, key: str) -> str | None:
    i = line.find(key)
    if i < 0:
        return None
    rest = line[i + len(key):].split(None, 1)
    return rest[0] if rest else None


def titan(body: str) -> dict[str, float] | None:
    """A TorchTitan step line as {step, loss, grad_norm, tokens_per_s, mfu}. ``tps`` there is
    tokens per second per GPU; ``mfu`` a percentage (``N/A`` with quantisation)."""
    m = _TITAN.search(body)
    if m is None:
        return None
    out = {"step": int(m.group(1)), "loss": number(m.group(2))}
    if (g := _word_after(body, "grad_norm:")) is not None:
        out["grad_norm"] = number(g)
    if (t := _word_after(body, "tps:")) is not None:
        out["tokens_per_s"] = number(t)
    if (f := _word_after(body, "mfu:")) is not None and f.endswith("%"):
        v = number(f[:-1])
        out["mfu"] = None if v is None else v / 100
    return out


def _start(body: str) -> list[tuple[str, int]] | None:
    """("tokens_per_step", N) and ("train_steps", S) from the start line."""
    if (m := _TITAN_PLAN.search(body)) is None:
        return None
    out = [("tokens_per_step", int(m.group(1)) * int(m.group(2)))]
    return out + [("train_steps", int(m.group(3)))] if m.group(3) else out


def _params(body: str) -> list[tuple[str, int]] | None:
    m = _PARAMS.search(body)
    return [("model_params", int(m.group(1).replace(",", "")))] if m else None


FORMAT = LineFormat(
    name="torchtitan",
    prefilter=(
        r"step: *[0-9]",  # progress
        r"Training starts at step",  # tokens per step
        r"total parameters",
        r"the checkpoint",
        r"Last step checkpoint",
        # "Training completed": hf_trainer reads it (both print it)
    ),
    progress=(Keyed(20, "step:", titan),),
    plan=(Keyed(10, "Training starts", _start), Keyed(61, "arameters", _params)),
    checkpoint_keys=("heckpoint",),
    checkpoints=(
        CheckpointRule(50, re.compile(r"Finished (?:saving|staging) the checkpoint|Last step "
                                      r"checkpoint completed"), "save_end", None),
        CheckpointRule(60, re.compile(r"(?:Saving|Staging) the checkpoint\b"), "save_start", None),
        CheckpointRule(70, re.compile(r"Finished loading the checkpoint"), "load", "finish"),
        CheckpointRule(80, re.compile(r"Loading the checkpoint (?:at step (?P<step>\d+)|from "
                                      r"(?P<path>\S+?))\.?\s*$"), "load", "start"),
    ),
)
