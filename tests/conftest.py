"""Shared fixtures: seeded stores, a real server in a subprocess, and Chromium for Playwright.

Nothing here skips: a missing browser or dependency fails the run with a message saying what
to install (under CI=true and everywhere else).
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from telemetry import env
from telemetry.queries import TimeRange, data_extent
from telemetry.store import Store

# The helpers live in tests/helpers/ (#59 item 7); these names are re-exported for the tests
# that import them from here. New tests import from tests.helpers.
from tests.helpers.browser import CHROMIUM as CHROMIUM
from tests.helpers.browser import CHROMIUM_ARGS as CHROMIUM_ARGS
from tests.helpers.browser import choose_option as choose_option
from tests.helpers.browser import collect_errors as collect_errors
from tests.helpers.browser import drag_zoom as drag_zoom
from tests.helpers.exporter import ExporterHandler as ExporterHandler
from tests.helpers.paths import DCGM_FIXTURES as DCGM_FIXTURES
from tests.helpers.paths import ROOT as ROOT
from tests.helpers.paths import SHOTS as SHOTS
from tests.helpers.procs import Server as Server
from tests.helpers.procs import cli as cli
from tests.helpers.procs import free_port as free_port
from tests.helpers.procs import start_server as start_server
from tests.helpers.stores import bound_store as bound_store
from tests.helpers.stores import build_store as build_store
from tests.helpers.stores import imported_night as imported_night

# Every figure a test builds or a test's server sends goes through plotly.py's validators first
# (app.figures.plot builds figures as plain data, unchecked in production): a misspelt property
# is an error, shown on the chart and in the server log, not a setting the browser ignores.
os.environ[env.CHECK_FIGURES] = "1"


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


@pytest.fixture(scope="session")
def dev_server(dev_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("logs") / "serve.log"
    server = start_server(["serve", "--store", str(dev_store)], log)
    yield server
    server.stop()


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


# Marks (`make test-fast` runs what has none; `make test` runs everything). A module that
# starts real servers, daemons or jobs (the dashboard under waitress, Prometheus,
# VictoriaMetrics, Alertmanager, Slurm's daemons, torch's gloo ranks) or runs the CLI in a
# subprocess test after test says so itself: ``pytestmark = pytest.mark.live`` (``slow`` for
# long generative ones). Beside those, two rules mark what a fixture implies: the tests in
# tests/ui/ and those using Playwright's ``page`` are ``ui``, and those using a fixture that
# starts a server or cluster are ``live``.
LIVE_FIXTURES = frozenset({"dev_server", "operator_server", "slurm_cluster", "fr_store"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.path.parent.name == "ui" or "page" in names:
            item.add_marker(pytest.mark.ui)
        if names & LIVE_FIXTURES:
            item.add_marker(pytest.mark.live)


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
