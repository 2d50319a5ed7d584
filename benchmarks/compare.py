"""Two runs of a benchmark side by side: every figure both wrote (``--json``), the second over
the first, and whether they agree within a tolerance (issue #40: two consecutive default runs
within 20 % on every figure).

    .venv/bin/python benchmarks/dashboard.py --json run1.json
    .venv/bin/python benchmarks/dashboard.py --json run2.json
    .venv/bin/python benchmarks/compare.py run1.json run2.json [--tolerance 0.2]

Exit status 1 when a figure moved by more than the tolerance (figures under ``--floor-ms``
ms, where a millisecond of scheduling is a large fraction, are shown but not judged).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--tolerance", type=float, default=0.2)
    ap.add_argument("--floor-ms", type=float, default=10.0)
    a = ap.parse_args()
    try:
        one, two = (json.loads(Path(p).read_text()) for p in (a.first, a.second))
    except (OSError, ValueError) as exc:
        print(f"compare: cannot read the runs: {exc}", file=sys.stderr)
        return 2
    moved = 0
    print(f"{'figure':<70} {'first':>9} {'second':>9} {'ratio':>6}")
    for key in sorted(set(one) & set(two)):
        x, y = float(one[key]), float(two[key])
        ratio = y / x if x else float("inf")
        small = key.endswith("_ms") or "_ms " in key
        judged = not (small and max(x, y) < a.floor_ms)
        bad = judged and abs(ratio - 1) > a.tolerance
        moved += bad
        flag = "  MOVED" if bad else ("" if judged else "  (under the floor)")
        print(f"{key[:70]:<70} {x:9.2f} {y:9.2f} {ratio:6.2f}{flag}")
    only = sorted(set(one) ^ set(two))
    if only:
        print(f"in one run only: {', '.join(only)}")
    print(f"{moved} figure(s) moved by more than {a.tolerance * 100:.0f} %")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
