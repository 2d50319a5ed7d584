"""A store that holds a cluster's Slurm accounting and nothing else yet (``import --slurm``
before any scrape): its jobs, node health and day accounting have a range, the header does not
say "no data stored yet", and a range ending at midnight does not add an empty day after it."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.queries import TimeRange, data_extent
from telemetry.store import Store
from tests.jobs_fixture import T0, insert_jobs, job


def _slurm_only(path: Path) -> Path:
    with Store(str(path)) as s:
        insert_jobs(s, [job(1, ["n0"], 0, 60, "COMPLETED"), job(2, ["n1"], 30, None, "RUNNING")])
        drained = T0 - timedelta(hours=2)
        with s.transaction(["slurm_node_events", "slurm_nodes"]) as con:
            con.execute(
                "INSERT INTO slurm_node_events VALUES (?, 'n1', 'DRAIN', 'bad gpu', 'root', ?, ?)",
                [drained, drained, drained],
            )
            con.execute(
                "INSERT INTO slurm_nodes (host, state, reason, reason_user, reason_ts, polled_ts) "
                "VALUES ('n1', 'DRAINED', 'bad gpu', 'root', ?, ?), "
                "('n0', 'IDLE', NULL, NULL, NULL, ?)",
                [drained, T0 + timedelta(hours=4), T0 + timedelta(hours=4)],
            )
    return path


def test_a_slurm_only_store_has_the_span_of_its_jobs_and_node_events(tmp_path: Path) -> None:
    with Store(str(_slurm_only(tmp_path / "s.duckdb")), read_only=True) as s:
        ext = data_extent(s)
    # from the drain two hours before the first job to the running job's last poll (4 h)
    assert ext == TimeRange(T0 - timedelta(hours=2), T0 + timedelta(hours=4))


def test_an_empty_store_still_has_no_range(tmp_path: Path) -> None:
    with Store(str(tmp_path / "e.duckdb")) as s:
        assert data_extent(s) is None


def test_a_range_ending_at_midnight_has_no_day_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.data.accounting import days_of
    from tests.conftest import bound_store

    for _ in bound_store(_slurm_only(tmp_path / "s.duckdb"), monkeypatch):
        two = days_of(TimeRange(datetime(2026, 1, 4, 6), datetime(2026, 1, 6)))
        within = days_of(TimeRange(datetime(2026, 1, 5, 6), datetime(2026, 1, 5, 7)))
    assert two == (datetime(2026, 1, 4), 2)  # the 4th and the 5th, not the 6th
    assert within == (datetime(2026, 1, 5), 1)


def test_a_node_named_in_the_jobs_filter_says_why_it_is_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "What ran on node X, and why is it drained": the Jobs page's name filter holding a
    node's name (any case) lists its jobs and says its state, since when, why and who set
    it; a node in service says so; a name that is no node adds nothing."""
    from app.main import create_app
    from tests.conftest import bound_store

    for st in bound_store(_slurm_only(tmp_path / "s.duckdb"), monkeypatch):
        create_app(st)
        from app.pages import jobs as page  # registered with an app

        view = {"range": "all"}
        drained = str(page.grid_for(view, {"name": "N1"})[0])
        idle = str(page.grid_for(view, {"name": "n0"})[0])
        none = str(page.grid_for(view, {"name": "job-1"})[0])
    assert (
        "Node n1 at Slurm's last word: DRAINED (drained since 2026-02-28 22:00, 6.0 h)" in drained
    )
    assert "reason \u201cbad gpu\u201d, set by root" in drained
    assert "In this range: drained 2026-02-28 22:00 \u2192 still" in drained
    assert "'2'" in drained and "'1'" not in drained  # job 2 ran on n1, job 1 did not
    assert "Node n0 at Slurm's last word: IDLE, in service." in idle
    assert "never drained or down" in idle
    assert "Slurm's last word" not in none
