"""The Slurm parsers and source on recorded outputs of the real test cluster
(tests/fixtures/slurm/, made by ``python -m tests.slurm_fixture record``): both forms (--json
and the parsable text) give the same rows, every end state the cluster produced is read, odd
input is counted and never raised, and the store turns job ends and drain reasons into the
signals the interruption inference weighs (a preemption is planned)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from telemetry.collect.slurm import slurm_parse as sp
from telemetry.collect.slurm.slurm_client import SlurmClient, diagnose, recorded_runner
from telemetry.collect.slurm.slurm_source import SlurmSource, job_mapper
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import collect
from telemetry.ingest.since import since_time as parse_since
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store

REC = Path(__file__).parent / "fixtures" / "slurm"
DRAINED, DOWN = REC / "drained", REC / "down"
META = json.loads((DRAINED / "cluster.json").read_text())


def _jobs(form: str, d: Path = DRAINED) -> pd.DataFrame:
    name = "sacct.json" if form == "json" else "sacct.txt"
    rows = sp.parse("sacct", form, (d / name).read_bytes()).rows
    return sp.jobs_frame(rows).sort_values(["job_id_raw", "requeue"]).reset_index(drop=True)


def test_json_and_text_give_the_same_jobs() -> None:
    j, t = _jobs("json"), _jobs("text")
    assert len(j) == len(t) == 17
    same = [c for c in sp.JOB_COLUMNS if c != "exit_code"]
    assert j[same].astype(str).equals(t[same].astype(str))
    # Slurm 22.05's JSON reports exit code 0 for a job that exited 1: unknown, never a false 0;
    # the text form has it.
    failed = t["state"] == "FAILED"
    assert set(t.loc[failed, "exit_code"]) == {1, 2} and j.loc[failed, "exit_code"].isna().all()


def test_every_end_state_of_the_real_cluster_is_read() -> None:
    t = _jobs("text")
    by_id = t[t["requeue"] == 0].set_index("job_id")["state"]
    jobs = META["jobs"]
    assert by_id[jobs["failed"]] == "FAILED"
    assert by_id[jobs["cancelled"]] == "CANCELLED"
    assert by_id[jobs["timeout"]] == "TIMEOUT"
    assert by_id[jobs["requeued"]] == "REQUEUED"
    assert by_id[jobs["preempted"]] == "PREEMPTED"
    assert by_id[jobs["node_fail"]] == "NODE_FAIL"
    # The requeue is a second record of the same job; the array's tasks are named N_i.
    assert list(t[t["job_id"] == jobs["requeued"]]["requeue"]) == [0, 1]
    assert {f"{jobs['array']}_0", f"{jobs['array']}_1"} <= set(t["job_id"])
    ran = t[t["state"] == "FAILED"].iloc[0]
    assert ran["hosts"] == [META["node"]] and ran["start_ts"] <= ran["end_ts"]


def test_squeue_forms_agree_on_the_pending_job() -> None:
    j = sp.parse("squeue", "json", (DRAINED / "squeue.json").read_bytes()).rows
    t = sp.parse("squeue", "text", (DRAINED / "squeue.txt").read_bytes()).rows
    assert [(r["job_id"], r["state"], r["submit_ts"]) for r in j] == [
        (r["job_id"], r["state"], r["submit_ts"]) for r in t
    ]
    assert j[0]["state"] == "PENDING" and j[0]["end_ts"] is None and j[0]["requeue"] == 0


@pytest.mark.parametrize("d", [DRAINED, DOWN])
def test_node_reason_with_who_and_when_in_both_forms(d: Path) -> None:
    j = sp.parse("nodes", "json", (d / "nodes.json").read_bytes()).rows
    t = sp.parse("nodes", "text", (d / "nodes.txt").read_bytes()).rows
    assert j == t
    node = j[0]
    assert node["host"] == META["node"] and node["reason_user"] == "root"
    assert "DRAIN" in node["state"] and isinstance(node["reason_ts"], datetime)
    if d is DRAINED:
        assert node["reason"] == "XID 79 GPU fell off the bus" and node["state"] == "IDLE+DRAIN"
    else:
        assert node["state"] == "DOWN+DRAIN"


def test_unknown_states_are_kept_and_counted_bad_lines_counted() -> None:
    text = (DRAINED / "sacct.txt").read_bytes().replace(b"|TIMEOUT|", b"|WARP_CORE_BREACH|")
    text += b"this is not sacct output\n"
    p = sp.parse("sacct", "text", text)
    assert p.unknown_states == {"WARP_CORE_BREACH": 1} and p.unreadable == 1
    assert "WARP_CORE_BREACH" in {r["state"] for r in p.rows}
    nodes = (DRAINED / "nodes.txt").read_bytes().replace(b"State=IDLE+DRAIN", b"State=IDLE+HALO")
    assert sp.parse("nodes", "text", nodes).unknown_states == {"HALO": 1}
    with pytest.raises(ValueError, match="sacct --json: output is not JSON"):
        sp.parse("sacct", "json", b"<html>proxy login</html>")


def test_hostlists_expand_as_scontrol_does() -> None:
    assert sp.expand_hostlist("gpu[001-003,7],login1") == (
        "gpu001", "gpu002", "gpu003", "gpu7", "login1",
    )  # fmt: skip
    assert sp.expand_hostlist("rack[1-2]-n[01-02]") == (
        "rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02",
    )  # fmt: skip
    assert sp.expand_hostlist("None assigned") == () and sp.expand_hostlist(None) == ()


def test_options_bad_input_is_one_line() -> None:
    assert job_mapper("^(llama-\\w+)-")("llama-8b-pretrain") == "llama-8b"
    assert job_mapper("atlas")("my-atlas-job") == "atlas" and job_mapper(None)("x") is None
    with pytest.raises(FactoryFloorError, match="not a regular expression"):
        job_mapper("(")
    assert parse_since("2026-11-20T01:00:00+01:00") == datetime(2026, 11, 20)
    with pytest.raises(FactoryFloorError, match="--since 'yesterday'"):
        parse_since("yesterday")
    # --since is shared with --prometheus, which counts back: both forms mean the same instant
    assert parse_since("6h", datetime(2026, 11, 20, 6)) == datetime(2026, 11, 20)
    msg = diagnose("squeue", "squeue: error: slurm_load_jobs error: Unable to contact slurm "
                   "controller (connect failure)\n", 1)  # fmt: skip
    assert msg.startswith("squeue: slurmctld is not answering")


def _source(d: Path, form: str = "auto", **kw: object) -> SlurmSource:
    client = SlurmClient(mode=form, runner=recorded_runner(str(d)))
    return SlurmSource(client, since=datetime(2020, 1, 1), follow=False, **kw)  # type: ignore[arg-type]


def test_recorded_cluster_into_a_store_gives_signals_and_runs(tmp_path: Path) -> None:
    now = datetime(2026, 11, 25, 10, 0)
    with Store(str(tmp_path / "s.duckdb")) as store:
        src = _source(DRAINED, run_from_job="^ff-(low)$")
        collect(src, StoreWriter(store), now)
        assert all(h.up for h in src.health())
        kinds = dict(store.rows("SELECT kind, count(*) FROM signals WHERE source = 'slurm' "
                                "GROUP BY kind"))  # fmt: skip
        assert kinds["slurm_preempted"] == 1 and kinds["slurm_node_failure"] == 1
        assert kinds["xid"] == 1 and kinds["slurm_time_limit"] == 1
        assert store.scalar("SELECT xid FROM signals WHERE kind = 'xid'") == 79
        # The mapped job is run "low"; the others are runs of their own.
        assert store.scalar("SELECT count(*) FROM slurm_jobs WHERE run_id = 'low'") == 1
        assert store.scalar("SELECT source FROM runs WHERE run_id = 'low'") == "slurm"
        # Polling the same state again stores nothing new.
        before = store.rows("SELECT (SELECT count(*) FROM signals), "
                            "(SELECT count(*) FROM slurm_node_events)")  # fmt: skip
        collect(_source(DRAINED), StoreWriter(store), now + timedelta(minutes=1))
        assert store.rows("SELECT (SELECT count(*) FROM signals), "
                          "(SELECT count(*) FROM slurm_node_events)") == before  # fmt: skip


def test_a_preempted_job_makes_a_planned_interruption(tmp_path: Path) -> None:
    """A run that stopped when its job was preempted: the inference calls it planned."""
    jobs = _jobs("text")
    pre = jobs[jobs["state"] == "PREEMPTED"].iloc[0]
    end = pre["end_ts"].to_pydatetime()
    with Store(str(tmp_path / "p.duckdb")) as store:
        from telemetry.ingest.records import store_records

        def ts(i: int) -> str:  # every 10 s, 5 minutes without progress at the preemption
            return (end + timedelta(seconds=10 * (i - 30) + (300 if i >= 30 else 0))).isoformat()

        recs = [{"run": "low", "step": i, "ts": ts(i), "loss": 2.0} for i in range(60)]
        assert store_records(store, "train_metrics", recs).stored == 60
        collect(_source(DRAINED, run_from_job="^ff-(low)$"), StoreWriter(store),
                datetime(2026, 11, 25, 10, 0))  # fmt: skip
        rows = store.rows("SELECT category, planned FROM interruptions WHERE run_id = 'low'")
        assert rows == [("Planned", True)]


def test_slurm_down_on_every_command_marks_each_down(tmp_path: Path) -> None:
    src = _source(tmp_path)  # an empty directory: every command "fails"
    with Store(str(tmp_path / "d.duckdb")) as store:
        collect(src, StoreWriter(store), datetime(2026, 11, 25))
        rows = store.rows("SELECT target, up, error FROM targets ORDER BY target")
    assert [r[0] for r in rows] == [
        "slurm:nodes", "slurm:reservations", "slurm:sacct", "slurm:squeue",
    ]  # fmt: skip
    assert not any(r[1] for r in rows) and all("\n" not in r[2] for r in rows)


def test_a_jobs_gpus_by_hpc_job_label_else_by_its_nodes_and_time(
    tmp_path: Path, exporter: str
) -> None:
    """Real scrapes of dcgm-exporter text: one node labelled with Slurm's ``hpc_job``, one not.
    The job named by the label gets that node's GPUs whatever its node list says; the other
    job gets its nodes' GPUs during its time, and a job that had ended gets none."""
    from telemetry.collect.dcgm.scrape_source import ScrapeSource, TargetSource
    from telemetry.queries.slurm import job_gpus

    at = datetime(2026, 11, 25, 9, 30)
    rec = tmp_path / "rec"
    rec.mkdir()
    line = "{0}|{0}|c1|ann|gpu|{1}|{2}|None|0:0|{3}|{3}|{4}|ml|gres/gpu=8|train\n"
    (rec / "sacct.txt").write_text(
        line.format(4312877, "elsewhere01", "RUNNING", "2026-11-25T09:00:00", "Unknown")
        + line.format(500, "dgx-h100-[017]", "RUNNING", "2026-11-25T09:00:00", "Unknown")
        + line.format(501, "dgx-h100-017", "COMPLETED", "2026-11-25T08:00:00",
                      "2026-11-25T08:30:00")  # fmt: skip
    )
    for name in ("squeue.txt", "nodes.txt", "reservations.txt"):
        (rec / name).write_text("")
    with Store(str(tmp_path / "g.duckdb")) as store:
        urls = [f"{exporter}/default_h100/metrics", f"{exporter}/hostname_lowercase/metrics"]
        collect(ScrapeSource(TargetSource(urls, [], print), 15.0, 2.0), StoreWriter(store), at)
        src = SlurmSource(SlurmClient(mode="text", runner=recorded_runner(str(rec))),
                          since=datetime(2026, 11, 1), follow=False)  # fmt: skip
        collect(src, StoreWriter(store), at + timedelta(seconds=5))
        by_label = job_gpus(store, "4312877")
        by_nodes = job_gpus(store, "500")
        # GPUs 0-5 carry the label; 6 and 7 of that node are not the job's (its node list
        # does not name the node either).
        assert set(by_label["host"]) == {"slurm-h100-0142"} and list(by_label["gpu"]) == [
            0, 1, 2, 3, 4, 5,
        ]  # fmt: skip
        assert set(by_nodes["host"]) == {"dgx-h100-017"} and len(by_nodes) == 8
        assert (by_nodes["samples"] == 1).all() and by_nodes["util_pct"].notna().all()
        assert job_gpus(store, "501").empty


# -- accounts, GPUs and reservations ------------------------------------------------------------
def test_account_and_gpus_of_the_real_clusters_jobs_in_both_forms() -> None:
    """Two users in two accounts ran GPU jobs at once (``--gres=gpu:N``, ``--uid``, ``-A``):
    both forms read each job's account and AllocTRES GPUs; a job without GPUs has none."""
    jobs = META["jobs"]
    for form in ("json", "text"):
        t = _jobs(form).drop_duplicates("job_id", keep="last").set_index("job_id")
        got = {n: (t.at[jobs[n], "user_name"], t.at[jobs[n], "account"], t.at[jobs[n], "gpus"])
               for n in ("alice-train", "bob-eval", "bob-debug", "alice-prep")}  # fmt: skip
        assert got == {
            "alice-train": ("ffalice", "ml", 4), "bob-eval": ("ffbob", "research", 2),
            "bob-debug": ("ffbob", "research", 1), "alice-prep": ("ffalice", "ml", 1),
        }, form  # fmt: skip
        # root's jobs: its default account, no GPU asked (none in AllocTRES)
        assert pd.isna(t.at[jobs["failed"], "gpus"]) and t.at[jobs["failed"], "account"] == "root"
        assert t.at[jobs["bob-debug"], "state"] == "FAILED"
        # the four ran at once: each started before any of them ended
        four = t.loc[[jobs[n] for n in ("alice-train", "bob-eval", "bob-debug", "alice-prep")]]
        assert four["start_ts"].max() < four["end_ts"].min()


def test_the_pending_gpu_job_and_the_nodes_gpus_in_both_forms() -> None:
    for form, ext in (("json", "json"), ("text", "txt")):
        (job,) = sp.parse("squeue", form, (DRAINED / f"squeue.{ext}").read_bytes()).rows
        assert (job["state"], job["account"], job["gpus"]) == ("PENDING", "research", 2), form
        (node,) = sp.parse("nodes", form, (DRAINED / f"nodes.{ext}").read_bytes()).rows
        assert node["gpus"] == 8


def test_the_booked_maintenance_reservation() -> None:
    p = sp.parse("reservations", "text", (DRAINED / "reservations.txt").read_bytes())
    (r,) = p.rows
    assert r["name"] == "ff-maint" and r["nodes"] == [META["node"]]
    assert "MAINT" in r["flags"].split(",") and r["users"] == "root" and r["accounts"] is None
    assert r["end_ts"] - r["start_ts"] == timedelta(hours=1) and p.unreadable == 0
    assert sp.parse("reservations", "text", b"No reservations in the system\n").rows == []


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("billing=8,cpu=8,gres/gpu=4,mem=1G,node=1", 4),
        ("cpu=8,gres/gpu:h100=2,gres/gpu:a100=1", 3),  # typed only: summed
        ("cpu=8,gres/gpu=3,gres/gpu:h100=3", 3),  # untyped and typed: the untyped total
        ("cpu=8,mem=1G,node=1", None),  # no GPUs
        ("", None),
        ("gres/gpu=abc", None),
        ("gres/gpu=-4", None),
        ("gres/gpu=99999999999999", None),  # not a count the store can hold
        ("gres/gpumem=80G,cpu=1", None),  # another gres, not a GPU count
        ("gres/gpu:h100=2,gres/gpu:a100=x", None),
    ],
)
def test_gpus_of_a_tres_list(tres: str, gpus: int | None) -> None:
    assert sp.tres_gpus(tres) == gpus


def test_hostile_or_malformed_account_gpus_and_reservations_lose_nothing() -> None:
    line = ("7|7|c|eve|gpu|n1|COMPLETED|None|0:0|2026-11-25T09:00:00|2026-11-25T09:00:01|"
            "2026-11-25T09:01:00|{acct}|{tres}|{name}\n")  # fmt: skip
    text = (
        line.format(acct="<img src=x onerror=alert(1)>", tres="gres/gpu=2", name="a|b|c")
        + line.format(acct="", tres="gres/gpu=lots", name="x")
        + "7|7|c|eve|gpu|n1|COMPLETED|None|0:0|2026|2026|2026|x\n"  # the old 13 fields
    )
    p = sp.parse("sacct", "text", text.encode())
    assert p.unreadable == 1 and len(p.rows) == 2
    assert p.rows[0]["account"] == "<img src=x onerror=alert(1)>" and p.rows[0]["gpus"] == 2
    assert p.rows[0]["name"] == "a|b|c"
    assert p.rows[1]["account"] is None and p.rows[1]["gpus"] is None
    resv = (
        b"ReservationName=ok StartTime=2026-11-25T10:00:00 EndTime=2026-11-25T12:00:00 "
        b"Nodes=n[1-2] Flags=MAINT Users=root Accounts=ml\n"
        b"ReservationName=backwards StartTime=2026-11-25T12:00:00 EndTime=2026-11-25T10:00:00 "
        b"Nodes=n1 Flags=MAINT\n"
        b"ReservationName=huge StartTime=2026-11-25T10:00:00 EndTime=2026-11-25T12:00:00 "
        b"Nodes=n[0-99999999999] Flags=MAINT\n"
        b"StartTime=2026-11-25T10:00:00 EndTime=2026-11-25T12:00:00 Nodes=n1\n"
        b"\xff\xfe garbage\n"
    )
    r = sp.parse("reservations", "text", resv)
    assert [x["name"] for x in r.rows] == ["ok"] and r.unreadable == 4
    assert r.rows[0]["nodes"] == ["n1", "n2"] and r.rows[0]["accounts"] == "ml"
    bad_json = json.dumps({"jobs": [{"job_id": 1, "account": ["not", "text"], "tres": {
        "allocated": [{"type": "gres", "name": "gpu", "count": "many"}]}}]})  # fmt: skip
    (row,) = sp.parse("sacct", "json", bad_json.encode()).rows
    assert row["gpus"] is None


def test_a_reservation_deleted_before_its_end_is_stored_ending_when_found_gone(
    tmp_path: Path,
) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for name in ("sacct.txt", "squeue.txt", "nodes.txt"):
        (rec / name).write_text("")
    (rec / "reservations.txt").write_text(
        "ReservationName=fix StartTime=2026-11-25T10:00:00 EndTime=2026-11-25T14:00:00 "
        "Nodes=n[1-2] Flags=MAINT,IGNORE_JOBS Users=root Accounts=(null)\n"
    )
    src = SlurmSource(SlurmClient(mode="text", runner=recorded_runner(str(rec))),
                      since=datetime(2026, 11, 1), follow=True, interval_s=0)  # fmt: skip
    with Store(str(tmp_path / "r.duckdb")) as store:
        collect(src, StoreWriter(store), datetime(2026, 11, 25, 11, 0))
        collect(src, StoreWriter(store), datetime(2026, 11, 25, 11, 1))  # unchanged: no write
        (rec / "reservations.txt").write_text("No reservations in the system\n")
        collect(src, StoreWriter(store), datetime(2026, 11, 25, 12, 30))  # deleted early
        rows = store.rows("SELECT name, nodes, start_ts, end_ts, flags FROM slurm_reservations")
    start, gone = datetime(2026, 11, 25, 10), datetime(2026, 11, 25, 12, 30)
    assert rows == [("fix", ["n1", "n2"], start, gone, "MAINT,IGNORE_JOBS")]
