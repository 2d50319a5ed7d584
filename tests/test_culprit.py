"""The culprit, not the cascade (issue 36, 1): on a multi-node job one rank fails and every
other rank logs "remote process exited" and IB completion errors; the interruption names the
rank that failed first and its host, sets the cascade and the launcher's teardown aside with
their roles, and does not believe torchrun's summary, which names whichever rank exited first.
The logs are written as the frameworks write them (``tests/cascade_fixture.py`` cites each
format); the import is the user's command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from telemetry.collect import logranks as lr
from telemetry.collect.textlogs import LogParser, parse_file
from tests import cascade_fixture as cf

CLI = [sys.executable, "-m", "app.cli"]


def _import(tmp_path: Path, *files: Path, extra: tuple[str, ...] = ()) -> tuple[Path, str]:
    store = tmp_path / "s.duckdb"
    args = [*CLI, "import", "--store", str(store), "--run", cf.RUN, *extra, *map(str, files)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return store, done.stdout


def _interruptions(store: Path) -> list[dict]:
    with duckdb.connect(str(store), read_only=True) as con:
        cur = con.execute(
            "SELECT ts, host, rank, component, description, evidence FROM interruptions "
            "ORDER BY ts"
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@pytest.mark.parametrize(
    ("kind", "component", "words"),
    [("oom", "Software Bug", "CUDA out of memory"),
     ("illegal", "Software Bug", "CUDA illegal memory access")],
)  # fmt: skip
def test_the_first_failing_rank_is_the_cause_not_the_network_cascade(
    tmp_path: Path, kind: str, component: str, words: str
) -> None:
    log = cf.build(tmp_path / "slurm-81234.out", kind=kind, culprit=5)
    store, out = _import(tmp_path, log)
    (row,) = _interruptions(store)
    # before: the seven ranks' "remote process exited" and IB errors outranked it: "Network"
    assert row["component"] == component and row["rank"] == 5
    assert row["host"] == cf.host(1)  # rank 5 of 4 per node, by NCCL's communicator lines
    assert f"{words} on rank 5 on {cf.host(1)}" in row["description"]
    assert "cascade on 7 other ranks" in row["description"] and words in out
    ev = json.loads(row["evidence"])
    assert ev[0]["role"] == "cause" and ev[0]["rank"] == 5
    roles = {(e["kind"], e["role"]) for e in ev if e["kind"] != "more"}
    assert ("nccl_error", "cascade") in roles and ("ib_error", "cascade") in roles
    assert not any(e["role"] == "cause" for e in ev[1:])
    summary = subprocess.run([*CLI, "summary", "--store", str(store), "--json"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    (run,) = json.loads(summary.stdout)["runs"]
    (listed,) = run["interruptions"]["list"]
    assert (listed["rank"], listed["host"]) == (5, cf.host(1))
    more = ev[-1]
    assert more["kind"] == "more" and "teardown worker_exit" in more["line"]


def test_torchruns_summary_is_teardown_and_places_its_rank(tmp_path: Path) -> None:
    log = cf.build(tmp_path / "job.out", culprit=6)
    scan = parse_file(log)
    exits = [s for s in scan.signals if s.kind == "worker_exit" and s.rank is not None]
    (summary,) = exits  # the ChildFailedError entry: rank 0 on node 0, at its own time
    assert (summary.rank, summary.host) == (0, cf.host(0))
    assert summary.ts.strftime("%H:%M:%S") == "07:13:34"
    summary_only = [ln for ln in log.read_text().splitlines() if ln.startswith("0:   ")]
    parser = LogParser("torchrun.out")
    for n, text in enumerate(summary_only, 1):
        parser.feed(text, n)
    assert [r[:3] for r in parser.scan().rank_hosts] == [(0, cf.host(0), "torchrun summary")]
    # every rank placed by NCCL's communicator lines
    nccl = {r[0]: r[1] for r in scan.rank_hosts if r[2] == "nccl nranks=8"}
    assert nccl == {r: cf.host(r // 4) for r in range(8)}
    store, _ = _import(tmp_path, log)
    (row,) = _interruptions(store)
    assert (row["rank"], row["host"]) == (6, cf.host(1))  # not torchrun's "first observed"


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[rank3]:[E218 07:34:53.624109 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog", 3),
        ("1: [default1]:[rank5]: Traceback (most recent call last):", 5),  # excepthook
        ("12: node-2:1:1 [1] NCCL WARN x", 12),  # srun --label, one task per rank
        ("1: [default3]:some text", None),  # srun's node number and torchrun's local rank
        ("[default5]:Traceback (most recent call last):", 5),  # one node: local = global
        ("[rank0]:[titan] 2025-02-18 07:34:53,123 - root - INFO - step: 10", 0),
    ],
)
def test_the_rank_a_line_names(line: str, rank: int | None) -> None:
    assert lr.split_prefix(line)[2] == rank


def test_pg_ranks_of_subgroups_are_not_global_ranks() -> None:
    assert lr.rank_in("[PG ID 0 PG GUID 0(default_pg) Rank 7] Exception (either an error") == 7
    assert lr.rank_in("[PG ID 2 PG GUID 9 Rank 4] Timeout at NCCL work: 610") is None


@pytest.mark.parametrize(("given", "node"), [((), 0), (("--ranks-per-node", "2"), 2)])
def test_ranks_no_log_placed_take_their_place_in_the_slurm_node_list(
    tmp_path: Path, given: tuple[str, ...], node: int
) -> None:
    """Without NCCL's communicator lines the culprit's host comes from the run's Slurm job:
    its node list in order, ``--ranks-per-node`` ranks to a node (default 8)."""
    from telemetry.store import Store

    log = cf.build(tmp_path / "job.out", culprit=5, nccl_lines=False)
    store = tmp_path / "s.duckdb"
    with Store(str(store)) as s, s.transaction(["slurm_jobs"]) as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, run_id, run_source) VALUES ('c', 81234, 0, '81234', ['n0', 'n1', 'n2', "
            "'n3'], 'FAILED', TIMESTAMP '2025-02-18 07:00:00', ?, 'mapped')",  # --run-from-job
            [cf.RUN],
        )
    _import(tmp_path, log, extra=given)
    (row,) = _interruptions(store)
    assert (row["rank"], row["host"]) == (5, f"n{node}")


def test_ranks_per_node_must_be_a_sensible_number(tmp_path: Path) -> None:
    log = cf.build(tmp_path / "job.out")
    store = tmp_path / "s.duckdb"
    done = subprocess.run(
        [*CLI, "import", "--store", str(store), "--run", cf.RUN, "--ranks-per-node", "0",
         str(log)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "--ranks-per-node 0" in done.stderr
    assert "Traceback" not in done.stderr and not store.exists()
