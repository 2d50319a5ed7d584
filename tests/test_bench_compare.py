"""benchmarks/compare.py: two runs' figures judged within a tolerance (issue #40)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _compare(tmp_path: Path, one: dict, two: dict, *extra: str) -> subprocess.CompletedProcess:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(one))
    b.write_text(json.dumps(two))
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), str(a), str(b), *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_runs_within_tolerance_agree(tmp_path: Path) -> None:
    r = _compare(tmp_path, {"worst_cold_p95_ms": 100.0, "first_view_s": 3.0},
                 {"worst_cold_p95_ms": 115.0, "first_view_s": 2.7})  # fmt: skip
    assert r.returncode == 0, r.stdout
    assert "0 figure(s) moved by more than 20 %" in r.stdout


def test_a_figure_that_moved_fails_and_is_named(tmp_path: Path) -> None:
    r = _compare(tmp_path, {"worst_cold_p95_ms": 100.0, "first_view_s": 3.0},
                 {"worst_cold_p95_ms": 250.0, "first_view_s": 3.1})  # fmt: skip
    assert r.returncode == 1
    moved = [ln for ln in r.stdout.splitlines() if ln.endswith("MOVED")]
    assert len(moved) == 1 and moved[0].startswith("worst_cold_p95_ms")


def test_small_figures_under_the_floor_are_not_judged(tmp_path: Path) -> None:
    r = _compare(tmp_path, {"cold_p95_ms url": 2.0}, {"cold_p95_ms url": 6.0})
    assert r.returncode == 0
    assert "(under the floor)" in r.stdout


def test_unreadable_run_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text("{}")
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), str(tmp_path / "a.json"),
         str(tmp_path / "b.json")], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "cannot read the runs" in r.stderr
