"""Real receivers for the alert delivery tests: Debian's Alertmanager (``prometheus-alertmanager``)
on 127.0.0.1, routing everything to a local webhook, and that webhook: an HTTP server that
keeps what it is sent and can be told to fail."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from telemetry.notify import Dispatcher
from tests.conftest import Server, free_port, start_server
from tests.prom_fixture import binary


class Hook:
    """A webhook receiver: ``received`` holds (path, headers lower-cased, body bytes) of every
    POST it answered 200; ``fail`` answers that many POSTs with 500 first."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.arrived: list[float] = []  # time.monotonic() of each received POST, in order
        self.refused = 0
        self.fail = 0
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook.lock:
                    failing = hook.fail > 0
                    if failing:
                        hook.fail -= 1
                        hook.refused += 1
                    else:
                        headers = {k.lower(): v for k, v in self.headers.items()}
                        hook.received.append((self.path, headers, body))
                        hook.arrived.append(time.monotonic())
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, path: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(b) for p, _, b in self.received if path is None or p == path]

    def wait_for(
        self, n: int, path: str | None = None, timeout: float = 30
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.bodies(path)
            if len(got) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"{len(self.bodies(path))} notification(s) at {path}, wanted {n}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Alertmanager:
    """``prometheus-alertmanager`` with one route: every alert, grouped by alertname, to
    ``hook_url`` at once (group_wait 0 s), resolved ones too."""

    def __init__(self, tmp: Path, hook_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = tmp / "alertmanager.yml"
        self.config.write_text(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n"
            "  group_interval: 1s\n  repeat_interval: 1h\n"
            f"receivers:\n  - name: hook\n    webhook_configs:\n      - url: {hook_url}/am\n"
            "        send_resolved: true\n"
        )
        self.log = tmp / "alertmanager.log"
        self.data = tmp / "alertmanager-data"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> Alertmanager:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [binary("prometheus-alertmanager"), f"--config.file={self.config}",
                 f"--storage.path={self.data}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--cluster.listen-address="],
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"alertmanager exited:\n{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.url + "/-/ready", timeout=2).read()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()  # not left running behind a failed start
        raise RuntimeError(f"alertmanager not ready within {timeout} s")

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts Alertmanager holds as active now."""
        with urllib.request.urlopen(self.url + "/api/v2/alerts", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        """SIGTERM to the process this fixture started (its pid), SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


class Gate:
    """A TCP forwarder on 127.0.0.1 to a receiver's ``port``, that can be shut (``shut =
    True``: each connection is closed unanswered): a network partition between Factory Floor
    and a receiver that keeps running (and keeps what it holds)."""

    def __init__(self, port: int) -> None:
        self.port, self.shut = port, False
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            if self.shut:
                conn.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def wait_idle(dispatcher: Dispatcher, timeout_s: float = 30.0) -> bool:
    """True once every sender's queue is empty and nothing is in flight."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(s.pending == 0 and s.attempt == 0 for s in dispatcher.status()):
            return True
        time.sleep(0.05)
    return False


OPERATOR_TOKEN = "operator-token-0123456789"


def serve_alerting(tmp: Path, dev_store: Path, receivers: str, *extra: str) -> Server:
    """``serve`` on a copy of the dev store, evaluating every second with group_wait 0 s, to
    ``receivers`` (``[[receiver]]`` tables), ``OPERATOR_TOKEN`` in ``tmp / "op"``."""
    path = tmp / "s.duckdb"
    shutil.copy(dev_store, path)
    (tmp / "op").write_text(OPERATOR_TOKEN + "\n")
    conf = tmp / "alerts.toml"
    conf.write_text('evaluate_every = "1s"\n[route]\ngroup_wait = "0s"\n' + receivers)
    args = ["serve", "--store", str(path), "--alerts", str(conf), *extra]
    return start_server(args, tmp / "serve.log")
