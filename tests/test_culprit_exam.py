"""The culprit exam's classes (issue 56, 3 and 4) on verbatim input: job logs recorded from a
real two-node torchrun job on this machine (``tests/torchrun_job.py``: torch 2.13, gloo, 4
ranks per node under hostnames gpu-b03/gpu-b07, ``srun --label``-style node numbers; kept in
``tests/fixtures/torchrun/``), and NCCL's and PyTorch's formats as ``cascade_fixture`` cites
them. A culprit is named only where evidence places it; otherwise it is unknown, with the
candidates and the reason."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from telemetry.collect.logs import logranks as lr
from telemetry.collect.logs.textlogs import parse_file
from tests import cascade_fixture as cf
from tests.test_culprit import _import, _interruptions, _megatron, _watchdogs

REAL = Path(__file__).with_name("fixtures") / "torchrun"


def _rows(store: Path) -> list[dict]:
    return _interruptions(
        store,
        "host, rank, component, restarts, restored_step, node_lost, "
        "description, culprit_candidates, culprit_reason, evidence",
    )


def test_every_ranks_copy_of_a_restore_line_is_one_restart(tmp_path: Path) -> None:
    """Each of the 8 ranks logs its own "loading checkpoint ... at iteration 10" and
    "successfully loaded" line: one restart, not a restart loop of 10."""
    (row,) = _rows(_import(tmp_path, REAL / "raise.log")[0])
    assert (row["restarts"], row["restored_step"]) == (1, 10)
    assert "Restart loop" not in row["description"]
    assert (row["rank"], row["host"]) == (5, "gpu-b07")  # its own traceback
    scan = parse_file(REAL / "raise.log")
    assert (scan.counts["load"], scan.counts["load_end"]) == (8, 8)  # each rank's start and end


def test_torchruns_exitcode_with_the_signals_name_is_read() -> None:
    """torch 2.x prints the signal after the pid; every signalled worker's entry places its rank."""
    assert lr.summary_field("1:   exitcode  : -15 (pid: 24724)  (SIGTERM)") == (
        "exitcode", (-15, 24724, "SIGTERM"))  # fmt: skip
    assert lr.summary_field("  exitcode  : 1 (pid: 7307) ") == ("exitcode", (1, 7307, None))
    placed = {(r, h) for r, h, _, _ in parse_file(REAL / "hang.log").rank_hosts}
    assert (6, "gpu-b07") in placed  # the hung rank: SIGTERMed, listed only with its signal


@pytest.mark.parametrize(
    ("log", "rank", "host", "signal", "cause"),
    [("kill", 6, "gpu-b07", "SIGKILL", "Unknown"),
     ("segv", 2, "gpu-b03", "SIGSEGV", "Software Bug")],
)
def test_a_rank_killed_by_a_signal_is_named_by_its_own_root_cause_entry(
    tmp_path: Path, log: str, rank: int, host: str, signal: str, cause: str
) -> None:
    """The culprit died of SIGKILL (as the OOM killer kills) or SIGSEGV and wrote nothing;
    torchrun's Root Cause entry on its node says so. The other node's Root Cause names a victim
    (exit code 1), and its ChildFailedError is teardown: neither is blamed. A SIGKILL with no
    line of its sender (the OOM killer, a person, a scheduler) is of unknown cause, not a bug;
    a SIGSEGV is the program's (or a dependency's) crash."""
    (row,) = _rows(_import(tmp_path, REAL / f"{log}.log")[0])
    assert (row["rank"], row["host"], row["component"]) == (rank, host, cause)
    assert signal in row["description"] and row["culprit_reason"] is None
    ev = json.loads(row["evidence"])
    assert ev[0]["kind"] == "worker_killed" and ev[0]["role"] == "cause"
    assert all(e["role"] == "teardown" for e in ev if "ChildFailedError" in (e["line"] or ""))


def test_an_srun_label_under_torchrun_is_a_node_not_a_rank() -> None:
    """``1: Traceback`` of torchrun's own ChildFailedError is node 1's agent, not rank 1."""
    scan = parse_file(REAL / "raise.log")
    agent = [s for s in scan.signals if "ChildFailedError" in s.line]
    assert len(agent) == 2 and all(s.rank is None for s in agent)
    assert lr.split_prefix("12: node-2:1:1 [1] NCCL WARN x")[2] == 12  # one task per rank


def _with_srun_line(tmp_path: Path) -> Path:
    """The lost node's job log as Slurm ends it: srun reports the killed task of that node."""
    lines = (REAL / "node.log").read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if "loading checkpoint" in ln)
    out = tmp_path / "slurm-1.out"
    out.write_text("".join([*lines[:at], "srun: error: gpu-b07: task 1: Killed\n", *lines[at:]]))
    return out


def test_a_node_lost_at_once_is_the_node_slurm_names_never_a_survivor(tmp_path: Path) -> None:
    """Every rank and the agent of gpu-b07 SIGKILLed at once: only gpu-b03's ranks write
    (gloo's "Connection reset by peer"/"Connection closed by peer"), and its agent's summary.
    With Slurm's line the culprit is gpu-b07; without it, unknown, never gpu-b03."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (row,) = _rows(_import(tmp_path / "a", _with_srun_line(tmp_path))[0])
    assert (row["host"], row["rank"], row["component"]) == ("gpu-b07", None, "Host Maintenance")
    assert row["node_lost"] and "gpu-b07 lost" in row["description"]
    (row,) = _rows(_import(tmp_path / "b", REAL / "node.log")[0])
    assert row["host"] is None and row["rank"] is None and row["component"] == "Unknown"
    assert json.loads(row["culprit_candidates"]) and "may be victims" in row["culprit_reason"]
    assert "Software Bug" not in row["description"]  # a victim's reset is no software bug


def test_watchdog_timeouts_alone_name_no_culprit(tmp_path: Path) -> None:
    """Every rank's watchdog timed out (rank 7 first in the file): no rank is missing, so
    the culprit is unknown; rank 7, a victim, is not named."""
    full = cf.build(tmp_path / "full.out", culprit=5).read_text().splitlines()
    head = [ln for ln in full if "NCCL INFO comm" in ln]
    head += _megatron("2025-02-18 07:00:00", range(10, 410, 10))
    waits = _watchdogs([7, 0, 1, 2, 3, 4, 5, 6], datetime(2025, 2, 18, 7, 23, 30))
    tail = ["[2025-02-18 07:30:00] loading checkpoint from /lustre/ckpt at iteration 300"]
    tail += _megatron("2025-02-18 07:30:00", range(310, 500, 10), origin=300)
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join([*head, *waits, *tail]) + "\n")
    (row,) = _rows(_import(tmp_path, log)[0])
    assert (row["rank"], row["host"]) == (None, None)
    assert row["component"] == "NCCL Watchdog Timeouts" and "only watchdog" in row["culprit_reason"]
    assert "rank 7" not in row["description"].split("candidates")[0]


def _silenced(tmp_path: Path, quiet: str) -> Path:
    """``cascade_fixture``'s job with every failure line of the writers ``quiet`` labels
    removed (its NCCL init lines and progress stay): a rank or node that died writing nothing."""
    full = cf.build(tmp_path / "full.out", culprit=5).read_text().splitlines()
    keep = [ln for ln in full if not ln.startswith(quiet) or "NCCL INFO comm" in ln
            or "iteration" in ln or "checkpoint" in ln]  # fmt: skip
    out = tmp_path / "slurm-81234.out"
    out.write_text("\n".join(keep) + "\n")
    return out


def test_a_rank_that_died_silently_is_unknown_with_it_among_the_candidates(
    tmp_path: Path,
) -> None:
    """Rank 5 died leaving no line and no launcher record: the others' cascade (NCCL "remote
    process exited", IB completion errors) names no culprit; rank 5 is the candidate."""
    (row,) = _rows(_import(tmp_path, _silenced(tmp_path, "1: [default1]:"))[0])
    assert (row["rank"], row["host"]) == (None, None)
    assert json.loads(row["culprit_candidates"]) == [f"rank 5 on {cf.host(1)}"]


def test_every_rank_of_one_host_silent_at_once_is_that_host(tmp_path: Path) -> None:
    """All four ranks of node 1 fell silent at once while every rank of node 0 logged its
    peers gone: the culprit is node 1's host."""
    (row,) = _rows(_import(tmp_path, _silenced(tmp_path, "1: [default"))[0])
    assert (row["host"], row["rank"], row["component"]) == (cf.host(1), None, "Host Maintenance")


def test_an_unknown_culprit_is_shown_with_its_candidates_and_reason(tmp_path: Path) -> None:
    """``summary --json`` and the incident view say "unknown", the candidates and why."""
    import subprocess
    import sys

    from app.figures.incident import markdown
    from telemetry.queries.failures import interruption_detail
    from telemetry.store import open_store

    store, _ = _import(tmp_path, REAL / "node.log")
    done = subprocess.run([sys.executable, "-m", "app.cli", "summary", "--store", str(store),
                           "--json"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = [r for r in json.loads(done.stdout)["runs"] if r["interruptions"]["list"]]
    (inc,) = run["interruptions"]["list"]
    assert inc["host"] is None and inc["rank"] is None and inc["culprit_candidates"]
    assert "no line places the culprit" in inc["culprit_reason"]
    with open_store(store, read_only=True) as s:
        row = interruption_detail(s, run["run_id"], datetime.fromisoformat(inc["ts"]))
    assert row is not None
    row |= {"detected": row["ts"], "run_name": None}
    shown = markdown(row)
    assert "**Culprit:** unknown (no line places the culprit" in shown
    assert f"candidates: {', '.join(inc['culprit_candidates'])}" in shown


@pytest.mark.slow
def test_the_real_job_is_judged_as_its_recording(tmp_path: Path) -> None:
    """The fixtures' job run again for real (two torchrun agents in their own namespaces, a
    rank SIGKILLed, a restart from its checkpoint; about 30 s): the same culprit and restart."""
    from tests import torchrun_job

    log = torchrun_job.run(tmp_path / "job.log", "kill", 6, port=29811)
    (row,) = _rows(_import(tmp_path, log)[0])
    assert (row["rank"], row["host"], row["restarts"]) == (6, "gpu-b07", 1)
    assert "SIGKILL" in row["description"]


SLURM = Path(__file__).with_name("fixtures") / "slurm_exam"


@pytest.mark.parametrize("case", ["time_limit", "preempt"])
def test_a_job_the_scheduler_stopped_names_no_culprit(tmp_path: Path, case: str) -> None:
    """Recorded from the exam (benchmarks/exam_slurm.py) under the suite's real Slurm: two
    torchrun agents as ``srun --label`` tasks, stopped by ``-t 1`` or by a job of the urgent
    partition. ``slurmstepd-vm:`` names the batch host and ``0:`` a task: neither is at fault,
    and naming one would drain a healthy node (both were named before)."""
    rows = [r for r in _rows(_import(tmp_path, SLURM / f"{case}.log")[0])
            if "TIME LIMIT" in r["evidence"] or "PREEMPTION" in r["evidence"]]  # fmt: skip
    assert rows
    for row in rows:
        assert (row["rank"], row["host"]) == (None, None)
        assert "scheduler stopped the whole job" in row["culprit_reason"]


def test_a_node_slurm_says_a_survivor_ran_on_is_never_the_lost_node(tmp_path: Path) -> None:
    """Recorded from the exam's node loss under the suite's one-node Slurm (both agents of a
    "2-node" job are srun tasks on node vm; node 1's agent and ranks were SIGKILLed): srun says
    ``vm: task 1: Killed``, then ``vm: task 0: Exited with exit code 1``. Task 0, a survivor,
    ran on vm, so vm was not lost and must not be named (it was). No line names the lost
    agent's own host: the culprit is unknown, the node of ranks 2-3 the candidate."""
    log = SLURM / "node_lost_one_node.log"
    text = log.read_text()
    assert "srun: error: vm: task 1: Killed" in text and "vm: task 0: Exited" in text
    (row,) = _rows(_import(tmp_path, log)[0])
    assert (row["host"], row["rank"], row["component"]) == (None, None, "Host Maintenance")
    assert row["node_lost"] and json.loads(row["culprit_candidates"]) == ["the node of ranks 2-3"]
    assert not re.search(r"\bvm\b", row["description"]), row["description"]


def test_a_restore_line_timed_in_the_second_of_the_last_steps_is_one_stop(tmp_path: Path) -> None:
    """The exam's time limit of 2026-12-07 (real Slurm, ``-t 1``): iterations 116-118 and
    ``CANCELLED AT 01:35:04 DUE TO TIME LIMIT`` share one second, and the requeued job's
    untimed ``loading distributed checkpoint ... at iteration 100`` takes that second too. It
    belongs after iteration 118 (the restart resumes at 101), not between 115 and 116: that
    made a second interruption, "stalled at 115 for 1 s", with 15 steps lost."""
    rows = _rows(_import(tmp_path, SLURM / "time_limit_same_second.log")[0])
    assert [(r["component"], r["restored_step"], r["restarts"]) for r in rows] == [
        ("Planned maintenance", 100, 1)
    ]
    assert "Step stalled at 118" in rows[0]["description"], rows[0]["description"]


def test_a_rank_named_by_its_own_line_beside_the_others_cascade_has_high_confidence(
    tmp_path: Path,
) -> None:
    """(#56, 3) Confidence means something: a rank named by its own traceback while the other
    ranks wrote only their cascade and teardown (the real job's rank 5) is named with >= 0.8
    (culprit.OWN_LINE_CONFIDENCE; the exam's reliability table, docs/exam.md). A software
    error in a log of that rank's lines alone (megatron-bridge-836: rank 29's launch failure,
    no other rank heard, its thread a container bug) names nobody: every rank may have hit it
    (rank 29 was named at 0.65 before)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (row,) = _interruptions(_import(tmp_path / "a", REAL / "raise.log")[0],
                            "rank, host, confidence")  # fmt: skip
    assert (row["rank"], row["host"]) == (5, "gpu-b07") and row["confidence"] >= 0.8
    alone = tmp_path / "alone.log"
    bridge = Path(__file__).with_name("corpus") / "megatron/megatron-bridge-836-launch-failure.log"
    alone.write_text("\n".join(bridge.read_text(encoding="utf-8").splitlines()[1:3]) + "\n",
                     encoding="utf-8")  # its iteration 48 and rank 29's error, verbatim
    (row,) = _interruptions(_import(tmp_path / "b", alone)[0], "rank, host, culprit_candidates")
    assert (row["rank"], row["host"]) == (None, None)
    assert "rank 29" in row["culprit_candidates"]
