"""Stores for tests: a seeded replay, the cluster fixture's night imported, and the
dashboard's data layer bound to a store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from telemetry.replay.runner import replay
from telemetry.replay.scenarios import get_scenario
from telemetry.store import Store
from tests.helpers.procs import cli


def build_store(
    path: Path, scenario: str = "dev-64", seed: int = 0, days: float = 0.25, **kw: float
) -> Path:
    sc = get_scenario(scenario).with_overrides(days=days)
    with Store(str(path)) as store:
        replay(store, sc, seed, **kw)  # type: ignore[arg-type]
    return path


def imported_night(root: Path) -> Path:
    """The cluster fixture's night (``tests/cluster_fixture.py``) under ``root``, imported with
    the user's command into ``root/s.duckdb``."""
    from tests.cluster_fixture import build

    store = root / "s.duckdb"
    r = cli(*build(root / "night").import_args(store))
    assert r.returncode == 0, r.stderr
    return store


def bound_store(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The dashboard's data layer bound to ``path`` read-only, as ``serve`` binds it (a
    fixture body: ``yield from bound_store(...)``)."""
    from app.data import services

    monkeypatch.setattr(services, "_services", None)
    with Store(str(path), read_only=True) as s:
        services.bind(s)
        yield s
