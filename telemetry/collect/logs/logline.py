"""What one line of a training job's or a node's log says: pure recognisers, no state.

``textlogs.LogParser`` decides which lines to look at (``PREFILTER``, one vectorised pass per
block) and keeps what spans lines (the year of a syslog line, the most recent time, an open
traceback); this module reads a single line. What each framework's or launcher's lines say is
in its own module of ``parsers`` (Megatron-LM, TorchTitan, Hugging Face Trainer, Lightning,
DeepSpeed, torchrun, Slurm, PyTorch's C++ side, NCCL, the kernel); this module tries them in
the order ``parsers.FORMATS`` gives their recognisers, and names the ones ``textlogs`` calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from telemetry import signals as sig
from telemetry.collect.logs.logranks import split_prefix
from telemetry.collect.logs.parsers import FORMATS
from telemetry.collect.logs.parsers.common import Failure
from telemetry.collect.logs.parsers.hf_trainer import after_bar, hf_dict, tqdm_bar
from telemetry.collect.logs.parsers.kernel import (
    host_from_filename,
    is_kernel_log,
    journal_json,
    pci_key,
)
from telemetry.collect.logs.parsers.lightning import lightning_bar
from telemetry.collect.logs.parsers.megatron import TRAIN_START, iteration_of
from telemetry.collect.logs.parsers.stamps import PREFIX, Stamp, stamp
from telemetry.collect.logs.settings import PREFILTER as SETTINGS_PREFILTER

# the format-specific recognisers textlogs (and the import command) call by name
__all__ = [
    "PREFIX", "TRAIN_START", "Failure", "Stamp", "after_bar", "hf_dict", "host_from_filename",
    "is_kernel_log", "iteration_of", "journal_json", "lightning_bar", "pci_key", "stamp",
    "tqdm_bar",
]


def _parts() -> list[str]:
    seen: dict[str, None] = {}
    for f in FORMATS:
        seen.update(dict.fromkeys(f.prefilter))
    return [*seen, SETTINGS_PREFILTER, r"Traceback"]  # settings and tracebacks: any writer's


# Substrings that any line worth reading contains. RE2 (pyarrow) and Python's re both compile
# it; keep to the syntax they share (no \w or \b: their meaning differs on non-ASCII text).
PREFILTER = "|".join(_parts())
PREFILTER_RE = re.compile(PREFILTER)


def _keyed(kind: str) -> list[tuple[str, Callable[[str], Any]]]:
    """(key, recogniser) of every format's recognisers of ``kind``, in their places' order (as
    plain pairs: unpacking them is the cheapest in the per-line loops)."""
    found = sorted((k for f in FORMATS for k in getattr(f, kind)), key=lambda k: k.place)
    return [(k.key, k.read) for k in found]


_PROGRESS = _keyed("progress")
_PLAN = _keyed("plan")
_FAILURES = _keyed("failures")
_CKPT = sorted((c for f in FORMATS for c in f.checkpoints), key=lambda c: c.place)
_SIGNATURES = [(s.kind, s.keys, s.rx) for s in
               sorted((s for f in FORMATS for s in f.signatures), key=lambda s: s.place)]
_CKPT_KEYS = tuple(dict.fromkeys(k for f in FORMATS for k in f.checkpoint_keys))


def strip_prefix(text: str) -> tuple[str, str]:
    """(label, rest): the ``[rank3]:`` / ``[default3]:`` / srun ``--label`` ``3: `` prefixes
    that launchers put before each line of a rank's output, and the line without them."""
    label, rest, _ = split_prefix(text)
    return label, rest


def progress(body: str) -> dict[str, float | None] | None:
    """A trainer's progress line (Megatron-LM, TorchTitan, DeepSpeed) as {step, loss, ...}."""
    for key, read in _PROGRESS:
        if key in body and (f := read(body)):
            return f
    return None


def plan(body: str) -> list[tuple[str, int]]:
    """What the trainer or the batch script says once about the job: ("tokens_per_step", N),
    ("train_steps", S), ("seq_length", L), ("world_size", W), ("nodes", N),
    ("gpus_per_node", G), ("model_params", P); [] otherwise."""
    for key, read in _PLAN:
        if key in body and (p := read(body)) is not None:
            return p
    return []


_STEP_IN_PATH = re.compile(r"(?:checkpoint-|step[-_=]?|iter_|global_step)0*(\d+)")
# a folder of the path named for its step, for a file named for none
# (``checkpoint-5/global_step5/mp_rank_00_model_states.pt``)
_STEP_DIR = re.compile(r"(?:^|/)(?:checkpoint-|step[-_]?|iter_|global_step)0*(\d+)(?=/)")


def checkpoint(body: str) -> tuple[str, str | None, int | None, str | None] | None:
    """(kind, phase, step, path) of a checkpoint line; the step from the path
    (``checkpoint-500``, ``step-100``, ``iter_0000100``) when the text does not say it."""
    for key in _CKPT_KEYS:
        if key in body:
            break
    else:
        return None
    for rule in _CKPT:
        m = rule.rx.search(body)
        if m is None:
            continue
        g = m.groupdict()
        path = g.get("path")
        path = path.rstrip(".,;") if path else None
        step = int(g["step"]) if g.get("step") else None
        if step is None and path and (s := _STEP_IN_PATH.search(PurePath(path).name)):
            step = int(s.group(1))
        if step is None and path and (dirs := _STEP_DIR.findall(path)):
            step = int(dirs[-1])
        if rule.needs_folder and step is None and "/" not in (path or ""):
            return None  # "Loading model from scratch" and the like
        return rule.kind, rule.phase, step, path
    return None


_NCCL_HDR = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*):\d+:\d+ \[(\d+)\] (?=NCCL )")
_CUDA_START = re.compile(r"CUDA error|Cuda failure|cudaError|torch\.\w*OutOfMemoryError")


def failure(body: str) -> Failure | None:
    """The failure signature a line carries, if any: the formats' own failure lines first
    (planned ends, launchers, the driver's Xid, Slurm), then the signatures of a cause in the
    text, the specific cause before the symptom."""
    if "NCCL INFO" in body:
        return None  # NCCL's INFO lines report, they never fail
    for key, read in _FAILURES:
        if key in body and (f := read(body)) is not None:
            return f or None  # NOT_A_FAILURE: the line is its format's, and no failure
    for kind, keys, rx in _SIGNATURES:
        for k in keys:
            if k in body:
                break
        else:
            continue
        m = rx.search(body)
        if m is None:
            continue
        host = gpu = None
        start = m.start()
        if h := _NCCL_HDR.search(body):
            host, gpu = h.group(1), int(h.group(2))
            start = min(start, h.end())
        if kind.startswith("cuda_") and (c := _CUDA_START.search(body, 0, start + 1)):
            start = c.start()
        return kind, body[start:].strip()[:sig.MAX_DETAIL_CHARS], None, None, host, gpu, None
    return None


# -- tracebacks --------------------------------------------------------------------------------
TB_START = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(?::|$)")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def traceback_step(rest: str) -> str:
    """What a line inside an open traceback is: ``frame`` (indented or blank), ``chain``,
    ``exception`` (the final ``Type: message`` line) or ``other`` (an interleaved line)."""
    if not rest or rest[0] in " \t" or rest.startswith(("^", "~")):
        return "frame"
    if rest.startswith(_CHAINED):
        return "chain"
    return "exception" if _EXCEPTION.match(rest) else "other"
