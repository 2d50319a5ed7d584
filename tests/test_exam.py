"""The culprit exam's generator and scorer on one real case (#56): a 2-agent torchrun job on
the CPU (each agent its own hostname, c10d rendezvous, gloo) in which rank 1 raises at step
7, then a second launch that resumes from the step-5 checkpoint it saved (a real DCP tree).
Imported blind with the real CLI, the interruption must be found, blamed on that rank and its
host, and its restore and lost steps must be the job's own record."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmarks.exam_jobs import Case, generate
from benchmarks.exam_score import import_case, score

pytestmark = pytest.mark.live


def test_a_real_rank_exception_is_found_and_scored_against_the_jobs_own_truth(
    tmp_path: Path,
) -> None:
    assert os.geteuid() == 0 and shutil.which("unshare"), "the exam needs root and unshare"
    g = generate(Case("exception", "exception", culprit=1, at=7), tmp_path)
    stop = g.truth["stops"][0]
    # the truth is the job's own: rank 1 raised after step 6, on the node that holds ranks 0-1
    assert stop["rank"] == 1 and stop["last_step"] == 6 and stop["restored_step"] == 5
    assert stop["host"] == g.truth["rank_host"]["1"] == g.truth["hosts"][0]
    assert (g.ckpt / "iter_0000005" / ".metadata").is_file()
    assert "RuntimeError: exam: injected fault" in g.log.read_text()

    got = import_case(g, tmp_path / "s.duckdb")
    assert got["import_rc"] == 0, got["import_out"]
    [i] = got["run"]["interruptions"]["list"]
    assert (i["rank"], i["host"]) == (1, stop["host"])
    assert i["component"] == "Software Bug"
    assert (i["restored_step"], i["lost_steps"]) == (5, 1)
    assert got["run"]["state"] == "finished"

    sc = score(g, got)
    assert sc["miss"] == []
    for check in ("found", "cause", "rank", "host", "stop", "restore", "lost", "restarts"):
        assert sc["checks"][check] is True, check
    assert sc["checks"]["extra"] is True  # one interruption, not one per rank's lines
    assert sc["named"] == (i["confidence"], True)
