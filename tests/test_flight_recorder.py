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
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry.collect import flight_recorder as fr
from telemetry.store import Store
from tests.conftest import ROOT, cli, free_port

TORCHRUN = shutil.which("torchrun", path=os.path.dirname(sys.executable))


def run_job(out: Path, ranks: int, culprit: int, json_dump: bool = False) -> None:
    assert TORCHRUN, "torchrun missing: `make test` installs torch==2.13.0 (the test extras)"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "CULPRIT": str(culprit),
           "FR_JSON": "1" if json_dump else "0", "OMP_NUM_THREADS": "1"}  # fmt: skip
    r = subprocess.run(
        [TORCHRUN, "--nproc-per-node", str(ranks), "--master-port", str(free_port()),
         str(ROOT / "tests" / "fr_job.py"), str(out)],  # fmt: skip
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list(out.iterdir())) == ranks, r.stderr[-3000:]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six ranks; rank 4 never calls the sixth all-reduce."""
    out = tmp_path_factory.mktemp("fr") / "atlas-70b"
    run_job(out, ranks=6, culprit=4)
    return out


def test_import_names_the_rank_the_others_waited_for(dumps: Path, tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    runs = tmp_path / "runs.jsonl"  # the run's shape: 6 ranks on 3 nodes
    runs.write_text(json.dumps({"run": "atlas-70b", "gpus": 6, "nodes": 3}) + "\n")
    r = cli("import", "--store", str(store), "--kind", "runs", str(runs))
    assert r.returncode == 0, r.stderr
    with Store(str(store)) as s, s.transaction(["slurm_jobs"]) as con:  # its Slurm job's nodes
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, run_id) VALUES ('c', 81234, 0, '81234', ['gpu-a', 'gpu-b', 'gpu-c'], "
            "'RUNNING', now()::TIMESTAMP - INTERVAL 1 hour, 'atlas-70b')"
        )
    r = cli("import", "--store", str(store), "--run", "atlas-70b", str(dumps) + "/")
    assert r.returncode == 0, r.stderr
    assert "6 flight-recorder dumps of 6 ranks read" in r.stdout
    assert "1 of 6 rank(s) never called it: rank 4 (gpu-c)" in r.stdout, r.stdout
    assert "gloo:all_reduce #11" in r.stdout  # 5 all-reduce + broadcast pairs, then this one
    assert "fr_job.py:" in r.stdout  # where the culprit last called a collective
    again = cli("import", "--store", str(store), "--run", "atlas-70b", str(dumps))
    assert again.returncode == 0 and "(already imported)" in again.stdout
    r = cli("summary", "--store", str(store), "--json")
    (hang,) = json.loads(r.stdout)["runs"][0]["hangs"]
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


def test_no_hang_when_every_rank_completed(tmp_path: Path, dumps: Path) -> None:
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
