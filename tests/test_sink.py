"""The store sink on its own: fixture scrapes as fetches, a real store file per test.

HTTP is covered in test_ingest.py; here the rounds are built from checked-in exporter text so a
test controls exactly what each round carries.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from telemetry.errors import DuplicateBatchError
from telemetry.ingest.seam import Round
from telemetry.ingest.sink import STALE_HORIZON_S, RoundReport, StoreSink
from telemetry.ingest.targets import Fetch, Target
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store
from tests.conftest import ROOT

FIXTURES = ROOT / "sample_data" / "dcgm"
T0 = datetime(2026, 3, 1, 12, 0, 0)
XID_TEXT = (FIXTURES / "xid.txt").read_text()
XID_COUNT_LABELLED = re.compile(r"^DCGM_EXP_XID_ERRORS_COUNT\{[^\n]*xid=\"[0-9]+\"\} .*\n", re.M)


def fetch(text: str | None, url: str = "http://node-a:9400/metrics") -> Fetch:
    return Fetch(Target(url), text, None if text is not None else "refused", 0.01)


def at(round_no: int) -> datetime:
    return T0 + timedelta(seconds=15 * round_no)


def default_text(host: str) -> str:
    return re.sub("dgx-h100-017", host, (FIXTURES / "default_h100.txt").read_text())


class _Written:
    """Rounds through the store writer, which runs the rollups after each (``after_write``)."""

    def __init__(self, store: Store) -> None:
        self.writer = StoreWriter(store)

    def write(self, ts: datetime, fetches: list[Fetch]) -> RoundReport:
        return self.writer.write(Round(ts, fetches, 0)).report  # type: ignore[return-value]


def test_failed_append_rolls_back_the_rounds_new_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round whose append fails registers nothing; the next rounds store consistent ids."""
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)
        real = store.append_many

        def broken(batches: dict[str, Any], **kw: Any) -> int:
            # targets is appended last: nodes, gpus and samples are in when it fails.
            bad = dict(batches, targets=batches["targets"].assign(surplus=1))
            return real(bad, **kw)

        monkeypatch.setattr(store, "append_many", broken)
        with pytest.raises(duckdb.Error):
            sink.write(at(0), [fetch(default_text("node-a"))])
        assert store.scalar("SELECT count(*) FROM gpus") == 0  # rolled back whole
        monkeypatch.setattr(store, "append_many", real)
        sink.write(at(1), [fetch(default_text("node-b"), "http://node-b:9400/metrics")])
        report = sink.write(
            at(2),
            [fetch(default_text("node-a")), fetch(default_text("node-b"), "http://b/metrics")],
        )
        assert report.samples == 16
        gpus = store.df("SELECT gpu_id, node_id, host FROM gpus ORDER BY gpu_id")
        assert gpus["gpu_id"].tolist() == list(range(16))
        assert gpus.groupby("host")["node_id"].nunique().eq(1).all()
        assert store.scalar("SELECT count(DISTINCT node_id) FROM nodes") == 2
        orphans = """SELECT count(*) FROM gpu_samples s LEFT JOIN gpus g USING (gpu_id)
                     WHERE g.host IS NULL"""
        assert store.scalar(orphans) == 0
        assert store.scalar("SELECT count(*) FROM gpu_samples") == 8 + 16


def test_xid_counts_survive_a_restart(tmp_path: Path) -> None:
    """Two sinks in sequence over one store file (a daemon restarted): the same XID count seen
    again is not a new event."""
    path = str(tmp_path / "s.duckdb")
    with Store(path) as store:
        assert StoreSink(store).write(at(0), [fetch(XID_TEXT)]).xid_events == 3
    with Store(path) as store:
        again = StoreSink(store).write(at(1), [fetch(XID_TEXT)])
        assert again.xid_events == 0
        assert store.scalar("SELECT count(*) FROM xid_events") == 3
        # the count's labels are kept in the stored series name
        names = [f for (f,) in store.rows("SELECT DISTINCT field FROM gpu_samples_extra")]
        assert any(f.startswith("DCGM_EXP_XID_ERRORS_COUNT{") and 'xid="79"' in f for f in names)


def test_an_xid_that_left_the_window_and_recurs_is_a_new_event(tmp_path: Path) -> None:
    without = XID_COUNT_LABELLED.sub("", XID_TEXT)
    assert 'xid="' not in without
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)
        assert sink.write(at(0), [fetch(XID_TEXT)]).xid_events == 3
        assert sink.write(at(1), [fetch(without)]).xid_events == 0  # the window emptied
        # The same XIDs counted again: new occurrences (the sticky gauge did not change).
        assert sink.write(at(2), [fetch(XID_TEXT)]).xid_events == 3


@pytest.mark.parametrize("silent_h", [2, 30, 24 * 9])
def test_a_node_silent_for_long_returns_after_a_restart_without_repeating_its_xid(
    tmp_path: Path, silent_h: int
) -> None:
    """The daemon restarts while a node has been silent (down for 2 h, a day, over a week):
    its sticky XID gauge, unchanged when it comes back, is not a new event; a gauge that was
    reset (a reboot) and shows the XID again is one. The sink reads the last gauges in windows
    growing back from the newest sample, so each of these cases takes a different window."""
    gauge_only = XID_COUNT_LABELLED.sub("", XID_TEXT)
    reset = re.sub(r"^(DCGM_FI_DEV_XID_ERRORS\{[^\n]*\}) \d+$", r"\1 0", gauge_only, flags=re.M)
    other = "http://node-b:9400/metrics"
    back = T0 + timedelta(hours=silent_h)
    path = str(tmp_path / "s.duckdb")
    with Store(path) as store:
        sink = StoreSink(store)
        assert sink.write(at(0), [fetch(gauge_only)]).xid_events == 2  # XID 48 and 79
        sink.write(at(1), [fetch(default_text("node-b"), other)])
        sink.write(back - timedelta(minutes=1), [fetch(default_text("node-b"), other)])
    with Store(path) as store:  # restarted; node-a is back, XIDs unchanged
        assert StoreSink(store).write(back, [fetch(gauge_only)]).xid_events == 0
        StoreSink(store).write(back + timedelta(seconds=15), [fetch(reset)])
    with Store(path) as store:  # restarted again; after the reset the XIDs are new
        again = StoreSink(store).write(back + timedelta(seconds=30), [fetch(gauge_only)])
        assert again.xid_events == 2
        assert store.scalar("SELECT count(*) FROM xid_events") == 4


def test_an_xid_gauge_missing_from_recent_scrapes_is_still_remembered(tmp_path: Path) -> None:
    """The exporter stopped exporting the XID gauge for a while (a changed counter list), then
    exports it again, unchanged, after a daemon restart. A running daemon keeps the last gauge
    across scrapes without it; a restarted one must too, not report XID 48 and 79 again."""
    gauge_only = XID_COUNT_LABELLED.sub("", XID_TEXT)
    no_gauge = re.sub(r"^(# \w+ )?DCGM_FI_DEV_XID_ERRORS.*\n", "", gauge_only, flags=re.M)
    assert "XID_ERRORS" not in no_gauge.replace("DCGM_EXP_XID_ERRORS_COUNT", "")
    later = T0 + timedelta(hours=2)
    path = str(tmp_path / "s.duckdb")
    with Store(path) as store:
        sink = StoreSink(store)
        assert sink.write(at(0), [fetch(gauge_only)]).xid_events == 2
        sink.write(later, [fetch(no_gauge)])
    with Store(path) as store:  # restarted: the newest hour holds only scrapes without it
        back = StoreSink(store).write(later + timedelta(seconds=15), [fetch(gauge_only)])
        assert back.xid_events == 0
        assert store.scalar("SELECT count(*) FROM xid_events") == 2
    with Store(str(tmp_path / "live.duckdb")) as store:  # the same scrapes in one process
        sink = StoreSink(store)
        rounds = [
            (at(0), gauge_only),
            (later, no_gauge),
            (later + timedelta(seconds=15), gauge_only),
        ]
        assert [sink.write(t, [fetch(text)]).xid_events for t, text in rounds] == [2, 0, 0]


def test_a_count_older_than_its_window_is_not_compared(tmp_path: Path) -> None:
    path = str(tmp_path / "s.duckdb")
    with Store(path) as store:
        StoreSink(store).write(at(0), [fetch(XID_TEXT)])
    with Store(path) as store:  # back after 10 minutes: the 5-minute window has turned over
        report = StoreSink(store).write(at(40), [fetch(XID_TEXT)])
        assert report.xid_events == 3


def test_a_target_whose_values_do_not_change_is_stale(tmp_path: Path) -> None:
    other = default_text("dgx-h100-017").rstrip("\n") + "1\n"  # one counter moved on
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store, stale_after=4)
        same = default_text("dgx-h100-017")
        stale = [sink.write(at(i), [fetch(same)]).stale for i in range(5)]
        assert stale == [0, 0, 0, 1, 1]  # four identical scrapes in a row
        assert sink.write(at(5), [fetch(other)]).stale == 0
        assert sink.write(at(6), [fetch(None)]).up == 0  # down is down, not stale
        assert [sink.write(at(7 + i), [fetch(other)]).stale for i in range(4)] == [0, 0, 0, 1]
        flags = [s for (s,) in store.rows("SELECT stale FROM targets ORDER BY ts")]
        assert flags == [False] * 3 + [True] * 2 + [False] * 5 + [True]
    with pytest.raises(ValueError, match="stale_after"):
        StoreSink(Store(str(tmp_path / "t.duckdb")), stale_after=1)


def test_staleness_carries_over_restarts_and_once_runs_from_cron(tmp_path: Path) -> None:
    """`ingest --once` from cron: every round is a new process with a new sink. A hung DCGM
    (the same values every minute) is still flagged after four rounds; an hour's gap starts the
    count over."""
    path = str(tmp_path / "s.duckdb")
    same = default_text("node-a")

    def once(when: datetime, text: str) -> int:
        with Store(path) as store:
            return StoreSink(store, stale_after=4).write(when, [fetch(text)], None, 60.0).stale

    minute = timedelta(minutes=1)
    assert [once(T0 + i * minute, same) for i in range(5)] == [0, 0, 0, 1, 1]
    later = T0 + 5 * minute + timedelta(seconds=STALE_HORIZON_S + 1)
    assert [once(later + i * minute, same) for i in range(4)] == [0, 0, 0, 1]
    changed = same.replace("} 60\n", "} 61\n", 1)
    assert changed != same
    assert once(later + 4 * minute, changed) == 0


def test_a_target_down_before_a_restart_starts_its_count_over(tmp_path: Path) -> None:
    """A running daemon forgets a target's count when it does not answer; a restarted one (or
    the next `--once` from cron) must too, not carry on from the round before the outage."""
    path = str(tmp_path / "s.duckdb")
    same = default_text("node-a")
    minute = timedelta(minutes=1)

    def once(i: int, text: str | None) -> int:
        with Store(path) as store:
            sink = StoreSink(store, stale_after=4)
            return sink.write(T0 + i * minute, [fetch(text)], None, 60.0).stale

    assert [once(i, same) for i in range(3)] == [0, 0, 0]  # unchanged 0, 1, 2
    assert once(3, None) == 0  # down
    assert [once(4 + i, same) for i in range(4)] == [0, 0, 0, 1]  # counted afresh
    with Store(str(tmp_path / "live.duckdb")) as store:  # the same rounds in one process
        sink = StoreSink(store, stale_after=4)
        texts = [same] * 3 + [None] + [same] * 4
        live = [
            sink.write(T0 + i * minute, [fetch(t)], None, 60.0).stale for i, t in enumerate(texts)
        ]
        assert live == [0, 0, 0, 0, 0, 0, 0, 1]


def test_target_health_per_target_in_one_round(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        report = StoreSink(store).write(
            at(0),
            [
                fetch(default_text("node-a")),
                fetch(None, "http://dead:9400/metrics"),
                fetch("exporter_up 1\n", "http://empty:9400/metrics"),
                fetch(default_text("node-b"), "http://node-b:9400/metrics"),
            ],
        )
        assert (report.targets, report.up, report.samples) == (4, 2, 16)
        health = store.df("SELECT target, up, samples, error, stale FROM targets ORDER BY target")
        by = health.set_index("target")
        assert by.loc["http://dead:9400/metrics", "error"] == "refused"
        assert by.loc["http://empty:9400/metrics", "error"] == "no GPU samples in the scrape"
        assert (
            by.loc["http://node-a:9400/metrics", "samples"]
            == by.loc["http://node-b:9400/metrics", "samples"]
        )
        assert not health["stale"].any()


def test_a_duplicate_batch_id_writes_nothing_and_changes_no_state(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)
        sink.write(at(0), [fetch(XID_TEXT)], batch_id="round-0")
        with pytest.raises(DuplicateBatchError):
            sink.write(at(0), [fetch(XID_TEXT), fetch(default_text("node-b"))], batch_id="round-0")
        report = sink.write(at(1), [fetch(XID_TEXT), fetch(default_text("node-b"))])
        assert report.xid_events == 0 and report.samples == 16
        assert store.df("SELECT gpu_id FROM gpus ORDER BY 1")["gpu_id"].tolist() == list(range(16))


def test_a_store_from_before_the_staleness_columns_takes_rounds(tmp_path: Path) -> None:
    """A store written by an earlier version (targets without digest/unchanged): opened for
    ingest, it gains the columns and the next round stores its health, old rows kept."""
    path = str(tmp_path / "s.duckdb")
    with Store(path) as store:
        StoreSink(store).write(at(0), [fetch(default_text("node-a"))])
    con = duckdb.connect(path)
    con.execute("ALTER TABLE targets DROP COLUMN unchanged")
    con.execute("ALTER TABLE targets DROP COLUMN digest")
    con.close()
    with Store(path) as store:
        StoreSink(store).write(at(1), [fetch(default_text("node-a"))])
        rows = store.rows("SELECT up, digest IS NOT NULL, unchanged FROM targets ORDER BY ts")
        assert rows == [(True, False, None), (True, True, 0)]


def _tables(store: Store) -> dict[str, list[tuple]]:
    """The stored data a round changes, in a fixed order (rollups included)."""
    queries = {
        "gpu_samples": "SELECT * FROM gpu_samples ORDER BY ts, gpu_id",
        "gpu_samples_extra": "SELECT * FROM gpu_samples_extra ORDER BY ts, gpu_id, field",
        "node_tick": "SELECT * FROM node_tick ORDER BY ts, node_id",
        "node_rollup": "SELECT * FROM node_rollup ORDER BY bucket_s, ts, node_id",
        "fleet_rollup": "SELECT * FROM fleet_rollup ORDER BY bucket_s, ts",
        "xid_events": "SELECT * FROM xid_events ORDER BY ts, host, gpu, xid",
    }
    return {name: store.rows(sql) for name, sql in queries.items()}


def test_a_late_round_is_stored_without_disturbing_newer_data_or_state(tmp_path: Path) -> None:
    """A round older than one already written (a second daemon's backlog, a re-queued spool
    file): it is stored and its rollup bucket rebuilt, while the newer rounds' data, rollups and
    the XID state they left stay as they were. Written in order or not, the store ends the same,
    and the next round's XIDs are judged against the newest round, not the late one."""
    gauge_only = XID_COUNT_LABELLED.sub("", XID_TEXT)  # XID 48 on GPU 2, 79 on GPU 5
    reset = re.sub(r"^(DCGM_FI_DEV_XID_ERRORS\{[^\n]*\}) \d+$", r"\1 0", gauge_only, flags=re.M)
    busier = re.sub(r"^(DCGM_FI_DEV_GPU_UTIL\{[^\n]*\}) \d+$", r"\1 3", reset, flags=re.M)
    assert busier != reset
    late, newer, next_ = T0 + timedelta(minutes=2), T0 + timedelta(minutes=10), at(41)
    rounds = {late: busier, newer: gauge_only, next_: gauge_only}

    def store_in(name: str, order: list[datetime]) -> tuple[list[int], dict[str, list[tuple]]]:
        with Store(str(tmp_path / name)) as store:
            sink = _Written(store)
            events = [sink.write(t, [fetch(rounds[t])]).xid_events for t in order]
            return events, _tables(store)

    in_order, expected = store_in("in-order.duckdb", [late, newer, next_])
    events, got = store_in("late.duckdb", [newer, late, next_])
    assert in_order == [0, 2, 0]
    assert events == [2, 0, 0]  # the late round's zero gauges did not make 48 and 79 new again
    assert got == expected
    assert {r[0] for r in got["gpu_samples"]} == {late, newer, next_}
    assert any(r[1] == late for r in got["node_rollup"])  # the late round's bucket was built


def test_a_late_round_does_not_reset_a_stale_targets_count(tmp_path: Path) -> None:
    """A hung DCGM's identical scrapes keep the target stale even when a late round with other
    values (from before it hung) is written in between."""
    same, other = default_text("node-a"), default_text("node-a").replace("} 60\n", "} 61\n", 1)
    assert same != other
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store, stale_after=4)
        assert [sink.write(at(10 + i), [fetch(same)]).stale for i in range(4)] == [0, 0, 0, 1]
        sink.write(at(1), [fetch(other)])  # late
        assert sink.write(at(14), [fetch(same)]).stale == 1
        rows = store.rows("SELECT ts, stale FROM targets ORDER BY ts")
        assert rows[0] == (at(1), False) and rows[-1] == (at(14), True) and len(rows) == 6
    with Store(str(tmp_path / "s.duckdb")) as store:  # a restarted sink agrees
        assert StoreSink(store, stale_after=4).write(at(15), [fetch(same)]).stale == 1


def test_a_rounds_refresh_builds_the_per_gpu_hours_when_five_minutes_close(
    tmp_path: Path,
) -> None:
    """A scrape round's refresh keeps the finest per-GPU level (5 min) current and builds the
    hours and 6 hours when a 5-minute bucket closes, so they lag by at most 5 minutes; the
    fleet's hourly energy stays filled meanwhile, and a full refresh brings every level up."""
    fetches = [
        fetch(default_text(host), f"http://{host}:9400/metrics") for host in ("node-a", "node-b")
    ]

    def counts(store: Store) -> dict[int, int]:
        rows = store.rows("SELECT bucket_s, sum(samples) FROM gpu_rollup GROUP BY ALL")
        return {int(level): int(n) for level, n in rows}

    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = _Written(store)
        samples = "SELECT count(*) FROM gpu_samples"
        sink.write(at(0), fetches)  # 12:00:00: the first round builds every level
        first = store.scalar(samples)
        assert counts(store) == {300: first, 3600: first, 21600: first}
        for k in range(1, 20):  # 12:00:15 ... 12:04:45, within the first 5 minutes
            sink.write(at(k), fetches)
        now = store.scalar(samples)
        assert counts(store) == {300: now, 3600: first, 21600: first}
        energy = "SELECT gpu_hours FROM fleet_rollup WHERE bucket_s = 3600 AND ts = ?"
        gpus = store.scalar("SELECT count(*) FROM gpus")
        assert store.scalar(energy, [T0]) == gpus == 16  # their hours as last built, not NULL
        sink.write(at(20), fetches)  # 12:05:00: the first 5 minutes closed
        now = store.scalar(samples)
        assert counts(store) == {300: now, 3600: now, 21600: now}
        sink.write(at(21), fetches)
        assert counts(store)[3600] == now < store.scalar(samples)
        store.refresh_rollups()  # a full refresh (a replay's, a store opened) builds them all
        now = store.scalar(samples)
        assert counts(store) == {300: now, 3600: now, 21600: now}


def test_the_round_that_passes_midnight_keeps_the_whole_day_per_gpu(tmp_path: Path) -> None:
    """Per-GPU days are built from the 6-hour buckets when the data passes the day's end; the
    round that does is the first of a 5-minute bucket, so a scrape's (lazy) refresh has built
    the day's last 6 hours, with every sample of the day, just before."""
    fetches = [fetch(default_text("node-a"))]
    start = datetime(2026, 3, 1, 23, 55, 0)
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = _Written(store)
        for k in range(22):  # 23:55:00 ... 00:00:15
            sink.write(start + timedelta(seconds=15 * k), fetches)
        day = "SELECT sum(samples) FROM gpu_rollup WHERE bucket_s = 86400 AND ts = ?"
        before = "SELECT count(*) FROM gpu_samples WHERE ts < ?"
        midnight = datetime(2026, 3, 2)
        assert store.scalar(day, [datetime(2026, 3, 1)]) == store.scalar(before, [midnight]) == 160
