"""Across pages: a shared link restores the view, back/forward move through views, themes."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from telemetry.replay.runner import replay
from telemetry.replay.scenarios import get_scenario
from telemetry.store import Store
from tests.callback_fuzz import parse_outputs, post_callback
from tests.conftest import Server, build_store, cli, drag_zoom, start_server
from tests.ui.test_overview import FLEET_READY, FLEET_X, _span_s


def _pick(page: Page, dropdown: str, option: str) -> None:
    page.locator(f"#{dropdown}").click()
    page.get_by_role("option", name=option).click()


def test_a_shared_link_reproduces_the_view(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/#run=dev-64-s1&range=6h")
    expect(page.locator("#range-select")).to_contain_text("Last 6 h")
    page.wait_for_function(FLEET_READY)
    page.wait_for_function(f"() => ({FLEET_X})().length < 1000")
    assert 5 * 3600 <= _span_s(page.evaluate(FLEET_X)) <= 6 * 3600
    expect(page.locator("#run-select")).to_contain_text("dev-64 (seed 1)")


def test_a_zoomed_window_travels_in_the_link(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/#run=dev-64-s1&from=2026-01-05T10:00:00&to=2026-01-05T12:00:00")
    expect(page.locator("#range-select")).to_contain_text("Zoomed window")
    page.wait_for_function(FLEET_READY)
    xs = page.evaluate(FLEET_X)
    assert min(xs) >= "2026-01-05T10:00" and max(xs) <= "2026-01-05T12:00:00.000001"
    assert _span_s(xs) > 1.5 * 3600


def test_back_and_forward_move_through_views(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/")
    page.wait_for_function(FLEET_READY)
    _pick(page, "range-select", "Last 6 h")
    expect(page).to_have_url(re.compile("range=6h"))
    _pick(page, "range-select", "Last hour")
    expect(page).to_have_url(re.compile("range=1h"))
    page.go_back()
    expect(page.locator("#range-select")).to_contain_text("Last 6 h")
    page.go_forward()
    expect(page.locator("#range-select")).to_contain_text("Last hour")


def _drag_across_power(page: Page) -> None:
    """A user's zoom: drag across a tenth of the Overview's power chart; the range follows."""
    drag_zoom(page, "#ov-power", 0.40, 0.50)  # below the fold at 1280x720: scrolled to
    expect(page.locator("#range-select")).to_contain_text("Zoomed window", timeout=20000)


def test_zooming_a_chart_narrows_the_range_everywhere(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/#run=dev-64-s1&range=all")
    page.wait_for_function(FLEET_READY)
    page.wait_for_load_state("networkidle")  # the first renders are done; now the user zooms
    _drag_across_power(page)
    # The *other* chart now shows only the dragged window: about a tenth of the day.
    page.wait_for_function(
        f"() => {{ const x = ({FLEET_X})(); return x.length > 0 && "
        "(Date.parse(x[x.length - 1]) - Date.parse(x[0])) < 6 * 3600 * 1000; }"
    )
    span = _span_s(page.evaluate(FLEET_X))
    assert 1 * 3600 < span < 4 * 3600
    assert "from=2026-01-05" in page.url


def test_light_theme_switch(page: Page, dev_server: Server) -> None:
    page.goto(dev_server.url + "/")
    assert page.evaluate("document.documentElement.dataset.bsTheme") == "dark"
    page.locator("#theme-switch").check()
    page.wait_for_function("document.documentElement.dataset.bsTheme === 'light'")
    page.wait_for_function(
        "() => document.querySelector('#ov-fleet .js-plotly-plot')?.layout?.template?.layout"
        "?.paper_bgcolor === 'white'"
    )


@pytest.fixture(scope="module")
def two_run_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One cluster, two consecutive runs: dev-64 seed 1, then seed 2 a day later."""
    tmp = tmp_path_factory.mktemp("two")
    path = tmp / "two.duckdb"
    sc = get_scenario("dev-64").with_overrides(days=0.5)
    with Store(str(path)) as store:
        replay(store, sc, 1)
        replay(store, sc.with_overrides(start=sc.start + timedelta(days=1)), 2)
    server = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield server
    server.stop()


def test_selecting_a_run_changes_what_the_charts_show(page: Page, two_run_server: Server) -> None:
    loss = "() => document.querySelector('#ov-loss .js-plotly-plot')?.data?.[0]?.x || []"
    page.goto(two_run_server.url + "/")
    expect(page.locator("#run-select")).to_contain_text("dev-64 (seed 2)")  # newest by default
    page.wait_for_function(f"() => ({loss})().length > 0")
    second = page.evaluate(loss)
    assert min(second) >= "2026-01-06"
    _pick(page, "run-select", "dev-64 (seed 1)")
    page.wait_for_function(f"() => ({loss})().length > 0 && ({loss})()[0] < '2026-01-06'")
    first = page.evaluate(loss)
    assert max(first) < "2026-01-06"
    expect(page.locator("#ov-step")).not_to_have_text("0")
    assert "run=dev-64-s1" in page.url


def test_a_live_tick_during_a_range_change_keeps_the_range(page: Page, dev_server: Server) -> None:
    """The 10 s live refresh firing while a range change is in flight must not undo it."""
    from tests.ui.test_failures import TIMELINE_POINTS

    page.clock.install()
    page.goto(dev_server.url + "/failures")
    page.wait_for_function(f"() => ({TIMELINE_POINTS})() === 10")
    for _ in range(3):  # the tick lands at a slightly different moment of the round trip each time
        page.locator("#range-select").click()
        page.get_by_role("option", name="Last 6 h").click()
        page.clock.run_for(10_001)
        page.wait_for_function(f"() => ({TIMELINE_POINTS})() === 3")
        expect(page).to_have_url(re.compile(r"range=6h"))
        page.locator("#range-select").click()
        page.get_by_role("option", name="Whole run").click()
        page.clock.run_for(10_001)
        page.wait_for_function(f"() => ({TIMELINE_POINTS})() === 10")
        expect(page).to_have_url(re.compile(r"range=all"))


def test_a_chart_relayout_during_a_link_change_keeps_the_new_view(
    page: Page, dev_server: Server
) -> None:
    """Charts emit relayout events of their own (autosize, a y-axis reset). One that fires
    while a URL change is on its way to the server must not undo the change: a click on a loss
    spike was lost this way when replies came back fast."""
    page.goto(dev_server.url + "/#run=dev-64-s1&range=all")
    page.wait_for_function(FLEET_READY)
    page.wait_for_load_state("networkidle")
    for hours in (2, 4, 6):  # each time a new link, and a chart relayout right behind it
        page.evaluate(
            """(to) => {
                location.hash = 'run=dev-64-s1&from=2026-01-05T10:00:00&to=' + to;
                const chart = document.querySelector('#ov-fleet .js-plotly-plot');
                Plotly.relayout(chart, {'yaxis.autorange': true});
            }""",
            f"2026-01-05T{10 + hours:02d}:00:00",
        )
        expect(page.locator("#range-select")).to_contain_text("Zoomed window")
        page.wait_for_function(
            f"() => {{ const x = ({FLEET_X})(); return x.length > 0 && "
            f"x[x.length - 1] <= '2026-01-05T{10 + hours:02d}:00:00.000001' && "
            f"x[x.length - 1] >= '2026-01-05T{9 + hours:02d}:30'; }}"
        )
        span = _span_s(page.evaluate(FLEET_X))
        assert (hours - 0.5) * 3600 < span <= hours * 3600, (hours, span)


def test_a_zoom_batched_after_an_autosize_still_reaches_the_link(dev_server: Server) -> None:
    """Two charts can report in one batch (an autosize, then the user's zoom). The zoom is
    what counts, wherever it is in the batch; before, only the first entry was read and the
    zoom was dropped. (The browser passes the batch's relayouts on; the server picks.)"""
    import json
    import urllib.request

    with urllib.request.urlopen(dev_server.url + "/_dash-dependencies", timeout=30) as r:
        deps = json.loads(r.read())
    dep = next(d for d in deps if any(i["id"] == "zoom-relayouts" for i in d["inputs"]))
    relayouts = [
        {"xaxis.autorange": False, "autosize": True},  # names the axis, is not a zoom
        {"xaxis.range[0]": "2026-01-05 10:00", "xaxis.range[1]": "2026-01-05 12:00"},
    ]
    body = {
        "output": dep["output"],
        "outputs": {"id": "url", "property": dep["output"].split(".")[1]},
        "inputs": [
            {"id": "zoom-relayouts", "property": "data", "value": {"n": 1, "relayouts": relayouts}}
        ],
        "state": [
            {"id": "view", "property": "data", "value": {"run": "dev-64-s1", "range": "all"}}
        ],
        "changedPropIds": ["zoom-relayouts.data"],
    }
    _, text = post_callback(dev_server.url, body)
    link = json.loads(text)["response"]["url"]["hash"]
    assert "run=dev-64-s1" in link and "from=2026-01-05T10" in link and "to=2026-01-05T12" in link


def test_a_link_opened_while_the_jobs_switch_waits_is_followed(dev_server: Server) -> None:
    """The browser merges the triggers of calls queued together: a link opened (or pasted)
    while the "All jobs" switch's call waits reaches the server as one call triggered by both.
    The link counts; before, the switch was taken alone and the link's view was dropped (a CI
    run's UI test stayed on the training run after opening a job's link)."""
    import json
    import urllib.request

    with urllib.request.urlopen(dev_server.url + "/_dash-dependencies", timeout=30) as r:
        deps = json.loads(r.read())
    dep = next(d for d in deps if any(i["id"] == "runs-all" for i in d["inputs"]))
    values = {
        ("url", "hash"): "#run=dev-64-s1&range=6h",
        ("url", "search"): "",
        ("run-select", "value"): "dev-64-s1",
        ("range-select", "value"): "all",
        ("runs-all", "value"): False,
        ("view", "data"): {"run": "dev-64-s1", "range": "all"},
        ("run-select", "options"): [],
    }

    def item(spec: dict) -> dict:
        return spec | {"value": values[(spec["id"], spec["property"])]}

    outputs = parse_outputs(dep["output"])
    body = {
        "output": dep["output"],
        "outputs": outputs,
        "inputs": [item(i) for i in dep["inputs"]],
        "state": [item(s) for s in dep["state"]],
        "changedPropIds": ["runs-all.value", "url.hash"],
    }
    status, text = post_callback(dev_server.url, body)
    assert status == 200, "the link changed nothing"
    reply = json.loads(text)["response"]
    assert reply["view"]["data"]["range"] == "6h"
    assert reply["range-select"]["value"] == "6h"


def test_loading_a_page_asks_the_server_nothing_about_zooms(page: Page, dev_server: Server) -> None:
    """Every chart reports a relayout as it is first drawn; the browser keeps those to itself
    (before, each batch of them was a request that answered 204), and a real zoom still goes
    to the server."""
    import json

    zoom_requests: list[str] = []

    def seen(request) -> None:  # type: ignore[no-untyped-def]
        if "/_dash-update-component" in request.url:
            output = json.loads(request.post_data or "{}").get("output", "")
            if output.startswith("url.hash@"):  # the zoom's own output (allow_duplicate)
                zoom_requests.append(output)

    page.on("request", seen)
    page.goto(dev_server.url + "/#run=dev-64-s1&range=all")
    page.wait_for_function(FLEET_READY)
    page.wait_for_load_state("networkidle")  # every chart drawn, each with its autosize
    assert zoom_requests == []
    _drag_across_power(page)
    assert len(zoom_requests) == 1


def test_the_light_theme_stays_on_reload_and_in_opened_links(
    page: Page, dev_server: Server
) -> None:
    # What the page looks like before the dashboard has drawn anything: no flash of dark.
    page.add_init_script(
        "document.addEventListener('DOMContentLoaded', () => {"
        " window.__themeAtLoad = document.documentElement.dataset.bsTheme; });"
    )
    page.goto(dev_server.url + "/")
    page.wait_for_function(FLEET_READY)
    assert page.evaluate("window.__themeAtLoad") == "dark"
    page.locator("#theme-switch").check()
    page.wait_for_function("document.documentElement.dataset.bsTheme === 'light'")
    page.reload()
    assert page.evaluate("window.__themeAtLoad") == "light"
    expect(page.locator("#theme-switch")).to_be_checked()
    page.wait_for_function(
        "() => document.querySelector('#ov-fleet .js-plotly-plot')?.layout?.template?.layout"
        "?.paper_bgcolor === 'white'"
    )
    other = page.context.new_page()  # a link opened in another tab
    other.add_init_script(
        "document.addEventListener('DOMContentLoaded', () => {"
        " window.__themeAtLoad = document.documentElement.dataset.bsTheme; });"
    )
    other.goto(dev_server.url + "/failures#run=dev-64-s1&range=6h")
    expect(other.locator("#theme-switch")).to_be_checked()
    assert other.evaluate("window.__themeAtLoad") == "light"
    other.locator("#theme-switch").uncheck()  # and back to dark, which sticks too
    other.wait_for_function("document.documentElement.dataset.bsTheme === 'dark'")
    page.reload()
    expect(page.locator("#theme-switch")).not_to_be_checked()
    assert page.evaluate("window.__themeAtLoad") == "dark"


@pytest.mark.parametrize(
    ("table", "name", "header"),
    [
        ("fail-tax-table", "failures-taxonomy", "Category,Component,Run (n)"),
        ("fail-xid-table", "failures-xids", "XID,Mnemonic,Meaning"),
        ("fail-lemon-table", "failures-node-ranking", "#,Host,Rack"),
    ],
)
def test_a_csv_export_is_named_after_what_it_holds(
    page: Page, dev_server: Server, table: str, name: str, header: str
) -> None:
    page.goto(dev_server.url + "/failures")  # the run comes from the view, not the link
    page.wait_for_selector(f"#{table} .ag-row")
    with page.expect_download() as download:
        page.locator(f"#{table}-box button.export").click()
    assert download.value.suggested_filename == f"factoryfloor-{name}-dev-64-s1.csv"
    text = open(download.value.path(), encoding="utf-8-sig").read()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0][:3] == header.split(","), text[:200]
    shown = page.evaluate(f"() => dash_ag_grid.getApi('{table}').getDisplayedRowCount()")
    assert len(rows) == 1 + shown  # every row, also those scrolled out of view


@pytest.fixture(scope="module")
def mixed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A replayed dev-64 run and, beside it, a real run imported from its metrics file."""
    import json

    tmp = tmp_path_factory.mktemp("mixed")
    path = build_store(tmp / "mixed.duckdb", seed=1, days=0.25)
    metrics = tmp / "atlas.jsonl"
    metrics.write_text(
        "".join(
            json.dumps(
                {
                    "run": "atlas-real",
                    "step": 10 * i,
                    "loss": 3.0 - i / 100,
                    "ts": f"2026-01-05T0{i // 60}:{i % 60:02d}:00Z",
                }
            )
            + "\n"
            for i in range(120)
        )
    )
    r = cli("import", "--store", str(path), str(metrics))
    assert r.returncode == 0, r.stderr
    server = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield server
    server.stop()


def test_the_simulated_banner_follows_the_run(page: Page, mixed_server: Server) -> None:
    page.goto(mixed_server.url + "/#run=dev-64-s1")
    expect(page.locator("#sim-banner")).to_contain_text("Simulated data")
    _pick(page, "run-select", "atlas-real")
    expect(page.locator("#run-select")).to_contain_text("atlas-real")
    expect(page.locator("#sim-banner")).to_have_count(0)
    page.goto(mixed_server.url + "/failures#run=atlas-real")  # a link to the real run
    expect(page.locator("#run-select")).to_contain_text("atlas-real")
    page.wait_for_load_state("networkidle")
    expect(page.locator("body")).not_to_contain_text("Simulated data")
    _pick(page, "run-select", "dev-64 (seed 1)")
    expect(page.locator("#sim-banner")).to_contain_text("A small development cluster")
