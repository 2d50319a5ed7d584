"""Ranks that leave no line of their own (issue 56, item 4), on the culprit exam's real output:
job logs recorded from ``benchmarks/exam.py`` (two torchrun agents in their own UTS
namespaces, 2 ranks each, gloo, ``srun --label``-style node numbers; kept in
``tests/fixtures/torchrun_exam/``). A rank that exited 0 early, a node lost with its agent,
and a restart loop whose last launch failed and was not restarted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from telemetry.collect.logs.textlogs import LogParser
from tests.test_culprit import _import, _interruptions

EXAM = Path(__file__).with_name("fixtures") / "torchrun_exam"
COLS = ("ts, end_ts, host, rank, component, node_lost, restarts, confidence, description, "
        "culprit_candidates, culprit_reason")  # fmt: skip


def test_a_rank_that_exited_0_early_is_named_by_its_launchers_silence(tmp_path: Path) -> None:
    """Rank 2 (gpu-b45) left its loop with exit code 0; the other three lost their peer
    (gloo's "Connection closed by peer") and gpu-b45's torchrun lists rank 3 alone
    (``<NO_OTHER_FAILURES>``, no SIGTERM sent): rank 2 exited cleanly before they failed.
    Without that summary nothing says so (nor even that rank 2 exists): no culprit."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (row,) = _interruptions(_import(tmp_path / "a", EXAM / "exit0.log")[0], COLS)
    assert (row["rank"], row["host"], row["component"]) == (2, "gpu-b45", "Software Bug")
    assert "left the job early" in row["description"] and row["culprit_reason"] is None
    assert row["confidence"] < 0.8  # inferred from a silence, not a line of its own
    lines = (EXAM / "exit0.log").read_text().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("1: E1206"))
    end = max(i for i, ln in enumerate(lines) if ln.startswith("1: ====")) + 1
    assert "gpu-b45" in "".join(lines[start:end]) and "gpu-b45" not in "".join(lines[end:])
    log = tmp_path / "job.log"
    log.write_text("".join(lines[:start] + lines[end:]))
    (row,) = _interruptions(_import(tmp_path / "b", log)[0], COLS)
    assert (row["rank"], row["host"], row["component"]) == (None, None, "Unknown")
    assert json.loads(row["culprit_candidates"]) and "left the job early" not in row["description"]


def test_srun_tasks_running_torchrun_are_nodes_at_least() -> None:
    """``0:`` and ``1:`` each start a torchrun agent: the job has (at least) 2 nodes."""
    p = LogParser(EXAM / "node_lost.log")
    for n, line in enumerate((EXAM / "node_lost.log").read_text().splitlines(), start=1):
        p.feed(line, n)
    p.finish()
    assert p.job_facts() == {"gpus": 4, "nodes": 2}  # Megatron's "using world size: 4"


def test_a_node_lost_with_its_agent_is_a_host_fault_never_a_survivor(tmp_path: Path) -> None:
    """Node 1's agent and both its ranks were SIGKILLed at once: only gpu-b54's ranks write
    (gloo's resets) and its agent lists ranks 0 and 1 alone, of a world of 4 on 2 nodes. The
    cause is the lost node; no line names its host, so it is a candidate, never gpu-b54."""
    (row,) = _interruptions(_import(tmp_path, EXAM / "node_lost.log")[0], COLS)
    assert (row["component"], row["host"], row["rank"]) == ("Host Maintenance", None, None)
    assert row["node_lost"]
    assert json.loads(row["culprit_candidates"]) == ["the node of ranks 2-3"]
    assert "no line names its host" in row["culprit_reason"]
    assert "gpu-b54" not in row["description"]


def test_a_restart_loops_last_failure_is_a_stop_of_its_own(tmp_path: Path) -> None:
    """Four launches failed at step 6 (rank 3 raised), three restarted from step 5 and the
    last was not: the loop is one interruption, the last launch's failure (logged in the
    second it resumed) a second one with no end, and the run is stopped."""
    store, _ = _import(tmp_path, EXAM / "restart_loop.log")
    loop, last = _interruptions(store, COLS)
    assert loop["restarts"] == 3 and "Restart loop: 3 restarts" in loop["description"]
    assert last["end_ts"] is None and (last["rank"], last["host"]) == (3, "gpu-b47")
    assert last["component"] == "Software Bug"
    done = subprocess.run([sys.executable, "-m", "app.cli", "summary", "--store", str(store),
                           "--json"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert run["state"] == "stopped"


def _failure_only(tmp_path: Path, case: str) -> Path:
    """The exam's log as pasted from the failure: its first launch's lines without progress
    or checkpoint lines (no progress in the data; the ranks' tracebacks have no time of their
    own then, so only torchrun's summaries are told)."""
    lines = (EXAM / f"{case}.log").read_text().splitlines(keepends=True)
    end = next(i for i, ln in enumerate(lines) if "oading" in ln and "checkpoint" in ln)
    keep = [ln for ln in lines[:end] if not any(w in ln for w in (
        "step:", "iteration", "checkpoint", "Training starts"))]  # fmt: skip
    out = tmp_path / f"{case}-failure.log"
    out.write_text("".join(keep))
    return out


def test_a_failure_only_log_places_the_silent_rank_and_node_too(tmp_path: Path) -> None:
    """With no progress lines the stop is told from the failure lines alone: the same rank
    that exited 0 early, and the same lost node (a candidate, never the survivor gpu-b54)."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (row,) = _interruptions(_import(tmp_path / "a", _failure_only(tmp_path, "exit0"))[0], COLS)
    assert (row["rank"], row["host"], row["component"]) == (2, "gpu-b45", "Software Bug")
    (row,) = _interruptions(_import(tmp_path / "b", _failure_only(tmp_path, "node_lost"))[0],
                            COLS)  # fmt: skip
    assert (row["component"], row["host"], row["rank"]) == ("Host Maintenance", None, None)
    assert "candidates: the node of ranks 2-3" in row["description"]
    assert "gpu-b54" not in row["description"].split("candidates")[1]
