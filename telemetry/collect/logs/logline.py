"""What one line of a training job's or a node's log says: pure recognisers, no state.

``textlogs.LogParser`` decides which lines to look at (``PREFILTER``, one vectorised pass per
block) and keeps what spans lines (the year of a syslog line, the most recent time, an open
traceback); this module reads a single line. The message texts come from the trainers' own
sources (Megatron-LM ``training.py``/``checkpointing.py``, TorchTitan ``metrics.py`` and its
checkpointer, Hugging Face ``trainer.py``), NCCL's debug prefix ``host:pid:tid [cudaDev]``,
PyTorch's ProcessGroupNCCL watchdog, Slurm's ``srun``/``slurmstepd`` and the NVIDIA driver's
``NVRM: Xid``, in the versions that are common on clusters today and the older ones still met.

Long module: each recogniser sits beside its part of ``PREFILTER`` and the line it quotes.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import PurePath

from telemetry import signals as sig
from telemetry.collect.logs.logranks import launcher, split_prefix
from telemetry.collect.logs.settings import PREFILTER as SETTINGS_PREFILTER
from telemetry.hostlist import MAX_HOSTS, count_hosts

# Substrings that any line worth reading contains. RE2 (pyarrow) and Python's re both compile
# it; keep to the syntax they share (no \w or \b: their meaning differs on non-ASCII text).
PREFILTER = "|".join(
    [
        r"iteration +[0-9]+/",  # Megatron-LM progress
        r"before the start of training step",  # Megatron: training (re)starts, timed
        r"step: *[0-9]",  # TorchTitan progress
        r"steps: [0-9]+ loss: ",  # DeepSpeed pipeline engine progress
        r"Training starts at step|seq_length \.\.\.",  # tokens per step or per sample
        r"train_iters \.\.\.",  # Megatron-LM: the planned steps
        r"SLURM_(?:JOB_)?NODELIST=|SLURM_(?:JOB_NUM_NODES|NNODES|GPUS_ON_NODE)=",  # job facts
        r"number of parameters in billions|total parameters|Number of trainable parameters",
        r"using world size: |world_size \.\.\.",  # Megatron-LM: how many GPUs the job has
        SETTINGS_PREFILTER,  # the run's settings as the trainer states them (logs.settings)
        r"checkpoint (?:at|from|to) |the checkpoint|Last step checkpoint|Loading model from",
        r"Checkpoint global_step",  # DeepSpeed's checkpoint engine
        r"Continuing training from global step|Attempting to resume from",  # HF Trainer resumes
        r"\{['\"]",  # Hugging Face Trainer log dicts
        r"%\|",  # tqdm progress bars (the step of an HF log dict)
        r"Xid",
        r"atchdog",
        r"Heartbeat monitor",
        r"Timeout at NCCL",
        r"NCCL WARN",
        r"NCCL error",
        r"nccl[A-Z][A-Za-z]*Error",
        r"unhandled system error",
        r"emote process exited",
        r"NET/IB",
        r"ibv_",
        r"IBV_",
        r"retry counter",
        r"[Ll]ink (?:is )?[Dd]own",
        r"uncorrectable ECC",
        r"illegal (?:memory|address)",
        r"IllegalAddress",
        r"launch failure",
        r"out of memory",
        r"Killed process [0-9]",  # the kernel's OOM killer (HOST_OOM)
        r"OutOfMemory",
        r"Cuda failure|unhandled cuda error",  # CUDA errors NCCL reports (logline.CUDA_ERROR)
        r"nvalid usage|nvalid argument|ncclInvalid|no algorithm/protocol",  # NCCL_USAGE
        r"cudaError[A-Z]",  # the CUDA runtime's error names (CUDA_ERROR)
        r"fallen off the bus|GSP RM heartbeat timed out|GSP Timeout|RmInitAdapter failed",
        r"nvidia-container-cli(?:\.real)?: [a-z]+ error: driver (?:rpc )?error: timed out",
        r"dump signal due to a collective timeout",  # the flight recorder told a rank timed out
        r"(?i:loss (?:is|=|:) *[-+]?(?:nan|inf)|found (?:nan|inf))",
        r"Traceback",
        r"srun: error",
        r"salloc: error: Node failure",  # salloc's word for a node of the allocation lost
        r"timed out in blocking wait",  # the NCCL timeout under TORCH_NCCL_BLOCKING_WAIT
        r"Killing subprocess [0-9]",  # DeepSpeed's launcher tearing its workers down
        r"_job_complete: JobId=[0-9]+ WTERMSIG",  # slurmctld: the job's tasks were signalled
        r"CANCELLED AT",
        r"exiting program|Training completed|after training is done|Trainer\.fit` stopped",
        r"closing signal SIG|death signal|SignalException|failed \(exitcode: ",  # torchrun
        r" (?:time|host|rank|exitcode) +: ",  # torchrun's ChildFailedError summary
        r"<NO_OTHER_FAILURES>",  # ... whose Failures list holds only its Root Cause
        r"NCCL INFO comm 0x[0-9a-fA-F]+ rank [0-9]+ n[Rr]anks [0-9]+",  # which host each rank is on
        r"time(?:s)? across ranks \(ms\):",  # Megatron-LM's timers (rankperf: the slow rank)
        r"GPU (?:relative|individual) performance:|STRAGGLER DETECTION WARNING",  # NVRx
    ]
)
PREFILTER_RE = re.compile(PREFILTER)

MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
_MON = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_SYSLOG = re.compile(_MON + r" {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")
_DMESG_T = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) " + _MON + r" +(\d{1,2}) "
                      r"(\d\d):(\d\d):(\d\d) (\d{4})\]")
_BOOT = re.compile(r"\[ *\d+\.\d+\]")  # plain dmesg: seconds since boot
# c10 prints the month unpadded (month * 100 + day): "E626 06:24:44" is June 26
_GLOG = re.compile(r"\[?[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")  # c10/glog
_HOST_TAG = re.compile(r" +([A-Za-z0-9][A-Za-z0-9_.-]*) +([A-Za-z0-9_./-]+)(?:\[\d+\])?: ")
PREFIX = re.compile(r"\[(?:rank|default)?\d+\]: ?|(?: *\d+: )(?=\S)")  # torchrun/srun labels

# Stamp: (kind, fields, host, kernel). kind "full": fields is a datetime (aware when the line
# gave an offset); "yearless": (month, day, h, m, s, us); "boot": no wall time; "bad": a stamp
# that names no real instant (``Feb 30``, ``25:61:61``; fields its text); None: no time.
Stamp = tuple[str | None, object, str | None, bool]
NO_STAMP: Stamp = (None, None, None, False)


def _us(frac: str | None) -> int:
    return int(frac[:6].ljust(6, "0")) if frac else 0


def stamp(body: str) -> Stamp:
    """The time a line was written, read from its start, and the host when the line carries a
    syslog/journal header (``Mar  5 10:20:30 node-7 kernel: ...``)."""
    c = body[:1]
    if c == "[":
        if m := _DMESG_T.match(body):
            mon, d, hh, mm, ss, yy = m.groups()
            try:
                t = datetime(int(yy), MONTHS[mon], int(d), int(hh), int(mm), int(ss))
            except ValueError:
                return "bad", m.group(0), None, True
            return "full", t, None, True
        if _BOOT.match(body):
            return "boot", None, None, True
        if m := _GLOG.match(body):
            return _yearless(m)
    elif c == " " and (b := body.lstrip())[:1] in "JFMASOND" and _SYSLOG.match(b):
        return stamp(b)  # a pasted journal, indented
    elif c in "JFMASOND" and (m := _SYSLOG.match(body)):
        kind, fields, _, _ = _yearless(m)
        host, kernel = _header_host(body, m.end())
        return kind, fields, host, kernel
    elif c in "IWEF" and (m := _GLOG.match(body)):
        return _yearless(m)
    m = _ISO.search(body, 0, 80)
    if m is None and (i := body.find("] datetime: ", 0, 200)) > 0:
        m = _ISO.match(body, i + 12)  # Megatron's print_datetime: "[after ...] datetime: ..."
    if m is None:
        return NO_STAMP
    try:
        t = datetime.fromisoformat(m.group(0))
    except ValueError:
        return "bad", m.group(0), None, False
    host, kernel = _header_host(body, m.end()) if m.start() == 0 and "T" in m.group(0) else (
        None, False)
    return "full", t, host, kernel


def _yearless(m: re.Match[str]) -> Stamp:
    g = m.groups()
    mon = MONTHS[g[0]] if g[0] in MONTHS else int(g[0])
    fields = (mon, int(g[1]), int(g[2]), int(g[3]), int(g[4]), _us(g[5]))
    return "yearless", fields, None, False


def _header_host(body: str, end: int) -> tuple[str | None, bool]:
    if body.startswith(" kernel: ", end):  # journalctl --no-hostname: the kernel, no host
        return None, True
    m = _HOST_TAG.match(body, end)
    if m is None:
        return None, False
    return m.group(1), m.group(2) == "kernel"


def strip_prefix(text: str) -> tuple[str, str]:
    """(label, rest): the ``[rank3]:`` / ``[default3]:`` / srun ``--label`` ``3: `` prefixes
    that launchers put before each line of a rank's output, and the line without them."""
    label, rest, _ = split_prefix(text)
    return label, rest


# -- training progress -------------------------------------------------------------------------
_ITER = re.compile(r"iteration\s+(\d+)/\s*\d+\s*\|")
_MEG_FIELDS = re.compile(
    r"\| (learning rate|lm loss|grad norm|number of nan iterations|elapsed time per iteration "
    r"\(m?s\)|consumed tokens|consumed samples|[A-Za-z0-9_ -]*loss): +([^ |]+)"
)
_TITAN = re.compile(r"(?<!validate )step:\s*(\d+)\s+loss:\s*([-+]?[\w.]+)")
_PAIR = re.compile(r"""['"]([A-Za-z_][\w/.-]*)['"]\s*:\s*([^,}]+)""")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)")
_TQDM = re.compile(r"(?:^|\s)\d{1,3}%\|[^|]*\|\s*(\d+)/(\d+) ?\[(?:(\d+):)?(\d+):(\d\d)[<,\]]?")
# DeepSpeed's pipeline engine (runtime/pipe/engine.py train_batch), no time of its own:
#   steps: 100 loss: 2.1234 iter time (s): 1.234 samples/sec: 103.511
_DS_STEPS = re.compile(r"steps: (\d+) loss: ([-+]?[\w.]+) iter time \(s\): ([0-9.]+)")
HF_FIELDS = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm",
             "num_input_tokens_seen": "tokens"}


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        m = _NUMBER.search(text)
        return float(m.group(0)) if m else None


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


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
    ms = _float(f.get("elapsed time per iteration (ms)"))
    if ms is None and (sec := _float(f.get("elapsed time per iteration (s)"))) is not None:
        ms = sec * 1000.0  # BigScience's Megatron-DeepSpeed prints seconds
    return {"step": int(m.group(1)), "loss": _float(loss), "lr": _float(f.get("learning rate")),
            "grad_norm": _float(f.get("grad norm")),
            "nan_iterations": _float(f.get("number of nan iterations")),
            "iter_s": None if ms is None else ms / 1000.0,
            "tokens": _float(f.get("consumed tokens")),  # Megatron-DeepSpeed counts them
            "samples": _float(f.get("consumed samples"))}


# How many tokens a step or a sample is, as the trainer says it once at the start:
#   TorchTitan train.py: "Training starts at step 1, with local batch size 8, global batch size
#   64, [gradient accumulation steps 1, ]sequence length 8192, total steps 1000 (warmup 200)"
#   Megatron-LM arguments.py (_print_args): "  seq_length ...................... 4096"
_TITAN_PLAN = re.compile(r"Training starts at step \d+, with local batch size \d+, global batch "
                         r"size (\d+),(?: gradient accumulation steps \d+,)? sequence length (\d+)"
                         r"(?:, total steps (\d+))?")
_SEQ_ARG = re.compile(r"^\s*seq_length \.+ (\d+)\s*$")
# The planned steps, Megatron-LM arguments.py: "  train_iters ......................... 500000"
_ITERS_ARG = re.compile(r"^\s*train_iters \.+ (\d+)\s*$")
# The job's ranks (GPUs), Megatron-LM arguments.py on rank 0: "using world size: 64, ..."
_WORLD = re.compile(r"using world size: (\d+), data-parallel|^\s*world_size \.+ (\d+)\s*$")
# The planned steps as each Megatron-LM progress line states them: "iteration  990/ 1000 |"
_ITER_OF = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|")


# The job's nodes and GPUs as a batch script prints its environment (``env | grep SLURM``,
# ``echo SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST``): Slurm's output environment variables.
_SLURM_ENV = re.compile(r"\b(SLURM_JOB_NODELIST|SLURM_NODELIST|SLURM_JOB_NUM_NODES|SLURM_NNODES"
                        r"|SLURM_GPUS_ON_NODE)=(\S+)")
# The model's size as the trainers state it once:
#   Megatron-LM theoretical_memory_usage.py: "Total number of parameters in billions: 6.96"
#   TorchTitan train.py: "Model llama3 8B size: 8,030,261,248 total parameters"
#   Hugging Face trainer.py: "  Number of trainable parameters = 124,439,808"
_PARAMS = re.compile(r"Total number of parameters in billions: *([0-9.]+)"
                     r"|size: ([0-9,]+) total parameters"
                     r"|Number of trainable parameters = ([0-9,]+)")


def _slurm_env(body: str) -> list[tuple[str, int]]:
    out = []
    for name, value in _SLURM_ENV.findall(body):
        if name.endswith("NODELIST"):
            if 0 < (n := count_hosts(value)) <= MAX_HOSTS:
                out.append(("nodes", n))
        elif value.isdigit() and int(value) > 0:
            out.append(("gpus_per_node" if name == "SLURM_GPUS_ON_NODE" else "nodes", int(value)))
    return out


def plan(body: str) -> list[tuple[str, int]]:
    """What the trainer says once about the job: ("tokens_per_step", N) and ("train_steps", S)
    from TorchTitan's start line; ("seq_length", L), ("world_size", W) and ("train_steps", S)
    from Megatron's arguments block (or its "using world size" line); ("nodes", N) and
    ("gpus_per_node", G) from Slurm's environment printed by the batch script; ("model_params",
    P) from the trainer's parameter count; [] otherwise."""
    if "Training starts" in body and (m := _TITAN_PLAN.search(body)):
        out = [("tokens_per_step", int(m.group(1)) * int(m.group(2)))]
        return out + [("train_steps", int(m.group(3)))] if m.group(3) else out
    if "seq_length" in body and (m := _SEQ_ARG.match(body)):
        return [("seq_length", int(m.group(1)))]
    if "train_iters" in body and (m := _ITERS_ARG.match(body)):
        return [("train_steps", int(m.group(1)))]
    if "world" in body and (m := _WORLD.search(body)):
        return [("world_size", int(m.group(1) or m.group(2)))]
    if "SLURM_" in body:
        return _slurm_env(body)
    if "arameters" in body and (m := _PARAMS.search(body)):
        if m.group(1):
            return [("model_params", round(float(m.group(1)) * 1e9))]
        return [("model_params", int((m.group(2) or m.group(3)).replace(",", "")))]
    return []


# Megatron-LM/-DeepSpeed training.py train(): print_datetime('before the start of training
# step') right after starting the timer that its first "elapsed time per iteration" measures
TRAIN_START = "[before the start of training step] datetime: "


def iteration_of(line: str) -> tuple[int, int] | None:
    """(step, planned steps) of a Megatron-LM progress line, else None."""
    m = _ITER_OF.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def deepspeed_steps(body: str) -> dict[str, float | None] | None:
    """DeepSpeed's ``steps: N loss: X iter time (s): T`` line as {step, loss, iter_s}."""
    m = _DS_STEPS.search(body)
    if m is None:
        return None
    return {"step": int(m.group(1)), "loss": number(m.group(2)), "iter_s": _float(m.group(3))}


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


# Lightning's training bar (callbacks/progress/tqdm_progress.py, BAR_FORMAT "{l_bar}{bar}|
# {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]", described "Epoch E"):
#   Epoch 0:  42%|████▏     | 5/12 [00:02<00:02,  2.34it/s, v_num=0, train_loss=0.340]
_PL_BAR = re.compile(r"Epoch (\d+): +\d{1,3}%\|[^|]*\| *(\d+)/(\d+) \[(?:(\d+):)?(\d+):(\d\d)<"
                     r"[^\]]*\]")
_PL_LOSS = re.compile(r"[ ,](?:train_)?loss(?:_step)?=([-+]?[0-9.]+(?:e[-+]?\d+)?)")


def lightning_bar(segment: str) -> tuple[int, int, int, int, float | None, int] | None:
    """(epoch, batch, batches per epoch, seconds since the bar started, loss, end of the bar in
    ``segment``) of Lightning's training bar at the start of ``segment``; None otherwise. The
    batch is ``batch_idx + 1`` in the epoch: the global step where each batch is one optimizer
    step (no gradient accumulation)."""
    m = _PL_BAR.match(segment.lstrip())
    if m is None:
        return None
    h, mm, ss = m.group(4), m.group(5), m.group(6)
    loss = _PL_LOSS.search(m.group(0))
    end = len(segment) - len(segment.lstrip()) + m.end()
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)),
            int(h or 0) * 3600 + int(mm) * 60 + int(ss), _float(loss.group(1)) if loss else None,
            end)  # fmt: skip


# -- checkpoints -------------------------------------------------------------------------------
_HF_LOAD = re.compile(r"Loading model from (?P<path>\S+?)\.?\s*$")
_CKPT = [  # (regex, kind, phase) in the order tried; groups "step" and "path" when given
    (re.compile(r"successfully saved checkpoint (?:at|from) iteration\s+(?P<step>\d+)"
                r" to (?P<path>\S+)"), "save_end", None),
    (re.compile(r"saving checkpoint at iteration\s+(?P<step>\d+) to (?P<path>\S+)"),
     "save_start", None),
    (re.compile(r"successfully loaded checkpoint from (?P<path>\S+).*? at iteration "
                r"(?P<step>\d+)"), "load", "finish"),
    (re.compile(r"loading (?:distributed )?checkpoint from (?P<path>\S+) at iteration "
                r"(?P<step>\d+)"), "load", "start"),
    (re.compile(r"Finished (?:saving|staging) the checkpoint|Last step checkpoint completed"),
     "save_end", None),
    (re.compile(r"(?:Saving|Staging) the checkpoint\b"), "save_start", None),
    (re.compile(r"Finished loading the checkpoint"), "load", "finish"),
    (re.compile(r"Loading the checkpoint (?:at step (?P<step>\d+)|from (?P<path>\S+?))\.?\s*$"),
     "load", "start"),
    (re.compile(r"Saving model checkpoint to (?P<path>\S+)"), "save_start", None),
    # DeepSpeed (runtime/checkpoint_engine/torch_checkpoint_engine.py, by version)
    (re.compile(r"Checkpoint (?P<path>global_step(?P<step>\d+)) is (?:begin to save|about to be "
                r"saved)"), "save_start", None),
    (re.compile(r"Checkpoint (?P<path>global_step(?P<step>\d+)) is ready now"), "save_end", None),
    (_HF_LOAD, "load", "start"),
    # DeepSpeed torch_checkpoint_engine.py load(), each file of a tag, on every rank:
    #   [Torch] Loading checkpoint from {path}...   /   [Torch] Loaded checkpoint from {path}.
    (re.compile(r"\[Torch\] Loading checkpoint from (?P<path>\S+?)(?:\.\.\.)?\s*$"),
     "load", "start"),
    (re.compile(r"\[Torch\] Loaded checkpoint from (?P<path>\S+?)\.?\s*$"), "load", "finish"),
    # HF Trainer: integrations/deepspeed.py deepspeed_load_checkpoint ("Attempting to resume
    # from {checkpoint_path}"), trainer.py ("  Continuing training from global step {}")
    (re.compile(r"Attempting to resume from (?P<path>\S+/\S+?)\s*$"), "load", "start"),
    (re.compile(r"Continuing training from global step (?P<step>\d+)"), "load", "finish"),
    # Lightning checkpoint_connector.py: "Restoring states from the checkpoint path at {}",
    # then "Restored all states from the checkpoint at {}" (fit; "Loaded model weights from
    # the checkpoint at" is validate/test/predict, no training resumed)
    (re.compile(r"Restoring states from the checkpoint path at (?P<path>\S+)"), "load", "start"),
    (re.compile(r"Restored all states from the checkpoint at (?P<path>\S+)"), "load", "finish"),
]
_STEP_IN_PATH = re.compile(r"(?:checkpoint-|step[-_=]?|iter_|global_step)0*(\d+)")
# a folder of the path named for its step, for a file named for none
# (``checkpoint-5/global_step5/mp_rank_00_model_states.pt``)
_STEP_DIR = re.compile(r"(?:^|/)(?:checkpoint-|step[-_]?|iter_|global_step)0*(\d+)(?=/)")


def checkpoint(body: str) -> tuple[str, str | None, int | None, str | None] | None:
    """(kind, phase, step, path) of a checkpoint line; the step from the path
    (``checkpoint-500``, ``step-100``, ``iter_0000100``) when the text does not say it."""
    if "heckpoint" not in body and "Loading model from" not in body and (
            "global step" not in body and "resume from" not in body):
        return None
    for rx, kind, phase in _CKPT:
        m = rx.search(body)
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
        if rx is _HF_LOAD and step is None and "/" not in (path or ""):
            return None  # "Loading model from scratch" and the like
        return kind, phase, step, path
    return None


# -- failures ----------------------------------------------------------------------------------
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:, ?(.*))?")
_CANCEL = re.compile(r"\*\*\* (JOB|STEP) (\S+) ON (\S+) CANCELLED AT (\S+)"
                     r"(?: DUE TO ([A-Z ]+?))?(?:,[^*]*)? \*\*\*")
_SRUN = re.compile(r"srun: error: ([^\s:]+): (tasks? [^:]+): (.+)")
_DS_KILL = re.compile(r"sigkill_handler\] Killing subprocess (\d+)")
_CTLD_SIGNAL = re.compile(r"_job_complete: (JobId=\d+) WTERMSIG (\d+)")


def _teardown(body: str) -> Failure | None:
    """Launchers and Slurm ending a job, in the forms torchrun's and srun's lines do not
    cover: DeepSpeed's ``[launch.py:318:sigkill_handler] Killing subprocess 80`` and
    slurmctld's ``_job_complete: JobId=127441 WTERMSIG 9``. Teardown, never a cause."""
    if "Killing subprocess" in body and (m := _DS_KILL.search(body)):
        detail = f"launcher killed pid {m.group(1)} (DeepSpeed)"
        return sig.LAUNCHER_SIGNAL, detail, None, None, None, None, None
    if "WTERMSIG" in body and (m := _CTLD_SIGNAL.search(body)):
        detail = f"{m.group(1)} ended by signal {m.group(2)} (slurmctld)"
        return sig.SLURM_TASK_KILLED, detail, None, None, None, None, None
    return None


# mm/oom_kill.c __oom_kill_process: "%s: Killed process %d (%s) total-vm:%lukB, ..." with
# "Out of memory" or "Memory cgroup out of memory" (and the oom_kill_allocating_task form)
_OOM_KILL = re.compile(r"(?:Memory cgroup out of memory|Out of memory(?: \([a-z_]+\))?): "
                       r"Killed process (\d+) \(([^)]{1,64})\)")
_SRUN_NODE = re.compile(r"(?:srun|salloc): error: Node failure on (\S+)")
_NCCL_HDR = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*):\d+:\d+ \[(\d+)\] (?=NCCL )")
_RULES = [  # (kind, keywords, regex) in priority order: the specific cause before the symptom
    (
        sig.NCCL_TIMEOUT,
        ("atchdog", "Heartbeat", "Timeout at", "blocking wait", "dump signal"),
        r"\] Watchdog caught coll|Watchdog caught collective operation timeout"
        r"|watchdog got stuck|Heartbeat monitor timed out|Timeout at NCCL work"
        r"|timed out in blocking wait|dump signal due to a collective timeout",
    ),
    (sig.GPU_OFF_BUS, ("off the bus",), r"fallen off the bus"),
    (sig.GSP_TIMEOUT, ("GSP",), r"GSP RM heartbeat timed out|GSP Timeout"),
    (sig.GPU_INIT_FAILED, ("RmInitAdapter",), r"RmInitAdapter failed"),
    (  # libnvidia-container's helper asked NVML and the driver never answered (signals.py)
        sig.GPU_DRIVER_TIMEOUT,
        ("nvidia-container-cli",),
        r"nvidia-container-cli(?:\.real)?: \w+ error: driver (?:rpc )?error: timed out",
    ),
    (
        sig.IB_ERROR,
        ("IB", "ibv_", "retry counter", "ink"),
        r"NET/IB.*(?:[Ee]rror|failed|status=[1-9])|ibv_\w+.*fail|IBV_WC_"
        r"|transport retry counter exceeded|[Ll]ink (?:is )?[Dd]own",
    ),
    (sig.CUDA_ECC, ("ECC",), r"uncorrectable ECC error"),
    (sig.CUDA_ILLEGAL_ADDRESS, ("llegal",), r"illegal (?:memory access|address)|IllegalAddress"),
    (sig.CUDA_LAUNCH_FAILURE, ("launch failure",), r"unspecified launch failure"),
    (
        sig.CUDA_OOM,
        ("out of memory", "OutOfMemory"),
        r"CUDA out of memory|OutOfMemoryError|(?i:cuda) (?:error: |failure ')out of memory",
    ),
    (  # a CUDA call NCCL made failed, of no kind above: say so, never "the network"
        sig.CUDA_ERROR,
        ("uda failure", "unhandled cuda", "UnhandledCuda", "cudaError"),
        r"Cuda failure \d+|unhandled cuda error|ncclUnhandledCudaError|cudaError[A-Z]\w*",
    ),
    (  # NCCL's own word that it was called or configured wrongly (nccl.h's result codes)
        sig.NCCL_USAGE,
        ("nvalid", "no algorithm"),
        r"ncclInvalid(?:Usage|Argument)|NCCL error[^,]*, invalid (?:usage|argument)"
        r"|no algorithm/protocol available",
    ),
    (
        sig.NCCL_ERROR,
        ("NCCL", "nccl", "unhandled", "emote process"),
        r"NCCL WARN|NCCL error|nccl[A-Z][A-Za-z]*Error|unhandled system error"
        r"|[Rr]emote process exited",
    ),
    (
        sig.NAN_LOSS,
        ("nan", "NaN", "NAN", "inf", "Inf", "INF"),
        r"(?i:loss (?:is|=|:) *[-+]?(?:nan|inf)\b|found (?:nan|inf)\b)",
    ),
]
_RULES_RE = [(kind, keys, re.compile(rx)) for kind, keys, rx in _RULES]
_DUE = {None: sig.SLURM_CANCELLED, "NODE FAILURE": sig.SLURM_NODE_FAILURE,
        "TIME LIMIT": sig.SLURM_TIME_LIMIT, "PREEMPTION": sig.SLURM_PREEMPTED}
_CUDA_START = re.compile(r"CUDA error|Cuda failure|cudaError|torch\.\w*OutOfMemoryError")

# (kind, detail, xid, pci, host, gpu, time text)
Failure = tuple[str, str, int | None, str | None, str | None, int | None, str | None]
# Megatron-LM training.py (print_datetime): "[exiting program at iteration 1000] datetime: ...",
# "[exiting program after 230.0 minutes] datetime: ...", "exiting program after receiving
# SIGTERM."; Hugging Face trainer.py and TorchTitan train.py: "Training completed"; Megatron-LM
# at the end of its planned steps: "[after training is done] datetime: ..."; Lightning's fit
# loop: "`Trainer.fit` stopped: `max_steps=1000` reached."
_PLANNED_EXIT = re.compile(r"exiting program (?:at iteration \d+|after [^\]]+?)(?=\]|\.?\s*$)"
                           r"|Training completed|after training is done"
                           r"|`Trainer\.fit` stopped: `max_(?:steps|epochs)=\d+` reached")


def failure(body: str) -> Failure | None:
    """The failure signature a line carries, if any."""
    if "NCCL INFO" in body:
        return None
    if ("exiting program" in body or "Training completed" in body or "training is done" in body
            or "Trainer.fit" in body) and (
        m := _PLANNED_EXIT.search(body)
    ):
        return sig.PLANNED_EXIT, m.group(0), None, None, None, None, None
    if ("exitcode" in body or "signal" in body or "Signal" in body) and (f := launcher(body)):
        return f
    if "Xid" in body and (m := _XID.search(body)):
        rest = (m.group(3) or "").strip()
        detail = f"Xid {m.group(2)}: {rest}" if rest else f"Xid {m.group(2)}"
        return sig.XID, detail[:sig.MAX_DETAIL_CHARS], int(m.group(2)), m.group(1), None, None, \
            None
    if "CANCELLED AT" in body and (m := _CANCEL.search(body)):
        what, job, host, at, due = m.groups()
        kind = _DUE.get(due, sig.SLURM_CANCELLED)
        detail = f"{what} {job} CANCELLED" + (f" DUE TO {due}" if due else "")
        return kind, detail, None, None, host, None, at
    if f := _teardown(body):
        return f
    if "Killed process" in body and (m := _OOM_KILL.search(body)):
        return sig.HOST_OOM, m.group(0), None, None, None, None, None
    if "srun: error" in body or "salloc: error" in body:
        if m := _SRUN_NODE.search(body):
            return sig.SLURM_NODE_FAILURE, f"Node failure on {m.group(1)}", None, None, \
                m.group(1), None, None
        if m := _SRUN.search(body):
            detail = f"{m.group(2).strip()}: {m.group(3).strip()}"[: sig.MAX_DETAIL_CHARS]
            return sig.SLURM_TASK_KILLED, detail, None, None, m.group(1), None, None
        return None
    for kind, keys, rx in _RULES_RE:
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


# -- journald's JSON export ---------------------------------------------------------------------
_EPOCH = datetime(1970, 1, 1)


def journal_json(raw: str) -> str | None:
    """A ``journalctl -o json`` entry as the line ``journalctl -o short-iso`` would print for it
    (``2026-03-01T09:53:20.123456+00:00 node-7 kernel: NVRM: Xid ...``), so the recognisers read
    it like any journal line; None for any other line. Fields as systemd's JSON export writes
    them (journalctl(1), "Journal Export Formats"): ``__REALTIME_TIMESTAMP`` in microseconds
    since the epoch (a string), ``_HOSTNAME``, ``_TRANSPORT`` ``kernel`` for the kernel ring
    buffer, ``SYSLOG_IDENTIFIER``, and ``MESSAGE``, an array of bytes when it is not UTF-8."""
    if not raw.startswith("{") or '"__REALTIME_TIMESTAMP"' not in raw:
        return None
    try:
        e = json.loads(raw)
        t = _EPOCH + timedelta(microseconds=int(e["__REALTIME_TIMESTAMP"]))
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    msg = e.get("MESSAGE")
    if isinstance(msg, list):
        data = bytes(b for b in msg if isinstance(b, int) and 0 <= b < 256)
        msg = data.decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    kernel = e.get("_TRANSPORT") == "kernel" or e.get("SYSLOG_IDENTIFIER") == "kernel"
    ident = "kernel" if kernel else str(e.get("SYSLOG_IDENTIFIER") or "journal")
    host = e.get("_HOSTNAME")
    head = f"{t.isoformat()}+00:00"
    return f"{head} {host} {ident}: {msg}" if isinstance(host, str) and host else f"{head} {msg}"


def is_kernel_log(path: str, sample_bytes: int = 16384) -> bool:
    """Whether the file at ``path`` reads as a kernel log (syslog, journal or ``dmesg`` lines
    from the kernel) by its first lines: most of them carry a kernel header or a boot time.
    False for a file that cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(sample_bytes).decode("utf-8", "replace")
    except OSError:
        return False
    lines = [ln for ln in head.splitlines()[:50] if ln.strip()]
    if not lines:
        return False
    kernel = 0
    for ln in lines:
        kind, _, _, is_kernel = stamp(journal_json(ln) or PREFIX.sub("", ln, count=1))
        kernel += bool(is_kernel or kind == "boot")
    return kernel * 2 > len(lines)


# -- file names --------------------------------------------------------------------------------
_KERNEL_WORD = r"(?:kern|kernel|syslog|dmesg|messages|journal)"
_HOST_NAMED = re.compile(
    r"(?P<a>[A-Za-z0-9][A-Za-z0-9.-]*?)[-_.]" + _KERNEL_WORD + r"(?:[-_.].*)?"
    r"|" + _KERNEL_WORD + r"[-_.](?P<b>[A-Za-z0-9][A-Za-z0-9.-]*)"
)
_EXTENSION = re.compile(r"\.(?:gz|xz|zst|bz2|log|txt|out|err|\d+)$")


# a folder named for a node: letters and digits (node-7, gpu012), not "log" or "2026-03-01",
# nor a job's, a run's or a temporary folder (job-81234, slurm-81234, run2, pytest-3, tmp1)
_HOST_DIR = re.compile(r"(?!(?i:job|slurm|run|pytest|tmp|temp|logs?|out|output|results?|data"
                       r"|step|iter|epoch|checkpoint|ckpt|attempt|day|backup)[-_.]?[0-9])"
                       r"(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9][A-Za-z0-9.-]*")


def host_from_filename(name: str) -> str | None:
    """The node a kernel log belongs to, from names like ``node-7-kern.log``,
    ``node-7.dmesg.txt`` or ``dmesg-node-7.log``, or from the folder of a log named only for
    what it is (``node-7/kern.log``, ``gpu012/dmesg.txt``: logs gathered one folder per node;
    a folder name with letters and digits, so ``/var/log/kern.log`` names none); None for
    names that name no node (``kern.log.1``, ``syslog``, ``slurm-81234.out``)."""
    path = PurePath(name)
    base = path.name
    while (m := _EXTENSION.search(base)) and m.start() > 0:
        base = base[: m.start()]
    m = _HOST_NAMED.fullmatch(base)
    if m:
        return m.group("a") or m.group("b")
    if re.fullmatch(_KERNEL_WORD, base) and _HOST_DIR.fullmatch(folder := path.parent.name):
        return folder
    return None


def pci_key(pci: str) -> str:
    """``00000000:3B:00.0`` (nvidia-smi) and ``0000:3b:00`` (NVRM) as one key: ``0000:3b:00``."""
    parts = pci.lower().split(".")[0].split(":")
    try:
        dom, bus, dev = (int(p, 16) for p in (["0", *parts] if len(parts) == 2 else parts[-3:]))
    except ValueError:
        return pci.lower()
    return f"{dom:04x}:{bus:02x}:{dev:02x}"
