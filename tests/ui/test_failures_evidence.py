"""A bad night imported from its files alone, on the Failures page in headless Chromium: the
inferred interruptions with their evidence lines a click away, and an operator correcting a
cause, with the operator token and (refused, 403) without it."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.cluster_fixture import Night, build
from tests.conftest import Server, cli, collect_errors, start_server

OPERATOR = "operator-token-0123456789"


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Night:
    return build(tmp_path_factory.mktemp("night"))


def imported(night: Night, store: Path) -> Path:
    r = cli(*night.import_args(store))
    assert r.returncode == 0, r.stderr
    return store


@pytest.fixture(scope="module")
def night_store(night: Night, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported(night, tmp_path_factory.mktemp("store") / "night.duckdb")


@pytest.fixture(scope="module")
def operator_server(
    night_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("op")
    token = tmp / "operator.token"
    token.write_text(OPERATOR + "\n")
    server = start_server(
        ["serve", "--store", str(night_store), "--operator-token-file", str(token)],
        tmp / "serve.log",
    )
    yield server
    server.stop()


def _label(url: str, body: dict, token: str | None) -> tuple[int, dict]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + "/api/v1/interruptions/label", data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("X-Operator-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _row(page: Page, text: str):  # type: ignore[no-untyped-def]
    return page.locator("#fail-int-table .ag-row", has=page.get_by_text(text, exact=True))


def test_evidence_of_an_inferred_interruption_and_a_correction(
    page: Page, operator_server: Server, shots: Path
) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(operator_server.url + "/failures")
    gpu = _row(page, "Faulty GPU")
    expect(gpu).to_contain_text("inferred")
    expect(gpu).to_contain_text("90 %")
    expect(gpu).to_contain_text("step 3,000 (pfs)")
    expect(_row(page, "Network Switch/Cable")).to_contain_text("step 5,000 (nvme)")
    gpu.get_by_text("Faulty GPU", exact=True).click()
    evidence = page.locator("#fail-evidence")
    expect(evidence).to_contain_text("NVRM: Xid (PCI:0000:3b:00): 79")
    expect(evidence).to_contain_text("node-7-kern.log:2")
    expect(evidence).to_contain_text("Watchdog caught collective operation timeout")
    expect(evidence.locator(".badge", has_text="cause")).to_have_count(1)
    page.screenshot(path=str(shots / "failures-evidence.png"), full_page=True)

    # Correct it to GPU HBM3 Memory: without the token, with a wrong one, then with it.
    page.locator("#fail-label-component").click()
    page.get_by_role("option", name="GPU HBM3 Memory").click()
    page.locator("#fail-label-by").fill("sre-on-call")
    page.locator("#fail-label-save").click()
    expect(page.locator("#fail-label-msg")).to_contain_text("403")
    page.locator("#fail-label-token").fill("not-the-operator-token")
    page.locator("#fail-label-save").click()
    expect(page.locator("#fail-label-msg")).to_contain_text("operator token missing or wrong")
    expect(_row(page, "Faulty GPU")).to_have_count(1)  # nothing changed
    page.locator("#fail-label-token").fill(OPERATOR)
    page.locator("#fail-label-save").click()
    expect(page.locator("#fail-label-msg")).to_contain_text("Saved: GPU HBM3 Memory (GPU)")
    fixed = _row(page, "GPU HBM3 Memory")
    expect(fixed).to_contain_text("by sre-on-call (was Faulty GPU)")
    expect(evidence).to_contain_text("Corrected by sre-on-call")
    assert errors == [], errors


def test_the_label_api_wants_the_operator_token(operator_server: Server) -> None:
    body = {"run": "atlas-70b", "ts": "2026-03-01T11:25:40", "component": "NIC"}
    status, reply = _label(operator_server.url, body, None)
    assert status == 403 and "operator token" in reply["error"]
    status, _ = _label(operator_server.url, body, "wrong-token-0123456789")
    assert status == 403
    status, reply = _label(operator_server.url, body | {"component": "Gremlins"}, OPERATOR)
    assert status == 400 and "unknown component" in reply["error"]
    status, reply = _label(operator_server.url, body | {"ts": "2026-03-01T00:00:00"}, OPERATOR)
    assert status == 404
    status, reply = _label(operator_server.url, body | {"by": "api"}, OPERATOR)
    assert status == 200 and reply["label"]["category"] == "Host", reply


def test_without_an_operator_token_the_page_is_read_only(
    page: Page, night: Night, tmp_path: Path
) -> None:
    store = imported(night, tmp_path / "ro.duckdb")
    server = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        page.goto(server.url + "/failures")
        expect(_row(page, "Network Switch/Cable")).to_contain_text("inferred")
        expect(page.locator("#fail-label-readonly")).to_be_visible()
        expect(page.locator("#fail-label-form")).to_be_hidden()
        body = {"run": "atlas-70b", "ts": "2026-03-01T11:25:40", "component": "NIC"}
        status, reply = _label(server.url, body, OPERATOR)
        assert status == 403 and "corrections are disabled" in reply["error"]
    finally:
        server.stop()


def test_the_overview_of_an_old_imported_night_tells_its_time(
    page: Page, operator_server: Server
) -> None:
    """#37, 2 and 4: the header says how old the data is (and, for a run whose log ended, that
    it ended, not "Live, but nothing new has arrived since" as if a feed had gone quiet: #57),
    no "Run stalled" since March is raised, and the loss chart carries the two failures
    (there is no GPU telemetry for the fleet chart to mark them on)."""
    errors = collect_errors(page)
    page.goto(operator_server.url + "/")
    age = page.locator("#data-age")
    expect(age).to_contain_text("atlas-70b: data to 2026-03-01 12:06 UTC")
    expect(age).to_contain_text("days ago · the run's log ended, how unknown")
    expect(age).not_to_contain_text("Live, but")
    expect(page.locator("#ov-alerts")).to_contain_text("XID 79 seen")
    expect(page.locator("#ov-alerts")).not_to_contain_text("Run stalled")
    ints_card = page.locator("#ov-ints").locator("xpath=..")
    expect(ints_card).to_contain_text("2 in the last 24 h of data")
    marks = page.locator("#ov-loss .scatterlayer .trace .points path")
    expect(marks).to_have_count(2)
    page.locator("#live-switch").click()  # Live off: the age stays
    expect(age).to_contain_text("days ago")
    assert errors == []


def test_each_failure_of_the_night_on_its_incident_view(
    page: Page, operator_server: Server, shots: Path
) -> None:
    """#37, 1: from the Failures table to the incident view, and from the Overview's marker:
    the cause, the host, the restore tier, the steps lost and the cost of each failure, its
    evidence whole, and the Markdown for the postmortem."""
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(operator_server.url + "/failures")
    _row(page, "Network Switch/Cable").get_by_text("Network Switch/Cable", exact=True).click()
    expect(page.locator("#fail-evidence-when")).to_have_text("2026-03-01 11:25:40 UTC")
    expect(page.locator("#fail-evidence-where")).to_contain_text("node-3")
    page.locator("#fail-incident-link").click()
    expect(page).to_have_url(re.compile(r"/incident\?at=2026-03-01T11%3A25%3A40#run=atlas-70b"))
    expect(page.locator("#inc-cause")).to_have_text("Network Switch/Cable (Network)")
    expect(page.locator("#inc-where")).to_contain_text("node-3")
    expect(page.locator("#inc-restored")).to_have_text("nvme, step 5,000")
    lost = page.locator("#inc-lost")
    expect(lost).to_contain_text("200 steps")
    expect(lost).to_contain_text("14.3 GPU-hours, $")  # the redone steps once (#57, 8)
    expect(page.locator("#inc-evidence")).to_contain_text("NCCL WARN NET/IB : Got completion")
    expect(page.locator("#inc-md")).to_contain_text("- **Restored from:** nvme, step 5,000")
    # what to do (#58, 2): no culprit named, so investigate the candidates
    expect(page.locator("#inc-action")).to_have_text("What to do: investigate")
    expect(page.locator("#inc-action-reason")).to_contain_text("candidates: node-3")
    expect(page.locator("#inc-timeline .scatterlayer .trace")).not_to_have_count(0)
    page.screenshot(path=str(shots / "incident.png"), full_page=True)

    # The other failure, from the Overview's loss chart: its marker opens its incident view.
    page.goto(operator_server.url + "/#run=atlas-70b&range=all")
    marker = page.locator("#ov-loss .scatterlayer .trace .points path").first
    expect(marker).to_be_visible()
    marker.click(force=True)
    expect(page).to_have_url(re.compile(r"/incident\?at=2026-03-01T09%3A53%3A20"))
    expect(page.locator("#inc-cause")).to_contain_text("(GPU)")  # corrected above, or not
    expect(page.locator("#inc-where")).to_contain_text("node-7")
    expect(page.locator("#inc-restored")).to_have_text("pfs, step 3,000")
    expect(page.locator("#inc-lost")).to_contain_text("400 steps")
    expect(page.locator("#inc-lost")).to_contain_text("34.5 GPU-hours, $")
    expect(page.locator("#inc-evidence")).to_contain_text("GPU has fallen off the bus")
    expect(page.locator("#inc-action")).to_have_text("What to do: drain or exclude the host")
    expect(page.locator("#inc-action-reason")).to_contain_text("NVIDIA's action is RESTART_BM")
    # Its links: the node's GPUs and the loss curve around it, in a zoomed view
    expect(page.locator("#inc-link-gpus")).to_have_attribute("href", re.compile("node=node-7"))
    page.locator("#inc-link-training").click()
    expect(page).to_have_url(re.compile(r"/training#run=atlas-70b&from=2026-03-01T09"))
    assert errors == []
