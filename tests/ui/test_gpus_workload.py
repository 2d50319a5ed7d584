"""The GPUs drill-down shows what runs on each GPU (job, pod, namespace, container), the node's
rack from the targets file, and more per-GPU metrics on a pick list (the memory clock among
them), in headless Chromium: over a store filled by ``factoryfloor ingest`` from a real
exporter on 127.0.0.1 with Kubernetes pod labels, and over the dev-64 replay."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, cli, collect_errors, start_server

MORE = "document.querySelector('#gpu-node-more .js-plotly-plot')"
HOST = "k8s-gpu-node-07"  # the pod_labels fixture's node


@pytest.fixture(scope="module")
def scraped(exporter: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("scraped")
    targets = tmp / "targets.json"
    address = exporter.removeprefix("http://")
    labels = {"rack": "r12", "hpc_job": "slurm-81234"}
    group = {"targets": [f"{address}/pod_labels/metrics"], "labels": labels}
    targets.write_text(json.dumps([group]))
    store = tmp / "s.duckdb"
    for _ in range(3):
        r = cli("ingest", "--targets-file", str(targets), "--store", str(store), "--once")
        assert r.returncode == 0, r.stderr
    server = start_server(["serve", "--store", str(store)], tmp / "serve.log")
    yield server
    server.stop()


def _pick(page: Page, label: str) -> None:
    page.locator("#gpu-node-metric").click()
    page.get_by_role("option", name=label).click()


def _more_series(page: Page, title: str) -> dict[str, list[float]]:
    page.wait_for_function(
        f"() => {MORE}?._fullLayout?.title?.text?.startsWith({json.dumps(title)})"
        f" && {MORE}._fullData.length > 0"
    )
    return page.evaluate(
        f"() => Object.fromEntries({MORE}._fullData.map(t => [t.name, Array.from(t.y)]))"
    )


def test_a_scraped_node_shows_its_rack_workload_and_memory_clock(
    page: Page, scraped: Server
) -> None:
    errors = collect_errors(page)
    page.goto(f"{scraped.url}/gpus#range=all&node={HOST}")
    expect(page.locator("#gpu-node-host")).to_have_text(HOST, timeout=30_000)
    expect(page.locator("#gpu-node-info")).to_contain_text("r12 · job node · 8 ×")
    rows = page.locator("#gpu-node-workload-table .ag-row")
    expect(rows).to_have_count(8, timeout=30_000)
    expect(rows.nth(0)).to_contain_text("llama-70b-worker-3")
    expect(rows.nth(0)).to_contain_text("llm-training")
    expect(rows.nth(0)).to_contain_text("pytorch")
    expect(rows.nth(4)).to_contain_text("mmlu-eval-7f9c2-0")
    # GPU 6 runs no pod: the job comes from the targets file, the rest is unknown, not blank
    expect(rows.nth(6)).to_have_text("6slurm-81234–––")
    _pick(page, "Memory clock (MHz)")
    clocks = _more_series(page, "Memory clock")
    assert list(clocks) == [f"GPU {i}" for i in range(8)]
    assert {v for ys in clocks.values() for v in ys} == {2619.0}  # what the exporter reported
    _pick(page, "PCIe received (B/s)")
    rx = _more_series(page, "PCIe received")
    # the exporter's rates, as the store keeps them (32-bit floats: 7 significant digits)
    assert rx["GPU 0"][0] == pytest.approx(107950857.0, rel=1e-7)
    assert rx["GPU 1"][0] == pytest.approx(112038832.0, rel=1e-7)
    assert errors == [], errors


def test_a_replayed_node_shows_its_job_and_says_it_has_no_memory_clock(
    page: Page, dev_server: Server
) -> None:
    page.goto(f"{dev_server.url}/gpus#range=all&node=h100-0003")
    rows = page.locator("#gpu-node-workload-table .ag-row")
    expect(rows).to_have_count(8, timeout=30_000)
    job = rows.nth(0).locator(".ag-cell[col-id=hpc_job]").inner_text()
    assert job.startswith("dev-64")  # the replay's run, which holds every GPU
    fb = _more_series(page, "Framebuffer used")  # the default pick
    assert list(fb) == [f"GPU {i}" for i in range(8)] and all(len(v) > 100 for v in fb.values())
    _pick(page, "Memory clock (MHz)")
    expect(page.locator("#gpu-node-more")).to_contain_text("No memory clock from h100-0003")
    _pick(page, "Real utilization (%)")  # the replay produces the SM profiling fields
    real = _more_series(page, "Real utilization")
    values = [v for ys in real.values() for v in ys]
    assert len(real) == 8 and 0 <= min(values) and 85 < max(values) <= 100
