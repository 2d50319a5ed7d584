"""The data adapter pages go through: what the what-if inputs mean, and the view's parameters
in, frames and dicts out (no page holds the store)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pandas as pd
import pytest

from app.data import checkpoints, failures, gpus, overview, services, training, view
from telemetry.queries import TimeRange
from telemetry.store import Store

RUN = "dev-64-s1"


@pytest.fixture
def bound(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(
        services, "_services", None
    )  # whatever was bound before is bound again after
    services.bind(store)
    yield store


@pytest.fixture
def model(bound: Store, whole: TimeRange) -> dict:
    m = checkpoints.checkpoint_model(RUN, whole, checkpoints.tier_stats(RUN, whole))
    assert m is not None and m["configured_interval_s"] == 300.0 and m["write_s"] is not None
    return m


def test_the_what_if_inputs_start_at_the_configured_values(model: dict) -> None:
    write = model["write_s"]
    assert checkpoints.what_if_defaults(model) == (
        5.0,
        round(write, 2),
    )  # 5 min, the measured write
    assert (
        checkpoints.what_if_defaults(None) == checkpoints.what_if_defaults("junk") == (None, None)
    )
    base = checkpoints.interval_advice(model)
    # Empty, invalid or the prefilled (rounded) values: the configured job, exactly.
    for interval, w in [(None, None), (5.0, round(write, 2)), (-1, "x"), (0, True)]:
        projection = checkpoints.what_if(model, interval, w)
        assert projection.what == projection.base == base, (interval, w)
    longer = checkpoints.what_if(model, 60, None)  # an hour between checkpoints
    assert longer.what.configured_s == 3600.0 and longer.what.write_s == write
    assert longer.what.ettr_configured < base.ettr_configured
    free = checkpoints.what_if(
        model, None, 0
    )  # a write that blocks nothing is a value, not "empty"
    assert free.what.write_s == 0.0 and free.what.configured_s == 300.0
    assert checkpoints.what_if("junk", 5, 2) is None and checkpoints.what_if({}, 5, 2) is None


def test_a_view_gets_frames_and_dicts(bound: Store, whole: TimeRange) -> None:
    frames = [
        checkpoints.tier_stats(RUN, whole),
        checkpoints.restores(RUN, whole),
        checkpoints.checkpoint_timeline(RUN, whole),
        training.run_events(RUN, whole),
        training.checkpoint_marks(RUN, whole),
        training.loss_spikes(RUN, whole),
        failures.taxonomy(RUN, whole, failures.taxonomy_key("category")),
        failures.failure_timeline(None, whole),
        failures.xid_table(RUN, whole),
        failures.lemons(RUN, whole),
        gpus.gpu_distribution(whole, "temp"),
        gpus.gpu_outliers(whole),
        gpus.node_gpu_series("h100-0003", whole),
        overview.active_alerts(RUN, whole, overview.target_time(whole, live=True)),
    ]
    assert all(isinstance(f, pd.DataFrame) and not f.empty for f in frames[:-1])
    assert isinstance(frames[-1], pd.DataFrame)
    assert failures.failure_summary(RUN, whole)["unexpected"] == 7
    assert gpus.gpu_heatmap(whole, "util").nodes_total == 10
    assert gpus.node_info("h100-0003")["gpus"] == 8 and gpus.node_info("nope") is None
    assert overview.target_health(whole.end) is None  # a replay scrapes no target
    assert view.run_options() == [{"label": view.run_label(RUN), "value": RUN}]
    assert training.tokens_per_step(RUN) > 0
    assert (
        failures.taxonomy_key("component; DROP TABLE runs")
        == failures.taxonomy_key(7)
        == "component"
    )
    assert (gpus.gpu_threshold("temp"), gpus.gpu_threshold("util")) == (85.0, 5.0)
    assert gpus.gpu_threshold("power") is None


def test_together_runs_a_view_s_reads_at_once_and_in_order() -> None:
    """Reads that each wait for the other finish only if they run at the same time; results
    come back in the order asked; a failing read's error reaches the caller."""
    meet = threading.Barrier(3, timeout=10)

    def read(value: int) -> Callable[[], int]:
        return lambda: (meet.wait(), value)[1]

    assert services.together(read(1), read(2), read(3)) == [1, 2, 3]

    def broken() -> int:
        raise ValueError("disk hiccup")

    with pytest.raises(ValueError, match="disk hiccup"):
        services.together(lambda: 1, broken)


def test_a_view_s_reads_at_once_equal_the_same_reads_in_turn(
    bound: Store, whole: TimeRange
) -> None:
    reads = (
        lambda: overview.fleet_series(whole),
        lambda: overview.interruption_marks(RUN, whole),
        lambda: overview.summary(RUN),
    )
    at_once = services.together(*reads)
    in_turn = [r() for r in reads]
    pd.testing.assert_frame_equal(at_once[0], in_turn[0])
    pd.testing.assert_frame_equal(at_once[1], in_turn[1])
    assert at_once[2] == in_turn[2]


def test_the_overview_s_cards_show_the_run_summary_s_own_figures(bound: Store) -> None:
    """The Overview reads the summary without its detail (the interruption list with every
    evidence parsed, tiers, restores, Slurm jobs, utilization): what it does read is the full
    summary's, figure for figure, and the energy by the same basis."""
    from telemetry.metrics.summary import run_summary

    full, cards = run_summary(bound, RUN), overview.summary(RUN)
    detail = {"checkpoints", "restores", "slurm_jobs", "utilization", "goodput"}
    assert set(full) - set(cards) == detail and not set(cards) - set(full)
    assert "list" in full["interruptions"] and len(full["interruptions"]["list"]) > 0
    assert cards["interruptions"] == {k: v for k, v in full["interruptions"].items() if k != "list"}
    for key in set(cards) - {"interruptions", "energy"}:
        assert cards[key] == full[key], key
    # the counter answers on a replay: power x time is not read for the cards
    assert full["energy"]["basis"] == "energy counter" and full["energy"]["kwh_power"] > 0
    assert cards["energy"] == full["energy"] | {"kwh_power": None}


def test_interruption_marks_are_the_interruptions_columns_the_charts_mark(
    bound: Store, whole: TimeRange
) -> None:
    from telemetry import queries

    marks = overview.interruption_marks(RUN, whole)
    full = queries.interruptions(bound, RUN, whole)
    assert len(marks) == len(full) > 0
    assert list(marks.columns) == [c.strip() for c in queries.MARK_COLUMNS.split(",")]
    pd.testing.assert_frame_equal(marks, full[list(marks.columns)])
    with pytest.raises(ValueError, match="not \\* or MARK_COLUMNS"):
        queries.interruptions(bound, RUN, whole, "1; DROP TABLE runs")


def test_the_overview_s_loss_is_the_training_series_loss(bound: Store, whole: TimeRange) -> None:
    from telemetry import queries

    loss, full = training.loss_series(RUN, whole), training.train_series(RUN, whole)
    assert len(loss) == len(full) > 0
    cols = [c.strip() for c in queries.LOSS_COLS.split(",")] + ["segment", "rolled_back"]
    pd.testing.assert_frame_equal(loss, full[cols])
    with pytest.raises(ValueError, match="not a known list"):
        queries.thinned_metrics(bound, RUN, "ts", whole.start, whole.end, 10, "loss; --")
