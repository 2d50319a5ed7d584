"""A benchmark run's key figures as JSON, so two runs (or two machines) can be compared figure by
figure (``benchmarks/compare.py``; ``make bench`` keeps every run's under ``bench-runs/``).

Each benchmark takes ``--json FILE`` and writes a flat object: figure name -> number. A name
ending in ``_ms`` (or holding ``_ms `` before a label) is a latency in milliseconds; compare.py
does not judge one under its floor (10 ms), where a millisecond of scheduling is a large
fraction. A same-run baseline is a figure too (its name starts with ``baseline_``), and so is a
ratio to it (``ratio_`` or ``x_``): the ratio is what two machines can be compared by."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def add_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", help="write this run's key figures here (benchmarks/compare.py)")


def write(path: str | None, figures: dict[str, float]) -> None:
    """Write ``figures`` to ``path`` (nothing without one); a figure that is not a finite number
    is refused, so a run never records a NaN as if measured."""
    if not path:
        return
    bad = [k for k, v in figures.items() if not isinstance(v, int | float) or not math.isfinite(v)]
    if bad:
        raise ValueError(f"not a finite number: {', '.join(sorted(bad))}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
