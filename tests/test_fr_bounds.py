"""Hostile flight-recorder dumps (issue 55, items 1 and 8), through the real ``import`` and the
real ``serve --flight-recorder``: a pickle memo "billion laughs", values nested 200,000 deep,
numbers that overflow a column, a dump over the size bound, a folder of a symlink loop, and a
dump that takes too long to unpickle. Each is refused in one line with its path; the others'
hang is still told; the server keeps answering and stops on SIGTERM."""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from telemetry.collect.logs import fr_bounds, fr_worker
from tests.conftest import ROOT, cli, free_port

SEQ = 5  # the waiting rank enqueued collectives 1..5; the culprit stopped at 4
T0_NS = 1_790_000_000_000_000_000


def entry(seq: int, sizes: object = None) -> dict:
    return {"pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "profiling_name": "nccl:all_reduce", "time_created_ns": T0_NS + seq * 10**9,
            "input_sizes": [[1024]] if sizes is None else sizes, "input_dtypes": ["Float"],
            "frames": [{"name": "train_step", "filename": "train.py", "line": 7}],
            "is_p2p": False}  # fmt: skip


def doc(enq: int, entries: list | None = None, **head: object) -> dict:
    d = {"version": "2.10",
         "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
         "pg_status": {"0": {"last_enqueued_collective": enq, "last_started_collective": enq,
                             "last_completed_collective": min(enq, SEQ - 1)}}}  # fmt: skip
    d.update(head)
    d["entries"] = [entry(s) for s in range(1, enq + 1)] if entries is None else entries
    return d


def job(folder: Path, **dumps: bytes) -> Path:
    """A job's dumps: ranks 1 (waiting) and 2 (the culprit) are sound; ``dumps`` add others
    by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nccl_trace_rank_1").write_bytes(pickle.dumps(doc(SEQ), protocol=2))
    (folder / "nccl_trace_rank_2").write_bytes(pickle.dumps(doc(SEQ - 1), protocol=2))
    for name, data in dumps.items():
        (folder / name).write_bytes(data)
    return folder


def laughs(levels: int) -> list:
    """A list nested ``levels`` deep, each level referring twice to the one below: pickled
    in about 10 bytes a level, 2^levels values written out."""
    x: list = []
    for _ in range(levels):
        x = [x, x]
    return x


def import_(tmp: Path, path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    store = tmp / "s.duckdb"
    if store.exists():
        store.unlink()
    return cli("import", "--store", str(store), "--run", "r", str(path), timeout=timeout)


def told_rank_2(out: str) -> bool:
    return "1 of 2 rank(s) never called it: rank 2" in out and "nccl:all_reduce #5" in out


@pytest.mark.parametrize("levels", [64, 26])
def test_a_memo_billion_laughs_is_refused_in_one_line(tmp_path: Path, levels: int) -> None:
    """64 levels (the issue's 914-byte dump) is over the depth bound; 26 levels nests within it
    and reaches 2^26 values, over the values bound. Either froze ``import`` before."""
    x = laughs(levels)
    bomb = pickle.dumps(doc(SEQ, [entry(s, x) for s in range(1, SEQ + 1)]), 2)
    assert len(bomb) < 3000
    d = job(tmp_path / "job", nccl_trace_rank_0=bomb)
    t0 = time.monotonic()
    r = import_(tmp_path, d, timeout=60)
    assert time.monotonic() - t0 < 30 and r.returncode == 0, r.stderr
    why = "nested more than 32 deep" if levels == 64 else "over 50,000,000 values reached"
    assert f"{d}/nccl_trace_rank_0: refused: {why}" in r.stdout, r.stdout
    assert "2 flight-recorder dumps of 2 ranks read" in r.stdout  # the bomb is not "read"
    assert told_rank_2(r.stdout) and "Traceback" not in r.stderr


def _deep_pickle(depth: int) -> bytes:
    """``doc`` whose waiting rank's ``input_sizes`` nests ``depth`` lists (opcodes written
    here: pickle.dumps itself would overflow the C stack)."""
    head = pickle.dumps(doc(SEQ, [entry(s, "MARK") for s in range(1, SEQ + 1)]), protocol=2)
    deep = b"(" * depth + b"]" + b"l" * depth
    return head.replace(b"X\x04\x00\x00\x00MARK", deep)


def _cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Issue 55 item 8: each folder and the one line that must refuse its bad dump."""
    big = 10**30
    cases = {
        "rank": ("nccl_trace_rank_99999999999", pickle.dumps(doc(SEQ), 2),
                 "no rank (0 to 2,147,483,647) at the end of its name"),
        "seq": ("nccl_trace_rank_0", pickle.dumps(doc(big, [entry(SEQ)]), 2),
                "refused: pg_status says 1000000000000000000000000000000, not a sequence"),
        "pg_config": ("nccl_trace_rank_0.json", json.dumps(doc(SEQ, pg_config=[1, 2])).encode(),
                      "not a flight-recorder dump (pg_config is a list, not a dict)"),
        "deep": ("nccl_trace_rank_0", _deep_pickle(200_000), "refused: nested more than 32 deep"),
        "deep_json": ("nccl_trace_rank_0.json", b'{"version": "2.10", "pg_status": {"0": {}}, '
                      b'"entries": [' + b"[" * 200_000 + b"]" * 200_000 + b"]}",
                      "refused: nested too deeply"),
        "entries": ("nccl_trace_rank_0", pickle.dumps(doc(SEQ, [1, "x", {"a": 1}]), 2),
                    "refused: none of its 3 entries is a collective"),
    }  # fmt: skip
    out = {}
    for case, (name, data, why) in cases.items():
        d = job(tmp / case, **{name: data})
        out[case] = (d / name, why)
    return out


def test_hostile_values_are_refused_in_one_line_and_not_counted_read(tmp_path: Path) -> None:
    for case, (bad, why) in _cases(tmp_path).items():
        r = import_(tmp_path, bad.parent)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (case, r.stderr[-2000:])
        assert f"unreadable: {bad}: {why}" in r.stdout, (case, r.stdout)
        assert "2 flight-recorder dumps of 2 ranks read" in r.stdout, (case, r.stdout)
        assert told_rank_2(r.stdout), (case, r.stdout)


def test_a_dump_over_the_size_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A sparse file whose first bytes are a sound dump's (its head alone used to be read,
    and the dump counted)."""
    d = job(tmp_path / "job")
    big = d / "nccl_trace_rank_0"
    big.write_bytes(pickle.dumps(doc(SEQ), protocol=2))
    os.truncate(big, fr_bounds.MAX_DUMP_BYTES + 1)
    r = import_(tmp_path, d)
    assert f"{big}: refused: 268,435,457 bytes, over the 268,435,456 a dump may be" in r.stdout
    assert "2 flight-recorder dumps of 2 ranks read" in r.stdout and told_rank_2(r.stdout)


def test_a_folder_of_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    d = tmp_path / "loop"
    d.mkdir()
    os.symlink("nccl_trace_rank_0", d / "nccl_trace_rank_0")
    r = import_(tmp_path, d)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(d) in r.stderr


def _colliding(keys: int) -> bytes:
    """A dump whose pg_config holds a dict of ``keys`` ints that share one hash: unpickling it
    is quadratic, in one C call that no thread can interrupt."""
    p = (1 << 61) - 1
    out = io.BytesIO()
    out.write(b"}(")
    for k in range(1, keys + 1):
        v = (k * p).to_bytes(10, "little", signed=True)
        out.write(b"\x8a\x0a" + v + b"N")
    out.write(b"u")
    head = pickle.dumps(doc(SEQ, pg_config={"0": {"name": "0"}, "1": "MARK"}), protocol=2)
    return head.replace(b"X\x04\x00\x00\x00MARK", out.getvalue())


def test_a_dump_that_takes_too_long_is_refused_and_the_rest_analysed(tmp_path: Path) -> None:
    d = job(tmp_path / "job", nccl_trace_rank_0=_colliding(40_000))
    files = sorted(str(p) for p in d.iterdir())
    t0 = time.monotonic()
    hang, errors = fr_worker.analyse(files, dump_s=3)
    assert time.monotonic() - t0 < 20
    assert errors == [f"{d}/nccl_trace_rank_0: refused: not read within 3 s"], errors
    assert hang is not None and hang.missing_ranks == [2] and hang.seq_id == SEQ


def test_serve_answers_and_stops_with_a_bomb_in_its_folder(tmp_path: Path) -> None:
    """The bomb in a folder ``serve --flight-recorder`` follows: it is refused in the log, the
    health endpoint answers within 2 s all along, and SIGTERM stops the server."""
    x = laughs(64)
    bomb = pickle.dumps(doc(SEQ, [entry(s, x) for s in range(1, SEQ + 1)]), 2)
    d = job(tmp_path / "dumps" / "job-1", nccl_trace_rank_0=bomb)
    old = time.time() - 120  # settled
    for f in d.iterdir():
        os.utime(f, (old, old))
    port, log = free_port(), tmp_path / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--store", str(tmp_path / "s.duckdb"),
             "--flight-recorder", str(tmp_path / "dumps"), "--run", "r", "--port", str(port)],
            cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/api/v1/health"
        answered = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "refused" not in log.read_text():
            answered.append(_answers(url))
            time.sleep(0.5)
        for _ in range(6):  # and after the analysis
            answered.append(_answers(url))
            time.sleep(0.5)
        answered = [x for x in answered if x is not None]  # before it listened: None
        assert answered and all(answered), log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) is not None
        assert f"{d}/nccl_trace_rank_0: refused: nested more than 32 deep" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool | None:
    """True: answered within 2 s; False: did not; None: not listening yet."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except urllib.error.URLError as exc:
        return None if isinstance(exc.reason, ConnectionRefusedError) else False
    except OSError:  # a timeout while reading
        return False
