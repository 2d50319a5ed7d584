"""Checkpoints rotated away still count (#37, 3): Megatron-LM keeps the last few checkpoint
directories; the night's log reports every save. A save whose directory is gone is a checkpoint
of its tier (from the log, no size), so the cadence and the restore from a checkpoint no longer
on disk read as the job ran. A directory that is there wins over the log's line."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from tests.cluster_fixture import RUN, build, rotate
from tests.conftest import cli


@pytest.fixture(scope="module")
def rotated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    night = rotate(build(tmp_path_factory.mktemp("night")))  # the newest 3 NVMe, 2 PFS kept
    store = tmp_path_factory.mktemp("s") / "s.duckdb"
    r = cli(*night.import_args(store))
    assert r.returncode == 0, r.stderr
    return store


def _rows(store: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute(sql, [RUN]).fetchall()


def test_saves_whose_directories_are_gone_are_checkpoints_of_their_tier(rotated: Path) -> None:
    got = dict(_rows(rotated, "SELECT tier, list(step ORDER BY step) FROM checkpoints "
                              "WHERE run_id = ? AND status = 'ok' GROUP BY tier"))  # fmt: skip
    # every 500 steps on NVMe and 1,000 on the PFS, as the log says, not only the survivors
    assert got["nvme"] == list(range(500, 5501, 500))
    assert got["pfs"] == [1000, 2000, 3000, 4000, 5000]
    logged = dict(_rows(rotated, "SELECT tier, count(*) FROM checkpoints WHERE run_id = ? "
                                 "AND format = 'log' GROUP BY tier"))  # fmt: skip
    assert logged == {"nvme": 8, "pfs": 4}  # 11 - 3 and 5 ok - 1 surviving ok
    # Megatron-LM's save lines carry no time of their own (both take the iteration line's):
    # the write time is unknown, not 0 s (#57, 7)
    (w,) = _rows(rotated, "SELECT count(write_s) FROM checkpoints WHERE run_id = ? AND "
                          "format = 'log'")  # fmt: skip
    assert w == (0,)


def test_the_restore_from_a_rotated_checkpoint_names_a_checkpoint_of_its_tier(
    rotated: Path,
) -> None:
    restores = _rows(rotated, "SELECT restored_tier, restored_step FROM interruptions "
                              "WHERE run_id = ? ORDER BY ts")  # fmt: skip
    assert restores == [("pfs", 3000), ("nvme", 5000)]
    for tier, step in restores:
        (n,) = _rows(rotated, f"SELECT count(*) FROM checkpoints WHERE run_id = ? AND tier = "
                              f"'{tier}' AND step = {step} AND status = 'ok'")  # fmt: skip
        assert n == (1,)


def test_importing_again_keeps_one_row_per_checkpoint(rotated: Path, tmp_path: Path) -> None:
    before = _rows(rotated, "SELECT count(*) FROM checkpoints WHERE run_id = ?")
    store = tmp_path / "again.duckdb"
    shutil.copy(rotated, store)
    night = build(tmp_path / "night")  # every directory back: they replace the logged rows
    r = cli(*night.import_args(store))
    assert r.returncode == 0, r.stderr
    assert _rows(store, "SELECT count(*) FROM checkpoints WHERE run_id = ? AND format = 'log'"
                 ) == [(0,)]  # fmt: skip
    assert before == [(17,)]


def test_a_save_whose_end_line_is_there_finished_in_the_same_second(tmp_path: Path) -> None:
    """(#56, 4) Megatron-LM prints its save lines without a time of their own
    (megatron/training/checkpointing.py save_checkpoint: ``saving checkpoint at iteration
    {:7d} to {} in {} format`` and ``  successfully saved checkpoint from iteration {:7d} to {}
    [ t {}/{}, p {}/{} ]``): both take the time of the iteration line before them, the same
    second. The end line is there, so the save finished; it is the step restored."""
    from datetime import datetime, timedelta

    from tests.cluster_fixture import _iteration

    t0, ckpt = datetime(2026, 3, 1, 8, 0, 0), "/lustre/ckpt/atlas-70b"
    lines = [_iteration(t0 + timedelta(seconds=2 * s), s) for s in range(10, 1010, 10)]
    lines += [f"saving checkpoint at iteration    1000 to {ckpt} in torch_dist format",
              f"  successfully saved checkpoint from iteration    1000 to {ckpt} [ t 1/1, p 1/1 ]"]
    lines += [_iteration(t0 + timedelta(seconds=2 * s), s) for s in range(1010, 1060, 10)]
    lines += ["[rank3]: Traceback (most recent call last):",
              '[rank3]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 245, in <module>',
              "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    back = t0 + timedelta(seconds=2 * 1050 + 600)
    lines += [f"[{back:%Y-%m-%d %H:%M:%S}] loading checkpoint from {ckpt} at iteration 1000",
              f"[{back:%Y-%m-%d %H:%M:%S}] successfully loaded checkpoint from {ckpt} "
              "[ t 0/1, p 0/1 ] at iteration 1000"]  # fmt: skip
    lines += [_iteration(back + timedelta(seconds=2 * (s - 1000)), s)
              for s in range(1010, 1200, 10)]
    log = tmp_path / "slurm-81234.out"
    log.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, str(log))
    assert r.returncode == 0, r.stderr
    with duckdb.connect(str(store), read_only=True) as con:
        (evidence, step, desc) = con.execute(
            "SELECT evidence, restored_step, description FROM interruptions").fetchone()
    assert step == 1000 and "CUDA out of memory" in desc
    # before: "(the save of step 1,000 never finished: failed)"
    assert "never finished" not in evidence and "ckpt_save_unfinished" not in evidence
