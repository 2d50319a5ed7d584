"""A run seen at one instant has no wall time (unknown, not 0 h). A stop inferred from failure
lines alone keeps its culprit's reason and candidates as
columns too (``culprit_reason``, ``culprit_candidates``), as a stop in a step stream does:
the action's reason read them, and said "culprit unknown; candidates: none listed" right
after a description that listed rank 0, rank 1 and rank 2 (three ranks' watchdog timeouts,
as pasted in XPixelGroup/BasicSR#737: tests/corpus/)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from tests.conftest import cli
from tests.test_culprit import _import

WATCHDOGS = Path(__file__).with_name("corpus") / "pytorch" / "basicsr-737-watchdog-allreduce.log"


def test_the_action_names_the_candidates_the_description_names(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(WATCHDOGS.read_text())
    store = _import(tmp_path, log)[0]
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    [run] = json.loads(r.stdout)["runs"]
    [i] = run["interruptions"]["list"]
    assert "candidates: rank 0, rank 1, rank 2" in i["description"], i["description"]
    assert i["culprit_candidates"] == ["rank 0", "rank 1", "rank 2"], i
    assert "waited or lost a peer" in i["culprit_reason"], i
    assert i["action_reason"] == "culprit unknown; candidates: rank 0, rank 1, rank 2", i


def test_a_run_seen_at_one_instant_has_no_wall_time_not_0_h(tmp_path: Path) -> None:
    # the three ranks' timeouts are dated to one second: how long the job ran before, no line
    # says; summary said "wall_hours": 0.0 and the Failures card "0 s wall / 1 unexpected"
    from telemetry.queries import TimeRange
    from telemetry.queries import failures as qf
    from telemetry.store import Store

    log = tmp_path / "job.log"
    log.write_text(WATCHDOGS.read_text())
    store = _import(tmp_path, log)[0]
    r = cli("summary", "--store", str(store), "--json")
    [run] = json.loads(r.stdout)["runs"]
    assert run["wall_start"] == run["wall_end"] is not None, run
    assert run["wall_hours"] is None and run["mtbf_hours"] is None, run
    at = datetime.fromisoformat(run["wall_start"])
    with Store(str(store), read_only=True) as st:  # the Failures page's figures
        rel = qf.reliability(st, run["run_id"], TimeRange(at - timedelta(hours=1), at))
    assert rel["wall_hours"] is None and rel["unexpected"] == 1, rel
