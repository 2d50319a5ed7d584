"""A real run's pages tell the truth about time (#37, 2 and 4): a run imported months after its
night is not "stalled for 272 days", "the last 24 h" is counted from the data's end whatever
range is shown, the run's final checkpoints (saved after its last progress line) are inside
its range, and the header says how old the data is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from app.data import overview, view
from app.figures.overview import loss_curve
from telemetry.metrics.alert_rules import active_alerts
from telemetry.queries import TimeRange, data_extent, run_span
from telemetry.queries.targets import report_time
from telemetry.store import Store
from tests.cluster_fixture import RUN
from tests.conftest import bound_store, imported_night


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster fixture's night (2026-03-01), imported now (months later)."""
    return imported_night(tmp_path_factory.mktemp("state"))


@pytest.fixture
def bound(night: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(night, monkeypatch)


def test_an_imported_run_is_not_stalled_since_its_data_ended(bound: Store) -> None:
    """The import's own health rows are stamped when it ran (today); they used to set the
    stall's clock, so the Overview raised a critical "Run stalled ... 391665.3 min"."""
    tr = view.time_range("all", RUN)
    assert tr is not None and tr.end < datetime(2026, 3, 2)
    at = report_time(bound, tr.end, live=True)  # the Overview's live view
    assert at > datetime(2026, 11, 1)  # the import's rows: the sources card still shows them
    alerts = active_alerts(bound, RUN, tr, targets_at=at)
    assert "Run stalled" not in set(alerts["alert"]), alerts.to_dict("records")
    assert report_time(bound, tr.end, live=True, imports=False) == tr.end


def test_the_runs_final_checkpoints_are_inside_its_range(bound: Store) -> None:
    """The failed PFS save of step 6000 ends at 12:06:15, after the last progress line
    (12:05:45): the range used to stop at the progress line and cut it off."""
    last_step = bound.scalar("SELECT max(ts) FROM train_metrics WHERE run_id = ?", [RUN])
    last_save = bound.scalar("SELECT max(end_ts) FROM checkpoints WHERE run_id = ?", [RUN])
    assert last_save > last_step
    ext, span = data_extent(bound), run_span(bound, RUN)
    assert ext is not None and ext.end == last_save
    assert span is not None and span.end in (None, last_save)  # None: no end recorded
    tr = view.time_range("all", RUN)
    assert tr is not None and tr.end >= last_save
    steps = bound.scalar(
        "SELECT count(*) FROM checkpoints WHERE run_id = ? AND end_ts BETWEEN ? AND ?",
        [RUN, tr.start, tr.end],
    )
    assert steps == bound.scalar("SELECT count(*) FROM checkpoints WHERE run_id = ?", [RUN])


def test_the_last_24_h_count_does_not_move_with_the_range(bound: Store) -> None:
    tr = view.time_range("all", RUN)
    assert tr is not None
    assert overview.recent_interruptions(RUN) == 2
    zoomed = TimeRange(tr.start, tr.start + timedelta(minutes=30))  # before both failures
    assert overview.interruption_marks(RUN, zoomed).empty
    assert overview.recent_interruptions(RUN) == 2  # the card counts what the alert counts


def test_the_header_says_how_old_the_data_is(bound: Store) -> None:
    age = view.data_age(RUN, now=datetime(2026, 11, 28, 12, 0))
    assert age is not None and age["end"] == datetime(2026, 3, 1, 12, 6, 15)
    assert view.ago(age["age_s"]) == "272 days" and age["stale"]
    fresh = view.data_age(RUN, now=age["end"] + timedelta(seconds=30))
    assert fresh is not None and not fresh["stale"] and view.ago(fresh["age_s"]) == "30 s"
    assert [view.ago(s) for s in (90, 600, 3 * 3600)] == ["90 s", "10 min", "3.0 h"]


def test_the_overview_loss_chart_marks_the_interruptions(bound: Store) -> None:
    """Without GPU telemetry the fleet chart is empty: the loss chart carries the markers."""
    tr = view.time_range("all", RUN)
    assert tr is not None
    ints = overview.interruption_marks(RUN, tr)
    fig = loss_curve(overview.loss_series(RUN, tr), interruptions=ints).to_dict()
    marks = [t for t in fig["data"] if t.get("mode") == "markers"]
    assert sorted(t["name"] for t in marks) == ["GPU interruption", "Network interruption"]
    assert all(t["yaxis"] == "y2" for t in marks) and fig["layout"]["yaxis2"]["visible"] is False
    assert loss_curve(overview.loss_series(RUN, tr)).to_dict()["data"][-1]["mode"] == "lines"


def test_the_incident_view_tells_each_failure_whole(bound: Store) -> None:
    """#37, 1: cause, culprit, spans, restore, loss and cost of each failure, and the same as
    Markdown for the postmortem (every evidence line whole)."""
    from app.data import incident
    from app.figures import incident as fig

    listed = incident.incidents(RUN)
    assert list(listed["component"]) == ["Network Switch/Cable", "Faulty GPU"]  # newest first
    gpu = incident.incident(RUN, listed["at"].iloc[1])
    assert gpu is not None and gpu["host"] == "node-7" and gpu["restored_tier"] == "pfs"
    assert [s[0] for s in gpu["spans"]] == [
        "stalled until detected", "down until training resumed", "lost steps redone"
    ]
    # training resumed: step 3001 began 20 s before the line of step 3010 (#57, 8)
    assert gpu["spans"][1][2] == datetime(2026, 3, 1, 10, 12, 20)
    assert gpu["cost_usd"] == pytest.approx(gpu["lost_gpu_hours"] * gpu["prices"].gpu_hour)
    assert fig.lost(gpu).startswith("400 steps · 19.0 min down · 34.5 GPU-hours, $")
    assert fig.restored(gpu) == "pfs, step 3,000" and fig.where(gpu) == "node-7 · XID 79"
    assert "&node=node-7" in gpu["links"]["gpus"] and "from=2026-03-01T09%3A23" in (
        gpu["links"]["training"]
    )
    md = fig.markdown(gpu)
    assert md.startswith("## 2026-03-01 09:53:20 UTC: Faulty GPU (GPU)")
    assert "- **Restored from:** pfs, step 3,000" in md
    for e in gpu["evidence"]:  # each line whole, with its place
        assert "  " + e["line"] in md and e["origin"] in md
    figure = fig.timeline(gpu).to_dict()
    assert {t["name"] for t in figure["data"]} >= {"down until training resumed", "cause lines"}
    assert incident.incident(RUN, "2026-03-01T09:00:00") is None  # no interruption began then
    assert incident.incident(RUN, "<img src=x onerror=alert(1)>") is None
    assert incident.incident(None, listed["at"].iloc[0]) is None


def test_the_what_if_models_an_imported_run_once_its_write_time_is_entered(
    bound: Store,
) -> None:
    """Directory scans see write times, not stalls: the model has no blocking write, and the
    hint says to enter one. Entered, the what-if projects the run (it said 'Nothing to model'
    whatever was typed); a zero interval says why it is not used instead of silently falling
    back."""
    from app.data import checkpoints as ck

    tr = data_extent(bound)
    assert tr is not None
    model = ck.checkpoint_model(RUN, tr, ck.tier_stats(RUN, tr))
    assert model is not None and model["write_s"] is None
    assert ck.what_if(model, None, None) is None  # nothing entered: nothing to model
    got = ck.what_if(model, None, 20)
    assert got is not None and got.base.write_s == 20.0
    assert 0.5 < got.base.ettr_configured < 1.0
    assert "write 20.00 s (entered)" in set(got.curves["curve"])
    assert ck.what_if(model, 5, 20).what.configured_s == 300.0  # a typed interval is used
    assert "more than 0 min" in (ck.what_if_refused(0, 20) or "")
    assert "negative" in (ck.what_if_refused(None, -3) or "")
    assert ck.what_if_refused(None, None) is None and ck.what_if_refused(10, 0) is None
    # the model's ETTR beside the measured one, with why they differ
    assert (ck.measured_ettr(RUN) or "").startswith("measured over the run: 81.2 %")


def test_the_overview_card_is_goodput_with_what_cost_most(bound: Store) -> None:
    """#38, 3: the ETTR card became goodput, with its largest badput category."""
    from app.main import create_app

    create_app(bound)
    from app.pages import overview as page

    card = str(page._goodput_card(overview.summary(RUN), overview.goodput(RUN)))
    assert "Goodput" in card and "81.2 %" in card  # of the wall time MTBF takes (#57, 7)
    # recovery without the 55 s its restores took (timed in the log: checkpoint_restore)
    assert "most lost: recovery 10.1 %" in card and "ETTR 81.2 %" in card
