"""Hostile names are shown as text: a host called ``<img src=x onerror=...>`` (from an exporter's
Hostname label), a run and a component carrying markup, and a link whose fragment carries
markup. No script runs on any page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from telemetry.ingest.records import store_records
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Fetch, Target
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES, Server, start_server
from tests.ui.test_readable import scroll_through

HOST = '<img src=x onerror="window.__xss=1;alert(1)">'
RUN = "<script>window.__xss=2</script>run"
COMPONENT = '<svg onload="window.__xss=3">'
PAGES = ["/", "/training", "/gpus", "/failures", "/checkpoints"]


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("xss")
    path = tmp / "xss.duckdb"
    page = (DCGM_FIXTURES / "default_h100.txt").read_text()
    hostile = page.replace(
        'Hostname="dgx-h100-017"', f'Hostname="{HOST.replace(chr(34), "&quot;")}"'
    )
    hostile = hostile.replace("&quot;", '\\"')  # a label value may hold an escaped quote
    now = datetime.utcnow().replace(microsecond=0)
    with Store(str(path)) as store:
        sink = StoreSink(store)
        for i in range(4):
            sink.write(
                now - timedelta(minutes=4 - i),
                [Fetch(Target("http://n1:9400/metrics"), hostile, None, 0.1, 200)],
            )
        t0 = now - timedelta(minutes=5)
        metrics = [
            {
                "run": RUN,
                "step": s,
                "ts": (t0 + timedelta(seconds=20 * s)).isoformat(),
                "loss": 3.0 - s / 10,
            }
            for s in range(12)
        ]
        assert store_records(store, "train_metrics", metrics).stored == 12
        event = {
            "run": RUN,
            "ts": (now - timedelta(minutes=2)).isoformat(),
            "host": HOST,
            "component": COMPONENT,
            "category": "GPU",
        }
        assert store_records(store, "interruptions", [event]).stored == 1
        assert store.scalar("SELECT count(*) FROM gpus WHERE host = ?", [HOST]) == 8
    server = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield server
    server.stop()


def test_hostile_names_render_as_text_and_run_nothing(page: Page, hostile_server: Server) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for path in PAGES:
        page.goto(hostile_server.url + path)
        page.wait_for_load_state("networkidle")
        scroll_through(page)  # the parts drawn when scrolled near too
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(500)
        assert page.evaluate("() => window.__xss") is None, path
    page.goto(hostile_server.url + "/gpus")
    expect(page.get_by_text(HOST).first).to_be_visible(timeout=20_000)  # the literal text
    page.goto(hostile_server.url + "/failures")
    expect(page.get_by_text(COMPONENT).first).to_be_visible(timeout=20_000)
    page.goto(hostile_server.url + "/#run=" + RUN + "&range=<img src=x onerror=alert(9)>")
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("img[src='x']").count() == 0 and page.locator("svg[onload]").count() == 0
    assert dialogs == []
