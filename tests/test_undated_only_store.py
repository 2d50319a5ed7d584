"""A store holding only a run no line dates (a log with no wall-clock time, imported with the
user's command) is not "no data stored yet": ``summary --json`` reports the run and its
interruption, and so do the pages, with what is unknown said to be unknown ("–", "time
unknown"), never 0 and never a made-up time; a page with nothing of the run to show (GPUs,
Checkpoints, the charts over time) says the time is unknown. Every page used to say "No data
stored yet", because the range of every page ends at the newest stored time, and nothing here
has one."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemetry.store import Store
from tests.conftest import bound_store, cli
from tests.test_failure_only_logs import NO_CLOCK, _write
from tests.test_time_unknown_failures import _grid

RUN = "undated"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("undated-only")
    path = tmp / "s.duckdb"
    r = cli("import", "--store", str(path), "--run", RUN, str(_write(tmp / "job.log", NO_CLOCK)))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"run {RUN}: 1 interruption(s) inferred" in r.stdout, r.stdout
    return path


@pytest.fixture
def bound(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(store, monkeypatch)


def _summary(store: Path) -> dict[str, Any]:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    [run] = json.loads(r.stdout)["runs"]
    return run


def test_the_pages_tell_what_summary_tells(store: Path, bound: Store) -> None:
    import dash

    from app.data import view as v
    from app.main import create_app
    from app.shell import header

    create_app(bound)
    from app.pages import _interruptions as ints
    from app.pages import _node_health as node_health

    failures = sys.modules[dash.page_registry["pages.failures"]["module"]]
    overview = sys.modules[dash.page_registry["pages.overview"]["module"]]
    gpus = sys.modules[dash.page_registry["pages.gpus"]["module"]]
    checkpoints = sys.modules[dash.page_registry["pages.checkpoints"]["module"]]

    s = _summary(store)
    i = s["interruptions"]
    assert (s["run_id"], i["unexpected"], i["planned"], s["wall_hours"]) == (RUN, 1, 0, None)
    # the run picker lists it and a page opens on it
    assert [o["value"] for o in v.run_options()] == [RUN]
    assert v.default_run(v.run_ids()) == RUN
    for preset in ("all", "24h", "1h"):
        view = {"run": RUN, "range": preset}
        # the header: the data's time unknown, not "no data"
        assert "No data" not in header._updated(view)
        # Failures: cards, taxonomy and list count what summary counts
        cards, _xid, _lemons = failures._summary(view, None)
        assert "No data" not in str(cards)
        assert f"'{i['unexpected']} + {i['planned']}'" in str(cards[0]), (preset, cards)
        assert "(1 at a time unknown)" in str(cards[0])
        assert "0 s wall" not in str(cards[1])  # nothing dates the run: wall time unknown
        _fig, tax = failures._taxonomy(view, None, None, "component")
        counts = {r["key"]: r["count"] for r in _grid(tax, "fail-tax-table") if r["count"]}
        assert counts == i["by_component"], preset
        rows = _grid(ints._list(view, None, 0), "fail-int-table")
        assert [r["time"] for r in rows] == ["time unknown"], rows
        assert [r["component"] for r in rows] == ["NCCL Watchdog Timeouts"]
        # the timeline draws no made-up time axis: it says the time is unknown
        timeline = failures._timeline(view, None, None, "component")
        assert "time unknown" in json.dumps(timeline, default=str).lower()
        # Overview: the run's cards as summary tells them; what no time dates is "–", not 0
        run_cards = str(overview._run_panel(view, None, None))
        assert "'1 + 0'" in run_cards, run_cards
        assert "0 in the last 24 h" not in run_cards and "– in the last 24 h" in run_cards
        fleet = str(overview._update(view, None, None)[0])
        assert "No data" not in fleet, fleet
        # the pages with nothing of this run to show say its time is unknown, not "no data"
        others = (
            overview._loss_panel(view, None, None),
            gpus._fleet(view, None, None, "util"),
            gpus._outliers(view, None),
            gpus._node(view, None, None, None),
            checkpoints._update(view, None, None),
        )
        told = [json.dumps(o, default=str) for o in others]
        assert ["No data" in t for t in told] == [False] * len(told), preset
        assert all("Time unknown" in t for t in told), preset
        # node health (GPUs page): no node telemetry of this run, its time unknown; it said
        # "Nothing stored yet" beside the run and interruption summary --json reports
        health = node_health._health(view, None, None, True)
        said = json.dumps(health, default=str)
        assert "Nothing stored" not in said and "No data" not in said, said
        assert health[0].startswith("Time unknown") and "no node telemetry" in health[0]
        assert "Time unknown" in json.dumps(health[3], default=str)
        # XIDs: no kernel log and no GPU samples stored: unknown ("–"), not 0
        xid_card = str(cards[-1])
        assert "'–'" in xid_card and "0 codes" not in xid_card, xid_card
