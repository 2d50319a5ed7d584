"""Job facts from logs (#37, 3): the GPUs, nodes and model size a job's log states fill the
run's row, so GPU-hours and cost are known for an imported run. Lines as Slurm's environment
(``env | grep SLURM`` in the batch script), NCCL (>= 2.19, after a communicator's init) and the
trainers print them; imported with the user's command."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from tests.conftest import cli

T0 = datetime(2025, 2, 18, 7, 0, 0)


def _megatron(steps: range, step_s: float = 2.0) -> list[str]:
    return [
        f" [{T0 + timedelta(seconds=s * step_s):%Y-%m-%d %H:%M:%S}] iteration {s:>8}/  100000 | "
        f"consumed samples: {s * 512:>10} | elapsed time per iteration (ms): {step_s * 1000:.1f}"
        " | learning rate: 1.000E-04 | global batch size:   512 | lm loss: 2.500000E+00 | "
        "loss scale: 1.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |"
        for s in steps
    ]


def _run(tmp_path: Path, lines: list[str], name: str = "slurm-4242.out") -> dict:
    log = tmp_path / name
    log.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "orion", str(log))
    assert r.returncode == 0, r.stderr
    with duckdb.connect(str(store), read_only=True) as con:
        cur = con.execute("SELECT gpus, nodes, model_params FROM runs WHERE run_id = 'orion'")
        row = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    s = cli("summary", "--store", str(store), "--json")
    return row | {"summary": json.loads(s.stdout)["runs"][0]}


def test_slurm_environment_and_megatron_state_nodes_gpus_and_size(tmp_path: Path) -> None:
    head = [
        "SLURM_JOB_ID=4242",
        "SLURM_JOB_NODELIST=gpu-node-[000-006,010]",
        "SLURM_JOB_NUM_NODES=8",
        "SLURM_GPUS_ON_NODE=8",
        "Number of parameters in transformer block in billions:  6.44",
        "Number of parameters in embedding layers in billions: 0.52",
        "Total number of parameters in billions: 6.96",
    ]
    row = _run(tmp_path, head + _megatron(range(10, 510, 10)))
    # no world size line: 8 nodes x 8 GPUs
    assert (row["gpus"], row["nodes"], row["model_params"]) == (64, 8, 6.96e9)
    assert row["summary"]["gpus"] == 64 and row["summary"]["nodes"] == 8


def test_nccl_says_nodes_and_gpus_per_node(tmp_path: Path) -> None:
    nccl = [f"gpu-node-00{r // 4}:{4100 + r}:{4200 + r} [{r % 4}] NCCL INFO comm 0x55a7be5{r:05x} "
            f"rank {r} nRanks 16 nNodes 4 localRanks 4 localRank {r % 4} MNNVL 0"
            for r in range(16)]  # fmt: skip
    sub = ["gpu-node-000:4100:4200 [0] NCCL INFO comm 0x55a7be6f0000 rank 0 nRanks 4 nNodes 1 "
           "localRanks 4 localRank 0 MNNVL 0"]  # a tensor-parallel group's: not the job's
    row = _run(tmp_path, nccl + sub + _megatron(range(10, 510, 10)))
    assert (row["gpus"], row["nodes"]) == (16, 4)


def test_torchtitan_states_its_model_size(tmp_path: Path) -> None:
    lines = [
        f"[titan] {T0:%Y-%m-%d %H:%M:%S},000 - root - INFO - \x1b[34mModel llama3 8B \x1b[31msize: "
        "8,030,261,248 total parameters\x1b[39m",
        f"[titan] {T0:%Y-%m-%d %H:%M:%S},000 - root - INFO - Training starts at step 1, with "
        "local batch size 8, global batch size 64, sequence length 8192, total steps 1000 "
        "(warmup 20)",
    ]
    for s in range(1, 40):
        t = T0 + timedelta(seconds=3 * s)
        lines.append(f"[titan] {t:%Y-%m-%d %H:%M:%S},123 - root - INFO - step: {s:2}  loss:  "
                     "7.1234  grad_norm:  1.2345  memory: 30.12GiB(38.01%)  tps: 3,456  "
                     "tflops: 160.12  mfu: 16.19%")  # fmt: skip
    row = _run(tmp_path, lines, "titan.log")
    assert row["model_params"] == 8_030_261_248 and row["gpus"] is None  # not stated: unknown
