"""The culprit exam on real logs: every excerpt of ``tests/corpus/`` (failure logs people pasted
in public GitHub issues, each labelled from its thread) imported blind with ``factoryfloor
import`` and scored: import ok, interruption found, cause right, culprit right / victim /
unconfirmed, per framework and overall (``tests/corpus/score.py``).

Targets (#56): import never fails; cause right on >= 95 %; culprit precision (named and right
over named) >= 98 %; recall >= 90 % of the culprits the threads established. Both are also
printed over what the excerpts' own lines show: a label part that rests on the thread alone
(``from_thread`` in labels.toml: a cause found after the paste, an error line left out of it)
is one no reader of the lines could get right. These are
accuracy figures: there is no same-run baseline to divide them by, so the targets are printed
beside them; the time is the import and read-back of every excerpt, one process.

    .venv/bin/python benchmarks/corpus.py [--json FILE]    # FILE: key figures, compare.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import figures  # noqa: E402
from tests.corpus.score import (  # noqa: E402
    findings,
    load_labels,
    misses,
    score_all,
    shown,
    summarise,
    table,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_argument(ap)
    args = ap.parse_args()
    labels = load_labels()
    t = time.perf_counter()
    results = score_all(labels)
    took = time.perf_counter() - t
    s = summarise(results)
    print(table(results))
    print(
        f"\n{s.n} excerpts in {took:.1f} s. Targets (#56): import ok {s.n}/{s.n}; cause right "
        f">= 95 % ({s.cause_right / s.n:.0%} now; a cause named wrong on {s.cause_wrong}, the "
        f"rest say unknown); culprit precision >= 98 %; recall >= 90 %."
    )
    w = shown(results)
    print(
        f"Where the excerpt's own lines show it (a label's from_thread parts left out): cause "
        f"right {w.cause_right}/{w.causes} ({w.cause_right / max(w.causes, 1):.0%}), culprit "
        f"recall {w.right}/{w.culprits} ({w.right / max(w.culprits, 1):.0%})."
    )
    print("\nWrong cause, or a culprit the thread does not support:")
    print(findings(results) or "- none")
    print("\nNo interruption found, by why:")
    print(misses(results) or "- none")
    key = {
        "excerpts": s.n, "import_ok": s.import_ok, "import_crashed": s.crashed,
        "found": s.found, "cause_right": s.cause_right, "cause_wrong": s.cause_wrong,
        "culprit_right": s.right,
        "culprit_victim": s.victim, "culprit_unconfirmed": s.unconfirmed,
        "culprits_established": s.with_culprit, "all_excerpts_s": took,
        "shown_causes": w.causes, "shown_cause_right": w.cause_right,
        "shown_culprits": w.culprits, "shown_culprit_right": w.right,
    }  # fmt: skip
    if s.precision is not None:
        key["culprit_precision"] = s.precision
    if s.recall is not None:
        key["culprit_recall"] = s.recall
    figures.write(args.json, key)


if __name__ == "__main__":
    main()
