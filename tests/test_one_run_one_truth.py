"""One run, one truth (#57, 1 and 7): in a store of two runs, each run's pages tell its own time
(range, checkpoint ages, MTBF), and a figure (MTBF, checkpoint size and write time) is the same
on every page as in ``summary --json``. The stores are made with the user's commands: the
cluster fixture's night (2026-03-01) imported, then a torchrun job's log (2026-12-06) imported
into the same store as a second run; and the night with its checkpoint directories rotated
away (the log still reports every save)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from app.data import checkpoints as ck
from app.data import failures as fail
from app.data import overview, view
from app.figures import checkpoints as ckfig
from telemetry.queries import TimeRange
from telemetry.store import Store
from tests.cluster_fixture import RUN, build
from tests.conftest import ROOT, bound_store, build_store, cli, imported_night
from tests.test_logged_saves import rotated  # noqa: F401 (the night, rotated, imported)

OTHER = "torchrun-hang"
RUN_END = datetime(2026, 3, 1, 12, 6, 15)  # the night's last record: its failed PFS save's end


def _summary(store: Path, run_id: str) -> dict[str, Any]:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    return next(x for x in json.loads(r.stdout)["runs"] if x["run_id"] == run_id)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = imported_night(tmp_path_factory.mktemp("two"))
    log = ROOT / "tests" / "fixtures" / "torchrun" / "hang.log"
    r = cli("import", "--store", str(store), "--run", OTHER, str(log))
    assert r.returncode == 0, r.stderr
    return store


@pytest.fixture
def bound(two: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(two, monkeypatch)


def test_each_run_of_a_store_of_two_is_shown_over_its_own_time(bound: Store) -> None:
    """The night used to be shown to December (the other run's end): its loss squeezed into a
    sliver of the chart."""
    ext = view.extent()
    assert ext is not None and ext.end > datetime(2026, 12, 1)  # the store's: the other run's
    for preset in ("all", "24h", "1h"):
        tr = view.view_range({"run": RUN, "range": preset})
        assert tr is not None and tr.end == RUN_END, preset
    assert view.run_extent(RUN) == TimeRange(datetime(2026, 3, 1, 8, 0, 20), RUN_END)
    age = view.data_age(RUN)
    assert age is not None and age["end"] == RUN_END  # the header's "data to ..."
    other = view.view_range({"run": OTHER, "range": "all"})
    assert other is not None and other.start > datetime(2026, 12, 1)


def test_checkpoint_ages_count_from_the_runs_end(bound: Store) -> None:
    """The last NVMe checkpoint (11:49:25) is 16.8 min before the night's end, not "6,726 h
    ago" at the other run's end."""
    tr = view.view_range({"run": RUN, "range": "all"})
    assert tr is not None
    ages = overview.checkpoint_ages(RUN, tr.end).set_index("tier")["age_s"]
    assert ages["nvme"] == (RUN_END - datetime(2026, 3, 1, 11, 49, 25)).total_seconds()
    stats = ck.tier_stats(RUN, tr)
    tiers = stats.set_index("tier")["age_s"]
    assert tiers["nvme"] == ages["nvme"] and tiers["pfs"] == ages["pfs"]
    assert overview.run_ended(RUN) and ck.run_ended(RUN)  # "before the end", not "ago"
    shown = ckfig.tier_table(stats, ck.run_ended(RUN)).set_index("tier_name")["age"]
    assert shown["NVMe (node-local)"] == "16.8 min before the end"


def test_mtbf_is_one_figure_on_every_page_and_in_summary(two: Path, bound: Store) -> None:
    """Checkpoints used to divide the range (to the store's end) by the failures: 4.1 d where
    Failures and ``summary`` said 5.1 h. Over the run's range and over a range holding both
    runs, every page gives ``summary --json``'s MTBF."""
    want = _summary(two, RUN)["mtbf_hours"]
    assert want == pytest.approx(4.099 / 2, abs=1e-3)  # two failures in 4.1 h
    run_tr = view.view_range({"run": RUN, "range": "all"})
    wide = view.view_range({"run": RUN, "range": "custom", "start": "2026-02-28 00:00:00",
                            "end": "2026-12-07 00:00:00"})  # fmt: skip
    for tr in (run_tr, wide):
        assert tr is not None
        model = ck.model_inputs(RUN, tr)
        assert model is not None and model["mtbf_s"] / 3600 == pytest.approx(want, abs=1e-3)
        assert fail.failure_summary(RUN, tr)["mtbf_hours"] == pytest.approx(want, abs=1e-3)
    assert overview.summary(RUN)["mtbf_hours"] == want  # the Overview's interruptions card


def test_checkpoint_size_and_write_time_are_one_figure(
    rotated: Path,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """11 NVMe saves, 3 on disk (8 KiB, files written over 20 s each), 8 known from the log
    only (no size; their lines carry one time, so no write time). The write mean used to count
    the 8 as 0 s (5.5 s), and ``summary`` divided the bytes on disk by all 11 saves (2,234 B)
    where the page averaged the sizes known (8,192 B)."""
    want = _summary(rotated, RUN)["checkpoints"]
    for _ in bound_store(rotated, monkeypatch):
        tr = view.view_range({"run": RUN, "range": "all"})
        assert tr is not None
        page = ck.tier_stats(RUN, tr).set_index("tier")
    nvme = page.loc["nvme"]
    assert nvme["n"] == 11 and nvme["write_mean_s"] == 20.0 and nvme["bytes_avg"] == 8192.0
    assert (want["nvme"]["mean_write_s"], want["nvme"]["bytes_per_checkpoint"]) == (20.0, 8192)
    assert (nvme["sized"], nvme["timed"]) == (3, 3)
    for tier in ("nvme", "pfs"):
        got = want[tier]
        assert got["count"] == page.loc[tier, "n"]
        assert got["mean_write_s"] == pytest.approx(page.loc[tier, "write_mean_s"])
        assert got["bytes_per_checkpoint"] == page.loc[tier, "bytes_avg"]
        assert (got["sized"], got["timed"]) == (page.loc[tier, "sized"], page.loc[tier, "timed"])


@pytest.fixture
def overview_page(bound: Store) -> Any:
    """The Overview page module, registered with an app bound to the two-run store."""
    from app.main import create_app

    create_app(bound)
    from app.pages import overview

    return overview


def test_a_run_without_gpu_telemetry_says_so_once_with_what_its_logs_know(
    overview_page: Any,
) -> None:
    """It showed "GPUs reporting 0 / 0" for a 64-GPU run and two empty "No GPU samples"
    charts."""
    out = overview_page._update({"run": RUN, "range": "all"}, None, "dark")
    text = str(out[0])  # the fleet's cards
    assert "0 / 0" not in text and "GPUs reporting" not in text
    fleet_style, power_style = out[5:]
    assert text.count("No GPU telemetry for this run") == 1
    assert "World size 64" in text  # the Megatron-LM log's "using world size: 64"
    assert fleet_style == power_style == {"display": "none"}  # no empty GPU charts


def test_imported_sources_are_not_up(overview_page: Any) -> None:
    """An import read its files once: "Sources 5 / 5 up" beside the Live switch said the
    cluster was watched."""
    targets = str(overview_page._update({"run": RUN, "range": "all"}, None, "dark")[4])
    assert "'none followed'" in targets and " imported (read once, not followed)" in targets
    assert re.search(r"\d+ / \d+ up", targets) is None


def test_an_ended_runs_alerts_are_its_history_not_active_now(overview_page: Any) -> None:
    """The night's "XID 79 seen in the last 24 h" sat in the active alerts of a run that
    ended months before: it is in the run's history; nothing is active in a store of
    imports."""
    text = str(overview_page._alert_panel({"run": RUN, "range": "all"}, None, "dark"))
    now, history = text.index("Active now"), text.index("In this run, to its end")
    assert now < text.index("Nothing is followed") < history < text.index("XID 79 seen")


@pytest.fixture(scope="module")
def beside_replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A replay (dev-64, 2026-01-05, GPU telemetry) and the night imported beside it."""
    root = tmp_path_factory.mktemp("mixed")
    store = build_store(root / "s.duckdb", seed=1, days=0.25)
    r = cli(*build(root / "night").import_args(store))
    assert r.returncode == 0, r.stderr
    return store


def test_beside_a_replay_the_imported_run_has_its_own_time_and_no_gpus(
    beside_replay: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store has GPU telemetry, the night has none in its time: its Overview says so once;
    the replay's keeps its fleet cards. Each run is shown over its own time."""
    from app.main import create_app

    for bound_ in bound_store(beside_replay, monkeypatch):
        create_app(bound_)
        from app.pages import overview as page

        replay = next(r for r in view.run_ids() if r != RUN)
        tr = view.view_range({"run": replay, "range": "all"})
        assert tr is not None and tr.end < datetime(2026, 1, 6)  # not to the night, in March
        assert view.view_range({"run": RUN, "range": "all"}).end == RUN_END  # type: ignore[union-attr]
        night = page._update({"run": RUN, "range": "all"}, None, "dark")
        assert "No GPU telemetry for this run" in str(night[0]) and "0 / " not in str(night[0])
        fleet = page._update({"run": replay, "range": "all"}, None, "dark")
        assert "GPUs reporting" in str(fleet[0]) and fleet[5:] == ({}, {})
        model = ck.model_inputs(replay, tr)
        want = _summary(beside_replay, replay)["mtbf_hours"]
        assert model is not None and model["mtbf_s"] / 3600 == pytest.approx(want, abs=1e-3)
