"""Checkpoint-interval and ETTR models: pure arithmetic, no data access, no presentation.

Every time is in **seconds** and every rate in **failures per second** unless a name says
otherwise (``failures_per_node_day``). Inputs that make a model meaningless (a negative cost, a
non-positive MTBF or interval) raise ``ValueError`` naming the argument; callers that may lack a
measurement (no failure seen yet) pass ``None`` where documented and get ``None`` back.

Sources:

- Young, "A first order approximation to the optimum checkpoint interval", CACM 1974:
  ``T = sqrt(2·C·M)`` with checkpoint cost ``C`` and mean time between failures ``M``.
- Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS
  2006: first order ``T = sqrt(2·C·(M + R))`` with restart time ``R``; and the perturbation
  solution ``T = sqrt(2·C·M)·[1 + (1/3)·sqrt(C/(2M)) + (1/9)·(C/(2M))] − C`` for ``C < 2M``,
  ``T = M`` otherwise, which stays accurate when ``C`` is comparable to ``M``.
- Kokolis et al., "Revisiting Reliability in Large-Scale ML Research Clusters", HPCA 2025:
  expected ETTR ``≈ (1 − N·r·(u0 + Δt/2)) / (1 + w/Δt)``, ``N`` nodes, ``r`` failures per
  node-day, ``u0`` restart overhead, ``Δt`` checkpoint interval, ``w`` blocking write time.
  The numerator is the share of time not lost to failures (each costs a restart plus, on
  average, half an interval of recomputation); the denominator stretches the rest by the
  blocking writes. ``N·r`` and the times must share one time unit; here ``r`` is converted
  from per node-day to per second.

All intervals ``T``/``Δt`` are compute time between checkpoints (the blocking write excluded),
as in Young and Daly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DAY_S = 86400.0


def _non_negative(name: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Young's optimal compute time between checkpoints (s): ``sqrt(2·C·M)``.

    ``cost_s``: time one checkpoint costs the job (s, >= 0); ``mtbf_s``: mean time between
    failures of the job (s, > 0; ``inf`` gives ``inf``)."""
    return math.sqrt(2.0 * _non_negative("cost_s", cost_s) * _positive("mtbf_s", mtbf_s))


def daly_interval_s(cost_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Daly's first-order optimum (s): ``sqrt(2·C·(M + R))``, ``R`` the restart time (s)."""
    c = _non_negative("cost_s", cost_s)
    m = _positive("mtbf_s", mtbf_s)
    return math.sqrt(2.0 * c * (m + _non_negative("restart_s", restart_s)))


def daly_higher_order_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (s), accurate when the checkpoint cost ``C`` is comparable
    to the MTBF ``M``: ``sqrt(2CM)·[1 + sqrt(C/2M)/3 + (C/2M)/9] − C`` for ``C < 2M``, else
    ``M`` (checkpointing cannot pay for itself; write once per MTBF). The restart time does
    not move this optimum, only the expected run time."""
    c = _non_negative("cost_s", cost_s)
    m = _positive("mtbf_s", mtbf_s)
    if c >= 2.0 * m:
        return m
    if math.isinf(m):
        return math.inf
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def failures_per_node_day(unexpected: int, nodes: int, wall_s: float) -> float:
    """Measured failure rate ``r`` (failures per node-day) of a job of ``nodes`` nodes that saw
    ``unexpected`` interruptions in ``wall_s`` seconds of wall time."""
    if unexpected < 0:
        raise ValueError(f"unexpected must be >= 0, got {unexpected!r}")
    return unexpected / (_positive("nodes", nodes) * _positive("wall_s", wall_s) / DAY_S)


def job_mtbf_s(nodes: int, failures_per_node_day: float) -> float:
    """Job mean time between failures (s): ``1 / (N·r)``; ``inf`` when ``r`` is 0."""
    rate = _positive("nodes", nodes) * _non_negative("failures_per_node_day", failures_per_node_day)
    return math.inf if rate == 0 else DAY_S / rate


def expected_ettr(
    nodes: int,
    failures_per_node_day: float,
    restart_s: float,
    interval_s: float,
    write_s: float,
) -> float:
    """Kokolis et al. expected ETTR (0..1) for a job of ``nodes`` nodes failing at
    ``failures_per_node_day`` per node, ``restart_s`` of restart overhead per failure (``u0``,
    s), a checkpoint every ``interval_s`` of compute (``Δt``, s) and ``write_s`` of blocking
    write per checkpoint (``w``, s). Clamped at 0: past that point the job never progresses."""
    lam = _positive("nodes", nodes) * _non_negative("failures_per_node_day", failures_per_node_day)
    lam /= DAY_S  # failures per second
    dt = _positive("interval_s", interval_s)
    u0 = _non_negative("restart_s", restart_s)
    w = _non_negative("write_s", write_s)
    return max((1.0 - lam * (u0 + dt / 2.0)) / (1.0 + w / dt), 0.0)


def ettr_optimal_interval_s(
    nodes: int, failures_per_node_day: float, restart_s: float, write_s: float
) -> float:
    """The interval (s) that maximises ``expected_ettr``: setting its derivative to zero gives
    ``Δt = −w + sqrt(w² + 2·w·(1 − λ·u0)/λ)`` with ``λ = N·r`` per second; close to Young's
    ``sqrt(2·w·M)`` when ``w`` and ``u0`` are small against the MTBF ``M = 1/λ``. ``inf``
    without failures; ``w = 0`` gives 0 (checkpoint continuously)."""
    lam = _positive("nodes", nodes) * _non_negative("failures_per_node_day", failures_per_node_day)
    lam /= DAY_S
    w = _non_negative("write_s", write_s)
    u0 = _non_negative("restart_s", restart_s)
    if lam == 0:
        return math.inf
    spare = max(1.0 - lam * u0, 0.0)
    return -w + math.sqrt(w * w + 2.0 * w * spare / lam)


def ettr_curve(
    nodes: int,
    failures_per_node_day: float,
    restart_s: float,
    write_s: float,
    intervals_s: Sequence[float],
) -> list[float]:
    """``expected_ettr`` at each interval (s) of ``intervals_s``."""
    return [
        expected_ettr(nodes, failures_per_node_day, restart_s, dt, write_s) for dt in intervals_s
    ]


def log_grid(lo: float, hi: float, n: int = 120) -> list[float]:
    """``n`` values from ``lo`` to ``hi`` (both > 0), evenly spaced on a log scale."""
    lo, hi = _positive("lo", lo), _positive("hi", hi)
    if n < 2 or hi <= lo:
        return [lo]
    step = math.log(hi / lo) / (n - 1)
    return [lo * math.exp(i * step) for i in range(n)]


@dataclass(frozen=True)
class IntervalAdvice:
    """The optimal intervals for a measured job next to its configured one (times in s, ETTR
    0..1). Optima are ``None`` without a measured MTBF (no failure seen)."""

    mtbf_s: float | None
    write_s: float
    restart_s: float
    configured_s: float
    young_s: float | None
    daly_s: float | None  # first order, restart time included
    daly_higher_order_s: float | None
    ettr_optimum_s: float | None  # maximiser of the Kokolis expression
    ettr_configured: float
    ettr_young: float | None
    ettr_optimum: float | None
    gpu_hours_per_day: float | None  # GPU-hours/day the configured interval loses to the optimum


def advise(
    nodes: int,
    gpus: int,
    failures_per_node_day: float,
    restart_s: float,
    write_s: float,
    configured_s: float,
) -> IntervalAdvice:
    """Young, Daly and ETTR-optimal intervals for a job of ``nodes`` nodes (``gpus`` GPUs)
    failing ``failures_per_node_day`` per node, with ``restart_s`` of restart overhead per
    failure and ``write_s`` of blocking write per checkpoint, compared to ``configured_s``."""
    r = _non_negative("failures_per_node_day", failures_per_node_day)
    mtbf = job_mtbf_s(nodes, r)

    def ettr(dt: float) -> float:
        return expected_ettr(nodes, r, restart_s, dt, write_s)

    base = ettr(configured_s)
    if math.isinf(mtbf):
        return IntervalAdvice(
            None, write_s, restart_s, configured_s, None, None, None, None, base, None, None, None
        )
    # A free write (w = 0) puts the optimum at 0 s: evaluate just above it.
    opt = ettr_optimal_interval_s(nodes, r, restart_s, write_s)
    young = young_interval_s(write_s, mtbf)
    best = ettr(max(opt, 1e-6))
    return IntervalAdvice(
        mtbf_s=mtbf,
        write_s=write_s,
        restart_s=restart_s,
        configured_s=configured_s,
        young_s=young,
        daly_s=daly_interval_s(write_s, mtbf, restart_s),
        daly_higher_order_s=daly_higher_order_s(write_s, mtbf),
        ettr_optimum_s=opt,
        ettr_configured=base,
        ettr_young=ettr(max(young, 1e-6)),
        ettr_optimum=best,
        gpu_hours_per_day=max(best - base, 0.0) * gpus * 24.0,
    )
