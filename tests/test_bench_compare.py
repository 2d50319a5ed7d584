"""benchmarks/compare.py: two runs' figures judged within a tolerance (issue #40)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run_compare(a: Path, b: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), str(a), str(b), *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def _compare(tmp_path: Path, one: dict, two: dict, *extra: str) -> subprocess.CompletedProcess:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(one))
    b.write_text(json.dumps(two))
    return _run_compare(a, b, *extra)


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


def test_a_time_and_its_rate_move_alike(tmp_path: Path) -> None:
    """41 -> 34 ms is the same change as 244 -> 293 K files/s: both moved by 20.3 %."""
    r = _compare(tmp_path, {"scan_ms": 41.0, "scan_files_per_s": 243_900.0},
                 {"scan_ms": 34.1, "scan_files_per_s": 293_255.0})  # fmt: skip
    assert r.returncode == 1
    moved = [ln.split()[0] for ln in r.stdout.splitlines() if ln.endswith("MOVED")]
    assert moved == ["scan_files_per_s", "scan_ms"], r.stdout


def test_small_figures_under_the_floor_are_not_judged(tmp_path: Path) -> None:
    r = _compare(tmp_path, {"cold_p95_ms url": 2.0}, {"cold_p95_ms url": 6.0})
    assert r.returncode == 0
    assert "(under the floor)" in r.stdout


def test_a_ratio_of_two_small_times_is_not_judged_but_one_of_a_large_time_is(
    tmp_path: Path,
) -> None:
    """workload's classes over its 2.9 ms baseline: 3.7 / 2.9 ms read 1.31 in one run and
    1.58 in the next, scheduling over scheduling; the 4-hour classes' 196 ms over the same
    baseline is judged."""
    one = {"workload_classes_24h_ms": 3.73, "workload_classes_4h_ms": 196.0,
           "baseline_fleet_series_7d_ms": 2.85,
           "ratio_workload_classes_24h_fleet_series_7d": 1.31,
           "ratio_workload_classes_4h_fleet_series_7d": 69.0}  # fmt: skip
    two = {"workload_classes_24h_ms": 4.10, "workload_classes_4h_ms": 193.0,
           "baseline_fleet_series_7d_ms": 2.60,
           "ratio_workload_classes_24h_fleet_series_7d": 1.58,
           "ratio_workload_classes_4h_fleet_series_7d": 90.0}  # fmt: skip
    r = _compare(tmp_path, one, two)
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("ratio_")}
    assert lines["ratio_workload_classes_24h_fleet_series_7d"].endswith("(under the floor)")
    assert lines["ratio_workload_classes_4h_fleet_series_7d"].endswith("MOVED")
    assert r.returncode == 1


def test_a_latency_that_moved_by_less_than_the_noise_has_not_moved(tmp_path: Path) -> None:
    """A 10-ms callback's p95 read 12.7 then 9.6 ms (3 ms: a scheduling slice); a page's
    1.01 -> 1.25 s moved 240 ms and is judged."""
    r = _compare(tmp_path, {"cold_p95_ms slurm": 12.73, "page_cold_s /failures": 1.01},
                 {"cold_p95_ms slurm": 9.62, "page_cold_s /failures": 1.25})  # fmt: skip
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith(("cold", "page"))}
    assert lines["cold_p95_ms"].endswith("(within 5 ms)"), r.stdout
    assert lines["page_cold_s"].endswith("MOVED"), r.stdout
    assert r.returncode == 1
    r = _compare(tmp_path, {"cold_p95_ms slurm": 12.73}, {"cold_p95_ms slurm": 9.62},
                 "--noise-ms", "1")  # fmt: skip
    assert r.returncode == 1 and "MOVED" in r.stdout


def test_unreadable_run_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text("{}")
    r = _run_compare(tmp_path / "a.json", tmp_path / "b.json")
    assert r.returncode == 2
    assert "cannot read the runs" in r.stderr


def test_two_make_bench_runs_are_compared_benchmark_by_benchmark(tmp_path: Path) -> None:
    """Directories of NAME.json (benchmarks/all.py's runs): each figure named by its benchmark,
    so a figure of the same name in two benchmarks is judged apart."""
    one, two = tmp_path / "run1", tmp_path / "run2"
    for d, cold in ((one, 80.0), (two, 130.0)):
        d.mkdir()
        (d / "dashboard.json").write_text(json.dumps({"worst_cold_p95_ms": cold}))
        (d / "goodput.json").write_text(json.dumps({"worst_cold_p95_ms": 50.0}))
        # a small latency of one benchmark stays under the floor with its name before it
        (d / "dashboard.json").write_text(
            json.dumps({"worst_cold_p95_ms": cold, "cold_p95_ms url": cold / 20})
        )
    r = _run_compare(one, two)
    assert r.returncode == 1, r.stdout
    moved = [ln for ln in r.stdout.splitlines() if ln.endswith("MOVED")]
    assert len(moved) == 1 and moved[0].startswith("dashboard: worst_cold_p95_ms"), r.stdout
    assert "goodput: worst_cold_p95_ms" in r.stdout
    assert "dashboard: cold_p95_ms url" in r.stdout and "(under the floor)" in r.stdout


def test_an_empty_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "b.json").write_text("{}")
    r = _run_compare(tmp_path / "empty", tmp_path / "b.json")
    assert r.returncode == 2
    assert "no benchmark figures" in r.stderr


def test_a_figure_that_is_not_a_number_is_never_recorded(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks import figures

    out = tmp_path / "x.json"
    try:
        figures.write(str(out), {"first_view_s": float("nan"), "server_up_s": 1.0})
    except ValueError as exc:
        assert "first_view_s" in str(exc)
    else:
        raise AssertionError("a NaN figure was written")
    assert not out.exists()
    figures.write(str(out), {"server_up_s": 1.0})
    assert json.loads(out.read_text()) == {"server_up_s": 1.0}


def test_make_bench_refuses_an_unknown_benchmark_before_running_any(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "all.py"), "--only", "dashbaord",
         "--out", str(tmp_path / "run")], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "unknown benchmark(s): dashbaord" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_count_of_zero_in_both_runs_agrees_and_tiny_seconds_are_not_judged(
    tmp_path: Path,
) -> None:
    r = _compare(tmp_path, {"found_signals": 0, "rederive_s": 0.004, "import_s": 10.0},
                 {"found_signals": 0, "rederive_s": 0.008, "import_s": 10.5})  # fmt: skip
    assert r.returncode == 0, r.stdout
    assert "0 figure(s) moved" in r.stdout
    r = _compare(tmp_path, {"found_signals": 0}, {"found_signals": 3})
    assert r.returncode == 1, r.stdout
