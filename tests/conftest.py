"""Shared fixtures: seeded stores, a real server in a subprocess, and Chromium for Playwright.

Nothing here skips: a missing browser or dependency fails the run with a message saying what
to install (under CI=true and everywhere else).
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from telemetry import env
from telemetry.queries import TimeRange, data_extent
from telemetry.replay.runner import replay
from telemetry.replay.scenarios import get_scenario
from telemetry.store import Store

ROOT = Path(__file__).resolve().parent.parent
# Every figure a test builds or a test's server sends goes through plotly.py's validators first
# (app.figures.plot builds figures as plain data, unchecked in production): a misspelt property
# is an error, shown on the chart and in the server log, not a setting the browser ignores.
os.environ[env.CHECK_FIGURES] = "1"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "screenshots"  # pytest-playwright empties test-results/ at each session start
DCGM_FIXTURES = ROOT / "sample_data" / "dcgm"


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


def build_store(
    path: Path, scenario: str = "dev-64", seed: int = 0, days: float = 0.25, **kw: float
) -> Path:
    sc = get_scenario(scenario).with_overrides(days=days)
    with Store(str(path)) as store:
        replay(store, sc, seed, **kw)  # type: ignore[arg-type]
    return path


@pytest.fixture(scope="session")
def dev_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-day dev-64 replay (seed 1: 7 unexpected and 3 planned interruptions), built once
    per session; tests must not write to it."""
    return build_store(tmp_path_factory.mktemp("dev") / "dev.duckdb", seed=1, days=1.0)


@pytest.fixture
def day(dev_store: Path, tmp_path: Path) -> Path:
    """A writable copy of the session's one-day dev-64 store (60 s samples)."""
    path = tmp_path / "day.duckdb"
    shutil.copy(dev_store, path)
    return path


@pytest.fixture(scope="session")
def store(dev_store: Path) -> Iterator[Store]:
    """The session's dev-64 store opened read-only (the dashboard server may share it)."""
    s = Store(str(dev_store), read_only=True)
    yield s
    s.close()


@pytest.fixture(scope="session")
def whole(store: Store) -> TimeRange:
    """The dev-64 store's whole extent: first to last stored sample or metric."""
    ext = data_extent(store)
    assert ext is not None
    return ext


def imported_night(root: Path) -> Path:
    """The cluster fixture's night (``tests/cluster_fixture.py``) under ``root``, imported with
    the user's command into ``root/s.duckdb``."""
    from tests.cluster_fixture import build

    store = root / "s.duckdb"
    r = cli(*build(root / "night").import_args(store))
    assert r.returncode == 0, r.stderr
    return store


def bound_store(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The dashboard's data layer bound to ``path`` read-only, as ``serve`` binds it (a
    fixture body: ``yield from bound_store(...)``)."""
    from app.data import services

    monkeypatch.setattr(services, "_services", None)
    with Store(str(path), read_only=True) as s:
        services.bind(s)
        yield s


def drag_zoom(page: Any, selector: str, a: float, b: float) -> None:
    """A user's zoom: drag across the chart ``selector`` from ``a`` to ``b`` of its width."""
    drag = page.locator(f"{selector} .nsewdrag").first
    drag.scroll_into_view_if_needed()
    box = drag.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * a, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * b, y, steps=8)
    page.mouse.up()


def choose_option(page: Any, dropdown: str, text: str) -> None:
    """Open a dropdown and pick the first option containing ``text`` (scrolled into view: the
    list may open below the card)."""
    box = page.locator(f"#{dropdown}")
    box.scroll_into_view_if_needed()
    box.click()
    option = page.get_by_role("option").filter(has_text=text).first
    option.scroll_into_view_if_needed()
    option.click()


def collect_errors(page: Any) -> list[str]:
    """Console errors, uncaught page errors and failed requests seen by ``page`` from now on.

    A request the browser itself cancelled (``net::ERR_ABORTED``: a reload or navigation while a
    callback or interval request was in flight) is not the server failing and is not counted;
    resets, empty replies and refused connections are."""
    errors: list[str] = []

    def failed(request: Any) -> None:
        reason = request.failure or ""
        if "ERR_ABORTED" not in reason:
            errors.append(f"request failed: {request.url} ({reason})")

    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", failed)
    return errors


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


@pytest.fixture(scope="session")
def dev_server(dev_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("logs") / "serve.log"
    server = start_server(["serve", "--store", str(dev_store)], log)
    yield server
    server.stop()


class ExporterHandler(http.server.BaseHTTPRequestHandler):
    """dcgm-exporter fixture text over real HTTP: ``/<fixture>/metrics`` for every file in
    ``sample_data/dcgm``, ``/slow`` (answers after 3 s), ``/error`` (HTTP 500), ``/truncated``
    (a body shorter than its Content-Length), and any route a test adds to ``routes`` (a text,
    or a callable giving the text of each request)."""

    routes: dict[str, str | Callable[[], str]] = {}

    def log_message(self, *_args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path
        if path == "/slow/metrics":
            time.sleep(3)
        if path == "/error/metrics":
            self.send_error(500, "exporter crashed")
            return
        route = self.routes.get(path, "")
        body = (route() if callable(route) else route).encode()
        if path == "/truncated/metrics":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 5000))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if not body:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="session")
def exporter() -> Iterator[str]:
    """The base URL of an ``ExporterHandler`` server on 127.0.0.1."""
    routes: dict[str, str | Callable[[], str]] = {
        f"/{p.stem}/metrics": p.read_text() for p in DCGM_FIXTURES.glob("*.txt")
    }
    default = (DCGM_FIXTURES / "default_h100.txt").read_text()
    routes["/truncated/metrics"] = routes["/slow/metrics"] = default
    ExporterHandler.routes = routes
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ExporterHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


# Marks (`make test-fast` runs what has none; `make test` runs everything). Measured on CI
# (2 cores, 2026-11-28): these modules start real servers, daemons or jobs (the dashboard under
# waitress, Prometheus, VictoriaMetrics, Alertmanager, Slurm's daemons, torch's gloo ranks) or
# run the CLI in a subprocess test after test (~3 s each); the two generative ones read ~150 s
# of Hypothesis rounds.
LIVE_MODULES = frozenset(
    {
        "test_alert_delivery", "test_api_records", "test_bind", "test_cli", "test_cluster_follow",
        "test_cluster_import", "test_culprit", "test_disk_faults", "test_down_reasons",
        "test_envelopes", "test_exporter_faults", "test_exporters", "test_flight_recorder",
        "test_forward", "test_fuzz_endpoints", "test_goodput_exclusions", "test_import",
        "test_ingest", "test_jobs_cli", "test_jobs_slurm_live", "test_kill",
        "test_page_rounds", "test_prom_history", "test_prom_remote_write", "test_prom_source",
        "test_remote_write_kill", "test_remote_write_loss", "test_replay_store", "test_security",
        "test_server_limits", "test_slurm_live", "test_warm_landing",
    }
)  # fmt: skip
SLOW_MODULES = frozenset({"test_roundparse", "test_exposition"})
LIVE_FIXTURES = frozenset({"dev_server", "operator_server", "slurm_cluster", "fr_store"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        names = set(getattr(item, "fixturenames", ()))
        if path.parent.name == "ui" or "page" in names:
            item.add_marker(pytest.mark.ui)
        if path.stem in LIVE_MODULES or names & LIVE_FIXTURES:
            item.add_marker(pytest.mark.live)
        if path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    # The deprecation below must not come back unnoticed: it fails the test that meets it.
    config.addinivalue_line("filterwarnings", "error::pytest.PytestRemovedIn10Warning")
    # A page's callbacks answer in well under a second on a quiet machine, but CI shares two
    # cores with Chromium, a server and sometimes daemons: an assertion waits up to 15 s for
    # what a person would see. Speed is measured by benchmarks/, not by these waits.
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)


@pytest.fixture(scope="session")
def base_url() -> str | None:
    """No base URL: every UI test opens the absolute URL of a server it started. Defined here,
    it replaces the fallback pytest-playwright 0.10 registers when the optional pytest-base-url
    plugin is not installed: a session fixture written as an instance method, which pytest 9
    deprecates (PytestRemovedIn10Warning, "Session-scoped fixtures defined as instance
    methods") and pytest 10 will refuse. ``--base-url`` is not used by this suite."""
    return None


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: run `make test` (installs it as root) or "
            "`sudo apt-get install -y chromium`",
            pytrace=False,
        )
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture
def shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


@pytest.fixture
def hook() -> Iterator[Any]:
    """A webhook receiver for one test (``tests.alert_fixture.Hook``)."""
    from tests.alert_fixture import Hook

    h = Hook()
    yield h
    h.close()


@pytest.fixture
def alertmanager(tmp_path: Path, hook: Any) -> Iterator[Any]:
    """Debian's Alertmanager for one test, routing every alert to ``hook`` at ``/am``."""
    from tests.alert_fixture import Alertmanager

    am = Alertmanager(tmp_path, hook.url).start()
    yield am
    am.stop()
