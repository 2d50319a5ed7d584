"""Fault drivers shared by the tests and ``benchmarks/reliability.py``: SIGKILL the ingest
daemon or the server at random moments while rounds flow, then account for every round and
every GPU sample in it.

A round counts as acknowledged when the daemon logged it (``round <ts> spooled`` in forwarding
mode: it is fsync'd in the spool; ``round <ts> stored`` with ``--store``: it is committed).
The verdict counts rounds (acknowledged, stored, stored twice, missing) and the GPU sample
rows of the acknowledged rounds that are missing from the store (the issue's "samples lost").
"""

from __future__ import annotations

import http.server
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from telemetry.store import Store

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "sample_data" / "dcgm" / "default_h100.txt").read_text()
# Forwarding: "round <ts> spooled: 3/4 targets up; ..."; direct: "round <ts> stored: 3/4
# targets up, 24 GPU samples, ..." (the forwarder and the store writer write them).
_ACK = re.compile(
    r"round (\S+) (?:spooled|stored): (\d+)/\d+ targets up(?:, ([\d,]+) GPU samples)?"
)


@dataclass(frozen=True)
class Ack:
    """What the daemon said of a round when it acknowledged it."""

    up: int  # targets that answered
    gpu_rows: int | None  # GPU sample rows it stored (direct mode says; forwarding does not)


@dataclass
class Verdict:
    kills: int
    acknowledged: int  # rounds the daemon acknowledged
    stored: int  # rounds in the store
    duplicated: int  # rounds or GPU samples stored more than once
    lost_rounds: int  # acknowledged rounds missing from the store
    lost: int | None  # GPU sample rows of acknowledged rounds missing (None: not measurable)
    expected: int  # GPU sample rows the acknowledged rounds should have stored
    store_opens: bool
    mid_write: int | None = None  # kills with a round's POST in flight (server kills only)

    @property
    def ok(self) -> bool:
        # Nothing acknowledged (a daemon that crashed on start) or no sample to look for is
        # no evidence that nothing is lost.
        measured = self.acknowledged > 0 and self.expected > 0
        no_loss = self.lost_rounds == 0 and self.lost == 0
        return self.store_opens and measured and no_loss and self.duplicated == 0


def fleet_exporter(nodes: int) -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    """``default_h100.txt`` (8 GPUs) as ``nodes`` exporters on one 127.0.0.1 port: each
    ``/node-<i>/metrics`` answers with its own Hostname, so every target adds 8 GPUs to a round
    (GPUs are keyed by host: one shared Hostname would merge every target into one node). The
    caller shuts the server down."""
    pages = {f"/node-{i:03d}/metrics": _as_host(f"node-{i:03d}") for i in range(nodes)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            page = pages.get(self.path)
            if page is None:
                self.send_error(404)
                return
            body = (page + f"# {time.time()}\n").encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon was killed, or gave up at its timeout: what the test does

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    return srv, [base + path for path in pages]


def _as_host(host: str) -> str:
    return PAGE.replace('Hostname="dgx-h100-017"', f'Hostname="{host}"')


def _target_args(targets: list[str]) -> list[str]:
    return [arg for t in targets for arg in ("--target", t)]


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


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    """Wait for ``url`` to answer; on failure ``proc`` is killed (no orphan holds the store).
    Minutes, not seconds: on a loaded 2-core machine a server's start has taken over 60 s."""
    try:
        _wait_http(url, proc, timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
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


def acknowledged(*logs: Path) -> dict[str, Ack]:
    """Every round the daemons acknowledged in ``logs``, by timestamp."""
    acks = {}
    for log in logs:
        if log.exists():
            for ts, up, rows in _ACK.findall(log.read_text()):
                acks[ts] = Ack(int(up), int(rows.replace(",", "")) if rows else None)
    return acks


def verdict(
    store_path: Path, acked: dict[str, Ack], kills: int, mid_write: int | None = None
) -> Verdict:
    """Open the store (it must open cleanly after the kills) and account for every round and
    every GPU sample row the acknowledged rounds brought."""
    try:
        with Store(str(store_path), read_only=True) as s:
            # A round has a targets row per target: more rows than targets is a second copy.
            rounds = s.rows("SELECT ts, count(*) - count(DISTINCT target) FROM targets GROUP BY ts")
            gpus = s.rows("SELECT ts, count(DISTINCT gpu_id) FROM gpu_samples GROUP BY ts")
            dup_samples = s.scalar(
                "SELECT count(*) FROM (SELECT ts, gpu_id FROM gpu_samples GROUP BY ALL "
                "HAVING count(*) > 1)"
            )
            for table in ("gpu_samples", "node_tick", "gpus", "nodes", "ingest_batches"):
                s.scalar(f"SELECT count(*) FROM {table}")  # every table reads back
    except Exception:  # noqa: BLE001 (any failure to open or read is the finding)
        return Verdict(kills, len(acked), 0, 0, len(acked), None, 0, False, mid_write)
    stored = {ts.isoformat() for ts, _ in rounds}
    twice = sum(1 for _, extra in rounds if extra > 0) + int(dup_samples or 0)
    expected, lost = samples_lost(acked, {ts.isoformat(): int(n) for ts, n in gpus})
    lost_rounds = len(acked.keys() - stored)
    return Verdict(
        kills, len(acked), len(stored), twice, lost_rounds, lost, expected, True, mid_write
    )


def samples_lost(acked: dict[str, Ack], gpus_at: dict[str, int]) -> tuple[int, int | None]:
    """(GPU sample rows expected, rows missing) over the acknowledged rounds.

    A direct daemon logs the rows it stored; a forwarding one only how many targets answered,
    so its rounds expect (targets up) x (GPUs per target), the latter taken from the data: the
    most GPUs per answering target in any stored round (the drivers' targets all serve the same
    8-GPU page; a round that lost rows cannot raise the figure). ``None``: rounds are missing
    and no stored round says how many rows they held."""
    per_target = max(
        (gpus_at[ts] / a.up for ts, a in acked.items() if a.up and ts in gpus_at), default=None
    )
    expected = lost = 0
    for ts, a in acked.items():
        if a.gpu_rows is not None:
            want = a.gpu_rows
        elif per_target is not None:
            want = round(a.up * per_target)
        elif a.up:
            return expected, None
        else:
            want = 0
        expected += want
        lost += max(0, want - gpus_at.get(ts, 0))
    return expected, lost


def kill_daemon_cycles(
    tmp: Path, targets: list[str], cycles: int, seed: int = 0, direct: bool = False
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
    common = ["ingest", *dest, *_target_args(targets), "--timeout", "0.3"]
    try:
        for c in range(cycles):
            logs.append(tmp / f"kd-daemon-{c}.log")
            proc = spawn([*common, "--interval", "0.4"], logs[-1])
            # Killed a random moment after it is up and writing: on a loaded machine its start
            # alone can outlast a fixed delay, and a daemon killed while importing tests nothing.
            _await_ack(logs[-1], proc, timeout=60.0)
            time.sleep(rng.uniform(0.0, 1.5))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        logs.append(tmp / "kd-final.log")
        final = spawn([*common, "--once"], logs[-1])
        final.wait(timeout=600)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return verdict(store, acknowledged(*logs), cycles)


def kill_server_cycles(tmp: Path, targets: list[str], cycles: int, seed: int = 0) -> Verdict:
    """SIGKILL `factoryfloor serve --accept-ingest` ``cycles`` times while a daemon forwards to
    it, restarting it on the same port; the daemon's spool must bridge every gap. Even cycles
    kill at a random moment, odd ones inside a write; the verdict counts the kills that landed
    while a POST of the daemon's was unanswered (``mid_write``)."""
    rng = random.Random(seed)
    store = tmp / "ks.duckdb"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = ["serve", "--store", str(store), "--accept-ingest", "--port", str(port)]
    spool = tmp / "ks-spool"
    daemon_log = tmp / "ks-daemon.log"
    ingest = ["ingest", "--server", url, "--spool", str(spool), *_target_args(targets)]
    daemon = spawn([*ingest, "--interval", "0.4", "--timeout", "0.3"], daemon_log)
    mid_write = 0
    try:
        for c in range(cycles):
            srv = spawn(serve, tmp / f"ks-serve-{c}.log")
            wait_http(url + "/api/v1/health", srv)
            time.sleep(rng.uniform(1.0, 2.5))
            if c % 2:
                # A POST is open about a fifth of the time, so random kills seldom hit one:
                # every other kill waits for a new one and lands a random moment into it
                # (they take 55-90 ms here, most of it the server's write and commit).
                _await_post(daemon.pid, port, timeout=2.0)
                time.sleep(rng.uniform(0.0, 0.045))
            os.kill(srv.pid, signal.SIGSTOP)  # frozen: what we see is what the kill interrupts
            mid_write += post_unanswered(daemon.pid, port)
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
    try:
        drain.wait(timeout=600)  # the spool of every cycle; minutes on a loaded machine
    finally:
        drain.kill()  # no-op when it finished; no orphan holding the spool when it did not
        srv.terminate()
        srv.wait(timeout=30)
    return verdict(store, acknowledged(daemon_log, drain_log), cycles, mid_write)


@dataclass
class Outage:
    verdict: Verdict
    down_s: float  # how long the server was unreachable
    spooled_during: int  # rounds the daemon spooled while it was down
    caught_up: bool  # the live daemon emptied its spool after the server came back
    catch_up_s: float  # from the server's return to an empty spool

    @property
    def ok(self) -> bool:
        return self.verdict.ok and self.caught_up and self.spooled_during > 0


def server_outage(tmp: Path, targets: list[str], minutes: float, interval: float = 2.0) -> Outage:
    """The server unreachable for ``minutes`` while a live daemon keeps scraping, then back on
    the same port: the live daemon must deliver its whole backlog by itself, each round once.
    The outage outlasts the sender's 30 s backoff cap many times over."""
    store, port = tmp / "out.duckdb", free_port()
    url = f"http://127.0.0.1:{port}"
    serve = ["serve", "--store", str(store), "--accept-ingest", "--port", str(port)]
    spool, daemon_log = tmp / "out-spool", tmp / "out-daemon.log"
    ingest = ["ingest", "--server", url, "--spool", str(spool), *_target_args(targets)]
    srv = spawn(serve, tmp / "out-serve-1.log")
    wait_http(url + "/api/v1/health", srv)
    daemon = spawn(
        [*ingest, "--interval", str(interval), "--timeout", str(interval / 2)], daemon_log
    )
    try:
        time.sleep(5 * interval)  # a few rounds delivered live
        srv.terminate()
        srv.wait(timeout=60)
        down = time.monotonic()
        time.sleep(minutes * 60)
        spooled_during = len(_pending(spool))
        srv = spawn(serve, tmp / "out-serve-2.log")
        wait_http(url + "/api/v1/health", srv)
        back = time.monotonic()
        down_s = back - down
        deadline = back + 120 + minutes * 30
        while _pending(spool) or "taking rounds again" not in daemon_log.read_text():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        catch_up_s = time.monotonic() - back
        caught_up = time.monotonic() <= deadline
        time.sleep(2 * interval)  # and rounds flow live again
    finally:
        daemon.terminate()  # SIGTERM: a round spooled in its last moments stays spooled
        daemon.wait(timeout=60)
    drain_log = tmp / "out-drain.log"  # ... and goes with the next run, as it would in life
    spawn([*ingest, "--once", "--timeout", str(interval / 2)], drain_log).wait(timeout=120)
    srv.terminate()
    srv.wait(timeout=60)
    v = verdict(store, acknowledged(daemon_log, drain_log), kills=0)
    return Outage(v, down_s, spooled_during, caught_up, catch_up_s)


def _await_ack(log: Path, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for the daemon writing ``log`` to acknowledge its first round; False if it has not
    after ``timeout`` seconds or it exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and _ACK.search(log.read_text(errors="replace")):
            return True
        time.sleep(0.05)
    return False


def _pending(spool: Path) -> list[Path]:
    return [p for p in spool.glob("*.batch")] if spool.exists() else []


def _await_post(pid: int, port: int, timeout: float) -> bool:
    """Wait for ``pid`` to open a new POST to ``port`` (one already open may be about to be
    answered, so first wait for it to end); False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for want in (False, True):
        while post_unanswered(pid, port) != want:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
    return True


def post_unanswered(pid: int, port: int) -> bool:
    """Whether process ``pid`` has a connection to ``port`` open with nothing received on it.
    The forwarder opens a connection per POST (urllib sends ``Connection: close``) and the
    server answers only once the round is committed, so with the server stopped (SIGSTOP) such
    a connection is a round being received, decoded or written: a kill inside a write, as far
    as the outside can tell."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:  # the daemon died: its (absent) rounds tell in the verdict
        return False
    sockets = set()
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            sockets.add(link[len("socket:[") : -1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            # sl local_address rem_address st tx_queue:rx_queue tr tm->when retrnsmt uid
            # timeout inode
            f = line.split()
            remote_port = int(f[2].rsplit(":", 1)[1], 16)
            answered = int(f[4].split(":")[1], 16) > 0  # bytes of the answer waiting
            if f[3] == "01" and remote_port == port and f[9] in sockets and not answered:
                return True  # 01: ESTABLISHED
    return False
