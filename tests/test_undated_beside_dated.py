"""A store holding a run no line dates beside a dated one (two logs imported with the user's
command: a watchdog timeout with its times, and one from an older PyTorch that prints none).
The undated run's time is unknown, never the other run's: its header said "data to
2026-06-26 06:24 UTC, 165 days ago" (the dated run's end), its Interruptions card "0 in the
last 24 h of data" for an interruption no line dates, and both runs, stopped long ago, showed
"Job not training" as a firing alert, though ``summary`` says each stopped (nothing resumed
it): a run whose stop is known has "Run stopped", and one no line dates has no alert judged at
a time."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from telemetry.store import Store
from tests.conftest import bound_store, cli
from tests.test_failure_only_logs import NO_CLOCK, WATCHDOG, _write

DATED_END = "2026-06-26"  # the watchdog lines' day (no year in them: the file's mtime's)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("undated-beside-dated")
    path = tmp / "s.duckdb"
    dated = _write(tmp / "dated.log", WATCHDOG, mtime=datetime(2026, 12, 7))
    for run, log in (("dated", dated), ("undated", _write(tmp / "undated.log", NO_CLOCK))):
        r = cli("import", "--store", str(path), "--run", run, str(log))
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert f"run {run}: 1 interruption(s) inferred" in r.stdout, r.stdout
    return path


def _runs(store: Path) -> dict[str, dict[str, Any]]:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    return {run["run_id"]: run for run in json.loads(r.stdout)["runs"]}


def _pages(bound: Store) -> tuple[Any, Any]:
    import dash

    from app.main import create_app
    from app.shell import header

    create_app(bound)
    return header, sys.modules[dash.page_registry["pages.overview"]["module"]]


@pytest.fixture
def bound(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(store, monkeypatch)


def test_the_undated_run_is_told_with_no_other_runs_time(store: Path, bound: Store) -> None:
    runs = _runs(store)
    assert runs["undated"]["wall_end"] is None and runs["dated"]["wall_end"].startswith(DATED_END)
    assert runs["undated"]["state"] == runs["dated"]["state"] == "stopped"
    header, overview = _pages(bound)
    for preset in ("all", "24h"):
        view = {"run": "undated", "range": preset}
        said = header._updated(view) + " " + header._age(view, True)[0]
        assert DATED_END not in said and "ago" not in said, said
        assert "time unknown" in said and "the run stopped: nothing resumed it" in said, said
        assert "Live, but nothing new" not in said  # no time to be new since
        # the card counts the run's one interruption at a time unknown, never "0 in 24 h"
        cards = str(overview._run_panel(view, None, None))
        assert "'1 + 0'" in cards and "(1 at a time unknown)" in cards, cards
        assert "0 in the last 24 h" not in cards and "– in the last 24 h" in cards
        # no alert of the run judged at the other run's time; nothing followed: none is now
        alerts = str(overview._alert_panel(view, None, None))
        assert "Job not training" not in alerts and "time is unknown" in alerts, alerts
        assert "no alert can be active now" in alerts
    # the dated run keeps its own time, and its count of the last 24 h
    view = {"run": "dated", "range": "all"}
    said = header._updated(view) + " " + header._age(view, True)[0]
    assert f"data to {DATED_END} 06:24 UTC" in said and "nothing resumed it" in said, said
    cards = str(overview._run_panel(view, None, None))
    assert "1 in the last 24 h of data" in cards and "time unknown" not in cards, cards


def test_a_run_that_stopped_is_not_told_as_not_training(store: Path, bound: Store) -> None:
    from telemetry.metrics.alert_rules import active_alerts
    from telemetry.queries import data_extent

    ext = data_extent(bound)
    assert ext is not None
    for run in ("dated", "undated"):
        names = set(active_alerts(bound, run, ext)["alert"])
        assert "Job not training" not in names, (run, names)
    # the dated run's stop is its alert: what summary says of it (stopped, nothing resumed it)
    found = active_alerts(bound, "dated", ext).set_index("alert")
    assert "NCCL watchdog timeout" in found.at["Run stopped", "detail"]
    _header, overview = _pages(bound)
    told = str(overview._alert_panel({"run": "dated", "range": "all"}, None, None))
    assert "Run stopped" in told and "Job not training" not in told, told
    assert "In this run, to its end" in told  # its history, not what is active now


def test_a_dated_run_with_an_undated_interruption_counts_it_apart(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dated run with one interruption no line dates besides its dated one (as the records
    API stores one posted without a time): the card's last 24 h are those of the dated ones,
    and the other is said at a time unknown, as the Failures page says it."""
    path = tmp_path / "s.duckdb"
    shutil.copy(store, path)
    with Store(str(path)) as s, s.transaction(["interruptions"]) as con:
        con.execute(
            "INSERT INTO interruptions (run_id, ts, component, category, planned, description) "
            "VALUES ('dated', NULL, 'GPU', 'Faulty GPU', false, 'posted without a time')"
        )
    assert _runs(path)["dated"]["interruptions"]["unexpected"] == 2
    for s in bound_store(path, monkeypatch):
        _header, overview = _pages(s)
        cards = str(overview._run_panel({"run": "dated", "range": "all"}, None, None))
        assert "'2 + 0'" in cards and "(1 at a time unknown)" in cards, cards
        assert "1 dated in the last 24 h of data" in cards, cards
