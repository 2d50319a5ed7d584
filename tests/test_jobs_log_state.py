"""A job imported from its logs gets the state its log's end tells (#57, 5), and ``summary``'s
run state and its ``jobs`` row agree: imported through the real CLI into a real DuckDB file,
from logs as the real software wrote them (the exam's Slurm runs, the night of
``tests/cluster_fixture.py``). A log that ends saying nothing of how is "unknown", not RUNNING
nor COMPLETED; one still being written to is running."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_fixture import build as build_night
from tests.conftest import ROOT, cli

EXAM = ROOT / "tests" / "fixtures" / "slurm_exam"


def _summary(store: Path, *logs: Path, run: str = "r1") -> tuple[dict[str, Any], dict[str, Any]]:
    r = cli("import", "--store", str(store), "--run", run, *map(str, logs))
    assert r.returncode == 0, r.stderr
    out = cli("summary", "--store", str(store), "--json", check=True).stdout
    d = json.loads(out)
    return d["runs"][0], {j["job_id"]: j for j in d["jobs"]}[run]


def _head(src: Path, dst: Path, upto: str) -> Path:
    """``src``'s lines up to the last one holding ``upto`` (the job as it ended there)."""
    lines = src.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if upto in line)
    dst.write_text("".join(lines[: last + 1]))
    return dst


def test_the_imported_night_that_ends_without_an_end_line_is_unknown(tmp_path: Path) -> None:
    """The night's log ends with a save of step 6000 that never logged its end, and no line
    after: it said RUNNING on the Jobs page and "running" in summary, 9 months after its end."""
    night = build_night(tmp_path / "night")
    store = tmp_path / "s.duckdb"
    r = cli(*night.import_args(store))
    assert r.returncode == 0, r.stderr
    d = json.loads(cli("summary", "--store", str(store), "--json", check=True).stdout)
    run, job = d["runs"][0], d["jobs"][0]
    assert (run["state"], job["state"]) == ("unknown", "UNKNOWN")
    assert run["ended"]["detail"] == (
        "no line of its log says how the job ended (its data end at 2026-03-01 12:06:15); its "
        "last save (step 6000) never logged its end"
    )
    assert run["ended"]["origin"] == str(night.job_log)  # the job's log, not the kernel's
    text = cli("summary", "--store", str(store), check=True).stdout
    assert "atlas-70b (unknown)" in text


@pytest.mark.parametrize(
    ("src", "upto", "state", "job_state"),
    [
        # Slurm's own lines: the job killed at its time limit, or preempted, and not restarted
        ("time_limit.log", "DUE TO TIME LIMIT ***", "stopped", "TIMEOUT"),
        ("preempt.log", "DUE TO PREEMPTION ***", "stopped", "CANCELLED"),
        # the whole logs: restarted and ran to their end
        ("time_limit.log", "", "finished", "COMPLETED"),
    ],
)
def test_slurm_lines_at_the_log_end_name_the_state(
    tmp_path: Path, src: str, upto: str, state: str, job_state: str
) -> None:
    log = _head(EXAM / src, tmp_path / src, upto) if upto else EXAM / src
    run, job = _summary(tmp_path / "s.duckdb", log)
    assert (run["state"], job["state"]) == (state, job_state)
    if upto:  # the run's state says which of Slurm's lines tells it, and where
        assert run["ended"]["job_state"] == job_state, run["ended"]
        assert upto.rstrip(" *") in run["ended"]["detail"]
        assert run["ended"]["origin"].startswith(str(log))


def test_a_final_failure_nothing_restarted_is_failed(tmp_path: Path) -> None:
    """The night cut after its InfiniBand failure (traceback, srun's exit code 1): a stop with
    no restart after it."""
    night = build_night(tmp_path / "night")
    log = _head(night.job_log, tmp_path / "slurm-81234.out",
                "srun: error: node-3: task 3: Exited with exit code 1")  # fmt: skip
    run, job = _summary(tmp_path / "s.duckdb", log)
    assert (run["state"], job["state"]) == ("stopped", "FAILED")


def test_a_log_still_written_to_is_running(tmp_path: Path) -> None:
    """Lines of the last minutes (a log being followed, its job running): RUNNING, never
    "unknown"; the same log a day old says nothing of how it ended."""
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)

    def log(end: datetime, name: str) -> Path:
        lines = ["using world size: 8, data-parallel size: 8, tensor-model-parallel size: 1"]
        for step in range(10, 110, 10):
            t = end - timedelta(seconds=(100 - step) * 2)
            lines.append(
                f"[{t:%Y-%m-%d %H:%M:%S}] iteration {step:>8}/   10000 | consumed samples: "
                f"{step * 64:>12} | elapsed time per iteration (ms): 2000.0 | learning rate: "
                "3.000E-04 | global batch size:    64 | lm loss: 2.500000E+00 | loss scale: 1.0 |"
            )
        (tmp_path / name).mkdir()
        p = tmp_path / name / "slurm-1.out"
        p.write_text("\n".join(lines) + "\n")
        return p

    run, job = _summary(tmp_path / "live.duckdb", log(now - timedelta(minutes=1), "live"))
    assert (run["state"], job["state"]) == ("running", "RUNNING")
    run, job = _summary(tmp_path / "old.duckdb", log(now - timedelta(days=1), "old"))
    assert (run["state"], job["state"]) == ("unknown", "UNKNOWN")


def test_checkpoint_save_cost_is_the_goodputs_on_a_logs_only_run(tmp_path: Path) -> None:
    """#57, 7: summary's cost.checkpoint_blocking_usd was null on a logs-only run (no
    checkpoint directory, so no tier) while its goodput counted the saves the log times; it is
    the goodput's checkpoint_save dollars, and null (never $0) where no save's time is known."""
    samples = ROOT / "sample_data" / "logs"
    run, _ = _summary(tmp_path / "s.duckdb", samples / "slurm-81234.out",
                      samples / "node-7-kern.log", run="gpt-512")  # fmt: skip
    good = run["goodput"]
    assert good["saves_timed"] == 5 and good["seconds"]["checkpoint_save"] == pytest.approx(157.0)
    assert run["cost"]["checkpoint_blocking_usd"] == good["usd"]["checkpoint_save"] == 44.66
    night = build_night(tmp_path / "night")  # its save lines carry one time each: not known
    r = cli(*night.import_args(tmp_path / "n.duckdb"))
    assert r.returncode == 0, r.stderr
    d = json.loads(cli("summary", "--store", str(tmp_path / "n.duckdb"), "--json").stdout)
    assert d["runs"][0]["goodput"]["saves_timed"] == 0
    assert d["runs"][0]["cost"]["checkpoint_blocking_usd"] is None
