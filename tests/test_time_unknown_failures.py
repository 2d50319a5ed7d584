"""An interruption no line dates (a log with no wall-clock time: ``derive.stopped``) is on the
Failures page as ``summary --json`` and the Overview count it: in its cards, taxonomy and list,
its time said to be unknown, never made up. It used to be left out of every range (``ts
BETWEEN``), so the Failures page said 0 + 0 where ``summary`` said 1 unexpected. The store is
made with the user's commands: a dated job's watchdog lines imported, then an undated log of
another job into the same store (so the store has a time range for the pages to show)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemetry.store import Store
from tests.conftest import bound_store, cli
from tests.test_failure_only_logs import NO_CLOCK, WATCHDOG, _write

DATED, UNDATED = "dated", "undated"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("untimed")
    path = tmp / "s.duckdb"
    for run, lines, year in ((DATED, WATCHDOG, ["--year", "2024"]), (UNDATED, NO_CLOCK, [])):
        log = _write(tmp / f"{run}.log", lines)
        r = cli("import", "--store", str(path), "--run", run, *year, str(log))
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert f"run {run}: 1 interruption(s) inferred" in r.stdout, r.stdout
    assert "  time unknown NCCL Watchdog Timeouts (" in r.stdout, r.stdout  # the import's account
    return path


@pytest.fixture
def bound(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(store, monkeypatch)


def _summaries(store: Path) -> dict[str, dict[str, Any]]:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    return {x["run_id"]: x for x in json.loads(r.stdout)["runs"]}


def _grid(reply: Any, grid_id: str) -> list[dict[str, Any]]:
    """The rows of grid ``grid_id`` in a page callback's reply (components or their JSON)."""
    node = reply.to_plotly_json() if hasattr(reply, "to_plotly_json") else reply
    if isinstance(node, dict):
        props = node.get("props", {})
        if props.get("id") == grid_id:
            return list(props["rowData"])
        kids = props.get("children")
        return _grid(kids, grid_id) if kids is not None else []
    if isinstance(node, list | tuple):
        return next((rows for k in node if (rows := _grid(k, grid_id))), [])
    return []


def test_the_failures_page_counts_and_lists_what_summary_counts(store: Path, bound: Store) -> None:
    import sys

    import dash

    from app.main import create_app

    create_app(bound)
    from app.pages import _interruptions as ints

    # the page as Dash loaded it (importing app.pages.failures again would register it twice)
    page = sys.modules[dash.page_registry["pages.failures"]["module"]]

    runs = _summaries(store)
    for run in (DATED, UNDATED):
        i = runs[run]["interruptions"]
        for preset in ("all", "24h", "1h"):
            view = {"run": run, "range": preset}
            cards, _xid, _lemons = page._summary(view, None)
            text = str(cards[0])
            assert f"'{i['unexpected']} + {i['planned']}'" in text, (run, preset, text)
            _fig, tax = page._taxonomy(view, None, None, "component")
            counts = {r["key"]: r["count"] for r in _grid(tax, "fail-tax-table") if r["count"]}
            assert counts == i["by_component"], (run, preset)
            rows = _grid(ints._list(view, None, 0), "fail-int-table")
            times = [r["time"] for r in rows]
            assert len(rows) == i["unexpected"] + i["planned"], (run, preset)
            assert (times == ["time unknown"]) is (run == UNDATED), times
    # the dated job was seen at one instant (its watchdog lines): no wall time to divide, so
    # its MTBF is unknown, never 0 s (an SRE would read "fails all the time")
    # nor its wall time: how long it ran before those lines, none says (not 0 h)
    assert runs[DATED]["mtbf_hours"] is None and runs[DATED]["wall_hours"] is None
    cards, *_ = page._summary({"run": DATED, "range": "all"}, None)
    assert "'0 s'" not in str(cards[1]) and "'–'" in str(cards[1]), str(cards[1])
    cards, *_ = page._summary({"run": UNDATED, "range": "all"}, None)
    assert "(1 at a time unknown)" in str(cards[0])
    # the chart of interruptions over time does not say "none" beside the card's 1
    fig = page._timeline({"run": UNDATED, "range": "all"}, None, None, "component")
    layout = fig["layout"] if isinstance(fig, dict) else fig.to_plotly_json()["layout"]
    said = f"{layout['title']['text']} {[a['text'] for a in layout.get('annotations', ())]}"
    assert "1 at a time unknown" in said and "No interruptions" not in said, said
    assert "0 s wall" not in str(cards[1])  # nothing dates the run: its wall time unknown
    # its evidence opens by its key, with the time said unknown and no incident link
    panel, component = ints._evidence(f"{UNDATED}|time unknown", 0)
    assert component == "NCCL Watchdog Timeouts"
    assert "'time unknown'" in str(panel) and "fail-incident-link" not in str(panel)
