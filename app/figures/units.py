"""How a quantity reads on every page: durations, bytes and GPU-hours, each with the precision
its size needs (a 70 s MTBF of a short job read "0.0 h" on one page and "70 s" on another)."""

from __future__ import annotations

import math

import pandas as pd


def fmt_duration(seconds: float | None) -> str:
    """``42 s``, ``7.9 min``, ``3.1 h``, ``2.4 d``; an en dash when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def fmt_bytes(n: float | None) -> str:
    """Decimal units, as storage bandwidth is quoted: ``74.9 GB``, ``4.33 TB``, ``415 kB``
    (a log-only run's small test checkpoints read "415069 B" before)."""
    if n is None or not math.isfinite(n):
        return "–"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_gpu_hours(x: float | None) -> str:
    """``1,234.5``, ``2.5``, ``0.034`` (two significant digits under 1, so a known small loss
    never reads as 0.0); ``0`` only for nothing lost; an en dash when unknown."""
    if x is None or not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    if abs(x) < 0.95:
        return f"{x:.2g}"
    return f"{x:,.1f}"


def rounded(values: pd.Series, digits: int) -> pd.Series:
    """``values`` rounded to ``digits`` decimals, except that a value the rounding would make 0
    keeps two significant digits (a short job's 0.034 GPU-hours lost, a small checkpoint's
    0.00028 GB/s, are not "0"); NaN stays NaN."""
    values = pd.Series(values, dtype=float)
    out = values.round(digits)
    hidden = (out == 0) & (values != 0) & values.notna()
    if hidden.any():
        out = out.where(~hidden, values.map(lambda v: float(f"{v:.2g}")))
    return out


def fmt_count(n: float | None) -> str:
    """``12.3 B``, ``1.3 M``, ``48 K``, ``512``: a count such as tokens at the scale it has (a
    short run's 1.3 M tokens read "0.0 B"); an en dash when unknown."""
    if n is None or not math.isfinite(n):
        return "–"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f}"


def fmt_percent(fraction: float | None) -> str:
    """``41.2 %``, and two significant digits under 1 % (a CPU job's MFU of 0.01 % read "0.0 %");
    ``0 %`` only for none; an en dash when unknown."""
    if fraction is None or not math.isfinite(fraction):
        return "–"
    pct = fraction * 100
    if pct == 0:
        return "0 %"
    return f"{pct:.2g} %" if abs(pct) < 0.95 else f"{pct:.1f} %"
