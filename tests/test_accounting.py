"""Cluster accounting per day (``telemetry.queries.accounting``) against GPU-hours worked out by
hand on a small store written through the store's own write path: a job crossing midnight, a
job with no GPU count (its node's GPUs where Slurm does not count GPUs, none where it does), a
drained node that comes back, a maintenance reservation on the drained node (planned, not
down) and one on a healthy node, and a reservation that is not maintenance (ignored)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from telemetry.errors import FactoryFloorError
from telemetry.queries.accounting import accounting
from telemetry.store import Store

D = datetime(2026, 11, 20)


def h(day: int, hour: float) -> datetime:
    return D + timedelta(days=day, hours=hour)


def gpu_rows(hosts: dict[str, int]) -> pd.DataFrame:
    rows, gid = [], 0
    for node_id, (host, n) in enumerate(hosts.items()):
        for g in range(n):
            rows.append({"gpu_id": gid, "node_id": node_id, "host": host, "gpu": g})
            gid += 1
    cols = ["gpu_id", "node_id", "host", "gpu", "uuid", "model", "pci_bus_id", "device",
            "driver_version", "mig_profile", "mig_instance", "namespace", "pod", "container",
            "hpc_job"]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def job(jid: int, user: str, account: str | None, hosts: list[str], gpus: int | None,
        start: datetime, end: datetime | None, state: str = "COMPLETED",
        requeue: int = 0, cluster: str = "c") -> dict:  # fmt: skip
    return {
        "cluster": cluster, "job_id_raw": jid, "requeue": requeue, "job_id": str(jid),
        "name": f"job{jid}", "user_name": user, "account": account, "partition": "gpu",
        "nodelist": ",".join(hosts), "hosts": hosts, "state": state, "submit_ts": start,
        "start_ts": start, "end_ts": end, "gpus": gpus, "polled_ts": h(3, 0),
    }  # fmt: skip


def write(store: Store) -> None:
    store.append_many({"gpus": gpu_rows({"n1": 8, "n2": 8})})
    jobs = pd.DataFrame([
        job(1, "alice", "ml", ["n1"], 4, h(0, 22), h(1, 2)),  # 2 h each side of midnight
        # no count, from a cluster whose accounting has no gres/gpu: n2's 8 GPUs
        job(2, "bob", "research", ["n2"], None, h(0, 10), h(0, 16), "FAILED", cluster="old"),
        # no count on a cluster that counts GPUs: a CPU-only job, no GPU-hours
        job(5, "carol", "cpu", ["n1"], None, h(0, 1), h(0, 9)),
        job(3, "alice", "ml", ["n1", "n2"], 8, h(1, 0), h(1, 6)),  # 4 GPUs on each node
        job(4, "bob", "research", ["n1"], 2, None, None, "PENDING"),  # never ran: nothing
    ])  # fmt: skip
    jobs["gpus"] = pd.array(jobs["gpus"], dtype="Int64")
    nodes = pd.DataFrame([{"host": "n3", "state": "IDLE", "gpus": 4, "polled_ts": h(3, 0)}])
    events = pd.DataFrame([
        {"ts": h(0, 12), "host": "n3", "state": "IDLE+DRAIN", "reason": "XID 79",
         "reason_user": "root", "reason_ts": h(0, 12), "polled_ts": h(0, 12)},
        {"ts": h(1, 12), "host": "n3", "state": "IDLE", "polled_ts": h(1, 12)},
    ])  # fmt: skip
    resv = pd.DataFrame([
        {"name": "fix-n3", "nodes": ["n3"], "start_ts": h(1, 6), "end_ts": h(1, 10),
         "flags": "MAINT,IGNORE_JOBS", "users": "root", "polled_ts": h(1, 6)},
        {"name": "pm-n2", "nodes": ["n2"], "start_ts": h(1, 20), "end_ts": h(1, 22),
         "flags": "MAINT,SPEC_NODES", "users": "root", "polled_ts": h(1, 6)},
        {"name": "demo", "nodes": ["n1"], "start_ts": h(0, 0), "end_ts": h(2, 0),
         "flags": "FLEX", "users": "root", "polled_ts": h(1, 6)},
    ])  # fmt: skip
    store.append_many({"slurm_jobs": jobs, "slurm_nodes": nodes, "slurm_node_events": events,
                       "slurm_reservations": resv})  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(str(tmp_path / "acct.duckdb"))
    write(s)
    yield s
    s.close()


def test_each_day_adds_up_as_worked_out_by_hand(store: Store) -> None:
    a = accounting(store, D, days=2, asof=h(3, 0))
    got = a.days.set_index(a.days["day"].dt.strftime("%Y-%m-%d")).drop(columns="day")
    # n1, n2: 8 GPUs each (gpus table); n3: 4 (Slurm's Gres): 20 GPUs x 24 h
    # day 0: job1 4 x 2 h + job2 8 x 6 h; n3 drained 12:00-24:00 (4 x 12 h)
    # day 1: job1 4 x 2 h + job3 8 x 6 h; n3 drained 00:00-12:00 less its maintenance
    #        06:00-10:00 (4 x 8 h down, 4 x 4 h planned) + n2's maintenance 20:00-22:00 (8 x 2)
    assert got.loc["2026-11-20"].to_dict() == {
        "reported": 480.0, "allocated": 56.0, "idle": 376.0, "down": 48.0, "planned_down": 0.0,
    }  # fmt: skip
    assert got.loc["2026-11-21"].to_dict() == {
        "reported": 480.0, "allocated": 56.0, "idle": 360.0, "down": 32.0, "planned_down": 32.0,
    }  # fmt: skip
    acc = {(d.strftime("%d"), k): v for d, k, v in a.accounts.itertuples(index=False)}
    assert acc == {("20", "ml"): 8.0, ("20", "research"): 48.0, ("21", "ml"): 56.0,
                   ("20", "cpu"): 0.0}  # fmt: skip
    users = {(d.strftime("%d"), k): v for d, k, v in a.users.itertuples(index=False)}
    assert users == {("20", "alice"): 8.0, ("20", "bob"): 48.0, ("21", "alice"): 56.0,
                     ("20", "carol"): 0.0}  # fmt: skip


def test_today_ends_at_asof_and_a_still_drained_node_stays_down(store: Store) -> None:
    store.append_many({"slurm_node_events": pd.DataFrame([
        {"ts": h(2, 6), "host": "n3", "state": "DOWN", "reason": "PSU", "polled_ts": h(2, 6)},
    ])})  # fmt: skip
    a = accounting(store, h(2, 0), days=3, asof=h(2, 18))
    assert len(a.days) == 1  # the days after asof are not reported
    day = a.days.iloc[0]
    assert day["reported"] == 20 * 18 and day["allocated"] == 0
    assert day["down"] == 4 * 12 and day["idle"] == 20 * 18 - 48


def test_a_draining_node_s_running_job_is_allocated_not_down(tmp_path: Path) -> None:
    with Store(str(tmp_path / "d.duckdb")) as s:
        s.append_many({"gpus": gpu_rows({"n1": 8})})
        s.append_many({
            "slurm_jobs": pd.DataFrame([job(1, "a", None, ["n1"], 8, h(0, 0), h(0, 12))]),
            "slurm_node_events": pd.DataFrame([
                {"ts": h(0, 6), "host": "n1", "state": "MIXED+DRAIN", "polled_ts": h(0, 6)},
            ]),
        })  # fmt: skip
        day = accounting(s, D, asof=h(1, 0)).days.iloc[0]
        # the job holds all 8 GPUs until 12:00; drained (down) after it ends, idle before
        assert (day["allocated"], day["down"], day["idle"]) == (96.0, 96.0, 0.0)
        acc = accounting(s, D, asof=h(1, 0)).accounts
        assert list(acc["account"]) == ["(none)"]


def test_bad_ranges_are_a_clear_error(store: Store) -> None:
    for days in (0, -1, 400):
        with pytest.raises(FactoryFloorError, match="days must be 1 to 366"):
            accounting(store, D, days=days)


def test_summary_json_and_text_give_the_days(store: Store, tmp_path: Path) -> None:
    from tests.conftest import cli

    path = store.path
    store.close()
    p = cli("summary", "--store", path, "--json", "--gpu-hour-price", "3")
    assert p.returncode == 0, p.stderr
    days = json.loads(p.stdout)["accounting"]
    assert [d["day"] for d in days] == ["2026-11-20", "2026-11-21"]
    d = days[1]
    assert {k: d[k] for k in ("reported", "allocated", "idle", "down", "planned_down")} == {
        "reported": 480.0, "allocated": 56.0, "idle": 360.0, "down": 32.0, "planned_down": 32.0,
    }  # fmt: skip
    assert d["accounts"] == {"ml": 56.0} and d["users"] == {"alice": 56.0}
    assert d["usd"]["allocated"] == 168.0 and d["usd"]["idle"] == 1080.0
    text = cli("summary", "--store", path).stdout
    assert (
        "cluster GPU-hours newest day (2026-11-21 UTC): reported 480.0; allocated 56.0 (12%)"
        in text
    )
    assert "by account: ml 56.0" in text
