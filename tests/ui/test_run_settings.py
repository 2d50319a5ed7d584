"""The run's settings its log states, on the Overview (issue 57, item 10), in headless
Chromium over the real server: a Megatron-LM night imported with the user's command shows its
parallel sizes with the ``file:line`` that stated them; a run whose log states none says so
instead of showing blanks or zeros."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.cluster_fixture import RUN, build
from tests.conftest import cli, collect_errors, start_server


def test_the_overview_shows_the_settings_the_log_states(page: Page, tmp_path: Path) -> None:
    night = build(tmp_path / "night")
    bare = build(tmp_path / "bare", world=False)  # "starting Megatron-LM": no settings said
    store = tmp_path / "s.duckdb"
    assert cli(*night.import_args(store)).returncode == 0
    r = cli("import", "--store", str(store), "--run", "bare-run", str(bare.job_log))
    assert r.returncode == 0, r.stderr
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"{srv.url}/#run={RUN}&range=all")
        table = page.locator("#ov-settings-table")
        expect(table).to_be_visible()
        tp = table.locator("tr[data-setting=tensor_parallel]")
        expect(tp).to_contain_text("Tensor parallel size")
        expect(tp).to_contain_text("8")
        expect(tp).to_contain_text(f"{night.job_log}:2")
        expect(table.locator("tr[data-setting=data_parallel]")).to_contain_text("8")
        expect(table.locator("tr[data-setting=pipeline_parallel]")).to_contain_text("1")
        expect(table.locator("tbody tr")).to_have_count(4)  # only what the line says
        page.goto(f"{srv.url}/#run=bare-run&range=all")
        page.reload()
        expect(page.locator("#ov-settings-none")).to_contain_text("state none of its settings")
        assert errors == [], errors
    finally:
        srv.stop()
