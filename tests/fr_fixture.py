"""Flight-recorder dumps from a real multi-rank PyTorch job (``tests/fr_job.py``), and a store
they were imported into, shared by the tests of the import and of the Failures page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry.store import Store
from tests.conftest import ROOT, cli, free_port

TORCHRUN = shutil.which("torchrun", path=os.path.dirname(sys.executable))


def run_job(out: Path, ranks: int, culprit: int, json_dump: bool = False) -> None:
    """``torchrun`` ``ranks`` gloo ranks in which rank ``culprit`` never calls the last
    all-reduce; their dumps land in ``out``."""
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


@pytest.fixture(scope="session", name="fr_store")
def _fr_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(store, dumps, what the import printed): six ranks on three nodes (the run's record and
    its Slurm job's node list), rank 4 never calls the sixth all-reduce, and the dumps imported
    with ``factoryfloor import --run atlas-70b DIR/``."""
    base = tmp_path_factory.mktemp("fr")
    dumps, store = base / "atlas-70b", base / "s.duckdb"
    run_job(dumps, ranks=6, culprit=4)
    runs = base / "runs.jsonl"
    runs.write_text(json.dumps({"run": "atlas-70b", "gpus": 6, "nodes": 3}) + "\n")
    r = cli("import", "--store", str(store), "--kind", "runs", str(runs))
    assert r.returncode == 0, r.stderr
    with Store(str(store)) as s, s.transaction(["slurm_jobs"]) as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, run_id) VALUES ('c', 81234, 0, '81234', ['gpu-a', 'gpu-b', 'gpu-c'], "
            "'RUNNING', now()::TIMESTAMP - INTERVAL 1 hour, 'atlas-70b')"
        )
    r = cli("import", "--store", str(store), "--run", "atlas-70b", str(dumps) + "/")
    assert r.returncode == 0, r.stderr
    return store, dumps, r.stdout
