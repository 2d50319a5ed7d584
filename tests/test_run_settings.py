"""The run's settings its log states (issue 57, item 10): parallelism, batch sizes, sequence
length, imported with the user's command from real logs (a Hugging Face Trainer run, a
TorchTitan run from the corpus) and from Megatron-LM's arguments block in the exact form its
``_print_args`` prints; only what a line says, verbatim, each with its ``file:line``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.collect.logs.settings import settings
from telemetry.queries.run_settings import run_settings
from telemetry.store import Store
from tests.cluster_fixture import _iteration
from tests.conftest import cli

ROOT = Path(__file__).resolve().parent
HF = ROOT / "fixtures" / "hf_exam" / "sigkill.log"
TITAN = ROOT / "corpus" / "torchtitan" / "torchtitan-810-b200-illegal-address.log"


def _megatron_args(values: dict[str, object]) -> list[str]:
    """Megatron-LM arguments.py ``_print_args``: the name, dots to column 48, the value."""
    rows = [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in values.items()]
    return ["------------------------ arguments ------------------------",
            *sorted(rows, key=str.lower),
            "-------------------- end of arguments ---------------------"]  # fmt: skip


def _imported(tmp: Path, *logs: Path) -> dict[tuple[str, str], tuple[str, int]]:
    store = tmp / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r1", *map(str, logs))
    assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        df = run_settings(s, "r1")
    return {(n, v): (o, int(c)) for n, v, o, c in df.itertuples(index=False)}


def test_a_hugging_face_runs_batch_settings(tmp_path: Path) -> None:
    got = _imported(tmp_path, HF)
    assert got == {  # stated at each of its two starts
        ("micro_batch", "8"): (f"{HF}:4", 2),
        ("global_batch", "32"): (f"{HF}:5", 2),
        ("grad_accumulation", "1"): (f"{HF}:6", 2),
    }


def test_a_torchtitan_runs_start_line(tmp_path: Path) -> None:
    got = _imported(tmp_path, TITAN)
    assert got == {("local_batch", "8"): (f"{TITAN}:1", 1),
                   ("global_batch", "16"): (f"{TITAN}:1", 1),
                   ("seq_length", "2048"): (f"{TITAN}:1", 1)}  # fmt: skip


def test_megatrons_arguments_and_a_setting_changed_on_restart(tmp_path: Path) -> None:
    first = {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 4,
             "global_batch_size": 1536, "micro_batch_size": 1, "seq_length": 4096,
             "num_layers": 80, "data_parallel_size": 16}  # fmt: skip
    log = tmp_path / "slurm-7.out"
    t0 = datetime(2026, 3, 1, 8, 0, 0)
    progress = [_iteration(t0 + timedelta(seconds=s), s) for s in (10, 20)]
    lines = _megatron_args(first) + progress + _megatron_args(first | {"micro_batch_size": 2})
    log.write_text("\n".join(lines) + "\n")
    got = _imported(tmp_path, log)
    assert {k: v[1] for k, v in got.items()} == {
        ("tensor_parallel", "8"): 2, ("pipeline_parallel", "4"): 2, ("data_parallel", "16"): 2,
        ("global_batch", "1536"): 2, ("seq_length", "4096"): 2,
        ("micro_batch", "1"): 1, ("micro_batch", "2"): 1,  # both values, each where it was said
    }  # fmt: skip
    # the second block's header, then data_parallel, global_batch, micro_batch (sorted)
    assert got[("micro_batch", "2")][0] == f"{log}:{len(_megatron_args(first)) + 2 + 1 + 3}"


@pytest.mark.parametrize(
    "line",
    [
        "  num_layers ...................................... 80",  # not one of ours
        "  tensor_model_parallel_size: 8",  # not Megatron's form
        "iteration 10/ 100 | global batch size: 64 | lm loss: 1.0",  # a progress line
        "  Num examples = 384",
        "the tensor_model_parallel_size ....... 8 was wrong",
    ],
)
def test_other_lines_state_no_setting(line: str) -> None:
    assert settings(line) == []
