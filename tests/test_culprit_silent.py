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

from telemetry.collect.logs import logranks as lr
from telemetry.collect.logs.textlogs import LogParser, parse_file
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


def test_a_node_lost_under_pdsh_is_the_one_labelled_host_no_agent_reported(
    tmp_path: Path,
) -> None:
    """The same loss without Slurm: pdsh started the two agents and labelled each line with
    its host (``gpu-b72: ``, ``gpu-b73: ``). gpu-b73's lines (the progress rank 3 printed)
    stop; gpu-b72's ranks log their peers gone and its agent lists ranks 0-1 alone. The job's
    hosts are its two nodes, so the block no agent reported is gpu-b73's: named, never
    gpu-b72; while the job tears down (the first launch alone, as a follower reads it) too.
    Without gpu-b73's lines nothing says it was in the job: unknown."""
    lines = (EXAM / "node_lost_pdsh.log").read_text().splitlines(keepends=True)
    first = lines[: next(i for i, ln in enumerate(lines) if "loading distributed" in ln)]
    cases = {"whole": lines, "tearing down": first,
             "no gpu-b73 line": [ln for ln in first if not ln.startswith("gpu-b73: ")]}
    for name, text in cases.items():
        (tmp_path / name).mkdir()
        log = tmp_path / name / "job.log"
        log.write_text("".join(text))
        (row,) = _interruptions(_import(tmp_path / name, log)[0], COLS)
        assert row["rank"] is None and row["host"] != "gpu-b72", (name, row)
        if name == "no gpu-b73 line":  # nor how many nodes it had: no node is said lost
            assert row["host"] is None, row
            continue
        assert row["component"] == "Host Maintenance" and row["node_lost"], (name, row)
        assert row["host"] == "gpu-b73" and "gpu-b72" not in row["description"], (name, row)
        assert "the one host of the job (by its lines' labels)" in row["description"]


def test_pdsh_host_labels_are_read_as_the_lines_writer(tmp_path: Path) -> None:
    """pdsh's ``host: `` label is the node that printed the line, before any launcher prefix:
    the slow-rank job's straggler reports, labelled so (as pdsh -w would print node 0's and
    node 1's output), are read as under srun's labels, and each host that labelled lines is
    a host of the job. A word or an srun task number before a colon is no host."""
    assert lr.host_label("gpu-b39: [rank0]:x") == ("gpu-b39", 9)
    for line in ("RuntimeError: boom", "3: [rank1]: x", "gpu012:1234:5678 [0] NCCL INFO"):
        assert lr.host_label(line) is None, line
    text = (EXAM / "slow.log").read_text()
    pdsh = tmp_path / "pdsh.log"
    pdsh.write_text("".join(("gpu-b39: " if ln.startswith("0: ") else "gpu-b40: ") + ln[3:]
                            for ln in text.splitlines(keepends=True)))  # fmt: skip
    srun, labelled = parse_file(EXAM / "slow.log"), parse_file(pdsh)
    scores = [(r.rank, r.host, r.metric, r.score) for r in srun.rank_perf]
    assert len(scores) > 20 and (1, "gpu-b39", "gpu_relative_perf", 0.25) in scores
    assert [(r.rank, r.host, r.metric, r.score) for r in labelled.rank_perf] == scores
    assert {(r, h) for r, h, how, _ in labelled.rank_hosts if how == "pdsh label"} == {
        (None, "gpu-b39"), (None, "gpu-b40")}



def test_a_ranks_host_is_known_from_its_first_pdsh_labelled_line(tmp_path: Path) -> None:
    """A survivor's traceback under pdsh (``gpu-b72: [rank1]: Traceback``: PyTorch's global
    rank, pdsh's host) places rank 1 on gpu-b72 at that line, not only when torchrun's summary
    says so at the teardown's end; a tee label (a local rank) places nothing."""
    log = EXAM / "node_lost_pdsh.log"
    lines = log.read_text().splitlines()
    tb = next(n for n, ln in enumerate(lines, 1) if ln.startswith("gpu-b72: [rank1]: Traceback"))
    placed = {(r, h, how): int(origin.rsplit(":", 1)[1])
              for r, h, how, origin in parse_file(log).rank_hosts}  # fmt: skip
    assert placed[(1, "gpu-b72", "pdsh label")] == tb + 1  # a label is a host from its 2nd line
    summary = next(n for n, ln in enumerate(lines, 1) if "ChildFailedError" in ln)
    assert placed[(0, "gpu-b72", "pdsh label")] < summary
    assert lr.torch_rank("[rank0]:[titan] 2026-12-07 07:46:56,631 - root - INFO - x") is None
