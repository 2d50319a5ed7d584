"""PyTorch Lightning: its training bar (``callbacks/progress/tqdm_progress.py``), its checkpoint
restores (``checkpoint_connector.py``) and the fit loop's planned end."""

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

# BAR_FORMAT "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}
# {postfix}]", described "Epoch E":
#   Epoch 0:  42%|████▏     | 5/12 [00:02<00:02,  2.34it/s, v_num=0, train_loss=0.340]
_PL_BAR = re.compile(r"Epoch (\d+): +\d{1,3}%\|[^|]*\| *(\d+)/(\d+) \[(?:(\d+):)?(\d+):(\d\d)<"
                     r"[^\]]*\]")
_PL_LOSS = re.compile(r"[ ,](?:train_)?loss(?:_step)?=([-+]?[0-9.]+(?:e[-+]?\d+)?)")
# the fit loop: "`Trainer.fit` stopped: `max_steps=1000` reached."
_PLANNED_EXIT = re.compile(r"`Trainer\.fit` stopped: `max_(?:steps|epochs)=\d+` reached")


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
            int(h or 0) * 3600 + int(mm) * 60 + int(ss), to_float(loss.group(1)) if loss else None,
            end)  # fmt: skip


def _planned_exit(body: str) -> Failure | None:
    if m := _PLANNED_EXIT.search(body):
        return sig.PLANNED_EXIT, m.group(0), None, None, None, None, None
    return None


FORMAT = LineFormat(
    name="lightning",
    prefilter=(r"%\|", r"the checkpoint", r"Trainer\.fit` stopped"),
    checkpoint_keys=("heckpoint",),
    checkpoints=(
        # "Restoring states from the checkpoint path at {}", then "Restored all states from the
        # checkpoint at {}" (fit; "Loaded model weights from the checkpoint at" is validate,
        # test or predict: no training resumed)
        CheckpointRule(170, re.compile(r"Restoring states from the checkpoint path at "
                                       r"(?P<path>\S+)"), "load", "start"),
        CheckpointRule(180, re.compile(r"Restored all states from the checkpoint at "
                                       r"(?P<path>\S+)"), "load", "finish"),
    ),
    failures=(Keyed(12, "Trainer.fit", _planned_exit),),
)
