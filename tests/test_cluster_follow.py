"""Followed logs and watched checkpoint directories (``ingest``/``serve --logs GLOB
--checkpoints TIER=PATH``): rotation, truncation, a restart that goes on where it stopped, a
checkpoint deleted by rotation that stays in history; and, end to end through the real
``ingest`` command, a stall that becomes an interruption once progress resumes."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.collect.checkpoints.ckpt_source import CheckpointSource
from telemetry.collect.logs.cluster_source import ClusterSource
from telemetry.ingest.daemon import collect, run_rounds
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store
from tests.conftest import cli

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

T0 = datetime(2026, 3, 1, 8, 0, 0)


def lines(first: int, last: int, start: datetime, every_s: float = 20.0) -> str:
    out = []
    for i, step in enumerate(range(first, last + 1, 10)):
        t = start + timedelta(seconds=i * every_s)
        out.append(f"[{t:%Y-%m-%d %H:%M:%S}] iteration {step:>8}/ 100000 | lm loss: 2.5E+00 |")
    return "\n".join(out) + "\n"


def source(tmp: Path, **kw: object) -> ClusterSource:
    return ClusterSource(
        globs=[str(tmp / "logs" / "*.out")],
        run="live-1",
        follow=True,
        positions=str(tmp / "positions.json"),
        **kw,  # type: ignore[arg-type]
    )


def steps(store: Store) -> list[int]:
    return [r[0] for r in store.rows("SELECT step FROM train_metrics ORDER BY ts, step")]


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = Store(str(tmp_path / "s.duckdb"))
    yield s
    s.close()


def test_rotation_truncation_and_restart_lose_and_repeat_nothing(
    tmp_path: Path, store: Store
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    job = logs / "job.out"
    job.write_text(lines(10, 100, T0))
    src, writer = source(tmp_path), StoreWriter(store)
    collect(src, writer, T0)
    assert steps(store) == list(range(10, 101, 10))
    with open(job, "a") as fh:  # half a line: not read until its newline comes
        fh.write(lines(110, 120, T0 + timedelta(seconds=200)) + "[2026-03-01 08:04:20] itera")
    collect(src, writer, T0)
    assert steps(store)[-1] == 120
    # logrotate: the file is renamed, a new one takes its name; the old one's rest is read
    with open(job, "a") as fh:
        fh.write("tion      130/ 100000 | lm loss: 2.4E+00 |\n")
    os.rename(job, logs / "job.out.1")
    job.write_text(lines(140, 150, T0 + timedelta(seconds=280)))
    collect(src, writer, T0)
    assert steps(store)[-3:] == [130, 140, 150]
    # copytruncate: the same file emptied and written again from the start
    with open(job, "r+") as fh:
        fh.truncate(0)
    job.write_text(lines(160, 160, T0 + timedelta(seconds=320)))
    collect(src, writer, T0)
    assert steps(store)[-1] == 160
    src.close()
    # a restart goes on from the positions file: nothing read twice
    with open(job, "a") as fh:
        fh.write(lines(170, 170, T0 + timedelta(seconds=340)))
    again = source(tmp_path)
    collect(again, writer, T0)
    assert steps(store) == list(range(10, 171, 10))
    again.close()


def test_a_checkpoint_deleted_by_rotation_stays_in_history(tmp_path: Path, store: Store) -> None:
    (tmp_path / "logs").mkdir()
    root = tmp_path / "ckpt"
    old = (T0 - datetime(1970, 1, 1)).total_seconds()
    for step in (100, 200):
        d = root / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x" * 100)
        (d / "trainer_state.json").write_text("{}")
        for f in (d / "model.safetensors", d / "trainer_state.json"):
            os.utime(f, (old + step, old + step))
    src, writer = CheckpointSource([("nvme", str(root))], "live-1", follow=True), StoreWriter(store)
    collect(src, writer, T0 + timedelta(hours=1))
    assert store.rows("SELECT step, status FROM checkpoints ORDER BY step") == [
        (100, "ok"),
        (200, "ok"),
    ]
    for f in (root / "checkpoint-100").iterdir():
        f.unlink()
    (root / "checkpoint-100").rmdir()
    collect(src, writer, T0 + timedelta(hours=1))
    restarted = CheckpointSource([("nvme", str(root))], "live-1", follow=True)
    collect(restarted, writer, T0 + timedelta(hours=1))
    assert store.rows("SELECT step, tier FROM checkpoints ORDER BY step") == [
        (100, "nvme"),
        (200, "nvme"),
    ]


def test_ingest_follows_a_log_and_derives_the_stop_once_progress_resumes(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    job = logs / "job.out"
    now = datetime.utcnow().replace(microsecond=0)
    job.write_text(lines(10, 300, now - timedelta(minutes=30)))  # then nothing for 20 min
    store = tmp_path / "s.duckdb"
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    args = ["ingest", "--store", str(store), "--logs", str(logs / "*.out"), "--run", "live-1"]
    r = cli(*args, "--once", env=env)
    assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        from telemetry.derive.derive import open_stall

        stall = open_stall(s, "live-1", now)
        assert stall is not None and stall["step"] == 300
        assert s.scalar("SELECT count(*) FROM interruptions") == 0
    with open(job, "a") as fh:  # the job restarted from step 200, and goes on
        fh.write(f"[{now:%Y-%m-%d %H:%M:%S}] loading checkpoint from /ckpt at iteration 200\n")
        fh.write(lines(210, 260, now + timedelta(seconds=30)))
    r = cli(*args, "--once", env=env)
    assert r.returncode == 0, r.stderr
    assert "derived live-1: 1 interruption(s)" in r.stderr + r.stdout
    with Store(str(store), read_only=True) as s:
        row = s.rows("SELECT restored_step, lost_steps, source FROM interruptions")
        assert row == [(200, 100, "inferred")]
        assert s.scalar("SELECT count(*) FROM train_metrics") == 30 + 6


def test_a_failure_line_starts_the_round_at_once_and_progress_keeps_the_cadence(
    tmp_path: Path, store: Store
) -> None:
    """``serve --logs`` reads a followed log on a schedule; a failure's first line must not
    wait for the next tick (#58: the culprit alerted within seconds). Here the tick is 30 s:
    a progress line waits for it, a traceback is read within seconds."""
    logs = tmp_path / "logs"
    logs.mkdir()
    job = logs / "job.out"
    now = datetime.utcnow().replace(microsecond=0)
    job.write_text(lines(10, 100, now - timedelta(minutes=5)))
    stop = threading.Event()
    src = source(tmp_path, interval_s=30.0)
    t = threading.Thread(target=run_rounds, args=(src, StoreWriter(store), stop, lambda _m: None),
                         daemon=True)  # fmt: skip
    t.start()
    try:
        _until(lambda: steps(store)[-1:] == [100], 60)  # the first round
        with open(job, "a") as fh:
            fh.write(lines(110, 110, now))
        time.sleep(4)
        assert steps(store)[-1] == 100  # progress waits for the tick, 30 s on
        t0 = time.monotonic()
        with open(job, "a") as fh:
            fh.write("[rank3]: Traceback (most recent call last):\n[rank3]: RuntimeError: "
                     "CUDA error: an illegal memory access was encountered\n")  # fmt: skip
        _until(lambda: steps(store)[-1] == 110, 20)  # read with the failure, long before 30 s
        assert time.monotonic() - t0 < 20, "the traceback waited for the tick"
    finally:
        stop.set()
        t.join(timeout=30)


def _until(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")
