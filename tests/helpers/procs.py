"""The real ``factoryfloor`` command and server, run in subprocesses on free ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.helpers.paths import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(
    *args: str, timeout: float = 120, check: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real ``factoryfloor`` entry point in a subprocess (``env``: variables added)."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        stdin=subprocess.DEVNULL,
    )


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_server(args: list[str], log: Path, timeout: float = 60) -> Server:
    port = free_port()
    fh = open(log, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args, "--port", str(port)],
        cwd=ROOT,
        stdout=fh,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/", timeout=2) as r:
                if r.status == 200:
                    return Server(proc, url, log)
        except urllib.error.HTTPError:  # it answers (a server with a token says 401)
            return Server(proc, url, log)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not answer within {timeout} s:\n{log.read_text()}")
