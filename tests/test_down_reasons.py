"""The ingest log says why targets are down: every down target on an ``--once`` run (so "0/1
targets up" names the reason), and in a running daemon every round where a target goes down or
comes back, over real exporters on 127.0.0.1 that stop and start again."""

from __future__ import annotations

import http.server
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.collect.dcgm.scrape_source import ScrapeSource, TargetSource
from telemetry.ingest.daemon import MAX_NAMED, collect
from telemetry.ingest.writer import StoreWriter
from telemetry.store import Store
from tests.conftest import ExporterHandler, cli, free_port

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

T0 = datetime(2026, 3, 1, 12)


class Exporter:
    """conftest's fixture exporter on a fixed port, to stop and start again."""

    def __init__(self, port: int) -> None:
        self.port, self.server = port, None

    def start(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), ExporterHandler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


def test_once_names_each_down_target_and_its_reason(tmp_path: Path, exporter: str) -> None:
    dead = free_port()
    store = tmp_path / "s.duckdb"
    r = cli("ingest", "--target", f"127.0.0.1:{dead}", "--store", str(store), "--once")
    assert r.returncode == 1, r.stderr
    assert (
        f"stored: 0/1 targets up, 0 GPU samples, 0 XID events, 0 rejected lines; "
        f"127.0.0.1:{dead} down: connection refused\n"
    ) in r.stderr
    # a page the exporter does not have: down with the HTTP status; the target up is not named
    r = cli(
        *("ingest", "--target", f"{exporter}/default_h100/metrics"),
        *("--target", f"{exporter}/nothing/metrics", "--store", str(store), "--once"),
    )
    assert r.returncode == 0, r.stderr
    assert (
        f"stored: 1/2 targets up, 8 GPU samples, 0 XID events, 0 rejected lines; "
        f"{exporter}/nothing/metrics down: HTTP 404 Not Found\n"
    ) in r.stderr


def test_a_running_daemon_logs_each_change_once(tmp_path: Path, exporter: str) -> None:
    port = free_port()
    flaky = Exporter(port)
    urls = [f"127.0.0.1:{port}/default_h100/metrics", f"{exporter}/default_h100/metrics"]
    source = ScrapeSource(TargetSource(urls, [], print), 15.0, 2.0)
    lines: list[str] = []
    with Store(str(tmp_path / "s.duckdb")) as store:
        writer = StoreWriter(store)
        for i, up in enumerate([False, False, True, True, False]):
            if up and flaky.server is None:
                flaky.start()
            if not up and flaky.server is not None:
                flaky.stop()
                flaky.server = None
            collect(source, writer, T0 + timedelta(seconds=15 * i), lines.append)
    flaky_url = f"http://127.0.0.1:{port}/default_h100/metrics"
    assert lines[0].endswith(
        f"stored: 1/2 targets up, 8 GPU samples, 0 XID events, 0 rejected lines; "
        f"{flaky_url} down: connection refused"
    )
    assert ";" not in lines[1]  # still down: not repeated every round
    # (both serve the same node, so its 8 GPUs once)
    assert lines[2].endswith(f"stored: 2/2 targets up, 8 GPU samples, 0 XID events, 0 rejected lines; {flaky_url} back up")  # noqa: E501
    assert ";" not in lines[3]
    assert lines[4].endswith(f"; {flaky_url} down: connection refused")


def test_a_mass_outage_names_a_few_and_counts_the_rest(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(MAX_NAMED + 3)]
    source = ScrapeSource(TargetSource([f"127.0.0.1:{p}" for p in ports], [], print), 15, 2)
    lines: list[str] = []
    with Store(str(tmp_path / "s.duckdb")) as store:
        collect(source, StoreWriter(store), T0, lines.append)
    (line,) = lines
    assert line.count(" down: connection refused") == MAX_NAMED
    assert line.endswith("; 3 more targets down")
    assert f"127.0.0.1:{ports[0]} down: connection refused;" in line
