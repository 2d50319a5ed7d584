"""One run, one truth, as a user reads it (#57, 9): five stores opened in Chromium against the
real server, each run's figures read off every page and checked against ``summary --json``
(the real CLI in a subprocess): MTBF, lost GPU-hours and their cost, goodput, checkpoint size
and write time, the run's state and its time span. Each store is built with the user's
commands: a replayed dev-64; a real night imported from its logs (a multi-node Megatron-LM job
that failed twice, ``tests/cluster_fixture.py``); a store of three runs (a replay, the night, a
torchrun job that finished); a run known from its logs alone (``sample_data/logs``); a run that
hung and died (``tests/hang_died_fixture.py``).

A page that formats a figure its own way is read with the page's formatter (``fmt_duration``,
``fmt_bytes``, ``money``): what is compared is the number, at the precision it is shown."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from app.figures.checkpoints import tier_name
from app.figures.units import fmt_bytes, fmt_duration, fmt_gpu_hours
from telemetry.cost import money
from tests import hang_died_fixture
from tests.cluster_fixture import build as build_night
from tests.conftest import ROOT, Server, build_store, cli, collect_errors, start_server

SAMPLES = ROOT / "sample_data" / "logs"
TORCHRUN = ROOT / "tests" / "fixtures" / "torchrun" / "hang.log"
# a run's state against its Slurm job's: the two words must not contradict each other
JOB_STATES = {
    "finished": {"COMPLETED"},
    "stopped": {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"},
    "running": {"RUNNING", "–"},
    "unknown": {"UNKNOWN"},  # a log that ended long ago saying nothing of how (#57, 5)
}
ANY = re.compile(r"\S")


def _import(store: Path, *args: str) -> None:
    r = cli("import", "--store", str(store), *args)
    assert r.returncode == 0, r.stderr


def _replay(root: Path) -> Path:
    return build_store(root / "s.duckdb", seed=1, days=0.25)


def _night(root: Path) -> Path:
    store = root / "s.duckdb"
    _import(store, *build_night(root / "night").import_args(store)[3:])
    return store


def _several(root: Path) -> Path:
    store = _replay(root)
    _import(store, *build_night(root / "night").import_args(store)[3:])
    _import(store, "--run", "torchrun-hang", str(TORCHRUN))
    return store


def _logs_only(root: Path) -> Path:
    store = root / "s.duckdb"
    _import(store, "--run", "gpt-512", str(SAMPLES / "slurm-81234.out"),
            str(SAMPLES / "node-7-kern.log"))  # fmt: skip
    return store


def _hang(root: Path) -> Path:
    return hang_died_fixture.build(root, first_save=20)


STORES: dict[str, Callable[[Path], Path]] = {
    "replay": _replay, "night": _night, "several": _several, "logs-only": _logs_only,
    "hang": _hang,
}  # fmt: skip


@pytest.fixture(scope="module", params=list(STORES))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Server, dict[str, Any]]]:
    """The store ``request.param`` built, served, and its ``summary --json``."""
    root = tmp_path_factory.mktemp(request.param)
    store = STORES[request.param](root)
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    srv = start_server(["serve", "--store", str(store)], root / "serve.log")
    yield request.param, srv, json.loads(r.stdout)
    srv.stop()


def _open(page: Page, srv: Server, path: str, run: str, query: dict[str, str] | None = None,
          ready: str = "") -> None:  # fmt: skip
    fragment = "#" + urlencode({"run": run, "range": "all"})
    page.goto(srv.url + path + ("?" + urlencode(query) if query else "") + fragment)
    if ready:
        expect(page.locator(ready)).to_have_text(ANY)


def _text(page: Page, selector: str) -> str:
    loc = page.locator(selector)
    expect(loc).to_have_text(ANY)
    return loc.inner_text().strip()


def _sub(page: Page, card_value_id: str) -> str:
    """The line under a card's value (``app.ui.card``)."""
    return _text(page, f"#{card_value_id} + div")


def _title(page: Page, card_value_id: str) -> str:
    return page.locator(f"#{card_value_id}").locator("xpath=preceding-sibling::div[1]").inner_text()


def _rows(page: Page, table_id: str) -> list[dict[str, str]]:
    """An AG Grid's rows as shown: column id -> cell text."""
    expect(page.locator(f"#{table_id} .ag-row").first).to_be_visible()
    return page.eval_on_selector_all(
        f"#{table_id} .ag-center-cols-container .ag-row",
        """rows => rows.map(r => Object.fromEntries([...r.querySelectorAll('.ag-cell')]
                 .map(c => [c.getAttribute('col-id'), c.innerText.trim()])))""",
    )


def _span(page: Page) -> tuple[datetime, datetime]:
    """The header's "Data A – B UTC": the time the page shows."""
    m = re.match(r"Data (\S+ \S+) – (\S+ \S+) UTC", _text(page, "#last-updated"))
    assert m is not None, page.locator("#last-updated").inner_text()
    return datetime.fromisoformat(m[1]), datetime.fromisoformat(m[2])


def _pct(share: float | None) -> str:
    return f"{share * 100:.1f} %" if share is not None else "–"


class Truth:
    """One run's figures as ``summary --json`` gives them, formatted as the pages show them."""

    def __init__(self, out: dict[str, Any], run: dict[str, Any]) -> None:
        self.run, self.id = run, run["run_id"]
        self.price = run["cost"]["gpu_hour_usd"]
        self.good = (run.get("goodput") or {}).get("goodput")
        self.jobs = [j for j in out.get("jobs") or [] if j["job_id"] == self.id]
        start, end = run["wall_start"], run["wall_end"]
        self.wall = None if start is None else (datetime.fromisoformat(start),
                                                datetime.fromisoformat(end))  # fmt: skip

    def mtbf_s(self) -> float | None:
        """The MTBF to the second (``mtbf_hours`` is rounded to 3.6 s): the wall time over the
        unexpected interruptions, the same figure."""
        n, h = self.run["interruptions"]["unexpected"], self.run["mtbf_hours"]
        if not n or self.wall is None:
            assert h is None
            return None
        mtbf_s = (self.wall[1] - self.wall[0]).total_seconds() / n
        assert h == pytest.approx(mtbf_s / 3600, abs=5e-4)
        return mtbf_s


def _overview(page: Page, srv: Server, t: Truth) -> tuple[datetime, datetime]:
    _open(page, srv, "/", t.id, ready="#ov-ints")
    assert f"MTBF {fmt_duration(t.mtbf_s())}" in _sub(page, "ov-ints")
    if t.good is not None:
        assert _title(page, "ov-ettr") == "Goodput"
        assert _text(page, "#ov-ettr") == _pct(t.good)
    step = _sub(page, "ov-step")
    assert ("finished" in step) == (t.run["state"] == "finished"), step
    assert ("stopped" in step) == (t.run["state"] == "stopped"), step
    return _span(page)


def _failures(page: Page, srv: Server, t: Truth) -> None:
    _open(page, srv, "/failures", t.id, ready="#fail-mtbf")
    # one reading of the MTBF on every page, in the unit its size needs (a short run's 70 s
    # read "0.0 h" here and "70 s" on Checkpoints)
    assert _text(page, "#fail-mtbf") == fmt_duration(t.mtbf_s())
    if t.wall is not None:
        wall = fmt_duration((t.wall[1] - t.wall[0]).total_seconds())
        assert _sub(page, "fail-mtbf").startswith(f"{wall} wall /")
    assert _text(page, "#fail-lostgh") == fmt_gpu_hours(t.run["lost_gpu_hours"])
    cost = t.run["cost"]["lost_usd"]
    assert ("cost –" if cost is None else f"≈ {money(cost)} ") in _sub(page, "fail-lostgh")


def _checkpoints(page: Page, srv: Server, t: Truth) -> None:
    _open(page, srv, "/checkpoints", t.id, ready="#ck-mtbf")
    assert _text(page, "#ck-mtbf") == fmt_duration(t.mtbf_s())
    note = _text(page, "#ck-goodput-note")
    if t.good is not None:
        window = fmt_duration(t.run["goodput"]["window_s"])
        assert note.startswith(f"Goodput {_pct(t.good)} of {window} in"), note
    good = t.run.get("goodput") or {}  # the saves' blocking time: the goodput's (#57, 7)
    want = (f"{good['seconds']['checkpoint_save'] / good['window_s'] * 100:.2f} %"
            if good.get("saves_timed") and good.get("window_s") else "–")  # fmt: skip
    assert _text(page, "#ck-blocking") == want
    restored = [i for i in t.run["interruptions"]["list"]
                if i["restored_step"] is not None or i["restored_tier"] is not None]  # fmt: skip
    assert _text(page, "#ck-restore-count") == f"{sum(t.run['restores'].values()):,}"
    assert sum(t.run["restores"].values()) == len(restored)
    gh = [i["lost_gpu_hours"] for i in restored]
    if restored and None not in gh:
        want = f"{fmt_gpu_hours(sum(gh))} GPU-hours lost · ≈ {money(sum(gh) * t.price)}"
        assert _sub(page, "ck-restore-count").startswith(want)
    tiers = t.run["checkpoints"]
    rows = {r["tier_name"]: r for r in _rows(page, "ck-tiers-table")} if tiers else {}
    for tier, want in tiers.items():
        row = rows[tier_name(tier)]
        assert int(row["n"]) == want["count"], (tier, row)
        assert row["size"] == fmt_bytes(want["bytes_per_checkpoint"]), (tier, row)
        mean = want["mean_write_s"]
        if mean is None:  # not known: no figure, never 0
            assert row["write_mean_s"] in ("", "–"), (tier, row)
        else:
            assert float(row["write_mean_s"]) == pytest.approx(mean, abs=0.006), (tier, row)


def _jobs(page: Page, srv: Server, t: Truth) -> None:
    if not t.jobs:
        return
    _open(page, srv, "/jobs", t.id)
    rows = {r["job_id"]: r for r in _rows(page, "jobs-table")}
    for job in t.jobs:
        row = rows[job["job_id"]]
        state = job["state"] or "–"
        assert row["state"] == state and state in JOB_STATES[t.run["state"]], (row, t.run["state"])
        if job["start"] and job["end"]:
            hours = datetime.fromisoformat(job["end"]) - datetime.fromisoformat(job["start"])
            assert float(row["elapsed_h"]) == pytest.approx(hours.total_seconds() / 3600, abs=0.006)
        if job["gpu_hours"] is not None:
            assert float(row["alloc_gpu_hours"]) == pytest.approx(job["gpu_hours"], abs=0.006)


def _lost_text(inc: dict[str, Any], price: float) -> str:
    gh = inc["lost_gpu_hours"]
    return "GPU-hours – (" if gh is None else f"{fmt_gpu_hours(gh)} GPU-hours, ${gh * price:,.2f} "


def _incidents(page: Page, srv: Server, t: Truth) -> None:
    listed = t.run["interruptions"]["list"]
    for inc in listed:
        _open(page, srv, "/incident", t.id, {"at": inc["ts"]}, ready="#inc-lost")
        assert _lost_text(inc, t.price) in _text(page, "#inc-lost"), inc["ts"]
    for hang in t.run["hangs"]:  # a hang opens as the stop it caused, its loss the same
        at = datetime.fromisoformat(hang["ts"]).isoformat()
        _open(page, srv, "/incident", t.id, {"at": at}, ready="#inc-title")
        stop = [i for i in listed if i["ts"] <= at]
        if stop:
            assert _lost_text(stop[-1], t.price) in _text(page, "#inc-lost")
    known = [i["lost_gpu_hours"] for i in listed if i["lost_gpu_hours"] is not None]
    total = t.run["lost_gpu_hours"]
    assert total == (None if not known else pytest.approx(sum(known), abs=1e-3))


def test_every_page_tells_the_runs_figures_as_summary_does(
    page: Page, served: tuple[str, Server, dict[str, Any]], shots: Path
) -> None:
    name, srv, out = served
    errors = collect_errors(page)
    page.set_viewport_size({"width": 1366, "height": 900})
    for run in out["runs"]:
        t = Truth(out, run)
        span = _overview(page, srv, t)
        if t.wall is not None:  # the run's own time, not the store's
            end = t.wall[1].replace(microsecond=0)  # the header reads to the second
            assert span[0] <= t.wall[0] and span[1] >= end, (span, t.wall)
            assert (span[1] - t.wall[1]).total_seconds() < 60, (span, t.wall)
            hours = (t.wall[1] - t.wall[0]).total_seconds() / 3600
            assert run["wall_hours"] == pytest.approx(hours, abs=5e-4)
            good = run.get("goodput")
            if good is not None:  # goodput is taken over the same wall time
                assert (good["start"], good["end"]) == (run["wall_start"], run["wall_end"])
        _failures(page, srv, t)
        _checkpoints(page, srv, t)
        _jobs(page, srv, t)
        _incidents(page, srv, t)
        for path in ("/gpus", "/failures"):  # every page shows the same span
            _open(page, srv, path, t.id)
            assert _span(page) == span, path
    if name == "night":
        _night_shots(page, srv, out["runs"][0], shots)
    assert errors == [], errors


def _night_shots(page: Page, srv: Server, run: dict[str, Any], shots: Path) -> None:
    """The README's pictures of a real run (#57, done when): the night's Overview and its GPU
    failure's incident view, as a user opens them."""
    _open(page, srv, "/", run["run_id"], ready="#ov-ettr")
    expect(page.locator("#ov-loss .scatterlayer .trace")).not_to_have_count(0)
    # no GPU telemetry: no hole where the fleet chart was, the alerts card takes its row
    alerts = page.locator("#ov-alerts").bounding_box()
    assert alerts is not None and alerts["x"] < 60 and alerts["width"] > 1000, alerts
    expect(page.locator("#ov-power")).to_be_hidden()
    page.screenshot(path=str(shots / "overview-night.png"), full_page=True)
    xid = next(i for i in run["interruptions"]["list"] if i["xid"] is not None)
    _open(page, srv, "/incident", run["run_id"], {"at": xid["ts"]}, ready="#inc-lost")
    expect(page.locator("#inc-timeline .scatterlayer .trace")).not_to_have_count(0)
    page.screenshot(path=str(shots / "incident-night.png"), full_page=True)
