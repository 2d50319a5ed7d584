"""Flight-recorder dumps analysed in a child process, with deadlines: ``find_hang`` bounded in
time and memory as well as in size (``collect.logs.fr_bounds``).

Why a process, not a thread: a hostile pickle can make one C call run for as long as it likes
while it holds the GIL or cannot be interrupted. ``json.dumps`` of a memo "billion laughs"
starved every other thread for the 13 s it ran (measured); a 519 KB pickle of 40,000 int keys
that share a hash took 43 s to unpickle in one call (quadratic: a 256 MiB one would not end).
A thread waiting on a deadline cannot stop either, and a signal handler runs only between
bytecodes; killing a process always works. The child also caps its own address space
(``MEMORY_BYTES``: a small pickle of empty dicts unpickles to 36 times its size) and CPU time
(so an orphan ends by itself).

The child marks which dump it starts reading on a shared page (a count and an index: a memory
store, not a write per dump); a dump that takes over ``DUMP_S`` (or kills the reader) is
refused with its path, and the analysis starts again without it, at most ``MAX_STALLED`` times
within ``ANALYSIS_S``. Each start costs a Python start-up (0.1 to 0.3 s).
"""

from __future__ import annotations

import atexit
import json
import mmap
import os
import selectors
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from telemetry.collect.logs.flight_recorder import DumpError, Hang, find_hang

DUMP_S = 30.0  # one dump read (its head, or whole) within this, or it is refused
ANALYSIS_S = 600.0  # one folder's analysis, every restart included
MAX_STALLED = 3  # dumps refused for time (or for killing the reader) before giving up
MEMORY_BYTES = 4 << 30  # the child's address space
_running: set[subprocess.Popen[bytes]] = set()
_BOARD = struct.Struct("<qq")  # the child's progress: dumps it began to read, the last's index


class Stalled(Exception):
    """The child stopped making progress on one dump (``path``; None: before the first)."""

    def __init__(self, path: str | None, why: str) -> None:
        super().__init__(why)
        self.path, self.why = path, why


def analyse(
    paths: Iterable[str],
    hosts: dict[int, str] | None = None,
    stop: Callable[[], bool] | None = None,
    dump_s: float = DUMP_S,
    total_s: float = ANALYSIS_S,
) -> tuple[Hang | None, list[str]]:
    """``find_hang(paths, hosts)`` in a child process: the hang and the dumps refused (one line
    each, with the path). ``DumpError`` when the analysis had to be given up (over
    ``total_s``, more than ``MAX_STALLED`` dumps over ``dump_s``, or ``stop()`` came true)."""
    todo, refused = list(paths), []
    if not todo:
        return None, []
    deadline = time.monotonic() + total_s
    while True:
        try:
            hang, errors = _child(todo, dump_s, deadline, stop)
            break
        except Stalled as exc:
            if exc.path is None or len(refused) >= MAX_STALLED:
                at = f" (at {exc.path})" if exc.path else ""
                raise DumpError(f"flight-recorder analysis of {len(todo):,} dumps given up: "
                                f"{exc.why}{at}") from None  # fmt: skip
            refused.append(f"{exc.path}: refused: {exc.why}")
            todo.remove(exc.path)
    if hang is not None:
        hang.hosts = dict(hosts or {})
    return hang, refused + errors


def _child(
    paths: list[str], dump_s: float, deadline: float, stop: Callable[[], bool] | None
) -> tuple[Hang | None, list[str]]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as board:
        board.write(bytes(_BOARD.size))
        board.flush()
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env,
                                pass_fds=(board.fileno(),))  # fmt: skip
        _running.add(proc)
        try:
            assert proc.stdin is not None
            request = [paths, deadline - time.monotonic(), board.fileno()]
            try:
                proc.stdin.write(json.dumps(request).encode())
                proc.stdin.close()
            except BrokenPipeError:  # it ended before reading: said below, from its stderr
                pass
            with mmap.mmap(board.fileno(), _BOARD.size) as shared:
                final, at = _follow(proc, paths, shared, (dump_s, deadline), stop)
            if final is None:
                err.seek(0)
                last = (err.read().decode(errors="replace").strip().splitlines() or ["?"])[-1]
                raise Stalled(at, f"the reader stopped on it (exit {proc.wait()}: {last[:200]})")
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            _running.discard(proc)
    return _hang(final["hang"]), final["errors"]


def _follow(
    proc: subprocess.Popen[bytes],
    paths: list[str],
    board: mmap.mmap,
    limits: tuple[float, float],
    stop: Callable[[], bool] | None,
) -> tuple[dict[str, Any] | None, str | None]:
    """The child's answer (None: it ended without one) and the dump it was reading last, as
    its board says (reads so far, the index of the last; memory stores, no write per dump)."""
    assert proc.stdout is not None
    dump_s, deadline = limits
    fd, out, at, seen = proc.stdout.fileno(), bytearray(), None, 0
    since = time.monotonic()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            reads, index = _BOARD.unpack(board[: _BOARD.size])
            if reads != seen:
                seen, at, since = reads, paths[index], now
            if stop is not None and stop():
                raise Stalled(None, "stopped (the process is stopping)")
            if now >= deadline:
                raise Stalled(at, "the analysis ran out of time")
            if now >= since + dump_s:
                raise Stalled(at, f"not read within {dump_s:g} s")
            if not sel.select(min(0.1, since + dump_s - now, deadline - now)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return (json.loads(out) if out.endswith(b"\n") else None), at
            out += chunk


def _hang(doc: dict[str, Any] | None) -> Hang | None:
    if doc is None:
        return None
    doc["ts"] = datetime.fromisoformat(doc["ts"]) if doc["ts"] else None
    doc["last_completed"] = {int(k): v for k, v in doc["last_completed"].items()}
    doc["hosts"] = {}
    return Hang(**doc)


@atexit.register
def _kill_children() -> None:  # a daemon thread's child, left waiting at exit
    for proc in list(_running):
        proc.kill()


def _main() -> int:
    """The child: paths, seconds left and the board's file descriptor on stdin; it counts each
    dump it starts reading on the board, and ends with a JSON line of the hang and the refused
    dumps on stdout."""
    import resource

    paths, seconds, board_fd = json.loads(sys.stdin.read())
    cpu_s = int(seconds) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    index = {p: i for i, p in enumerate(paths)}
    board = mmap.mmap(board_fd, _BOARD.size)
    reads = 0

    def on_read(path: str) -> None:
        nonlocal reads
        reads += 1
        board[: _BOARD.size] = _BOARD.pack(reads, index[path])

    hang, errors = find_hang(paths, on_read=on_read)
    doc = None if hang is None else asdict(hang)
    if doc is not None:
        doc["ts"] = hang.ts.isoformat() if hang and hang.ts else None
    sys.stdout.write(json.dumps({"hang": doc, "errors": errors}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
