"""The Checkpoints page's data: tiers, restores, the interval models and the what-if."""

from __future__ import annotations

from typing import Any

import pandas as pd

from app.data.services import bound, store
from app.data.view import mapping, number
from telemetry.metrics import goodput as good
from telemetry.metrics import summary as run_figures
from telemetry.queries import TimeRange, run_time
from telemetry.queries import checkpoints as ckq
from telemetry.queries import outliers as outq
from telemetry.queries.checkpoints import WhatIf
from telemetry.queries.slow_ranks import EWMA_ALPHA, SLOW_SCORE
from telemetry.reliability import IntervalAdvice

run_ended = bound(run_time.has_ended)
tier_stats = bound(ckq.tier_stats)
restores = bound(ckq.restores)
checkpoint_timeline = bound(ckq.timeline)


def model_inputs(
    run_id: str, tr: TimeRange, tiers: pd.DataFrame | None = None
) -> dict[str, Any] | None:
    """The measured inputs of the interval models over the range (``ModelInputs`` as a dict),
    None outside the run; ``tiers`` the range's ``tier_stats`` (read here without: one
    statement, shared when the page's own read asks at once)."""
    m = ckq.model_inputs(store(), run_id, tr, tier_stats(run_id, tr) if tiers is None else tiers)
    return None if m is None else m.as_dict()


def checkpoint_model(
    run_id: str, tr: TimeRange, tiers: pd.DataFrame | None = None
) -> dict[str, Any] | None:
    """The model as the page keeps it in the browser: ``model_inputs``' dict and the run (its
    prices price the what-if); None without inputs."""
    inputs = model_inputs(run_id, tr, tiers)
    return None if inputs is None else {**inputs, "run_id": run_id}


def model_interval_s(model: Any) -> float | None:
    """The interval the advice compares against: the policy's, else the measured spacing."""
    return ckq.model_interval_s(mapping(model))


def interval_advice(model: Any) -> IntervalAdvice | None:
    """Young, Daly and ETTR-optimal intervals next to the configured one; None without a
    model, an interval or a measured write time."""
    return ckq.interval_advice(mapping(model))


def what_if_defaults(model: Any) -> tuple[float | None, float | None]:
    """What the empty what-if inputs show: the interval (min) and the blocking write (s), each
    rounded to two decimals; None where the model has no (or a zero) value."""
    m = mapping(model)
    configured, measured = number(model_interval_s(m)), number((m or {}).get("write_s"))
    return (
        round(configured / 60.0, 2) if configured else None,
        round(measured, 2) if measured else None,
    )


def _typed(value: Any, default: float, positive: bool) -> float:
    """An input's value, or ``default`` when empty, invalid, or the prefilled rounding of it."""
    value = number(value)
    if value is None or value < 0 or (positive and value == 0):
        return default
    return default if round(default, 2) == value else float(value)


def what_if(model: Any, interval_min: Any, write_s: Any) -> WhatIf | None:
    """The projected ETTR for the typed interval (min) and write time (s) next to the
    configured ones; empty or invalid inputs mean the configured value. None when the model
    has nothing to project (no checkpoints in the range)."""
    m = mapping(model)
    if m is None:
        return None
    typed = number(write_s)
    if m.get("write_s") is None and typed is not None and typed >= 0:
        # no measured blocking time (a directory scan sees writes, not stalls): the one the
        # user entered is the run's, as the hint asks (#37, 3)
        m = {**m, "write_s": float(typed), "write_entered": True}
    base = ckq.interval_advice(m)
    if base is None:
        return None
    interval_s = _typed(interval_min, base.configured_s / 60.0, positive=True) * 60.0
    return ckq.what_if(m, interval_s, _typed(write_s, base.write_s, positive=False))


def measured_ettr(run_id: str) -> str | None:
    """The run's measured ETTR (its summary's) and goodput (its whole span) beside the model's,
    and why they differ: "measured over the run: 81.2 %, goodput 80.1 % (productive time over
    wall time); the model ..."; None without an ETTR. Read beside the page's cards, not inside
    them: the goodput total is a third of their cold time, for one line of text."""
    ettr = number(run_figures.measured_ettr(store(), run_id))
    if ettr is None:
        return None
    block = good.goodput(store(), run_id, detail=False)
    goodput_ = number(block["goodput"]) if block else None
    g = "" if goodput_ is None else f", goodput {goodput_ * 100:.1f} %"
    return (f"measured over the run: {ettr * 100:.1f} %{g} (productive time over wall time); the "
            "model (Kokolis et al.) expects failures at random at the measured rate, each "
            "costing the restart time and on average half an interval of redone work, and "
            "every checkpoint its blocking write")  # fmt: skip


def goodput(run_id: str, tr: TimeRange) -> dict[str, Any] | None:
    """The run's goodput block over the range, with its days and its hours' step time
    (``telemetry.metrics.goodput``)."""
    return good.goodput(store(), run_id, tr, steps=True)


SLOW_RANK_COLUMNS = {
    "rank": "Rank", "host": "Host", "score": "Score now (1 = reference rank)",
    "worst": "Worst score", "pattern": "Pattern", "windows": "Reports flagged",
    "source": "Source", "gpu_note": "GPU note",
}  # fmt: skip
NO_RANK_REPORTS = (
    "Slow ranks: no per-rank timing report in this range. Megatron-LM's timers with "
    "--timing-log-option all ('times across ranks (ms):') or minmax, or the NVIDIA Resiliency "
    "Extension's straggler callback ('GPU relative performance:'), in an imported or followed "
    "job log, name the slowest ranks here."
)


def slow_ranks(block: dict[str, Any] | None) -> tuple[pd.DataFrame, str]:
    """The goodput block's slow ranks as a table's frame (columns ``SLOW_RANK_COLUMNS``) and a
    one-line note: which reports were read, or which would fill the table."""
    rows = (block or {}).get("slow_ranks") or []
    frame = pd.DataFrame(rows, columns=list(SLOW_RANK_COLUMNS))
    reports = int((block or {}).get("rank_reports") or 0)
    if not reports:
        return frame, NO_RANK_REPORTS
    spread = [e for e in (block or {}).get("rank_spread") or [] if e["slow_windows"]]
    if frame.empty and spread:  # only the spread was logged: a slow rank, unnamed
        e = spread[0]
        return frame, (f"Slow ranks: {reports:,} reports read; the logged {e['metric']} min "
                       f"fell to {e['worst_min']:.2f} (below {SLOW_SCORE}) in "
                       f"{e['slow_windows']:,} of them, but metrics name no rank: the job "
                       "log's 'GPU relative performance:' report does.")  # fmt: skip
    if frame.empty:
        return frame, (f"Slow ranks: {reports:,} per-rank timing reports read; no rank below "
                       f"{SLOW_SCORE:.0%} of the reference rank's speed.")  # fmt: skip
    frame["pattern"] = [
        f"{p} (EWMA {e:.2f})" if e is not None else p
        for p, e in zip(frame["pattern"], [r.get("ewma") for r in rows], strict=True)
    ]
    return frame, (f"Slow ranks: from {reports:,} per-rank timing reports; chronic when the "
                   f"running score (EWMA, alpha {EWMA_ALPHA}) stays below "
                   f"{SLOW_SCORE}, one-off when flagged in one report only.")  # fmt: skip


def straggler_note(tr: TimeRange | None, ranks: pd.DataFrame) -> str:
    """Why the GPUs page's stragglers (from GPU telemetry: SM clock while busy) may be missing
    from the slow ranks (the job's own per-rank timings), naming those not among them: the
    demo's banner and GPUs page named a straggler the slow ranks never mentioned (#57). ""
    when there is none to explain."""
    if tr is None:
        return ""
    out = outq.outliers(store(), tr)
    slow = out[(out["reason"] == "straggler") & ~out["host"].isin(ranks.get("host", []))]
    if slow.empty:
        return ""
    names = ", ".join(f"{h} GPU {int(g)}" for h, g in
                      zip(slow["host"].head(3), slow["gpu"].head(3), strict=True))  # fmt: skip
    more = f" and {len(slow) - 3:,} more" if len(slow) > 3 else ""
    one = len(slow) == 1
    return (f" The GPUs page's straggler{'' if one else 's'} ({names}{more}: SM clock while "
            f"busy below the fleet's) {'comes' if one else 'come'} from GPU telemetry, not the "
            "job's timings: "
            "a GPU is a slow rank here only when a per-rank timing report says so.")  # fmt: skip


top_badput = good.top_badput


def what_if_refused(interval_min: Any, write_s: Any) -> str | None:
    """Why a typed what-if value is not used (the configured one is shown instead), or None."""
    interval, write = number(interval_min), number(write_s)
    if interval_min not in (None, "") and (interval is None or interval <= 0):
        return "a checkpoint interval must be more than 0 min: the configured one is shown"
    if write_s not in (None, "") and (write is None or write < 0):
        return "a blocking write cannot be negative: the measured one is shown"
    return None
