"""The Training page's data: the run's metrics, loss, restarts, checkpoints and spikes."""

from __future__ import annotations

import pandas as pd

from app.data.services import bound, store
from telemetry import queries
from telemetry.queries import TimeRange
from telemetry.queries import training as trainq


def train_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    """The run's metrics in the range, with its restarts marked (``mark_restarts``)."""
    return trainq.with_restarts(store(), run_id, queries.train_series(store(), run_id, tr))


def loss_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    """The run's loss in the range (``LOSS_COLS``), with its restarts marked."""
    return trainq.with_restarts(store(), run_id, queries.loss_series(store(), run_id, tr))


overlay_series = bound(trainq.overlay_series)
time_of_steps = bound(trainq.time_of_steps)
run_events = bound(trainq.run_events)
checkpoint_marks = bound(trainq.checkpoint_marks)
tokens_per_step = bound(trainq.tokens_per_step)
loss_spikes = bound(trainq.loss_spikes)
