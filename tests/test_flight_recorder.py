"""Hangs localised from PyTorch's flight recorder, on dumps written by real multi-rank PyTorch
jobs (torch 2.13, CPU, gloo, ``tests/fr_job.py``) in which one rank never calls a collective:
``import`` names that rank (and its host, where the store knows the job's nodes), the
collective the others waited in, where each was in the code; ``summary --json`` lists it.
Dumps that would run code when unpickled are refused, never run."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest

from telemetry.collect.logs import flight_recorder as fr
from telemetry.store import Store
from tests.conftest import cli
from tests.fr_fixture import _fr_store, run_job  # noqa: F401 (a fixture)

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


def test_import_names_the_rank_the_others_waited_for(
    fr_store: tuple[Path, Path, str]
) -> None:
    store, dumps, r = fr_store
    assert "6 flight-recorder dumps of 6 ranks read" in r
    assert "1 of 6 rank(s) never called it: rank 4 (gpu-c)" in r, r
    assert "gloo:all_reduce #11" in r  # 5 all-reduce + broadcast pairs, then this one
    assert "fr_job.py:" in r  # where the culprit last called a collective
    again = cli("import", "--store", str(store), "--run", "atlas-70b", str(dumps))
    assert again.returncode == 0 and "(already imported)" in again.stdout
    r = cli("summary", "--store", str(store), "--json")
    (run,) = [x for x in json.loads(r.stdout)["runs"] if x["run_id"] == "atlas-70b"]
    (hang,) = run["hangs"]
    assert hang["seq_id"] == 11 and hang["op"] == "gloo:all_reduce"
    assert hang["missing_ranks"] == [4] and hang["culprit_rank"] == 4
    assert hang["culprit_host"] == "gpu-c" and hang["hosts"] == ["gpu-c"]
    assert hang["input_sizes"] == "[[1024]]" and hang["ranks"] == 6 and hang["stuck_ranks"] == 5
    assert any("fr_job.py" in f and "broadcast" not in f for f in hang["culprit_frames"])


def test_the_json_dumps_tell_the_same(tmp_path: Path) -> None:
    out = tmp_path / "json"
    run_job(out, ranks=3, culprit=0, json_dump=True)
    assert all(fr.is_dump(str(p)) for p in out.iterdir())
    hang, errors = fr.find_hang(fr.dump_files(str(out)))
    assert not errors and hang is not None
    assert hang.missing_ranks == [0] and hang.seq_id == 11 and hang.op == "gloo:all_reduce"


def test_no_hang_when_every_rank_completed(
    tmp_path: Path, fr_store: tuple[Path, Path, str]
) -> None:
    dumps = fr_store[1]
    """The dumps with the culprit's rank made whole: nothing hung (no rank is blamed)."""
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(dumps / "nccl_trace_rank_4", one / "nccl_trace_rank_4")
    hang, errors = fr.find_hang(fr.dump_files(str(one)))
    assert hang is None and not errors


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch /tmp/ff-pwned",))


def test_a_dump_that_would_run_code_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "nccl_trace_rank_0"
    doc = {"version": "2.10", "pg_config": {}, "pg_status": {"0": {}}, "entries": [_Boom()]}
    bad.write_bytes(pickle.dumps(doc, protocol=2))
    if os.path.exists("/tmp/ff-pwned"):
        os.remove("/tmp/ff-pwned")
    with pytest.raises(fr.DumpError, match="holds no"):
        fr.read_dump(str(bad))
    hang, errors = fr.find_hang([str(bad)])
    assert not os.path.exists("/tmp/ff-pwned")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "x", str(bad))
    assert not os.path.exists("/tmp/ff-pwned")
    assert "Traceback" not in r.stderr


def test_the_interruption_names_the_culprit_host(
    fr_store: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """A job log whose progress stops a minute before the hang and resumes after a restart,
    imported with the dumps: the interruption's cause is the hang, on the culprit's host (not
    on no host, as the waiting ranks' watchdog timeouts would have it)."""
    src, dumps, _ = fr_store
    store = tmp_path / "s.duckdb"
    shutil.copy(src, store)
    hang, _ = fr.find_hang(fr.dump_files(str(dumps)))
    assert hang is not None and hang.ts is not None
    lines = []  # TorchTitan's progress lines, verbatim format (torchtitan/train.py)
    for i in range(60):
        t = hang.ts - timedelta(minutes=11) + timedelta(seconds=10 * i)
        lines.append(f"[rank0]:[titan] {t:%Y-%m-%d %H:%M:%S},000 - root - INFO - step: {i + 1}"
                     f"  loss:  7.{i:02d}  memory: 33.12GiB(41.86%)  tps: 6,123")  # fmt: skip
    for i in range(30):
        t = hang.ts + timedelta(minutes=15) + timedelta(seconds=10 * i)
        lines.append(f"[rank0]:[titan] {t:%Y-%m-%d %H:%M:%S},000 - root - INFO - step: {61 + i}"
                     f"  loss:  6.{i:02d}  memory: 33.12GiB(41.86%)  tps: 6,123")  # fmt: skip
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    r = cli("import", "--store", str(store), "--run", "atlas-70b", str(log))
    assert r.returncode == 0, r.stderr
    r = cli("summary", "--store", str(store), "--json")
    (run,) = [x for x in json.loads(r.stdout)["runs"] if x["run_id"] == "atlas-70b"]
    ints = run["interruptions"]
    assert ints["unexpected"] == 1, ints
    with Store(str(store), read_only=True) as s:
        (host, component, desc) = s.rows(
            "SELECT host, component, description FROM interruptions WHERE run_id = 'atlas-70b'"
        )[0]
    assert host == "gpu-c" and component == "NCCL Watchdog Timeouts", (host, desc)
    assert "rank 4 never called gloo:all_reduce #11, 5 ranks waited" in desc


def test_ingest_reads_the_dumps_as_they_land(
    fr_store: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """``ingest --flight-recorder DIR``: a job's dumps landing in a subfolder of DIR are read
    once they settle, the hang stored and placed on its host by the run's Slurm node list."""
    src, dumps, _ = fr_store
    store = tmp_path / "s.duckdb"
    shutil.copy(src, store)
    with Store(str(store)) as s, s.transaction(["hangs", "signals", "slurm_jobs"]) as con:
        con.execute("DELETE FROM hangs")  # the import's: this time they come by ingest
        con.execute("DELETE FROM signals")
        con.execute("UPDATE slurm_jobs SET run_id = 'atlas-70b', run_source = 'mapped'")  # as by
        # --run-from-job
    root = tmp_path / "fr-dumps"
    shutil.copytree(dumps, root / "job-81234")
    old = time.time() - 120  # written two minutes ago: settled
    for f in (root / "job-81234").iterdir():
        os.utime(f, (old, old))
    args = ("ingest", "--store", str(store), "--flight-recorder", str(root), "--run",
            "atlas-70b", "--once")  # fmt: skip
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        rows = s.rows("SELECT culprit_rank, culprit_host, seq_id FROM hangs")
        health = s.rows("SELECT up FROM targets WHERE target LIKE 'flight_recorder:%'")
    assert rows == [(4, "gpu-c", 11)] and health and health[-1][0]
    r = cli(*args)  # a second look at the same dumps stores nothing twice
    with Store(str(store), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM hangs") == 1


def test_flight_recorder_needs_a_run_and_a_folder(tmp_path: Path) -> None:
    r = cli("ingest", "--store", str(tmp_path / "s.duckdb"), "--flight-recorder", str(tmp_path),
            "--once")  # fmt: skip
    assert r.returncode != 0 and "--flight-recorder needs --run" in r.stderr
    r = cli("ingest", "--store", str(tmp_path / "s.duckdb"), "--flight-recorder",
            str(tmp_path / "nope"), "--run", "x", "--once")  # fmt: skip
    assert r.returncode != 0 and "not a directory" in r.stderr and "Traceback" not in r.stderr


def test_a_hang_is_an_alert_that_names_the_rank_that_never_arrived(
    fr_store: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """The Overview's (and the alert receivers') rules had no hang: a run known from its dumps
    raised nothing, so the culprit waited for someone to open the Failures page (#58)."""
    from datetime import timedelta

    from telemetry.metrics.alert_rules import active_alerts
    from telemetry.notify import utcnow
    from telemetry.queries import TimeRange
    from telemetry.store import Store

    store, _, _ = fr_store
    copy = tmp_path / "s.duckdb"
    copy.write_bytes(store.read_bytes())
    now = utcnow()
    with Store(str(copy)) as s:
        got = active_alerts(s, "atlas-70b", TimeRange(now - timedelta(hours=6), now))
        (hung,) = got[got["key"].str.startswith("RunHung")].to_dict("records")
        assert hung["key"] == "RunHung:rank 4 on gpu-c"  # the receivers' ``culprit`` label
        assert hung["severity"] == "critical"
        assert hung["detail"].startswith("rank 4 on gpu-c never called gloo:all_reduce #11"), hung
        # once the run logs steps again the hang is its history, not an alert
        with s.transaction(["train_metrics"]) as con:
            con.execute("INSERT INTO train_metrics (run_id, ts, step) VALUES ('atlas-70b', ?, 7)",
                        [now + timedelta(minutes=2)])  # fmt: skip
        at = now + timedelta(minutes=3)
        later = active_alerts(s, "atlas-70b", TimeRange(at - timedelta(hours=6), at))
        assert not later["key"].str.startswith("RunHung").any()
