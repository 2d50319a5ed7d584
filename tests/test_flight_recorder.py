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
from pathlib import Path

import pytest

from telemetry.collect import flight_recorder as fr
from tests.conftest import cli
from tests.fr_fixture import _fr_store, run_job  # noqa: F401 (a fixture)


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
