"""The slow rank alerted (#58): the culprit exam's slow-rank job (``benchmarks/exam.py``'s
``slow``: real torchrun, two agents in their own UTS namespaces, rank 1 on gpu-b39 four times
slower from step 3, NVRx's straggler report every 2 steps; kept in
``tests/fixtures/torchrun_exam/slow.log``) imported as far as a live follower had read it.
``RankSlow`` names the rank and its host once the reports keep naming it, never after one
report alone, never another rank, and not once the run has finished."""

from __future__ import annotations

from pathlib import Path

from telemetry.metrics.alert_rules import active_alerts
from telemetry.queries import TimeRange
from telemetry.store import Store
from tests import cascade_fixture as cf
from tests.test_culprit import _import

SLOW = Path(__file__).with_name("fixtures") / "torchrun_exam" / "slow.log"


def _alerts(tmp_path: Path, warnings: int | None) -> list[tuple[str, str]]:
    """The run's alerts at its newest line, the log cut after its ``warnings``-th straggler
    warning (None: whole)."""
    lines = SLOW.read_text().splitlines(keepends=True)
    warned = [i for i, ln in enumerate(lines) if "STRAGGLER DETECTION WARNING" in ln]
    log = tmp_path / "slurm-7.out"
    log.write_text("".join(lines if warnings is None else lines[: warned[warnings - 1] + 1]))
    store, _ = _import(tmp_path, log)
    with Store(str(store), read_only=True) as s:
        lo = s.rows("SELECT min(ts) FROM train_metrics")[0][0]
        hi = s.rows("SELECT max(ts) FROM (SELECT ts FROM train_metrics UNION ALL "
                    "SELECT ts FROM rank_perf)")[0][0]  # the newest line: a report's
        found = active_alerts(s, cf.RUN, TimeRange(lo, hi), targets_at=hi)
    return [(r.key, r.detail) for r in found.itertuples() if r.key.startswith("RankSlow")]


def test_the_rank_the_straggler_reports_keep_naming_is_alerted_with_its_host(
    tmp_path: Path,
) -> None:
    """One flagged window could be a loaded host's hiccup: nobody is named on it. The second
    names rank 1 on gpu-b39 and no other rank; the finished run has no slow rank to act on."""
    for n in (1, 2, None):
        (tmp_path / str(n)).mkdir()
    assert _alerts(tmp_path / "1", 1) == []
    (got,) = _alerts(tmp_path / "2", 2)
    assert got[0] == "RankSlow:rank 1 on gpu-b39"
    assert got[1].startswith("rank 1 on gpu-b39 is slow: score 0.25"), got[1]
    assert "flagged in 2 of 3 report windows" in got[1]
    assert _alerts(tmp_path / "None", None) == []
