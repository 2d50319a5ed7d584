"""The Training page's data: the run's metrics, loss, restarts, checkpoints and spikes."""

from __future__ import annotations

from typing import Any

import pandas as pd

from app.data.services import store
from telemetry import queries
from telemetry.cost import money as money  # formatting re-export for the pages
from telemetry.cost import per_day_usd as per_day_usd  # the what-if's money, for the page
from telemetry.queries import TimeRange
from telemetry.queries import training as trainq
from telemetry.queries.failures import LLAMA3_MTBF_H as LLAMA3_MTBF_H  # vocabulary re-export
from telemetry.queries.gpu_node import EXTRA_FIELDS as EXTRA_FIELDS  # vocabulary re-export
from telemetry.queries.gpu_node import NODE_METRICS as NODE_METRICS  # vocabulary re-export
from telemetry.utilization import CLASS_TEXT as CLASS_TEXT  # vocabulary re-export


def train_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    """The run's metrics in the range, with its restarts marked (``mark_restarts``)."""
    return trainq.mark_restarts(queries.train_series(store(), run_id, tr))


def loss_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    """The run's loss in the range (``LOSS_COLS``), with its restarts marked."""
    return trainq.mark_restarts(queries.loss_series(store(), run_id, tr))


def overlay_series(run_id: str, tr: TimeRange, overlay: Any, axis: str) -> dict[str, pd.DataFrame]:
    """The run's series and those of the ``overlay`` runs to compare (same time or steps)."""
    return trainq.overlay_series(store(), run_id, tr, overlay, axis)


def time_of_steps(run_id: str, axis: str, lo: float, hi: float) -> TimeRange | None:
    """The time the run spent on steps (or tokens) ``lo``..``hi`` (a Step-axis zoom)."""
    return trainq.time_of_steps(store(), run_id, axis, lo, hi)


def run_events(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return trainq.run_events(store(), run_id, tr)


def checkpoint_marks(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return trainq.checkpoint_marks(store(), run_id, tr)


def tokens_per_step(run_id: str) -> float:
    return trainq.tokens_per_step(store(), run_id)


def loss_spikes(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return trainq.loss_spikes(store(), run_id, tr)
