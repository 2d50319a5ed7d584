"""Fault drivers shared by the tests and ``benchmarks/reliability.py``: SIGKILL the ingest
daemon or the server at random moments while rounds flow, then account for every round.

A round counts as acknowledged when the daemon logged it (``round <ts> spooled`` in forwarding
mode: it is fsync'd in the spool; ``round <ts> stored`` with ``--store``: it is committed).
Each cycle's verdict is (acknowledged, stored once, stored twice, lost).
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from telemetry.store import Store

ROOT = Path(__file__).resolve().parent.parent
_ACK = re.compile(r"round (\S+) (?:spooled|stored)")


@dataclass
class Verdict:
    kills: int
    acknowledged: int
    stored: int
    duplicated: int
    lost: int
    store_opens: bool

    @property
    def ok(self) -> bool:
        return self.store_opens and self.duplicated == 0 and self.lost == 0


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    fh = open(log, "ab")  # noqa: SIM115 (the child owns it)
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        stdout=fh,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:  # it answers (401 without the token is an answer)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def exporter_farm(
    tmp: Path, scenario: str = "dev-64", *extra: str, timeout: float = 300
) -> tuple[subprocess.Popen[bytes], Path]:
    """``replay --serve-exporters``: the scenario's nodes as dcgm-exporters on 127.0.0.1, and
    the file_sd targets file it wrote (waited for). The caller terminates the process."""
    targets = tmp / f"{scenario}-targets.json"
    log = tmp / f"{scenario}-farm.log"
    proc = spawn(
        ["replay", "--scenario", scenario, "--serve-exporters", "--exporter-base-port", "0",
         "--targets-file", str(targets), *extra],
        log,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not (targets.exists() and targets.stat().st_size):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the exporter farm did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc, targets


def acknowledged(*logs: Path) -> set[str]:
    return {m for log in logs if log.exists() for m in _ACK.findall(log.read_text())}


def verdict(store_path: Path, acked: set[str], kills: int) -> Verdict:
    """Open the store (it must open cleanly after the kills) and account for every round."""
    try:
        with Store(str(store_path), read_only=True) as s:
            rounds = s.rows("SELECT ts, count(*) FROM targets GROUP BY ts")
            dup_samples = s.scalar(
                "SELECT count(*) FROM (SELECT ts, gpu_id FROM gpu_samples GROUP BY ALL "
                "HAVING count(*) > 1)"
            )
            for table in ("gpu_samples", "node_tick", "gpus", "nodes", "ingest_batches"):
                s.scalar(f"SELECT count(*) FROM {table}")  # every table reads back
    except Exception:  # noqa: BLE001 (any failure to open or read is the finding)
        return Verdict(kills, len(acked), 0, 0, len(acked), False)
    stored = {ts.isoformat() for ts, _ in rounds}
    twice = sum(1 for _, n in rounds if n > 1) + int(dup_samples or 0)
    return Verdict(kills, len(acked), len(stored), twice, len(acked - stored), True)


def kill_daemon_cycles(
    tmp: Path, target: str, cycles: int, seed: int = 0, direct: bool = False
) -> Verdict:
    """SIGKILL `factoryfloor ingest` ``cycles`` times at random moments (forwarding to a live
    server, or with ``direct`` writing the store itself), restarting it each time; finally
    drain with ``--once``."""
    rng = random.Random(seed)
    store = tmp / "kd.duckdb"
    tok = tmp / "token"
    tok.write_text("kill-test-token-0123456789")
    logs: list[Path] = []
    server = None
    if direct:
        dest = ["--store", str(store)]
    else:
        port = free_port()
        server = spawn(
            [
                "serve",
                "--store",
                str(store),
                "--accept-ingest",
                "--port",
                str(port),
                "--token-file",
                str(tok),
            ],
            tmp / "kd-serve.log",
        )
        wait_http(f"http://127.0.0.1:{port}/api/v1/health", server)
        dest = [
            "--server",
            f"http://127.0.0.1:{port}",
            "--spool",
            str(tmp / "kd-spool"),
            "--token-file",
            str(tok),
        ]
    common = ["ingest", *dest, "--target", target, "--timeout", "0.3"]
    try:
        for c in range(cycles):
            logs.append(tmp / f"kd-daemon-{c}.log")
            proc = spawn([*common, "--interval", "0.4"], logs[-1])
            time.sleep(rng.uniform(1.2, 2.5))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        logs.append(tmp / "kd-final.log")
        final = spawn([*common, "--once"], logs[-1])
        final.wait(timeout=120)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return verdict(store, acknowledged(*logs), cycles)


def kill_server_cycles(tmp: Path, target: str, cycles: int, seed: int = 0) -> Verdict:
    """SIGKILL `factoryfloor serve --accept-ingest` ``cycles`` times while a daemon forwards to
    it, restarting it on the same port; the daemon's spool must bridge every gap."""
    rng = random.Random(seed)
    store = tmp / "ks.duckdb"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = ["serve", "--store", str(store), "--accept-ingest", "--port", str(port)]
    spool = tmp / "ks-spool"
    daemon_log = tmp / "ks-daemon.log"
    ingest = ["ingest", "--server", url, "--spool", str(spool), "--target", target]
    daemon = spawn([*ingest, "--interval", "0.4", "--timeout", "0.3"], daemon_log)
    try:
        for c in range(cycles):
            srv = spawn(serve, tmp / f"ks-serve-{c}.log")
            wait_http(url + "/api/v1/health", srv)
            time.sleep(rng.uniform(1.0, 2.5))
            os.kill(srv.pid, signal.SIGKILL)
            srv.wait()
            time.sleep(rng.uniform(0.0, 1.0))
        srv = spawn(serve, tmp / "ks-serve-final.log")
        wait_http(url + "/api/v1/health", srv)
        time.sleep(1.0)
    finally:
        daemon.terminate()  # SIGTERM: what is still spooled stays for the next run
        daemon.wait(timeout=30)
    drain_log = tmp / "ks-drain.log"
    drain = spawn([*ingest, "--once", "--timeout", "0.3"], drain_log)
    drain.wait(timeout=120)
    srv.terminate()
    srv.wait(timeout=30)
    return verdict(store, acknowledged(daemon_log, drain_log), cycles)
