"""A stop inferred from failure lines alone keeps its culprit's reason and candidates as
columns too (``culprit_reason``, ``culprit_candidates``), as a stop in a step stream does:
the action's reason read them, and said "culprit unknown; candidates: none listed" right
after a description that listed rank 0, rank 1 and rank 2 (three ranks' watchdog timeouts,
as pasted in XPixelGroup/BasicSR#737: tests/corpus/)."""

from __future__ import annotations

import json
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
