"""The Slurm source against a real Slurm (tests/slurm_fixture.py): munge, MariaDB, slurmdbd,
slurmctld and slurmd from Debian's packages, with real failures made by sbatch, scancel,
scontrol and a killed slurmd. ``factoryfloor import --store s.duckdb --slurm`` runs as written,
with only ``SLURM_CONF`` naming the cluster, as on a real one. The last test stops slurmctld."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.conftest import cli
from tests.slurm_fixture import XID_REASON, SlurmCluster, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

ENDS = ("FAILED", "CANCELLED", "TIMEOUT", "REQUEUED", "PREEMPTED", "NODE_FAIL", "COMPLETED")


def _import(cluster: SlurmCluster, store: Path, *args: str, env: dict[str, str] | None = None):
    return cli("import", "--store", str(store), "--slurm", *args,
               env={"SLURM_CONF": str(cluster.conf), **(env or {})}, timeout=180)  # fmt: skip


def _q(store: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _states(store: Path) -> dict[str, str]:
    """job id -> state of its first record (the requeued one for a requeue)."""
    rows = _q(store, "SELECT job_id, state FROM slurm_jobs WHERE requeue = 0")
    return dict(rows)


@pytest.fixture(scope="module")
def imported(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    store = tmp_path_factory.mktemp("slurm") / "s.duckdb"
    p = _import(slurm_cluster, store)
    assert p.returncode == 0, p.stderr
    assert "slurm sacct (json)" in p.stdout and "job rows stored" in p.stdout
    return store


def test_every_job_end_made_by_the_real_slurm_is_stored(
    slurm_cluster: SlurmCluster,  # noqa: F811
    imported: Path,
) -> None:
    j, states = slurm_cluster.jobs, _states(imported)
    assert states[j["failed"]] == "FAILED"
    assert states[j["cancelled"]] == "CANCELLED"
    assert states[j["timeout"]] == "TIMEOUT"
    assert states[j["requeued"]] == "REQUEUED"
    assert states[j["preempted"]] == "PREEMPTED"
    assert states[j["node_fail"]] == "NODE_FAIL"
    assert states[j["completed"]] == "COMPLETED"
    assert states[j["oom"]] == "OUT_OF_MEMORY"  # killed by its cgroup's OOM killer
    # The requeue is two records of one job id, numbered in order.
    recs = _q(imported, "SELECT requeue, state FROM slurm_jobs WHERE job_id = ? ORDER BY 1",
              [j["requeued"]])  # fmt: skip
    assert recs[0] == (0, "REQUEUED")
    # An array's tasks keep their array id and task.
    arr = _q(imported, "SELECT array_job_id, array_task_id, job_id FROM slurm_jobs "
             "WHERE array_job_id = ? ORDER BY 2", [int(j["array"])])  # fmt: skip
    assert [r[2] for r in arr] == [f"{j['array']}_0", f"{j['array']}_1"]
    node = slurm_cluster.node
    hosts = _q(imported, "SELECT hosts FROM slurm_jobs WHERE job_id = ?", [j["failed"]])
    assert hosts[0][0] == [node]
    # GPU jobs of two users in two accounts, ran at once: each one's account and AllocTRES GPUs
    gpu_jobs = {r[0]: r[1:] for r in _q(
        imported, "SELECT job_id, user_name, account, gpus, start_ts, end_ts FROM slurm_jobs "
        "WHERE gpus IS NOT NULL AND user_name LIKE 'ff%'")}  # fmt: skip
    assert {gpu_jobs[j[n]][:3] for n in ("alice-train", "bob-eval", "bob-debug", "alice-prep")} == {
        ("ffalice", "ml", 4), ("ffbob", "research", 2), ("ffbob", "research", 1),
        ("ffalice", "ml", 1),
    }  # fmt: skip
    assert max(r[3] for r in gpu_jobs.values()) < min(r[4] for r in gpu_jobs.values())
    assert _q(imported, "SELECT gpus FROM slurm_nodes") == [(8,)]


def test_the_drain_reason_with_who_and_when_and_its_signal(
    slurm_cluster: SlurmCluster,  # noqa: F811
    imported: Path,
) -> None:
    (state, reason, user, ts), = _q(
        imported, "SELECT state, reason, reason_user, reason_ts FROM slurm_nodes WHERE host = ?",
        [slurm_cluster.node],
    )  # fmt: skip
    assert "DRAIN" in state and reason == XID_REASON and user == "root" and ts is not None
    # The reason names XID 79: an XID signal with that code, on that node.
    sig = _q(imported, "SELECT kind, xid, host FROM signals WHERE source = 'slurm' "
             "AND origin LIKE 'slurm:node %'")  # fmt: skip
    assert ("xid", 79, slurm_cluster.node) in sig
    kinds = {r[0] for r in _q(imported, "SELECT kind FROM signals WHERE source = 'slurm'")}
    assert {"slurm_node_failure", "slurm_time_limit", "slurm_preempted", "slurm_requeued",
            "slurm_job_failed", "slurm_cancelled", "slurm_oom"} <= kinds  # fmt: skip


def test_text_forms_store_what_json_stores_even_in_another_time_zone(
    slurm_cluster: SlurmCluster,  # noqa: F811
    imported: Path,
    tmp_path: Path,
) -> None:
    store = tmp_path / "text.duckdb"
    p = _import(slurm_cluster, store, "--slurm-format", "text", env={"TZ": "Asia/Kolkata"})
    assert p.returncode == 0, p.stderr
    assert "slurm sacct (text)" in p.stdout and "slurm nodes (text)" in p.stdout
    # Records that got an allocation. A requeued job cancelled before it ran again is listed
    # by one form and not the other (seen both ways with Slurm 22.05), so it is left out here.
    cols = "job_id, requeue, state, hosts, start_ts, end_ts"
    sql = (f"SELECT {cols} FROM slurm_jobs WHERE state <> 'PENDING' AND len(hosts) > 0 "
           "AND start_ts IS NOT NULL ORDER BY job_id_raw, requeue")  # fmt: skip
    assert _q(store, sql) == _q(imported, sql)
    nsql = "SELECT host, state, reason, reason_user, reason_ts FROM slurm_nodes"
    assert _q(store, nsql) == _q(imported, nsql)


def test_importing_again_adds_no_rows(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    store = tmp_path / "again.duckdb"
    assert _import(slurm_cluster, store).returncode == 0
    count = "SELECT (SELECT count(*) FROM slurm_jobs), (SELECT count(*) FROM signals), " \
            "(SELECT count(*) FROM slurm_node_events), (SELECT count(*) FROM runs)"
    before = _q(store, count)
    assert _import(slurm_cluster, store).returncode == 0
    assert _q(store, count) == before


def test_node_failure_explains_a_runs_stall(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    """A training run that stalled while its job hit NODE_FAIL: the inference names the cause
    from Slurm (the drain reason's XID 79, with the node failure among the evidence)."""
    store = tmp_path / "run.duckdb"
    j = slurm_cluster.jobs
    (start, end), = _q_live(slurm_cluster, j["node_fail"])
    metrics = tmp_path / "m.jsonl"
    lines, step = [], 0
    t = start - 300
    while t <= end + 600:
        if not (end - 20 < t < end + 180):  # no progress from just before the failure
            lines.append(json.dumps({"run": "nodefail", "step": step, "ts": t, "loss": 2.0}))
        step, t = step + 1, t + 10
    metrics.write_text("\n".join(lines) + "\n")
    assert cli("import", "--store", str(store), str(metrics)).returncode == 0
    p = _import(slurm_cluster, store, "--run-from-job", "^ff-(nodefail)$")
    assert p.returncode == 0, p.stderr
    assert "1 interruption(s) inferred" in p.stdout, p.stdout
    (component, evidence), = _q(store, "SELECT component, evidence FROM interruptions "
                                "WHERE run_id = 'nodefail'")  # fmt: skip
    kinds = {e["kind"] for e in json.loads(evidence)}
    assert "slurm_node_failure" in kinds
    assert component in ("Faulty GPU", "Host Maintenance")
    s = cli("summary", "--store", str(store), "--json")
    doc = json.loads(s.stdout)
    run = next(r for r in doc["runs"] if r["run_id"] == "nodefail")
    assert any(x["state"] == "NODE_FAIL" for x in run["slurm_jobs"])


def _q_live(cluster: SlurmCluster, job: str) -> list[tuple[int, int]]:
    out = cluster.run("sacct", "-n", "-P", "-X", "-D", "-j", job, "-o", "State,Start,End",
                      "--noconvert")  # fmt: skip
    for line in out.splitlines():
        state, start, end = line.split("|")
        if state == "NODE_FAIL":
            from datetime import datetime

            def epoch(s: str) -> int:
                return int(datetime.fromisoformat(s).timestamp())  # the fixture's own TZ

            return [(epoch(start), epoch(end))]
    raise AssertionError(out)


def test_a_maintenance_reservation_makes_a_runs_stop_planned(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """An operator books a maintenance window on the node a training job runs on and stops
    the job: the run's stall is a planned interruption (Slurm's maintenance reservation), and
    the node's MAINTENANCE state is stored as a node event, not as an unknown state."""
    cl = slurm_cluster
    cl.resume()
    job = cl.sbatch("-J", "ff-train", "--wrap", "sleep 600")
    try:
        cl.wait_state(job, ("RUNNING",), 30)
        started = time.time()
        cl.maintenance()
        cl.run("scancel", job)
        cl.wait_state(job, ("CANCELLED",), 30)
        store = tmp_path / "maint.duckdb"
        lines, step, t = [], 0, started - 600
        while t <= started + 900:  # progress up to just before the window, then after it
            if not (started - 20 < t < started + 300):
                lines.append(json.dumps({"run": "train", "step": step, "ts": t, "loss": 2.0}))
            step, t = step + 1, t + 10
        metrics = tmp_path / "m.jsonl"
        metrics.write_text("\n".join(lines) + "\n")
        assert cli("import", "--store", str(store), str(metrics)).returncode == 0
        p = _import(cl, store, "--run-from-job", "^ff-(train)$")
    finally:
        cl.end_maintenance()
        cl.run("scontrol", "update", f"nodename={cl.node}", "state=drain",
               f"reason={XID_REASON}")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "unknown state" not in p.stdout, p.stdout
    (state,), = _q(store, "SELECT state FROM slurm_nodes")
    assert "MAINTENANCE" in state.split("+")
    (category, component, evidence), = _q(
        store, "SELECT category, component, evidence FROM interruptions WHERE run_id = 'train'")
    assert (category, component) == ("Planned", "Planned maintenance"), evidence
    assert "slurm_maintenance" in {e["kind"] for e in json.loads(evidence)}
    # the reservation is stored, and the day's accounting counts the node's GPUs as planned down
    (name, flags, nodes), = _q(store, "SELECT name, flags, nodes FROM slurm_reservations")
    assert name == "ff-maint" and "MAINT" in flags.split(",") and nodes == [cl.node]
    s = cli("summary", "--store", str(store), "--json")
    day = json.loads(s.stdout)["accounting"][-1]
    assert day["planned_down"] > 0 and day["reported"] > 0, day


def test_ingest_polls_and_sees_a_new_failure(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    import subprocess
    import sys

    from tests.conftest import ROOT

    slurm_cluster.resume()
    store = tmp_path / "live.duckdb"
    env = {**os.environ, "SLURM_CONF": str(slurm_cluster.conf)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "ingest", "--store", str(store), "--slurm",
         "--slurm-interval", "1", "--interval", "1", "--timeout", "0.5",
         "--slurm-format", "text"],  # Slurm 22.05's sacct --json reports exit codes as 0
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(3)
        job = slurm_cluster.sbatch("-J", "ff-late", "--wrap", "exit 3")
        slurm_cluster.wait_state(job, ("FAILED",), 60)
        time.sleep(10)  # sacct shows a job end once slurmdbd has it: seconds, more under load
    finally:
        proc.terminate()  # SIGTERM: what was stored is committed
        _, err = proc.communicate(timeout=60)
        slurm_cluster.run("scontrol", "update", f"nodename={slurm_cluster.node}", "state=drain",
                          f"reason={XID_REASON}")  # fmt: skip
    rows = _q(store, "SELECT state, exit_code FROM slurm_jobs WHERE job_id = ?", [job])
    assert rows and rows[-1] == ("FAILED", 3), err
    up = _q(store, "SELECT DISTINCT target FROM targets WHERE up")
    assert {("slurm:sacct",), ("slurm:squeue",), ("slurm:nodes",)} <= set(up)


def test_missing_sacct_and_no_accounting_are_one_line_each(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    import shutil

    # A PATH with Slurm's other commands but no sacct: squeue and the nodes still come in.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("squeue", "sinfo", "scontrol"):
        os.symlink(shutil.which(cmd), bindir / cmd)  # type: ignore[arg-type]
    py = Path(os.__file__).parent  # keep python reachable through sys.executable, not PATH
    assert py
    store = tmp_path / "nosacct.duckdb"
    p = _import(slurm_cluster, store, env={"PATH": str(bindir)})
    assert p.returncode == 0, p.stderr
    assert "slurm sacct: DOWN: sacct: not found on PATH" in p.stdout
    assert "slurm nodes (json)" in p.stdout
    (err,), = _q(store, "SELECT error FROM targets WHERE target = 'slurm:sacct'")
    assert "not found on PATH" in err
    # A client configuration without accounting (no slurmdbd): sacct says so, in one line.
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text(slurm_cluster.conf.read_text().replace(
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageType=accounting_storage/none"))  # fmt: skip
    store2 = tmp_path / "noacct.duckdb"
    p = cli("import", "--store", str(store2), "--slurm", env={"SLURM_CONF": str(conf)})
    assert p.returncode == 0, p.stderr
    assert "accounting storage is disabled" in p.stdout, p.stdout
    assert p.stdout.count("\n") < 10


def test_slurmctld_down_marks_the_source_down_and_accounting_still_answers(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    pid = int(slurm_cluster.pidfile("slurmctld").read_text().split()[0])
    os.kill(pid, signal.SIGTERM)
    SlurmCluster._reap(pid, 20)
    try:
        store = tmp_path / "noctld.duckdb"
        p = _import(slurm_cluster, store)
        assert p.returncode == 0, p.stderr
        assert "slurm squeue: DOWN: squeue: slurmctld is not answering" in p.stdout, p.stdout
        assert "slurm sacct (json)" in p.stdout  # slurmdbd still has the history
        states = _states(store)
        assert states[slurm_cluster.jobs["node_fail"]] == "NODE_FAIL"
        # With no Slurm command at all the import fails in one line.
        empty = tmp_path / "nobin"
        empty.mkdir()
        p = cli("import", "--store", str(tmp_path / "x.duckdb"), "--slurm",
                env={"PATH": str(empty)})  # fmt: skip
        last = p.stderr.strip().splitlines()[-1]  # before it: the daemon log's lines
        assert p.returncode == 1, p.stderr
        assert last.startswith("factoryfloor: error: nothing read from Slurm: sacct: not found")
    finally:
        slurm_cluster._daemon(["slurmctld"], "slurmctld")
