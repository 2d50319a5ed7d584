"""Node health over time (#39, 4): rules over windows, each firing at its threshold and not one
event below it, the 24-hour window honoured; each node's drained/down time with who set it and
how long repair took; the findings in the bad-node ranking and as alerts."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from telemetry.queries import TimeRange
from telemetry.queries import node_health as nh
from telemetry.store import Store

T0 = datetime(2026, 5, 1, 0, 0)
DAY = TimeRange(T0, T0 + timedelta(days=3))


def _xid(host: str, gpu: int, xid: int, hours: float) -> dict:
    return {"ts": T0 + timedelta(hours=hours), "host": host, "gpu": gpu, "xid": xid,
            "run_id": None, "source": "dcgm"}  # fmt: skip


def _job(job: int, host: str, user: str, state: str, hours: float) -> dict:
    end = T0 + timedelta(hours=hours)
    return {"cluster": "c", "job_id_raw": job, "requeue": 0, "job_id": str(job),
            "user_name": user, "hosts": [host], "nodelist": host, "state": state,
            "start_ts": end - timedelta(minutes=5), "end_ts": end, "polled_ts": end}  # fmt: skip


def _store(tmp_path: Path, xids: list[dict], jobs: list[dict] = (),
           events: list[dict] = ()) -> Store:  # fmt: skip
    s = Store(str(tmp_path / "h.duckdb"))
    with s.transaction(["xid_events", "slurm_jobs", "slurm_node_events"]) as con:
        for table, rows in (("xid_events", xids), ("slurm_jobs", list(jobs)),
                            ("slurm_node_events", list(events))):  # fmt: skip
            if rows:
                frame = pd.DataFrame(rows)
                con.register(f"new_{table}", frame)
                cols = ", ".join(frame.columns)
                con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM new_{table}")
                con.unregister(f"new_{table}")
    return s


def _rules(s: Store) -> dict[tuple[str, object], dict]:
    f = nh.findings(s, DAY)
    return {(r["rule"], r["host"], None if pd.isna(r["gpu"]) else int(r["gpu"])): r
            for r in f.to_dict("records")}  # fmt: skip


def test_a_fatal_xid_twice_on_one_gpu_in_a_day_is_a_finding_once_is_not(tmp_path: Path) -> None:
    s = _store(tmp_path, [
        _xid("n1", 3, 79, 1), _xid("n1", 3, 79, 20),  # twice within 24 h: fires
        _xid("n2", 0, 79, 1), _xid("n2", 0, 79, 30),  # 29 h apart: two windows of one each
        _xid("n3", 1, 79, 1), _xid("n3", 2, 79, 2),  # two GPUs once each: not one GPU twice
    ])  # fmt: skip
    with s:
        got = _rules(s)
    f = got[("fatal_xid_repeat", "n1", 3)]
    assert f["n"] == 2 and "reset GPU 3" in f["action"] and "XID 79" in f["evidence"]
    assert not [k for k in got if k[1] in ("n2", "n3")]


def test_xid_13_or_31_thrice_asks_for_the_dcgm_diagnostic(tmp_path: Path) -> None:
    s = _store(tmp_path, [_xid("a", 5, 13, h) for h in (1, 2, 3)]
               + [_xid("b", 5, 31, h) for h in (1, 2)])  # fmt: skip
    with s:
        got = _rules(s)
    assert "dcgmi diag -r 3" in got[("app_xid_repeat", "a", 5)]["action"]
    assert not [k for k in got if k[1] == "b"]  # twice: below the threshold


def test_a_row_remap_failure_is_an_rma_at_once(tmp_path: Path) -> None:
    s = _store(tmp_path, [_xid("r", 2, 64, 5), _xid("q", 2, 63, 5)])  # 63: a remap recorded
    with s:
        got = nh.findings(s, DAY)
    assert list(got["rule"]) == ["row_remap_failure"] and got.iloc[0]["host"] == "r"
    assert "RMA GPU 2" in got.iloc[0]["action"]


def test_jobs_of_two_users_failing_on_a_node_blame_the_node(tmp_path: Path) -> None:
    s = _store(tmp_path, [], jobs=[
        _job(1, "bad", "alice", "FAILED", 2), _job(2, "bad", "bob", "NODE_FAIL", 10),
        _job(3, "ok", "carol", "FAILED", 2), _job(4, "ok", "carol", "FAILED", 3),  # one user
        _job(5, "far", "alice", "FAILED", 1), _job(6, "far", "bob", "FAILED", 40),  # 39 h
        _job(7, "done", "alice", "COMPLETED", 1), _job(8, "done", "bob", "FAILED", 2),
    ])  # fmt: skip
    with s:
        got = _rules(s)
    f = got[("jobs_of_users_failed", "bad", None)]
    assert f["n"] == 2 and "alice, bob" in f["evidence"] and "1, 2" in f["evidence"]
    assert f["action"] == "drain and investigate the node, not the jobs"
    assert [k[1] for k in got] == ["bad"]


def test_the_timeline_says_who_drained_a_node_and_how_long_repair_took(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script> XID 79"
    ev = [
        {"ts": T0 + timedelta(hours=1), "host": "n1", "state": "DRAIN", "reason": hostile,
         "reason_user": "oncall"},
        {"ts": T0 + timedelta(hours=2), "host": "n1", "state": "DRAIN", "reason": hostile,
         "reason_user": "oncall"},  # the same drain polled again: one interval
        {"ts": T0 + timedelta(hours=7), "host": "n1", "state": "IDLE", "reason": None,
         "reason_user": None},
        {"ts": T0 + timedelta(hours=30), "host": "n2", "state": "DOWN+NOT_RESPONDING",
         "reason": "Not responding", "reason_user": "slurm"},
    ]  # fmt: skip
    s = _store(tmp_path, [], events=ev)
    with s:
        states = nh.node_states(s, DAY)
    n1 = states[states["host"] == "n1"]
    assert list(n1["kind"]) == ["drained", "in service"]
    assert n1.iloc[0]["reason"] == hostile and n1.iloc[0]["reason_user"] == "oncall"
    fixed = nh.repairs(states)
    assert list(fixed["host"]) == ["n1"] and fixed.iloc[0]["hours"] == pytest.approx(6.0)
    n2 = states[states["host"] == "n2"].iloc[0]
    assert n2["kind"] == "down" and pd.isna(n2["end_ts"])  # still down at the range's end


def test_findings_are_alerts_naming_node_gpu_and_rule(tmp_path: Path) -> None:
    from telemetry.alerting import from_overview, generator_url
    from telemetry.metrics.alert_rules import health_alerts

    s = _store(tmp_path, [_xid("n|7", 3, 79, 1), _xid("n|7", 3, 79, 20)],
               jobs=[_job(1, "bad", "alice", "FAILED", 2), _job(2, "bad", "bob", "FAILED", 3)])
    with s:
        rows = health_alerts(s, T0 + timedelta(hours=21))
    alerts = from_overview(pd.DataFrame(rows, columns=["severity", "alert", "detail", "key"]),
                           "run-1")  # fmt: skip
    by_rule = {a.labels["rule"]: a for a in alerts}
    xid = by_rule["fatal_xid_repeat"]
    assert xid.labels == {"alertname": "NodeHealth", "severity": "critical", "node": "n|7",
                          "gpu": "3", "rule": "fatal_xid_repeat"}  # fmt: skip
    assert "reset GPU 3" in xid.description and "XID 79" in xid.description
    node = by_rule["jobs_of_users_failed"]
    assert node.labels["node"] == "bad" and "gpu" not in node.labels
    assert node.labels["severity"] == "warning"
    assert generator_url("http://ff", xid).startswith("http://ff/gpus#")


def test_the_bad_node_ranking_names_the_rules_a_node_broke(tmp_path: Path) -> None:
    from telemetry.queries.failures import lemons

    # n2 has more XIDs, none a pattern; n1's two are the same fatal XID on one GPU in a day
    s = _store(tmp_path, [_xid("n1", 3, 79, 1), _xid("n1", 3, 79, 20)]
               + [_xid("n2", 1, 43, h) for h in (2, 3, 4)],
               jobs=[_job(1, "n3", "alice", "FAILED", 2), _job(2, "n3", "bob", "FAILED", 3)])
    with s:
        ranked = lemons(s, None, DAY)
    assert list(ranked["host"]) == ["n1", "n3", "n2"]  # a broken rule ranks above more XIDs
    assert list(ranked["health"]) == ["same fatal XID repeated", "jobs of several users failed",
                                      ""]  # fmt: skip


def test_summary_json_says_why_a_node_is_drained_and_what_it_broke(tmp_path: Path) -> None:
    """"Why is node X drained": ``summary --json``'s ``node_health`` names the nodes drained
    at Slurm's last poll with the reason and who set it, the rules broken in the last 7 days
    and the repairs."""
    from telemetry.metrics.summary import store_summary

    xid = [{"ts": T0 + timedelta(hours=h), "host": "n3", "gpu": 2, "xid": 79}
           for h in (1, 3)]  # fmt: skip
    ev = [
        {"ts": T0 + timedelta(hours=1), "host": "n1", "state": "DRAIN", "reason": "XID 79",
         "reason_user": "oncall"},
        {"ts": T0 + timedelta(hours=7), "host": "n1", "state": "IDLE"},
        {"ts": T0 + timedelta(hours=4), "host": "n3", "state": "DRAIN",
         "reason": "XID 79 twice", "reason_user": "ops", "reason_ts": T0 + timedelta(hours=4)},
    ]  # fmt: skip
    s = _store(tmp_path, xid, events=ev)
    with s:
        now = pd.DataFrame([{"host": "n3", "state": "IDLE+DRAIN", "reason": "XID 79 twice",
                             "reason_user": "ops", "reason_ts": T0 + timedelta(hours=4),
                             "polled_ts": T0 + timedelta(hours=10)}])  # fmt: skip
        s.append_many({"slurm_nodes": now})
        block = store_summary(s)["node_health"]
    (drained,) = block["drained_now"]
    assert drained["host"] == "n3" and drained["reason"] == "XID 79 twice"
    assert drained["reason_user"] == "ops" and drained["hours"] == pytest.approx(6.0)
    assert drained["since"] == (T0 + timedelta(hours=4)).isoformat()
    assert [(f["host"], f["gpu"], f["rule"]) for f in block["findings"]] == [
        ("n3", 2, "fatal_xid_repeat")
    ]
    assert [(r["host"], r["hours"]) for r in block["repairs"]] == [("n1", 6.0)]
