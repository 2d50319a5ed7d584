"""The culprit named live (#58): ``serve`` follows a real 2-agent torchrun job's log directory and
its flight-recorder dump directory, with ``--alerts`` to a real local webhook, while one rank
hangs before a collective (``benchmarks/live_culprit.py``'s ``hang`` case, the exam's job). The
first alert that answers "who" must name the rank the others waited for and its host; an alert
that named a victim first would be a miss however right a later one is. How fast is measured by
the benchmark, not here."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from benchmarks.exam import CASES, _slurm
from benchmarks.exam_jobs import Generated, hosts
from benchmarks.exam_score import import_case
from benchmarks.exam_slurm import slurm_nodes
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


def test_a_node_lost_under_real_slurm_is_the_node_slurm_names_never_a_survivor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exam's ``node_lost_slurm``: under the suite's real Slurm with a slurmd per node
    (``SlurmCluster.nodes``), ``srun --label`` starts one torchrun agent on each of two nodes;
    every rank of the second node and its agent are SIGKILLed at once. ``serve`` follows the
    log and Slurm: its first culprit alert names the lost node (srun's own ``srun: error:
    NODE: task 1: Killed``), and so does a blind import of the same log; the survivor's node
    is never named. (Before, the case ran both agents on one Slurm node, ``vm``, and the
    product named vm, where the survivor ran.)"""
    assert os.geteuid() == 0 and shutil.which("unshare"), "the exam's jobs need root and unshare"
    (case,) = [c for c in CASES if c.name == "node_lost_slurm"]
    survivor, lost = hosts(case)
    base = Path(tempfile.mkdtemp(prefix="ff-slurm-"))
    cluster = _slurm(base / "slurm", slurm_nodes([case]))
    try:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # serve's --slurm asks it
        r = _exam_case(case, tmp_path, cluster)
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    d = tmp_path / case.name
    log = d / "logs" / "slurm-4242.out"
    assert f"srun: error: {lost}: task 1: Killed" in log.read_text()
    assert r.culprit_s is not None, (r.named, (d / "serve.log").read_text()[-3000:])
    assert r.right and r.named == f"host {lost}", r.named
    got = import_case(Generated(case, d, log, d / "ckpt", d / "fr"), tmp_path / "blind.duckdb")
    assert got["import_rc"] == 0, got["import_out"]
    (i,) = got["run"]["interruptions"]["list"]
    assert (i["host"], i["rank"], i["component"]) == (lost, None, "Host Maintenance")
    assert not re.search(rf"\b{survivor}\b", i["description"]), i["description"]
