"""Checkpoint directories scanned for real: trees of real files whose modification times are set
with ``os.utime``, in the layouts PyTorch DCP, Megatron-LM, the HF Trainer and plain
``torch.save``/safetensors files leave on disk; a real unreadable directory (as root, by dropping
the effective uid); a watcher polled across completion, failure, rotation and a restart."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from telemetry.collect.checkpoints.ckptdirs import (
    COLUMNS,
    TRACKER,
    CheckpointWatcher,
    UnknownTierError,
    frame,
    scan,
)
from telemetry.store import Store

T0 = datetime(2026, 3, 1, 12, 0, 0)
NOW = T0 + timedelta(hours=2)
S = timedelta(seconds=1)
MIN = timedelta(minutes=1)


def _epoch(t: datetime) -> float:
    return (t - datetime(1970, 1, 1)).total_seconds()


def put(path: Path, at: datetime, data: bytes = b"x" * 100) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (_epoch(at), _epoch(at)))
    return path


def torch_zip() -> bytes:
    """A zip laid out like torch.save's (archive/data.pkl, archive/data/0, archive/version)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", b"\x00" * 4096)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def safetensors() -> bytes:
    header = {
        "w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [64, 80]},
        "__metadata__": {"format": "pt"},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads its header to 8 bytes
    return len(raw).to_bytes(8, "little") + raw + b"\x01" * 80


def dcp(d: Path, at: datetime, shards: int = 4, complete: bool = True) -> None:
    """Shards 10 s apart, then ``.metadata`` 10 s after the last (FileSystemWriter's order)."""
    for i in range(shards):
        put(d / f"__{i}_0.distcp", at + 10 * i * S, b"s" * 1000)
    if complete:
        put(d / ".metadata", at + 10 * shards * S, b"m" * 50)


def hf(d: Path, at: datetime, complete: bool = True) -> None:
    put(d / "model.safetensors", at, safetensors())
    put(d / "optimizer.pt", at + 20 * S, torch_zip())
    put(d / "scheduler.pt", at + 21 * S)
    put(d / "rng_state.pth", at + 22 * S)
    if complete:
        put(d / "trainer_state.json", at + 23 * S, b'{"global_step": 1}')


def megatron_iter(root: Path, it: int, at: datetime, torch_dist: bool = False) -> Path:
    d = root / f"iter_{it:07d}"
    if torch_dist:
        dcp(d, at, shards=2)
    else:
        put(d / "mp_rank_00" / "model_optim_rng.pt", at, torch_zip())
        put(d / "mp_rank_01" / "model_optim_rng.pt", at + 5 * S, torch_zip())
    return d


@contextmanager
def unprivileged() -> Iterator[None]:
    """Root reads everything; drop the effective uid so permission bits apply for real."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def by_step(cks):  # type: ignore[no-untyped-def]
    return {c.step: c for c in cks}


def test_dcp_complete_failed_and_in_progress(tmp_path: Path) -> None:
    root = tmp_path / "atlas-70b"
    dcp(root / "step-100", T0)
    dcp(root / "step_200", T0 + timedelta(hours=1), complete=False)  # died mid-save
    dcp(root / "global_step300", NOW - 2 * MIN, complete=False)  # still writing
    d = root / "step-400"
    dcp(d, NOW - timedelta(hours=1), complete=False)
    put(d / ".metadata.tmp", NOW - timedelta(hours=1) + 50 * S)  # rename never happened
    res = scan("pfs", root, now=NOW)
    rows = by_step(res.checkpoints)
    ok = rows[100]
    assert (ok.status, ok.format, ok.run, ok.tier) == ("ok", "dcp", "atlas-70b", "pfs")
    assert (ok.bytes, ok.files, ok.path) == (4 * 1000 + 50, 5, str(root / "step-100"))
    assert (ok.start_ts, ok.end_ts, ok.write_s) == (T0, T0 + 40 * S, 40.0)
    assert rows[200].status == "failed" and rows[200].end_ts == T0 + timedelta(hours=1, seconds=30)
    assert rows[400].status == "failed"  # a .metadata.tmp is not the marker
    assert sorted(rows) == [100, 200, 400]
    assert [(c.step, c.status) for c in res.in_progress] == [(300, "in_progress")]
    assert res.problems == []
    assert (res.counts["ok"], res.counts["failed"], res.counts["in_progress"]) == (1, 2, 1)

    # the grace period is the caller's: 2 h keeps step 200 in progress, 1 min fails step 300
    assert by_step(scan("pfs", root, now=NOW, grace_s=7200).in_progress).keys() == {200, 300, 400}
    assert by_step(scan("pfs", root, now=NOW, grace_s=60).checkpoints)[300].status == "failed"
    # an aware time is converted, not compared as if it were UTC
    aware = (NOW + timedelta(hours=1)).replace(tzinfo=timezone(timedelta(hours=1)))
    assert by_step(scan("pfs", root, now=aware).in_progress).keys() == {300}
    assert by_step(scan("pfs", root, now=aware.replace(tzinfo=UTC)).checkpoints).keys() == {
        100, 200, 300, 400,
    }  # fmt: skip


def test_megatron_tracker_decides_completion(tmp_path: Path) -> None:
    root = tmp_path / "run"
    megatron_iter(root, 100, T0)
    megatron_iter(root, 200, T0 + 20 * MIN)
    megatron_iter(root, 300, T0 + 40 * MIN)  # above the tracker: the save never finished
    put(root / TRACKER, T0 + 20 * MIN + 10 * S, b"200")
    res = scan("nvme", root, now=NOW)
    rows = by_step(res.checkpoints)
    assert {s: c.status for s, c in rows.items()} == {100: "ok", 200: "ok", 300: "failed"}
    assert all(c.format == "megatron" for c in rows.values())
    assert rows[200].end_ts == T0 + 20 * MIN + 10 * S  # the tracker's write ends the save
    assert rows[100].end_ts == T0 + 5 * S and rows[100].write_s == 5.0
    assert rows[100].files == 2 and rows[100].bytes == 2 * len(torch_zip())
    assert res.problems == []


def test_megatron_release_garbage_and_missing_tracker(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    a = root / "a"
    megatron_iter(a, 100, T0)  # legacy layout: no marker of its own
    megatron_iter(a, 200, T0 + 10 * MIN, torch_dist=True)  # torch_dist: .metadata last
    put(a / "release" / "mp_rank_00" / "model_optim_rng.pt", T0, torch_zip())
    put(a / TRACKER, T0, b"release\n")
    res = scan("pfs", root, now=NOW)
    rows = by_step(res.checkpoints)
    assert {s: c.status for s, c in rows.items()} == {100: "failed", 200: "ok"}
    assert res.problems == [] and res.counts["skipped_dirs"] == 1  # release is valid, not a row

    put(a / TRACKER, T0, b"\x00garbage\nmore")
    hf(root / "b" / "checkpoint-50", T0)
    res = scan("pfs", root, now=NOW)
    assert len(res.problems) == 1
    assert res.problems[0].startswith(f"{a / TRACKER}: holds '\\x00garbage")
    assert "not an iteration number or 'release'" in res.problems[0]
    assert {(c.run, c.step, c.status) for c in res.checkpoints} == {
        ("a", 100, "failed"),
        ("a", 200, "ok"),
        ("b", 50, "ok"),
    }

    (a / TRACKER).unlink()
    res = scan("pfs", root, now=NOW)
    assert res.problems == [f"{a}: Megatron iterations without {TRACKER}: each counts as "
                            "complete only if it holds a torch_dist .metadata"]  # fmt: skip
    assert len(res.checkpoints) == 3


def test_hugging_face_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "out"
    hf(root / "checkpoint-500", T0)
    hf(root / "checkpoint-1000", T0 + 30 * MIN, complete=False)
    hf(root / "tmp-checkpoint-1500", T0 + 60 * MIN)  # saved, never renamed into place
    put(root / "runs" / "events.out.tfevents.1", T0)
    res = scan("object", root, now=NOW)
    rows = by_step(res.checkpoints)
    assert {s: c.status for s, c in rows.items()} == {500: "ok", 1000: "failed", 1500: "failed"}
    ok = rows[500]
    assert (ok.format, ok.files, ok.start_ts, ok.end_ts) == ("hf", 5, T0, T0 + 23 * S)
    assert ok.write_s == 23.0
    assert ok.bytes == len(safetensors()) + len(torch_zip()) + 2 * 100 + 18
    assert res.counts["other_files"] == 1


def test_plain_files_judged_by_their_own_format(tmp_path: Path) -> None:
    root = tmp_path / "run"
    whole, cut = torch_zip(), torch_zip()[:-30]
    put(root / "model_step_1200.pt", T0, whole)
    put(root / "ckpt-1300.safetensors", T0, safetensors())
    put(root / "iter_1400.pt", T0, cut)  # the job died in torch.save
    put(root / "ckpt-1450.safetensors", T0, safetensors()[:-5])
    put(root / "epoch3-step1500.ckpt", NOW - MIN, cut)  # being written now
    put(root / "epoch=4-step=1600.ckpt", T0, b"\x80\x02legacy pickle")  # cannot be checked
    put(root / "last.ckpt", T0, whole)  # no step in the name
    put(root / "notes.txt", T0)
    res = scan("nvme", root, now=NOW)
    rows = by_step(res.checkpoints)
    assert {s: c.status for s, c in rows.items()} == {
        1200: "ok", 1300: "ok", 1400: "failed", 1450: "failed", 1600: "ok",
    }  # fmt: skip
    assert [c.step for c in res.in_progress] == [1500]
    one = rows[1200]
    assert (one.format, one.files, one.bytes) == ("file", 1, len(whole))
    assert one.start_ts == one.end_ts == T0 and one.write_s is None  # one time only: unknown
    assert (res.counts["unverified"], res.counts["unrecognised"], res.counts["other_files"]) == (
        1, 1, 1,
    )  # fmt: skip
    # a legacy file still being written is not yet called whole
    put(root / "epoch=4-step=1600.ckpt", NOW - MIN, b"\x80\x02legacy pickle")
    assert [c.step for c in scan("nvme", root, now=NOW).in_progress] == [1500, 1600]


def test_runs_below_a_parent_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ckpt"
    dcp(root / "atlas-70b" / "checkpoints" / "step-100", T0)
    hf(root / "llama-8b" / "checkpoint-50", T0)
    put(root / "mistral" / "model_step_10.pt", T0, torch_zip())
    dcp(root / "checkpoint" / "step-5", T0)  # only a generic folder: the root names the run
    put(root / "atlas-70b" / "checkpoints" / TRACKER, T0, b"7")  # no Megatron dirs: ignored
    res = scan("pfs", root, now=NOW)
    assert {(c.run, c.step) for c in res.checkpoints} == {
        ("atlas-70b", 100), ("llama-8b", 50), ("mistral", 10), ("ckpt", 5),
    }  # fmt: skip
    assert res.problems == []
    given = scan("pfs", root, run="atlas", now=NOW)
    assert {c.run for c in given.checkpoints} == {"atlas"}
    # a relative root and a trailing slash give the same absolute paths (watcher identity)
    monkeypatch.chdir(tmp_path)
    again = scan("pfs", "ckpt/", now=NOW)
    assert [c.path for c in again.checkpoints] == [c.path for c in res.checkpoints]


def test_bad_roots_are_problems_not_crashes(tmp_path: Path) -> None:
    missing = scan("pfs", tmp_path / "nope", now=NOW)
    assert missing.problems == [f"checkpoint root {tmp_path / 'nope'} does not exist"]
    assert missing.checkpoints == []
    a_file = put(tmp_path / "file", T0)
    assert scan("pfs", a_file, now=NOW).problems == [f"checkpoint root {a_file} is not a directory"]
    with pytest.raises(UnknownTierError, match="unknown checkpoint tier 'lustre'; tiers are nvme"):
        scan("lustre", tmp_path)
    with pytest.raises(ValueError, match="grace_s"):
        CheckpointWatcher("nvme", tmp_path, grace_s=-1)


def test_unreadable_directories(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp root is 0700: nobody cannot enter
    try:
        base.chmod(0o755)
        dcp(base / "run-a" / "step-100", T0)
        dcp(base / "run-b" / "step-100", T0)
        dcp(base / "run-a" / "step-200", T0)
        (base / "run-b").chmod(0)
        (base / "run-a" / "step-200").chmod(0)
        with unprivileged():
            res = scan("nvme", base, now=NOW)
        assert sorted(res.problems) == [
            f"{base / 'run-a' / 'step-200'}: cannot read (Permission denied)",
            f"{base / 'run-b'}: cannot read (Permission denied)",
        ]
        assert [(c.run, c.step, c.status) for c in res.checkpoints] == [("run-a", 100, "ok")]
        base.chmod(0)
        with unprivileged():
            res = scan("nvme", base, now=NOW)
        assert res.problems == [f"{base}: cannot read (Permission denied)"]
    finally:
        for d in (base, base / "run-b", base / "run-a" / "step-200"):
            d.chmod(0o755)
        shutil.rmtree(base)


def test_symlinks_loops_and_odd_names(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run = root / "run with spaces ü"
    dcp(run / "step-100", T0)
    (run / "loop").symlink_to(run)  # back to its own directory
    (root / "up").symlink_to(tmp_path)  # above the root
    (run / "self").symlink_to(run / "self")  # ELOOP
    (run / "bad\nlink").symlink_to(tmp_path / "gone")
    (run / "latest").symlink_to(run / "step-100")  # an alias: not scanned twice
    elsewhere = tmp_path / "elsewhere" / "other-run"
    dcp(elsewhere / "step-7", T0)
    (root / "linked-run").symlink_to(elsewhere)  # outside the root: followed
    put(run / "model\nstep_9.pt", T0, torch_zip())
    os.mkdir(os.fsencode(root) + b"/run-\xff")
    put(Path(os.fsdecode(os.fsencode(root) + b"/run-\xff/model_step_3.pt")), T0, torch_zip())
    res = scan("pfs", root, now=NOW)
    got = {(c.run, c.step): c for c in res.checkpoints}
    assert set(got) == {("run with spaces ü", 100), ("run with spaces ü", 9),
                        ("linked-run", 7), ("run-\\xff", 3)}  # fmt: skip
    assert got[("run with spaces ü", 9)].path == str(run / "model\nstep_9.pt")
    assert got[("run-\\xff", 3)].path.encode("utf-8")  # stored text is valid UTF-8
    assert sorted(res.problems) == sorted([
        f"{root / 'up'}: symlink loop (leads to a directory above it), not followed",
        f"{run / 'loop'}: symlink loop (leads to a directory above it), not followed",
        f"{run / 'self'}: symlink loop, not followed",
        f"{run}/bad\\x0alink: broken symlink, skipped",
    ])  # fmt: skip
    assert all("\n" not in p for p in res.problems)
    assert res.counts["symlinks_skipped"] == 1


def test_watcher_emits_once_keeps_rotated_and_catches_late_completion(tmp_path: Path) -> None:
    root = tmp_path / "run"
    dcp(root / "step-100", T0)
    dcp(root / "step-200", NOW - MIN, complete=False)
    w = CheckpointWatcher("nvme", root, grace_s=600)
    assert [(c.step, c.status) for c in w.poll(NOW)] == [(100, "ok")]
    assert w.poll(NOW + S) == []  # nothing unchanged is emitted again
    assert w.last is not None and w.last.counts["settled"] == 1  # and step 100 was not re-read
    assert [c.step for c in w.last.in_progress] == [200]

    put(root / "step-200" / ".metadata", NOW + MIN)
    assert [(c.step, c.status) for c in w.poll(NOW + 2 * MIN)] == [(200, "ok")]
    shutil.rmtree(root / "step-100")  # rotation
    assert w.poll(NOW + 3 * MIN) == []
    assert [c.step for c in w.history] == [100, 200]  # the history keeps the rotated one

    dcp(root / "step-300", NOW + 3 * MIN, complete=False)
    assert w.poll(NOW + 20 * MIN) == []  # failed once: confirmed on the next poll
    assert [(c.step, c.status) for c in w.poll(NOW + 21 * MIN)] == [(300, "failed")]
    assert w.poll(NOW + 22 * MIN) == []
    put(root / "step-300" / ".metadata", NOW + 25 * MIN)  # the write finished after all
    late = w.poll(NOW + 26 * MIN)
    assert [(c.step, c.status, c.end_ts) for c in late] == [(300, "ok", NOW + 25 * MIN)]
    assert late[0].key != w.history[2].key and late[0].path == w.history[2].path
    assert w.poll(NOW + 27 * MIN) == []

    # restart: what the store holds is skipped, as 5-tuples or as 4-tuples
    stored = [c.key for c in w.history]
    for keys in (stored, [k[:4] for k in stored]):
        again = CheckpointWatcher("nvme", root, stored=keys)
        assert again.poll(NOW + 30 * MIN) == [] and again.poll(NOW + 31 * MIN) == []


def test_watcher_restart_still_sees_a_stored_failure_complete(tmp_path: Path) -> None:
    root = tmp_path / "run"
    megatron_iter(root, 100, T0)
    megatron_iter(root, 200, T0 + 10 * MIN)
    put(root / TRACKER, T0 + 5 * S, b"100")
    w = CheckpointWatcher("pfs", root)
    assert [(c.step, c.status) for c in w.poll(NOW)] == [(100, "ok")]
    assert [(c.step, c.status) for c in w.poll(NOW + S)] == [(200, "failed")]
    stored = [c.key for c in w.history] + [("run", 200, "nvme", "/elsewhere", "ok")]
    restarted = CheckpointWatcher("pfs", root, stored=stored)
    assert restarted.poll(NOW + 2 * S) == []
    put(root / TRACKER, NOW + MIN, b"200")  # Megatron finished the save of 200 late
    assert [(c.step, c.status, c.end_ts) for c in restarted.poll(NOW + 2 * MIN)] == [
        (200, "ok", NOW + MIN)
    ]


def test_watcher_does_not_take_a_rotation_in_progress_for_a_failure(tmp_path: Path) -> None:
    root = tmp_path / "out"
    hf(root / "checkpoint-500", T0)
    w = CheckpointWatcher("nvme", root, stored=[])
    (root / "checkpoint-500" / "trainer_state.json").unlink()  # rmtree caught half way
    assert w.poll(NOW) == []
    shutil.rmtree(root / "checkpoint-500")
    assert w.poll(NOW + S) == [] and w.history == []


def test_watcher_on_a_root_that_appears_later(tmp_path: Path) -> None:
    root = tmp_path / "later"
    w = CheckpointWatcher("object", root)
    assert w.poll(NOW) == [] and w.new_problems == [f"checkpoint root {root} does not exist"]
    assert w.poll(NOW + S) == [] and w.new_problems == []  # said once, not every poll
    hf(root / "checkpoint-10", T0)
    assert [(c.run, c.step) for c in w.poll(NOW + 2 * S)] == [("later", 10)]


def test_rows_append_to_a_real_store(tmp_path: Path) -> None:
    root = tmp_path / "run"
    dcp(root / "step-100", T0)
    put(root / "model_step_150.pt", T0, torch_zip())
    dcp(root / "step-200", T0 + MIN, complete=False)
    df = frame(scan("nvme", root, now=NOW).checkpoints)
    assert list(df.columns) == list(COLUMNS)
    with Store(str(tmp_path / "s.duckdb")) as store:
        # today's table lacks the new path and format columns (the lead adds them)
        assert store.append("checkpoints", df[list(COLUMNS[:9])]) == 3
        got = store.rows("SELECT step, status, start_ts, end_ts, bytes, write_s FROM checkpoints "
                         "ORDER BY step")  # fmt: skip
    assert got == [
        (100, "ok", T0, T0 + 40 * S, 4050, 40.0),
        (150, "ok", T0, T0, len(torch_zip()), None),
        (200, "failed", T0 + MIN, T0 + MIN + 30 * S, 4000, 30.0),
    ]


def deepspeed_tag(root: Path, step: int, at: datetime, ranks: int = 2) -> Path:
    """DeepSpeed's layout (engine.save_checkpoint): ``global_stepN/`` with the model states of
    model-parallel rank 0 and each data-parallel rank's ZeRO optimizer states."""
    d = root / f"global_step{step}"
    put(d / "mp_rank_00_model_states.pt", at, torch_zip())
    for r in range(ranks):
        put(d / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt", at + (r + 1) * 5 * S, torch_zip())
    return d


def test_deepspeed_latest_decides_completion(tmp_path: Path) -> None:
    """(#36, 5) ``latest`` names the newest complete tag; a tag above it (the save died, or
    ``latest`` was never pointed at it) is a failed write; the same inside a Hugging Face
    ``checkpoint-N/`` written by the Trainer with DeepSpeed."""
    root = tmp_path / "orion-13b"
    deepspeed_tag(root, 1000, T0)
    deepspeed_tag(root, 2000, T0 + 20 * MIN)
    deepspeed_tag(root, 3000, T0 + 40 * MIN)  # latest never moved to it
    put(root / "latest", T0 + 20 * MIN + 30 * S, b"global_step2000")
    put(root / "zero_to_fp32.py", T0, b"#!/usr/bin/env python\n")
    res = scan("pfs", root, now=NOW)
    rows = by_step(res.checkpoints)
    assert {s: c.status for s, c in rows.items()} == {1000: "ok", 2000: "ok", 3000: "failed"}
    assert {c.format for c in rows.values()} == {"deepspeed"}
    assert rows[2000].end_ts == T0 + 20 * MIN + 30 * S  # latest's write ends that save
    assert rows[1000].files == 3 and rows[1000].write_s == 10.0

    out = tmp_path / "hf-ds"
    for step, point in ((500, True), (1000, False)):
        d = out / f"checkpoint-{step}"
        hf(d, T0 + step * S)
        deepspeed_tag(d, step, T0 + step * S)
        if point:
            put(d / "latest", T0 + step * S + 40 * S, f"global_step{step}".encode())
    rows = by_step(scan("pfs", out, now=NOW).checkpoints)
    assert {s: (c.status, c.format) for s, c in rows.items()} == {
        500: ("ok", "hf"), 1000: ("failed", "hf")}


def test_a_deepspeed_tag_below_latest_that_latest_never_named_is_not_good(tmp_path: Path) -> None:
    """(#56, 4) DeepSpeed (runtime/engine.py ``save_checkpoint``) writes every rank's
    ``*_optim_states.pt`` into ``global_stepN/`` and then rank 0 points ``latest`` at the tag. A
    save that died (one rank's shard half-written, another's never started), followed by a
    restart from the tag before and a later save that moved ``latest`` past it, leaves a tag
    below ``latest`` that ``latest`` never named: a failed write, not a checkpoint to restore."""
    root = tmp_path / "orion-13b"
    deepspeed_tag(root, 1000, T0)
    torn = deepspeed_tag(root, 1500, T0 + 10 * MIN)
    (torn / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()  # never written
    shard = torn / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    put(shard, T0 + 10 * MIN + 5 * S, torch_zip()[:1000])  # cut off mid-write
    deepspeed_tag(root, 2000, T0 + 40 * MIN)
    put(root / "latest", T0 + 40 * MIN + 30 * S, b"global_step2000")
    rows = by_step(scan("pfs", root, now=NOW).checkpoints)
    assert {s: c.status for s, c in rows.items()} == {1000: "ok", 1500: "failed", 2000: "ok"}
