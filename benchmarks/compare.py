"""Two runs of a benchmark side by side: every figure both wrote (``--json``), the second over
the first, and whether they agree within a tolerance (issue #40: two consecutive default runs
within 20 % on every figure).

    .venv/bin/python benchmarks/dashboard.py --json run1.json
    .venv/bin/python benchmarks/dashboard.py --json run2.json
    .venv/bin/python benchmarks/compare.py run1.json run2.json [--tolerance 0.2]
    .venv/bin/python benchmarks/compare.py benchmarks/results/RUN1 benchmarks/results/RUN2

Two directories (``make bench``'s runs, ``benchmarks/all.py``) are compared benchmark by
benchmark: every ``NAME.json`` in both, each figure named ``NAME: figure``.

Exit status 1 when a figure moved by more than the tolerance, the larger of the two over the
smaller (so 100 -> 80 ms moved as much as its rate, 10 -> 12.5 per s; latencies under ``--floor-ms``
ms, in ``_ms`` or ``_s`` figures, where a millisecond of scheduling is a large fraction, are
shown but not judged, and so is a ratio of two of them, ``ratio_A_B`` of ``A_ms`` over its
same-run baseline ``baseline_B_ms``; a latency whose two values differ by less than
``--noise-ms`` (5 ms: a scheduler's slice or two on a 2-core machine) has not moved, whatever
the ratio; a figure 0 in both runs agrees).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _floor(name: str, floor_ms: float) -> float:
    """The smallest value of figure ``name`` that is judged: a latency in ms (``_ms``) or in
    seconds (``_s``) under ``floor_ms`` is a few scheduling slices, not a measure."""
    unit = name.split(": ", 1)[-1].split(" ", 1)[0]  # "dashboard: cold_p95_ms url" -> cold_p95_ms
    if name.endswith("_ms") or unit.endswith("_ms"):
        return floor_ms
    if name.endswith("_s") or unit.endswith("_s"):
        return floor_ms / 1000
    return float("-inf")


def _of_small_times(key: str, runs: tuple[dict[str, float], ...], floor_ms: float) -> bool:
    """Whether figure ``key`` is a ratio ``ratio_A_B`` of a time ``A_ms`` over its same-run
    baseline ``baseline_B_ms`` (the naming the benchmarks write) with both under ``floor_ms``
    in every run: scheduling slices over scheduling slices (3.7 over 2.9 ms read 1.31 in one
    run and 1.58 in the next), not a measure."""
    bench, sep, fig = key.rpartition(": ")
    prefix = bench + sep
    if not fig.startswith("ratio_"):
        return False
    rest = fig.removeprefix("ratio_")
    for name in runs[0]:
        a = name.removeprefix(prefix).removesuffix("_ms")
        if not name.startswith(prefix) or not name.endswith("_ms") or a.startswith("baseline_"):
            continue
        if not rest.startswith(a + "_"):
            continue
        base = f"{prefix}baseline_{rest.removeprefix(a + '_')}_ms"
        if all(name in r and base in r for r in runs):
            return all(max(r[name], r[base]) < floor_ms for r in runs)
    return False


def _within_noise(name: str, x: float, y: float, noise_ms: float) -> bool:
    """Whether latency figure ``name``'s two values differ by less than ``noise_ms``: the
    p95 of a 10-ms callback read 12.7 then 9.6 ms, a scheduling slice, not a change."""
    scale = _floor(name, 1000.0) / 1000.0  # 1 for a figure in ms, 1/1000 in seconds
    return scale > 0 and abs(x - y) < noise_ms * scale


def _load(path: Path) -> dict[str, float]:
    """One run's figures: a benchmark's JSON, or a directory of them (``NAME: figure``)."""
    if not path.is_dir():
        return json.loads(path.read_text())
    out: dict[str, float] = {}
    for f in sorted(path.glob("*.json")):
        out |= {f"{f.stem}: {k}": v for k, v in json.loads(f.read_text()).items()}
    if not out:
        raise ValueError(f"{path}: no benchmark figures (*.json) in it")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--tolerance", type=float, default=0.2)
    ap.add_argument("--floor-ms", type=float, default=10.0)
    ap.add_argument("--noise-ms", type=float, default=5.0)
    a = ap.parse_args()
    try:
        one, two = _load(Path(a.first)), _load(Path(a.second))
    except (OSError, ValueError) as exc:
        print(f"compare: cannot read the runs: {exc}", file=sys.stderr)
        return 2
    moved = 0
    print(f"{'figure':<70} {'first':>9} {'second':>9} {'ratio':>6}")
    for key in sorted(set(one) & set(two)):
        x, y = float(one[key]), float(two[key])
        ratio = y / x if x else (1.0 if y == 0 else float("inf"))  # 0 and 0 agree
        small = max(x, y) < _floor(key, a.floor_ms) or _of_small_times(key, (one, two), a.floor_ms)
        noise = not small and _within_noise(key, x, y, a.noise_ms)
        judged = not small and not noise
        # the larger over the smaller: a time and its rate (ms and files/s) move alike
        spread = max(abs(x), abs(y)) / min(abs(x), abs(y)) if x and y else ratio
        bad = judged and (x * y < 0 or abs(spread - 1) > a.tolerance)
        moved += bad
        quiet = noise and abs(spread - 1) > a.tolerance  # moved by the ratio, not by the ms
        flag = "  MOVED" if bad else "  (under the floor)" if small else ""
        flag += f"  (within {a.noise_ms:g} ms)" if quiet else ""
        print(f"{key[:70]:<70} {x:9.2f} {y:9.2f} {ratio:6.2f}{flag}")
    only = sorted(set(one) ^ set(two))
    if only:
        print(f"in one run only: {', '.join(only)}")
    print(f"{moved} figure(s) moved by more than {a.tolerance * 100:.0f} %")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
