"""The culprit named live (#58): ``serve`` follows a real 2-agent torchrun job's log directory and
its flight-recorder dump directory, with ``--alerts`` to a real local webhook, while one rank
hangs before a collective (``benchmarks/live_culprit.py``'s ``hang`` case, the exam's job). The
first alert that answers "who" must name the rank the others waited for and its host; an alert
that named a victim first would be a miss however right a later one is. How fast is measured by
the benchmark, not here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmarks.exam import CASES
from benchmarks.exam_jobs import hosts
from benchmarks.live_culprit import _exam_case

pytestmark = pytest.mark.live


@pytest.mark.parametrize("name", ["exception", "hang", "slow"])
def test_the_culprit_is_alerted_live_with_its_rank_and_host(name: str, tmp_path: Path) -> None:
    """``exception``: the first stop alert names rank 1 before torchrun's summary places its
    host; the receivers must then hear the host too (an alert's changed words alone were never
    sent). ``hang``: no rule alerted a hang at all, and the dumps settled for 30 s. ``slow``:
    no alert named a straggler (``RankSlow``, from the job's NVRx straggler reports)."""
    assert os.geteuid() == 0 and shutil.which("unshare"), "the exam's jobs need root and unshare"
    (case,) = [c for c in CASES if c.name == name]
    r = _exam_case(case, tmp_path)
    assert r.culprit_s is not None, (r.named, (tmp_path / name / "serve.log").read_text()[-3000:])
    want = f"rank {case.culprit} on {hosts(case)[case.culprit // case.nproc]}"
    assert r.right and r.named == want, (r.named, want)
