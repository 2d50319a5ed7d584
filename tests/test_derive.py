"""Derived interruptions in a real store: inferred from signals, replaced only when they change,
beaten by a posted record of the same stop, and corrected by an operator for good."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pandas as pd
import pytest

from telemetry.derive import derive
from telemetry.ingest.records import store_records
from telemetry.store import Store

T0 = datetime(2026, 3, 1, 8, 0, 0)


def _metrics(run: str, spans: list[tuple[datetime, int, int]], every_s: float = 10.0) -> list:
    """Progress lines: for each (start time, first step, last step) one metric per step."""
    out = []
    for start, a, b in spans:
        for i, step in enumerate(range(a, b + 1)):
            out.append({"run": run, "ts": (start + timedelta(seconds=i * every_s)).isoformat(),
                        "step": step, "loss": 3.0 - step * 1e-4})  # fmt: skip
    return out


def _signal(ts: datetime, kind: str, host: str, run: str | None = "atlas", **kw: object) -> dict:
    row = {"ts": ts, "run_id": run, "host": host, "gpu": None, "kind": kind, "xid": None}
    row |= {"detail": "", "origin": "node-7-kern.log:12", "line": f"{kind} line", "source": "log"}
    return row | kw


@pytest.fixture
def store(tmp_path) -> Store:  # type: ignore[no-untyped-def]
    s = Store(str(tmp_path / "s.duckdb"))
    yield s
    s.close()


def _two_failures(store: Store) -> None:
    """Steps 0..300, stop (XID 79 on node-7), resume from 200; run to 500, stop (IB error),
    resume from 400."""
    first_stop = T0 + timedelta(seconds=3000)
    back1 = first_stop + timedelta(minutes=20)
    second_stop = back1 + timedelta(seconds=3000)
    back2 = second_stop + timedelta(minutes=15)
    spans = [(T0, 0, 300), (back1, 201, 500), (back2, 401, 600)]
    rep = store_records(store, "train_metrics", _metrics("atlas", spans), source="import")
    assert rep.stored == 301 + 300 + 200
    sig = pd.DataFrame(
        [
            _signal(
                first_stop + timedelta(seconds=30),
                "xid",
                "node-7",
                xid=79,
                detail="GPU has fallen off the bus",
            ),  # fmt: skip
            _signal(first_stop + timedelta(minutes=10), "nccl_timeout", "node-3"),
            _signal(second_stop + timedelta(seconds=20), "ib_error", "node-5"),
        ]
    ).astype({"gpu": "Int16", "xid": "Int16"})
    store.append("signals", sig)
    ck = pd.DataFrame(
        {
            "run_id": ["atlas"] * 2,
            "step": [200, 400],
            "tier": ["pfs", "pfs"],
            "start_ts": [T0 + timedelta(seconds=1990), back1 + timedelta(seconds=1990)],
            "end_ts": [T0 + timedelta(seconds=2000), back1 + timedelta(seconds=2000)],
            "status": ["ok", "ok"],
            "path": ["/lustre/ckpt/atlas/iter_0000200", "/lustre/ckpt/atlas/iter_0000400"],
        }
    )
    store.append("checkpoints", ck)


def _inferred(store: Store) -> pd.DataFrame:
    return store.df(
        "SELECT * FROM interruptions WHERE run_id = 'atlas' AND source = 'inferred' ORDER BY ts"
    )


def test_a_job_that_failed_twice_gets_two_interruptions_with_their_causes(store: Store) -> None:
    _two_failures(store)
    (res,) = derive.derive(store)
    assert res.changed and res.interruptions == 2
    df = _inferred(store)
    assert list(df["component"]) == ["Faulty GPU", "Network Switch/Cable"]
    assert list(df["category"]) == ["GPU", "Network"]
    assert list(df["restored_step"]) == [200, 400]
    assert list(df["restored_tier"]) == ["pfs", "pfs"]
    assert list(df["lost_steps"]) == [100, 100]
    assert df["host"].iloc[0] == "node-7" and int(df["xid"].iloc[0]) == 79
    ev = json.loads(df["evidence"].iloc[0])
    assert ev[0]["role"] == "cause" and ev[0]["kind"] == "xid"
    assert any(e["kind"] == "nccl_timeout" and e["role"] == "cascade" for e in ev)
    # The run's GPU count is unknown: lost GPU-hours are unknown, never 0.
    assert df["lost_gpu_hours"].isna().all()


def test_rederiving_the_same_data_writes_nothing(store: Store) -> None:
    _two_failures(store)
    derive.derive(store)
    version = store.version
    (res,) = derive.derive(store)
    assert not res.changed and store.version == version
    assert len(_inferred(store)) == 2


def test_a_posted_record_of_the_same_stop_wins(store: Store) -> None:
    _two_failures(store)
    stop = T0 + timedelta(seconds=3000)
    rec = {"run": "atlas", "ts": (stop + timedelta(minutes=1)).isoformat(),
           "component": "GPU HBM3 Memory", "category": "GPU"}  # fmt: skip
    assert store_records(store, "interruptions", [rec], source="api").stored == 1
    derive.derive(store)
    all_rows = store.df("SELECT component, source FROM interruptions ORDER BY ts")
    assert list(all_rows["source"]) == ["api", "inferred"]
    assert list(all_rows["component"]) == ["GPU HBM3 Memory", "Network Switch/Cable"]


def test_a_correction_is_kept_with_who_and_when_and_survives_rederivation(store: Store) -> None:
    _two_failures(store)
    derive.derive(store)
    ts = _inferred(store)["ts"].iloc[1]
    derive.relabel(store, "atlas", ts, "NIC", by="sre-on-call")
    row = _inferred(store).iloc[1]
    assert (row["component"], row["category"]) == ("NIC", "Host")
    assert (row["orig_component"], row["labelled_by"]) == ("Network Switch/Cable", "sre-on-call")
    # New data arrives: the run is re-derived, the correction stays.
    more = _metrics("atlas", [(T0 + timedelta(hours=5), 601, 650)])
    store_records(store, "train_metrics", more, source="import")
    (res,) = derive.derive(store)
    assert res.changed
    row = _inferred(store).iloc[1]
    assert (row["component"], row["labelled_by"]) == ("NIC", "sre-on-call")
    assert row["orig_component"] == "Network Switch/Cable"


@pytest.mark.parametrize(
    ("component", "category", "message"),
    [("Gremlins", None, "unknown component"), ("NIC", "Weather", "unknown category")],
)
def test_a_bad_correction_is_refused_and_changes_nothing(
    store: Store, component: str, category: str | None, message: str
) -> None:
    _two_failures(store)
    derive.derive(store)
    before = _inferred(store)
    with pytest.raises(derive.LabelError, match=message):
        derive.relabel(store, "atlas", before["ts"].iloc[0], component, category)
    with pytest.raises(derive.LabelError, match="no interruption"):
        derive.relabel(store, "atlas", T0, "NIC")
    pd.testing.assert_frame_equal(_inferred(store), before)


def test_a_simulated_run_is_never_derived(store: Store) -> None:
    _two_failures(store)
    store.append_many({"runs": store.df("SELECT * FROM runs").assign(simulated=True)})
    assert derive.derive(store) == []
    assert _inferred(store).empty


def test_a_run_stalled_now_is_reported_until_progress_resumes(store: Store) -> None:
    store_records(store, "train_metrics", _metrics("atlas", [(T0, 0, 100)]), source="import")
    last = T0 + timedelta(seconds=1000)
    assert derive.open_stall(store, "atlas", last + timedelta(seconds=30)) is None
    stall = derive.open_stall(store, "atlas", last + timedelta(minutes=3))
    assert stall is not None and stall["step"] == 100 and stall["since"] == last
    (res,) = derive.derive(store)
    assert res.interruptions == 0  # a stall is no interruption until progress resumes


def test_a_stalled_run_raises_an_overview_alert_within_a_minute(store: Store) -> None:
    from telemetry.metrics.alert_rules import active_alerts
    from telemetry.queries import TimeRange

    store_records(store, "train_metrics", _metrics("atlas", [(T0, 0, 100)]), source="import")
    last = T0 + timedelta(seconds=1000)

    def titles(now: datetime) -> list[str]:
        return list(active_alerts(store, "atlas", TimeRange(T0, now))["alert"])

    assert "Run stalled" not in titles(last + timedelta(seconds=20))
    alert = titles(last + timedelta(seconds=65))
    assert "Run stalled" in alert and "Job not training" not in alert


def test_summary_reports_inferred_interruptions_and_a_step_based_ettr(store: Store) -> None:
    from telemetry.metrics.summary import run_summary

    _two_failures(store)
    derive.derive(store)
    s = run_summary(store, "atlas")
    i = s["interruptions"]
    assert i["by_component"] == {"Faulty GPU": 1, "Network Switch/Cable": 1}
    assert i["inferred"] == 2 and i["lost_steps"] == 200
    assert i["downtime_hours"] > 0.5  # 20 + 15 minutes stalled
    assert s["restores"] == {"pfs": 2}
    assert s["checkpoints"]["pfs"]["count"] == 2 and s["checkpoints"]["pfs"]["failed"] == 0
    # No tokens in the log: ETTR from steps. 600 steps x 10 s of 1.9 h wall.
    assert s["ettr_basis"] == "steps"
    assert s["ettr"] == pytest.approx(6000 / (s["wall_hours"] * 3600), rel=0.02)
    first = i["list"][0]
    assert (first["source"], first["component"]) == ("inferred", "Faulty GPU")
    assert first["evidence"][0]["role"] == "cause" and first["confidence"] > 0.8
