"""Failures page queries against replayed stores, cross-checked with direct SQL and the run
summary (dev-64 seed 1: 7 unexpected and 3 planned interruptions in one day)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from telemetry.metrics.summary import run_summary
from telemetry.queries import TimeRange, data_extent
from telemetry.queries import failures as q
from telemetry.store import Store
from tests.conftest import build_store

RUN = "dev-64-s1"


def _last(whole: TimeRange, hours: float) -> TimeRange:
    return TimeRange(whole.end - timedelta(hours=hours), whole.end)


@pytest.mark.parametrize("by", ["component", "category"])
def test_taxonomy_counts_equal_a_direct_count(store: Store, whole: TimeRange, by: str) -> None:
    direct = dict(
        store.rows(
            f"SELECT {by}, count(*) FROM interruptions WHERE run_id = ? AND NOT planned GROUP BY 1",
            [RUN],
        )
    )
    df = q.taxonomy(store, RUN, whole, by)
    seen = {k: c for k, c in zip(df["key"], df["count"], strict=True) if c}
    assert seen == direct
    assert sum(seen.values()) == 7 == run_summary(store, RUN)["interruptions"]["unexpected"]
    assert df["pct"].sum() == pytest.approx(100.0)
    assert "Planned maintenance" not in set(df["key"])  # planned ones are counted apart


def test_reference_series_is_count_over_419(store: Store, whole: TimeRange) -> None:
    df = q.taxonomy(store, RUN, whole).set_index("key")
    assert len(df) == 18
    assert df["ref_count"].sum() == 419
    assert df["ref_pct"].sum() == pytest.approx(100.0)
    assert df.loc["Faulty GPU", "ref_pct"] == pytest.approx(148 / 419 * 100)  # 35.3 %
    assert df.loc["Faulty GPU", "ref_pct_printed"] == 30.1  # as the paper prints it
    cat = q.taxonomy(store, RUN, whole, "category").set_index("key")
    assert cat["ref_count"].sum() == 419
    assert cat.loc["GPU", "ref_count"] == 148 + 72 + 19 + 17 + 6 + 6
    with pytest.raises(ValueError, match="unknown taxonomy grouping"):
        q.taxonomy(store, RUN, whole, "host; DROP TABLE runs")


def test_taxonomy_follows_the_time_range(store: Store, whole: TimeRange) -> None:
    six = q.taxonomy(store, RUN, _last(whole, 6))
    assert dict(six.loc[six["count"] > 0, ["key", "count"]].values) == {
        "Faulty GPU": 1,
        "GPU SRAM Memory": 1,
        "Software Bug": 1,
    }


def test_reliability_agrees_with_the_run_summary(store: Store, whole: TimeRange) -> None:
    r = q.reliability(store, RUN, whole)
    s = run_summary(store, RUN)
    assert (r["unexpected"], r["planned"]) == (7, 3)
    assert r["mtbf_hours"] == pytest.approx(s["mtbf_hours"], abs=1e-3)
    assert 3.0 < r["mtbf_hours"] < 3.6  # ~24 h / 7
    assert r["lost_gpu_hours"] == pytest.approx(s["lost_gpu_hours"], abs=0.05)
    assert r["downtime_hours"] == pytest.approx(s["interruptions"]["downtime_hours"], abs=1e-3)
    assert r["lost_steps"] == s["interruptions"]["lost_steps"]
    assert (r["automated"], r["manual"]) == (10, 0)
    six = q.reliability(store, RUN, _last(whole, 6))
    assert six["unexpected"] == 3  # the run's last 6 h: its wall time minus the first 18 h
    assert six["wall_hours"] == pytest.approx(s["wall_hours"] - 18.0, abs=1e-3)


def test_timeline_lists_every_interruption_in_range(store: Store, whole: TimeRange) -> None:
    df = q.timeline(store, RUN, whole)
    assert len(df) == 10 and df["ts"].is_monotonic_increasing
    gpu = df[df["xid"] == 46].iloc[0]
    assert gpu["xid_name"] == "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR"
    assert gpu["component"] == "Faulty GPU" and gpu["restored_tier"] == "pfs"
    direct = store.scalar(
        "SELECT sum(detect_s + restart_s) FROM interruptions WHERE run_id = ?", [RUN]
    )
    assert df["downtime_s"].sum() == pytest.approx(direct)
    assert len(q.timeline(store, RUN, _last(whole, 6))) == 3
    assert len(q.timeline(store, RUN, whole, limit=4)) == 4


def test_xid_table_decodes_every_code_with_nvidia_action(store: Store, whole: TimeRange) -> None:
    direct = dict(store.rows("SELECT xid, count(*) FROM xid_events GROUP BY xid"))
    df = q.xid_table(store, RUN, whole).set_index("xid")
    assert df["count"].to_dict() == direct == {46: 2, 95: 1, 140: 1, 143: 1}
    assert df.loc[46, "mnemonic"] == "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR"
    assert df.loc[46, "action"] == "RESET_GPU" and df.loc[46, "fatal"] == "yes"
    assert df.loc[46, "hosts"] == "h100-0004, h100-0007"
    assert df.index[0] == 46  # most frequent first


def test_unknown_xid_is_shown_not_dropped(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 5)
    with Store(str(tmp_path / "x.duckdb")) as s:
        s.append(
            "xid_events",
            pd.DataFrame(
                {
                    "ts": [t0, t0 + timedelta(minutes=1), t0 + timedelta(minutes=2)],
                    "host": ["n1", "n1", "n2"],
                    "gpu": pd.array([0, 0, 3], dtype="int16"),
                    "xid": pd.array([999, 79, 999], dtype="int16"),
                    "run_id": [None, None, None],
                    "source": ["test"] * 3,
                }
            ),
        )
        df = q.xid_table(s, None, TimeRange(t0, t0 + timedelta(hours=1))).set_index("xid")
    assert df.loc[999, "mnemonic"] == "unknown XID" and df.loc[999, "count"] == 2
    assert df.loc[999, "fatal"] == "unknown" and df.loc[999, "gpus"] == 2
    assert df.loc[79, "action"] == "RESTART_BM"  # fell off the bus: reboot the node


def test_lemon_ranking_puts_repeat_offenders_first(store: Store, whole: TimeRange) -> None:
    df = q.lemons(store, RUN, whole)
    direct = dict(
        store.rows(
            "SELECT host, count(*) FROM interruptions WHERE run_id = ? AND NOT planned "
            "GROUP BY host",
            [RUN],
        )
    )
    assert dict(zip(df["host"], df["unexpected"], strict=True)) == direct
    # h100-0009 and h100-0004 failed twice; 0009 also logged two XIDs, so it leads
    assert list(df["host"][:2]) == ["h100-0009", "h100-0004"]
    assert df["unexpected"].is_monotonic_decreasing
    top = df.iloc[0]
    assert top["components"] == "GPU HBM3 Memory, GPU SRAM Memory" and top["xids"] == 2
    assert top["last_failure"] == datetime(2026, 1, 5, 19, 15, 56, 186224)


def test_lemon_node_tops_the_lemon_cooling_ranking(tmp_path: Path) -> None:
    path = build_store(
        tmp_path / "lemon.duckdb", "lemon-cooling", seed=0, days=14.0, interval_s=3600.0
    )
    with Store(str(path), read_only=True) as s:
        ext = data_extent(s)
        assert ext is not None
        df = q.lemons(s, "lemon-cooling-s0", ext)
    assert df.iloc[0]["host"] == "h100-0037"  # the scenario's 40x lemon
    assert df.iloc[0]["unexpected"] > df.iloc[1]["unexpected"]  # a repeat offender, alone


def test_lost_gpu_hours_say_their_planned_part_and_unknown_recovery_is_not_zero(
    store: Store, whole: TimeRange
) -> None:
    """#37, 4: the Failures card's lost GPU-hours include planned stops (now said, with their
    part), and "Recovery 0 / 0" read as no recoveries where none was recorded."""
    from app.main import create_app

    create_app(store)  # pages register with an app
    from app.pages.failures import _recovery_card

    r = q.reliability(store, None, whole)
    planned = store.scalar(
        f"SELECT sum(lost_gpu_hours) FILTER (WHERE planned) FROM {q.COSTED}"
    )
    assert r["planned"] > 0 and r["planned_gpu_hours"] == pytest.approx(planned)
    assert 0 < r["planned_gpu_hours"] < r["lost_gpu_hours"]
    told = str(_recovery_card(r))
    assert f"'{r['automated']} / {r['manual']}'" in told and "not recorded" not in told
    unknown = str(_recovery_card(r | {"automated": 0, "manual": 0}))
    total = r["unexpected"] + r["planned"]
    assert "'–'" in unknown and f"not recorded for {total} of {total}" in unknown


def test_an_interruption_naming_no_node_is_not_a_blank_lemon(tmp_path: Path) -> None:
    """A training job posts an interruption without a host (it does not know which node): the
    bad-node ranking showed a row with a blank host, first when it was the only failure (#37)."""
    from telemetry.ingest.records import store_records

    with Store(str(tmp_path / "s.duckdb")) as s:
        one = {"run": "posted", "component": "Faulty GPU", "category": "GPU"}
        recs = [one | {"ts": "2026-01-05T10:00:00Z"},
                one | {"ts": "2026-01-05T11:00:00Z", "host": ""},
                one | {"ts": "2026-01-05T12:00:00Z", "host": "node-3"}]  # fmt: skip
        store_records(s, "interruptions", recs)
        df = q.lemons(s, "posted", TimeRange(datetime(2026, 1, 5), datetime(2026, 1, 6)))
    assert list(df["host"]) == ["node-3"] and list(df["unexpected"]) == [1]
