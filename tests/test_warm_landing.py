"""The landing view is built as the server starts: the first browser's Overview request, exactly
as Chromium sends it, is answered from that build, not computed again."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from app import cli, ui
from app.data import overview as data
from app.main import create_app, warm_landing
from telemetry import env
from telemetry.store import Store
from tests.conftest import Server, free_port

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


def _computed_again(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("computed again")


def test_the_first_overview_request_is_answered_from_the_warm_up(
    dev_server: Server, page: Page, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: list[str] = []

    def keep(request: Any) -> None:
        if "_dash-update-component" in request.url and "ov-cards" in (request.post_data or ""):
            bodies.append(request.post_data)

    page.on("request", keep)
    page.goto(dev_server.url + "/")  # a browser that has chosen nothing: the landing view
    page.wait_for_function(
        "() => document.querySelector('#ov-fleet .js-plotly-plot')?.data?.length > 0"
    )
    assert len(bodies) == 1

    app = create_app(store)  # a server starting on the same store
    warm_landing().join(timeout=120)
    monkeypatch.setattr(data, "fleet_series", _computed_again)
    monkeypatch.setattr(data, "interruption_marks", _computed_again)
    client = app.server.test_client()
    headers = {"Content-Type": "application/json"}
    reply = client.post("/_dash-update-component", data=bodies[0], headers=headers)
    assert reply.status_code == 200
    text = reply.get_data(as_text=True)
    assert "ov-fleet" in text and "Mean utilization" in text
    assert "computed again" not in text

    ui._REPLIES.clear()  # without the warm-up the same request builds the view itself
    text = client.post("/_dash-update-component", data=bodies[0], headers=headers).get_data(
        as_text=True
    )
    assert "Could not load this view: RuntimeError: computed again" in text


def test_a_server_stopped_while_it_warms_up_closes_its_store(
    day: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopped at once (Ctrl-C right after start): the warm-up is still reading. Closing the
    # store under its query raised "connection is busy" and aborted the process at exit.
    import app.main

    built: list[threading.Thread] = []

    def warm() -> threading.Thread:
        built.append(warm_landing())
        return built[-1]

    monkeypatch.setattr(app.main, "warm_landing", warm)
    monkeypatch.setattr(app.main, "run_server", lambda *_args: None)
    assert cli.main(["serve", "--store", str(day), "--port", str(free_port())]) == 0
    assert len(built) == 1 and not built[0].is_alive()
    with Store(str(day)) as again:  # closed cleanly: it opens for writing again
        assert again.rows("SELECT count(*) FROM runs")[0][0] > 0


def test_the_cold_benchmarks_server_answers_every_callback_as_after_a_write(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FACTORYFLOOR_RESULT_CACHE=request (benchmarks/dashboard.py's cold run): each callback
    request finds no query result kept, while a page load keeps them."""
    monkeypatch.setenv(env.RESULT_CACHE, "request")
    client = create_app(store).server.test_client()
    sql = "SELECT count(*) FROM runs"

    def misses_after(path: str, method: str) -> int:
        store.scalar(sql)  # kept
        before = store.cache_stats()["cache_misses"]
        getattr(client, method)(path, data="{}", headers={"Content-Type": "application/json"})
        store.scalar(sql)
        return store.cache_stats()["cache_misses"] - before

    assert misses_after("/", "get") == 0
    assert misses_after("/_dash-update-component", "post") == 1
    monkeypatch.setenv(env.RESULT_CACHE, "1")  # as users meet it: results kept across requests
    client = create_app(store).server.test_client()
    assert misses_after("/_dash-update-component", "post") == 0


def test_a_started_server_leaves_what_it_built_out_of_full_collections(
    day: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The objects `serve` holds from its start (the app, layouts, callbacks) are frozen out
    of Python's garbage collection, so a full collection during a request does not walk them
    (one cost a Training reply ~55 ms at llama3 scale)."""
    import gc

    import app.main

    seen: list[int] = []
    monkeypatch.setattr(app.main, "run_server", lambda *_a: seen.append(gc.get_freeze_count()))
    try:
        assert cli.main(["serve", "--store", str(day), "--port", str(free_port())]) == 0
        assert seen and seen[0] > 10_000  # dash, plotly, pandas and the app's own objects
    finally:
        gc.unfreeze()
