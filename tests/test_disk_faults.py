"""The store's disk full or its path read-only: a clear error naming the path, nothing
corrupted, and writes resume when space returns.

A full disk is a file-size limit (RLIMIT_FSIZE) on the process that owns the store: every
write past it fails with EFBIG exactly as a full disk fails with ENOSPC, and it can be lifted
on the running process (prlimit), which is "space returns" without needing a real full disk.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli
from tests.faults import acknowledged, free_port, spawn, verdict, wait_http

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

_FILL = """
import resource, sys
import numpy as np, pandas as pd
from telemetry.store import Store
from telemetry.errors import StoreError
store = Store(sys.argv[1])
def batch(i):
    n = 50_000
    return pd.DataFrame({"ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(n), "s"),
        "target": f"t{i}", "up": True, "duration_s": np.random.rand(n), "samples": 1,
        "rejected_lines": 0, "error": None, "stale": False, "digest": 0, "unchanged": 0})
ok = 0
resource.setrlimit(resource.RLIMIT_FSIZE, (4_000_000, resource.RLIM_INFINITY))  # "disk full"
for i in range(12):
    try:
        store.append("targets", batch(i)); ok += 1
    except StoreError as exc:
        print("ERROR", exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)  # space returns
for i in range(12, 15):
    store.append("targets", batch(i)); ok += 1
print("OK", ok, store.scalar("SELECT count(DISTINCT target) FROM targets"))
store.close()
"""


def test_a_full_disk_is_a_clear_error_and_writes_resume(tmp_path: Path) -> None:
    path = tmp_path / "full.duckdb"
    r = subprocess.run(
        [sys.executable, "-c", _FILL, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR")]
    assert errors, r.stdout  # the limit was hit
    assert all(str(path) in e and "File too large" in e for e in errors), errors
    ok, distinct = map(int, r.stdout.splitlines()[-1].split()[1:])
    assert ok == distinct  # every batch that was acknowledged, and only those, is stored
    assert ok >= 3 + 1  # some before the limit, and all three after it was lifted


def test_a_full_disk_on_the_server_is_bridged_by_the_spool(tmp_path: Path, exporter: str) -> None:
    """The server's disk fills while a daemon forwards: the server answers 507 naming the
    store, the daemon spools, and once space returns every round is stored once."""
    store, port = tmp_path / "srv.duckdb", free_port()
    url = f"http://127.0.0.1:{port}"
    server = spawn(
        ["serve", "--store", str(store), "--accept-ingest", "--port", str(port)],
        tmp_path / "serve.log",
    )
    wait_http(url + "/api/v1/health", server)
    daemon_log = tmp_path / "daemon.log"
    target = f"{exporter}/default_h100/metrics"
    args = ["ingest", "--server", url, "--spool", str(tmp_path / "spool"), "--target", target]
    daemon = spawn([*args, "--interval", "0.4", "--timeout", "0.3"], daemon_log)
    try:
        time.sleep(2.0)
        resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
        deadline = time.monotonic() + 30
        while "HTTP 507" not in daemon_log.read_text():
            assert time.monotonic() < deadline, daemon_log.read_text()[-2000:]
            time.sleep(0.3)
        time.sleep(1.5)  # a few more rounds spool while the disk is full
        resource.prlimit(
            server.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )
        deadline = time.monotonic() + 60
        while "taking rounds again" not in daemon_log.read_text():
            assert time.monotonic() < deadline, daemon_log.read_text()[-2000:]
            time.sleep(0.3)
        time.sleep(1.0)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    drain_log = tmp_path / "drain.log"
    drain = spawn([*args, "--once", "--timeout", "0.3"], drain_log)
    assert drain.wait(timeout=120) == 0, drain_log.read_text()
    server.terminate()
    server.wait(timeout=30)
    text = daemon_log.read_text()
    assert f"store {store}: cannot write" in text and "File too large" in text
    v = verdict(store, acknowledged(daemon_log, drain_log), kills=0)
    assert v.store_opens and v.acknowledged >= 8, v
    assert (v.lost, v.duplicated) == (0, 0), v


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory the test process cannot write: a read-only tmpfs when running as root
    (root ignores permission bits), else a directory without write permission."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)], check=True)
        try:
            yield d
        finally:
            subprocess.run(["umount", str(d)], check=False)
    else:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)


def test_a_read_only_store_path_is_one_clear_line(read_only_dir: Path, exporter: str) -> None:
    path = read_only_dir / "fleet.duckdb"
    r = cli(
        "ingest", "--store", str(path), "--target", f"{exporter}/default_h100/metrics", "--once"
    )
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and str(path) in r.stderr, r.stderr
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_older_store_on_a_read_only_path_is_one_clear_line(tmp_path: Path) -> None:
    """`serve` of a store from an earlier version that cannot be upgraded in place (its file
    system is read-only): one line that says why and what to do, and the file is unchanged."""
    import duckdb

    d = tmp_path / "old"
    d.mkdir()
    root = os.geteuid() == 0
    if root:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(d)], check=True)
    path = d / "fleet.duckdb"
    try:
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        con.close()
        before = path.read_bytes()
        if root:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        else:
            path.chmod(0o444)
            d.chmod(0o555)
        r = cli("serve", "--store", str(path), "--port", str(free_port()))
        assert r.returncode == 1, r.stderr
        assert r.stderr.count("\n") == 1 and str(path) in r.stderr, r.stderr
        assert "older Factory Floor" in r.stderr and "write access" in r.stderr, r.stderr
        assert path.read_bytes() == before
    finally:
        if root:
            subprocess.run(["umount", str(d)], check=False)
        else:
            d.chmod(0o755)


_REAL_FULL = """
import subprocess, sys
import numpy as np, pandas as pd
from telemetry.store import Store
from telemetry.errors import StoreError
path, mnt = sys.argv[1], sys.argv[2]
store = Store(path)
def batch(i):
    n = 50_000
    return pd.DataFrame({"ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(n), "s"),
        "target": f"t{i}", "up": True, "duration_s": np.random.rand(n), "samples": 1,
        "rejected_lines": 0, "error": None, "stale": False, "digest": 0, "unchanged": 0})
def remount(opts):
    subprocess.run(["mount", "-o", "remount," + opts, mnt], check=True)
ok, i = 0, 0
def write():
    global ok, i
    try:
        store.append("targets", batch(i)); ok += 1
    except StoreError as exc:
        print("ERROR", exc, flush=True)
    i += 1
for _ in range(30):  # until the 12 MB file system is full
    write()
remount("size=256m")  # space returns
for _ in range(3):
    write()
remount("size=12m")  # the volume fills up again
for _ in range(3):
    write()
remount("size=256m")
for _ in range(3):
    write()
print("OK", ok, store.scalar("SELECT count(DISTINCT target) FROM targets"), flush=True)
store.close()
"""


def test_a_really_full_volume_twice_mid_run(tmp_path: Path) -> None:
    """A real ``No space left on device`` (a 12 MB tmpfs) under a running writer, twice: each
    failed batch is a clear error naming the store, every batch that was acknowledged is
    stored exactly once, and writes resume each time space returns. (Linux refuses to remount
    a volume read-only while a file on it is open for writing, so the read-only case is the
    start-up test above.)"""
    # Mounting needs root. Not root is a failure, never a skip: `make test` and CI run as root.
    assert os.geteuid() == 0, "run the tests as root: this one mounts a 12 MB tmpfs"
    d = tmp_path / "vol"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(d)], check=True)
    path = d / "fleet.duckdb"
    try:
        r = subprocess.run(
            [sys.executable, "-c", _REAL_FULL, str(path), str(d)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        errors = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR")]
        assert errors and all("No space left on device" in e for e in errors), r.stdout[-3000:]
        assert all(str(path) in e for e in errors), errors
        ok, distinct = map(int, r.stdout.splitlines()[-1].split()[1:])
        assert ok == distinct, r.stdout[-3000:]  # acknowledged batches, each stored once
        assert ok >= 1 + 3 + 3, r.stdout[-3000:]  # before full, and after each time space returns
        from telemetry.store import Store

        with Store(str(path), read_only=True) as s:  # it opens cleanly afterwards
            again = s.rows("SELECT target, count(*) FROM targets GROUP BY target")
        assert len(again) == ok and {n for _, n in again} == {50_000}
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
