"""The GPU performance scores NVIDIA Resiliency Extension's PyTorch Lightning straggler callback
logs as training metrics (TensorBoard event files, Lightning's ``metrics.csv``, JSON lines): the
spread of the ranks' scores in each report, stored as run-level ``rank_perf`` rows.

The writer, ``nvidia_resiliency_ext/ptl_resiliency/straggler_det_callback.py``,
``StragglerDetectionCallback._log_gpu_perf_scores`` (with ``enable_ptl_logging=True``), after
``torch.min``/``torch.median``/``torch.max`` of the report's per-rank scores::

    scores_log[f"{score_prefix}/min"] = min_val
    scores_log[f"{score_prefix}/median"] = med_val
    scores_log[f"{score_prefix}/max"] = max_val
    try:
        pl_module.log_dict(scores_log, logger=True, batch_size=1, rank_zero_only=True)

``_log_gpu_scores`` calls it with ``score_prefix="gpu_relative_perf"`` (scores vs the best rank)
and ``"gpu_individual_perf"`` (vs the rank's own best); ``min_val`` and the others stay
``float('nan')`` when the report held no scores. So six names, ``gpu_relative_perf/min``,
``/median``, ``/max`` and the same of ``gpu_individual_perf``, logged from
``on_train_batch_end`` (on step: Lightning adds no ``_step`` suffix). Lightning's
TensorBoardLogger writes each as a scalar tag of that name at the global step; its CSVLogger as
a column of ``metrics.csv`` beside ``epoch`` and ``step`` (no time column).

No rank is logged: which rank is the minimum only the printed report says (``GPU relative
performance:``, read by ``rankperf``). The rows are therefore the run's: ``rank`` NULL,
``source`` ``NVRX_PTL``, ``metric`` the name as logged (``rankperf.GPU_RELATIVE`` + ``/min``),
``score`` the value, ``ts`` the step's time (a file without times, as Lightning's
``metrics.csv``, is dated when it is imported, as its metrics are). Hugging Face transformers
ships no straggler callback (its own callbacks are flow, progress, early stopping and the
experiment trackers'), so no metric of it is read here.

A value that is no number, NaN (NVRx's "no scores"), negative or above ``rankperf.MAX_SCORE`` is
refused with a reason naming it, as are a step's values of one score whose min, median and max
are out of order; the step's other values are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from math import isfinite
from typing import Any

from telemetry.collect.logs.rankperf import GPU_INDIVIDUAL, GPU_RELATIVE, MAX_SCORE, RankPerf

NVRX_PTL = "nvrx-ptl"
STATS = ("min", "median", "max")
NAMES = tuple(f"{score}/{stat}" for score in (GPU_RELATIVE, GPU_INDIVIDUAL) for stat in STATS)


def name_of(key: str) -> str | None:
    """The logged name a TensorBoard tag, CSV column or JSON key is (any case, without a
    ``train/`` or ``training/`` prefix, as ``importers.TB_TAGS``); None for another key."""
    k = key.strip().lower()
    for prefix in ("train/", "training/"):
        k = k.removeprefix(prefix)
    return k if k in NAMES else None


def _score(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} {value!r} is not a number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} {str(value)[:40]!r} is not a number") from None
    if v != v:
        raise ValueError(f"{name} is NaN (NVRx logs NaN when a report held no scores)")
    if not isfinite(v) or v < 0 or v > MAX_SCORE:
        raise ValueError(f"{name} {v:g} is out of range (0 to {MAX_SCORE:g})")
    return v


def step_rows(
    values: Mapping[str, Any], ts: datetime, origin: str
) -> tuple[list[RankPerf], list[str]]:
    """One step's rows from its values ({logged name: value}) and the reasons for the values
    refused."""
    rows, refused = [], []
    for score in (GPU_RELATIVE, GPU_INDIVIDUAL):
        got: dict[str, float] = {}
        for stat in STATS:
            name = f"{score}/{stat}"
            if name in values:
                try:
                    got[stat] = _score(name, values[name])
                except ValueError as exc:
                    refused.append(str(exc))
        ordered = [got[s] for s in STATS if s in got]
        if ordered != sorted(ordered):
            shown = ", ".join(f"{s} {v:g}" for s, v in got.items())
            refused.append(f"{score}: {shown} are not in min <= median <= max order")
            continue
        rows += [RankPerf(ts, None, None, NVRX_PTL, f"{score}/{stat}", v, None, origin)
                 for stat, v in got.items()]  # fmt: skip
    return rows, refused


def frame(rows: Sequence[tuple[str, RankPerf]]) -> Any:
    """(run, row) pairs as a ``rank_perf`` frame."""
    import pandas as pd

    return pd.DataFrame(
        {
            "run_id": [run for run, _ in rows],
            "ts": pd.to_datetime([r.ts for _, r in rows]),
            "rank": pd.array([r.rank for _, r in rows], dtype="Int32"),
            "host": [r.host for _, r in rows],
            "source": [r.source for _, r in rows],
            "metric": [r.metric for _, r in rows],
            "score": pd.array([r.score for _, r in rows], dtype="Float64"),
            "value_ms": pd.array([r.value_ms for _, r in rows], dtype="Float64"),
            "origin": [r.origin for _, r in rows],
        }
    )
