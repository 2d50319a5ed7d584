"""Real Prometheus 2.x and VictoriaMetrics (Debian's packages) on 127.0.0.1 for the tests.

Both scrape dcgm-exporter endpoints through a Prometheus ``file_sd`` file, the one that
``factoryfloor replay --serve-exporters --targets-file`` writes (or the same file written for an
in-process ``ExporterFarm`` held at one simulated instant). ``TsdbServer.restart`` stops the
server and starts it again on the same data directory and port, as an operator's restart does.
A missing binary fails with the command that installs it (``make test`` runs
``scripts/ensure-prometheus.sh``); nothing skips.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import free_port

SCRAPE_INTERVAL_S = 1
INSTALL = "apt-get install -y prometheus victoria-metrics (or: bash scripts/ensure-prometheus.sh)"


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed: {INSTALL}")
    return path


def scrape_config(targets_file: Path, interval_s: float = SCRAPE_INTERVAL_S) -> str:
    return json.dumps(
        {
            "global": {"scrape_interval": f"{interval_s:g}s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "dcgm",
                    "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
                }
            ],
        }
    )


class TsdbServer:
    """A Prometheus or VictoriaMetrics process scraping ``targets_file``."""

    def __init__(self, kind: str, tmp: Path, targets_file: Path, **options: str) -> None:
        self.kind, self.tmp = kind, tmp
        self.port = free_port()
        self.data = tmp / f"{kind}-data"
        self.config = tmp / f"{kind}.yml"
        self.config.write_text(scrape_config(targets_file))
        self.log = tmp / f"{kind}.log"
        self.options = options
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.options.get('prefix', '')}"

    def args(self) -> list[str]:
        if self.kind == "prometheus":
            out = [
                binary("prometheus"),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
            ]
            if "prefix" in self.options:
                out.append(f"--web.route-prefix={self.options['prefix']}")
            if "web_config" in self.options:
                out.append(f"--web.config.file={self.options['web_config']}")
            return out
        return [
            binary("victoria-metrics"),
            f"-storageDataPath={self.data}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-promscrape.config={self.config}",
            "-search.latencyOffset=0s",  # the latest samples are answered at once
            "-retentionPeriod=1y",
            "-promscrape.config.strictParse=false",  # file_sd refresh_interval is ours
        ]

    def start(self, timeout: float = 60) -> TsdbServer:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                self.args(), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        ready = "/-/ready" if self.kind == "prometheus" else "/health"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited:\n{self.log.read_text()[-3000:]}")
            try:
                self.get(ready, raw=True)
                return self
            except urllib.error.HTTPError as exc:
                if exc.code == 401:  # it answers; the test's own credentials are elsewhere
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.kind} not ready within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def restart(self, sig: int = signal.SIGKILL) -> None:
        self.stop(sig)
        self.start()

    def get(self, path: str, raw: bool = False, **params: str) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
        return body if raw else json.loads(body)["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.get("/api/v1/query", query=expr)["result"]

    def wait_scraped(self, hosts_up: int, timeout: float = 90) -> None:
        """Until every answering exporter has been scraped twice (``up`` and the DCGM series
        are there), so what the server holds is what a direct scrape sees."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            up = self.query('sum(up{job="dcgm"})')
            n = int(float(up[0]["value"][1])) if up else 0
            series = self.query('count(DCGM_FI_DEV_GPU_TEMP{job="dcgm"})')
            seen = int(float(series[0]["value"][1])) if series else 0
            if n == hosts_up and seen >= 8 * hosts_up:
                time.sleep(2.5 * SCRAPE_INTERVAL_S)  # a second scrape of the same page
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.kind}: {seen} GPU series after {timeout} s")

    def __enter__(self) -> TsdbServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
