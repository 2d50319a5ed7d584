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
import math
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.replay.exporters import ExporterFarm
from telemetry.store import Store
from tests.conftest import free_port
from tests.test_exporters import FarmThread, farm_sim, first_xid

SCRAPE_INTERVAL_S = 1
INSTALL = (
    "apt-get install -y prometheus victoria-metrics prometheus-alertmanager "
    "(or: bash scripts/ensure-prometheus.sh)"
)


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed: {INSTALL}")
    return path


def scrape_config(
    targets_file: Path, interval_s: float = SCRAPE_INTERVAL_S, remote_write: str | None = None,
    token_file: Path | None = None,
) -> str:
    """A config scraping the file_sd targets as job ``dcgm``; with ``remote_write`` (a URL) the
    DCGM series and target health are forwarded there, in small batches (a scrape is split
    across requests), with the token in ``token_file`` as a bearer credential."""
    doc: dict[str, Any] = {
        "global": {"scrape_interval": f"{interval_s:g}s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "dcgm",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
            }
        ],
    }
    if remote_write:
        keep = {"source_labels": ["__name__"], "regex": "DCGM_.*|up|scrape_duration_seconds",
                "action": "keep"}  # fmt: skip
        rw: dict[str, Any] = {
            "url": remote_write,
            "write_relabel_configs": [keep],
            "queue_config": {"batch_send_deadline": "1s", "max_samples_per_send": 2000},
        }
        if token_file:
            rw["authorization"] = {"credentials_file": str(token_file)}
        doc["remote_write"] = [rw]
    return json.dumps(doc)


class TsdbServer:
    """A Prometheus or VictoriaMetrics process scraping ``targets_file``."""

    def __init__(self, kind: str, tmp: Path, targets_file: Path, **options: str) -> None:
        self.kind, self.tmp = kind, tmp
        self.port = free_port()
        self.data = tmp / f"{kind}-data"
        self.config = tmp / f"{kind}.yml"
        self.config.write_text(
            scrape_config(
                targets_file,
                float(options.get("interval", SCRAPE_INTERVAL_S)),
                remote_write=options.get("remote_write"),
                token_file=Path(options["token_file"]) if "token_file" in options else None,
            )
        )
        self.log = tmp / f"{kind}.log"
        self.options = options
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if "web_config" in self.options else "http"
        return f"{scheme}://127.0.0.1:{self.port}{self.options.get('prefix', '')}"

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
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, ssl.SSLError):  # it answers, over TLS
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
                time.sleep(2.5 * float(self.options.get("interval", SCRAPE_INTERVAL_S)))
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.kind}: {seen} GPU series after {timeout} s")

    def __enter__(self) -> TsdbServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


COLS = [c.name for c in SAMPLE_COLUMNS]


def stored(path: Path, at: Any = None) -> dict[str, Any]:
    """Everything the rounds (the round at ``at``) put in the store, keyed by what a user sees
    (host, GPU, field)."""
    when, args = (" WHERE ts = ?", [at]) if at is not None else ("", [])
    with Store(str(path), read_only=True) as s:
        samples = s.rows(
            f"SELECT g.host, g.gpu, {', '.join('s.' + c for c in COLS)} "
            "FROM gpu_samples s JOIN gpus g USING (gpu_id)" + when,
            args,
        )
        extras = s.rows(
            "SELECT g.host, g.gpu, e.field, e.value FROM gpu_samples_extra e JOIN gpus g "
            "USING (gpu_id)" + when,
            args,
        )
        gpus = s.rows(
            "SELECT host, gpu, uuid, model, pci_bus_id, device, driver_version, hpc_job "
            "FROM gpus"
        )
        xids = s.rows("SELECT host, gpu, xid FROM xid_events ORDER BY ALL")
        # Up in any round: one row per target. A dict of every round's rows kept whichever row
        # came last, so a target missed by one straddled or partial window (the sender's last,
        # written at shutdown) read as down at random (a CI run, 2026-11-28).
        targets = s.rows(
            "SELECT target, bool_or(up) FROM targets WHERE target LIKE 'http%' GROUP BY target"
        )
    return {
        "samples": {(r[0], r[1]): tuple(_num(v) for v in r[2:]) for r in samples},
        "extras": {(r[0], r[1], r[2]): _num(r[3]) for r in extras},
        "gpus": {(r[0], r[1]): r[2:] for r in gpus},
        "xids": xids,
        "targets": dict(targets),
    }


def _num(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(v, 6)


def hosts_up(ft: FarmThread) -> int:
    """The farm's nodes that answer (one is in repair): what a server should see scraped."""
    sim = ft.farm.sim
    return sum(not sim.down(n) for n in range(sim.n_hosts))


@pytest.fixture(scope="module", name="frozen_farm")
def _frozen_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FarmThread, Path]]:
    """dev-64 (seed 3) held at the moment its first XID shows, with a node in repair: the
    pages do not change while the servers and the direct scrape read them."""
    tmp = tmp_path_factory.mktemp("farm")
    sim = farm_sim()
    it = first_xid(sim, node_lost=False)
    with FarmThread(ExporterFarm(sim, base_port=0)) as ft:
        ft.step_to(it.t + 2 * sim.interval_s)
        targets = tmp / "targets.json"
        ft.farm.write_targets(str(targets))
        yield ft, targets




def secured(tmp: Path, user: str, password: str) -> tuple[str, Path]:
    """A Prometheus web config with TLS (a self-signed certificate for 127.0.0.1, made with
    openssl) and basic auth (bcrypt hash); returns it and the CA file that verifies it."""
    import bcrypt

    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = tmp / "web.yml"
    web.write_text(
        json.dumps(
            {
                "tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                "basic_auth_users": {user: hashed},
            }
        )
    )
    return str(web), cert
