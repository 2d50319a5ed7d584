"""Money: what a run's interruptions, checkpoint stalls and energy cost at a price per GPU-hour
and per kWh. Pure arithmetic over figures measured elsewhere (``telemetry.metrics.summary``); every
amount travels with the prices it used and where they came from, because a price is an
assumption the operator sets (``--gpu-hour-price``, ``--kwh-price``, ``--run-price``), not a
measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULT_GPU_HOUR_USD = 2.00  # an assumption shown as such: set your contract's
DEFAULT_KWH_USD = 0.10


@dataclass(frozen=True)
class Prices:
    gpu_hour: float  # USD per GPU-hour
    kwh: float  # USD per kWh
    source: str  # "default" | "settings" | "run"

    def text(self) -> str:
        return f"${self.gpu_hour:,.2f}/GPU-h, ${self.kwh:,.2f}/kWh ({self.source})"

    def per_gpu_hour(self, source: bool = True) -> str:
        """``at $2.00/GPU-h (default)``: what a money figure beside GPU-hours assumed."""
        return f"at ${self.gpu_hour:,.2f}/GPU-h" + (f" ({self.source})" if source else "")


@dataclass(frozen=True)
class PriceBook:
    """The prices of every run: the command line's (or the defaults) unless a run has its own."""

    default: Prices
    runs: dict[str, Prices]

    def for_run(self, run_id: str | None) -> Prices:
        return self.runs.get(run_id or "", self.default)


def price_book(
    gpu_hour: float | None, kwh: float | None, run_prices: list[str] | None
) -> PriceBook:
    """From settings: ``run_prices`` entries are ``RUN=USD_PER_GPU_HOUR[/USD_PER_KWH]``;
    ValueError naming the entry for anything else."""
    given = gpu_hour is not None or kwh is not None
    default = Prices(
        DEFAULT_GPU_HOUR_USD if gpu_hour is None else float(gpu_hour),
        DEFAULT_KWH_USD if kwh is None else float(kwh),
        "settings" if given else "default",
    )
    runs = {}
    for entry in run_prices or []:
        run, sep, rest = entry.partition("=")
        gh, _, kw = rest.partition("/")
        try:
            p = Prices(float(gh), float(kw) if kw else default.kwh, "run")
        except ValueError:
            p = None
        finite = p is not None and all(math.isfinite(x) and x >= 0 for x in (p.gpu_hour, p.kwh))
        if not sep or not run or not finite:
            raise ValueError(
                f"--run-price {entry[:100]!r}: use RUN=USD_PER_GPU_HOUR or "
                "RUN=USD_PER_GPU_HOUR/USD_PER_KWH (for example llama-405b=2.40/0.08)"
            )
        runs[run] = p
    return PriceBook(default, runs)


def _usd(gpu_hours: float | None, price: float) -> float | None:
    return None if gpu_hours is None else round(gpu_hours * price, 2)


def run_cost(summary: dict[str, Any], prices: Prices) -> dict[str, Any]:
    """The money of one run's ``summary`` (``metrics.summary.run_summary``): lost GPU-hours
    (downtime and rework of its interruptions), checkpoint blocking time and GPU energy. A
    figure whose inputs are unknown is None, never 0."""
    gpus = summary.get("gpus")
    i = summary["interruptions"]

    def gpu_hours(hours: float | None) -> float | None:
        return None if hours is None or not gpus else hours * gpus

    blocking = [t["blocking_hours"] for t in summary["checkpoints"].values()]
    known = [b for b in blocking if b is not None]
    save_usd = _usd(gpu_hours(sum(known)) if known else None, prices.gpu_hour)
    good = summary.get("goodput") or {}
    if "saves_timed" in good:  # one definition (#57, 7): the goodput's checkpoint saves, which
        # also count the saves the log times (a logs-only run: null here beside $45 of saves)
        usd = good.get("usd") or {}
        save_usd = usd.get("checkpoint_save") if good["saves_timed"] else None
    kwh = summary.get("energy", {}).get("kwh")
    return {
        "currency": "USD",
        "gpu_hour_usd": prices.gpu_hour,
        "kwh_usd": prices.kwh,
        "prices_from": prices.source,
        "lost_usd": _usd(summary["lost_gpu_hours"], prices.gpu_hour),
        "downtime_usd": _usd(gpu_hours(i["downtime_hours"]), prices.gpu_hour),
        "rework_usd": _usd(gpu_hours(i["rework_hours"]), prices.gpu_hour),
        "checkpoint_blocking_usd": save_usd,
        "energy_usd": None if kwh is None else round(kwh * prices.kwh, 2),
    }


def per_day_usd(ettr_delta: float, gpus: int | None, prices: Prices) -> float | None:
    """Money an ETTR change (0..1) saves (positive) or costs per day of the whole job."""
    if not gpus:
        return None
    return ettr_delta * gpus * 24 * prices.gpu_hour


def money(usd: float | None) -> str:
    """``$12,345`` (``–`` when unknown); cents only under $100."""
    if usd is None:
        return "–"
    sign = "-" if usd < 0 else ""
    return f"{sign}${abs(usd):,.2f}" if abs(usd) < 100 else f"{sign}${abs(usd):,.0f}"
