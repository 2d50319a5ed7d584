"""Page callbacks remember their replies per store version: many users on one view cost one
figure build per data update; a write, a different input or an error is never served stale."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from dash.exceptions import PreventUpdate

from app import figures
from app.data import services
from app.ui import guarded
from telemetry.store import Store


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Store(str(tmp_path / "s.duckdb")) as s:
        services.bind(s)
        yield s


def _write(store: Store, i: int) -> None:
    store.append(
        "train_metrics",
        pd.DataFrame(
            {"run_id": ["r"], "ts": [pd.Timestamp("2026-01-01")], "step": [i], "loss": [2.0]}
        ).reindex(columns=store.df("SELECT * FROM train_metrics LIMIT 0").columns),
    )


def test_one_build_per_view_and_version(store: Store) -> None:
    calls: list[tuple] = []

    @guarded("figure", "alert")
    def page(view, _n, theme):  # type: ignore[no-untyped-def]
        calls.append((view, theme))
        steps = store.scalar("SELECT count(*) FROM train_metrics")
        return figures.empty("Loss", f"{steps} steps"), f"{steps} steps"

    view = {"run": "r", "range": "all"}
    first = [page(view, n, "dark") for n in range(20)]  # twenty users, each its own tick
    assert len(calls) == 1
    fig, text = first[-1]
    assert isinstance(fig, dict) and fig["layout"]["annotations"][0]["text"] == "0 steps"
    assert text == "0 steps"
    page(view | {"range": "24h"}, 0, "dark")  # another view is its own reply
    page(view, 0, "light")
    assert len(calls) == 3
    _write(store, 1)  # new data: the same view is built again, and shows it
    fig, text = page(view, 0, "dark")
    assert len(calls) == 4 and text == "1 steps"


def test_errors_and_prevent_update_are_not_served_from_memory(store: Store) -> None:
    state = {"fail": True, "calls": 0}

    @guarded("alert")
    def page(view):  # type: ignore[no-untyped-def]
        state["calls"] += 1
        if view == "skip":
            raise PreventUpdate
        if state["fail"]:
            raise RuntimeError("disk hiccup")
        return "fine"

    assert "disk hiccup" in str(page("v"))  # an error is shown, as an alert
    with pytest.raises(PreventUpdate):
        page("skip")
    state["fail"] = False
    _write(store, 2)  # the next write retries at once (within one version: shared for 5 s)
    assert page("v") == "fine"


def test_a_huge_crafted_input_is_answered_but_not_remembered(store: Store) -> None:
    calls = []

    @guarded("alert")
    def page(view):  # type: ignore[no-untyped-def]
        calls.append(1)
        return "ok"

    big = {"run": "x" * 100_000}
    assert page(big) == "ok" and page(big) == "ok"
    assert len(calls) == 2


def test_a_newly_bound_store_is_never_answered_from_the_old_ones_replies(
    store: Store, tmp_path: Path
) -> None:
    """Two stores at the same version: binding the second must not serve the first's reply."""

    @guarded("alert")
    def page(view):  # type: ignore[no-untyped-def]
        return f"{services.store().scalar('SELECT count(*) FROM train_metrics')} steps"

    view = {"run": "r", "range": "all"}
    assert page(view) == "0 steps"
    with Store(str(tmp_path / "other.duckdb")) as other:
        frame = store.df("SELECT * FROM train_metrics LIMIT 0")
        two = pd.DataFrame(
            {"run_id": ["r", "r"], "ts": [pd.Timestamp("2026-01-01")] * 2, "step": [1, 2]}
        )
        other.append("train_metrics", two.reindex(columns=frame.columns))  # one write, 2 rows
        _write(store, 1)  # the first store reaches the same version the second one has
        assert store.version == other.version
        assert page(view) == "1 steps"
        services.bind(other)
        assert page(view) == "2 steps"
