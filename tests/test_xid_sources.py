"""An XID count is a count only where a stored source could have reported an XID: a kernel log
read for the run, DCGM's XID field in the GPU samples, or an XID event itself
(``queries.xid_sources``). A run imported from its job log alone showed "0 / 0 codes, 0 fatal"
on the Failures page: a claim that no XID happened, which nothing stored can make. It shows
"–" with why; where a source covers the range and reported none, 0 stays."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from telemetry.ingest.records import store_records
from telemetry.queries import TimeRange, data_extent
from telemetry.queries import failures as failq
from telemetry.queries.xid_sources import NO_XID_SOURCE, xid_sources
from telemetry.store import Store
from tests.conftest import bound_store, cli, imported_night
from tests.test_failure_only_logs import _write
from tests.test_time_unknown_failures import _grid

RUN = "dated"
# the NCCL watchdog lines of a job log: dated, no kernel log, no GPU telemetry
DATED = [
    f"[rank{r}]:[E626 06:24:44.{us} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
    f"NumelOut=9801523, Timeout(ms)=600000) ran for 600049 milliseconds before timing out."
    for r, us in ((1, "903881913"), (0, "159932949"), (2, "163004115"))
]
DAY = TimeRange(datetime(2026, 6, 26), datetime(2026, 6, 27))


@pytest.fixture(scope="module")
def logs_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("xid-logs-only")
    path = tmp / "s.duckdb"
    log = _write(tmp / "dated.log", DATED, datetime(2026, 12, 7))
    r = cli("import", "--store", str(path), "--run", RUN, str(log))
    assert r.returncode == 0, (r.stdout, r.stderr)
    return path


@pytest.fixture
def bound(logs_only: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(logs_only, monkeypatch)


def _failures_page(store: Store) -> Any:
    import dash

    from app.main import create_app

    create_app(store)
    return sys.modules[dash.page_registry["pages.failures"]["module"]]


def test_a_run_no_xid_source_covers_shows_xids_unknown_not_zero(bound: Store) -> None:
    assert xid_sources(bound, RUN, DAY) == [] and xid_sources(bound, None, DAY) == []
    failures = _failures_page(bound)
    cards, xid, lemons = failures._summary({"run": RUN, "range": "all"}, None)
    told = str(cards[-1])
    assert "'XIDs'" in told and "'–'" in told and NO_XID_SOURCE in told, told
    assert "0 codes" not in told and "'0'" not in told
    assert "No XIDs in this range" not in str(xid) and NO_XID_SOURCE in str(xid)
    assert "or XIDs on any node" not in str(lemons)


def test_the_lemon_ranking_does_not_count_xids_no_source_reports(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as s:
        down = {"run": "posted", "component": "Faulty GPU", "category": "GPU",
                "ts": "2026-06-26T10:00:00Z", "host": "node-3"}  # fmt: skip
        store_records(s, "interruptions", [down])
        df = failq.lemons(s, "posted", DAY)
        assert list(df["host"]) == ["node-3"] and df["xids"].isna().all()  # not 0
        failures = _failures_page(s)
        rows = _grid(failures._lemon_table(df, []), "fail-lemon-table")
    assert [r["xids"] for r in rows] == ["–"]


def test_a_kernel_log_of_the_run_makes_no_xid_a_zero(tmp_path: Path) -> None:
    """The night's kernel log has an XID 79: counted; over the hours before it the log still
    covers the run, so none is 0, not unknown."""
    path = imported_night(tmp_path)
    from tests.cluster_fixture import RUN as NIGHT

    with Store(str(path), read_only=True) as s:
        ext = data_extent(s)
        assert ext is not None
        assert xid_sources(s, NIGHT, ext) == ["kernel", "events"]
        first = s.scalar("SELECT min(ts) FROM xid_events")
        before = TimeRange(ext.start, first - timedelta(minutes=1))
        assert xid_sources(s, NIGHT, before) == ["kernel"]
        assert failq.xid_table(s, NIGHT, before).empty
        assert failq.lemons(s, NIGHT, ext)["xids"].notna().all()
        failures = _failures_page(s)
        told = str(failures._xid_card(failq.xid_table(s, NIGHT, before), ["kernel"]))
    assert "'0'" in told and "0 codes, 0 fatal" in told


def test_dcgm_samples_with_the_xid_field_cover_their_range(store: Store, whole: TimeRange) -> None:
    assert "dcgm" in xid_sources(store, None, whole)
    after = TimeRange(whole.end + timedelta(days=1), whole.end + timedelta(days=2))
    assert xid_sources(store, None, after) == []  # no sample there: nothing covers it


def test_an_xid_no_line_dates_is_counted_not_zero(tmp_path: Path) -> None:
    """A kernel log of seconds since boot: its XID has no time, so no ``xid_events`` row; the
    kernel log covers the run, and the XID counts (in every range of its run, as its
    interruption does), never "0"."""
    from tests.test_failure_only_logs import NO_CLOCK

    path = tmp_path / "s.duckdb"
    dmesg = ["[ 9123.456] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."]
    logs = [_write(tmp_path / "job.log", NO_CLOCK), _write(tmp_path / "dmesg.log", dmesg)]
    r = cli("import", "--store", str(path), "--run", "r1", *map(str, logs))
    assert r.returncode == 0, (r.stdout, r.stderr)
    with Store(str(path), read_only=True) as s:
        assert xid_sources(s, "r1", DAY) == ["kernel"]
        df = failq.xid_table(s, "r1", DAY)
        assert (list(df["xid"]), list(df["count"]), list(df["untimed"])) == ([79], [1], [1])
        failures = _failures_page(s)
        card = str(failures._xid_card(df, ["kernel"]))
        rows = _grid(failures._xid_table(df, ["kernel"]), "fail-xid-table")
    assert "'1'" in card and "(1 at a time unknown)" in card, card
    assert [r["last_ts"] for r in rows] == ["time unknown"]


def test_node_health_of_a_range_nothing_judged_says_unknown_not_0_findings(bound: Store) -> None:
    # its rules judge XIDs and Slurm's job ends: a job log alone gives them nothing, so "0
    # finding(s) of 0 rule(s) on 0 node(s)" was a claim nothing stored can make
    from app.data import node_health as nhd
    from app.pages._node_health import summary

    told = summary(nhd.health(DAY))
    assert told.startswith("Findings unknown: no XIDs"), told
    assert "0 finding(s)" not in told


def test_node_health_of_a_replay_counts_its_findings(
    dev_store: Path, whole: TimeRange, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.data import node_health as nhd
    from app.pages._node_health import summary

    for _ in bound_store(dev_store, monkeypatch):
        told = summary(nhd.health(whole))
        assert "finding(s) of" in told and "unknown" not in told, told
