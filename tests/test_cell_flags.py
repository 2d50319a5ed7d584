"""Per-node cell flags kept with the node rollups (``telemetry.store.cellflags``): each cell's idle,
slow and hot flags equal what judging the bucket's cells at query time gives, at every level,
after a late round and after an upgrade; and the outlier table's candidates are the same from
the kept flags as from the judged cells."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from telemetry.queries import TimeRange, data_extent
from telemetry.queries import outliers as outq
from telemetry.store import Store
from telemetry.store.cellflags import FLAG_COLUMNS, JUDGED_SQL

_CELLS = """SELECT ts, node_id, coalesce(real_avg, util_avg) AS eff_avg, temp_max, sm_clock_avg
FROM node_rollup WHERE bucket_s = ?"""
_FLAGS = ", ".join(FLAG_COLUMNS)


def _kept(s: Store, level: int) -> pd.DataFrame:
    return s.df(
        f"SELECT ts, node_id, {_FLAGS} FROM node_rollup WHERE bucket_s = ? ORDER BY ALL", [level]
    )


def _judged(s: Store, level: int) -> pd.DataFrame:
    return s.df(
        f"SELECT ts, node_id, {_FLAGS} FROM ({JUDGED_SQL.format(cells=_CELLS)}) ORDER BY ALL",
        [level],
    )


def _all_same(s: Store) -> dict[int, pd.DataFrame]:
    kept = {}
    for level in s.rollup_levels():
        kept[level] = _kept(s, level)
        assert len(kept[level]) > 0
        pd.testing.assert_frame_equal(kept[level], _judged(s, level), obj=f"level {level}")
    return kept


def test_each_node_cell_keeps_the_flags_its_bucket_gives(day: Path) -> None:
    with Store(str(day)) as s:
        kept = _all_same(s)
        hourly = kept[3600]  # the dev day has a hot node, a slow one and drained idle ones
        assert hourly["hot_cell"].any() and hourly["slow_cell"].any()
        assert hourly["idle_cell"].any()
        # a late round: one GPU of a node with no hot hour reads 99 degrees in an old hour
        cool = hourly.groupby("node_id")["hot_cell"].any()
        node = int(cool[~cool].index[0])
        gpu = s.scalar("SELECT min(gpu_id) FROM gpus WHERE node_id = ?", [node])
        whole = data_extent(s)
        assert whole is not None
        at = whole.start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=5, seconds=7)
        s.append("gpu_samples", pd.DataFrame({"ts": [at], "gpu_id": [gpu], "temp_c": [99.0]}))
        s.refresh_rollups(since=at)
        after = _all_same(s)[3600]
        hot = after[after["hot_cell"]]
        assert (node, at.replace(second=0)) in set(zip(hot["node_id"], hot["ts"], strict=True))
    con = duckdb.connect(str(day))  # as a store from before the flags
    for column in FLAG_COLUMNS:
        con.execute(f"ALTER TABLE node_rollup DROP COLUMN {column}")
    con.close()
    with Store(str(day)) as s:  # opened for writing: every cell flagged once
        pd.testing.assert_frame_equal(_all_same(s)[3600], after)


@pytest.mark.parametrize(("hours", "cells"), [(24, None), (6, 10 * 24)])
def test_the_candidates_from_kept_flags_are_those_of_the_judged_cells(
    store: Store,
    whole: TimeRange,
    monkeypatch: pytest.MonkeyPatch,
    hours: int,
    cells: int | None,
) -> None:
    """Over a day (5-minute cells) and, as if the fleet were huge, over 6 hours (hourly)."""
    if cells is not None:
        monkeypatch.setattr(outq, "CANDIDATE_CELLS", cells)
    tr = TimeRange(whole.end - timedelta(hours=hours), whole.end)
    grid = outq.cell_grid
    used: list[tuple[int, int, bool]] = []
    monkeypatch.setattr(outq, "cell_grid", lambda *a: used.append(grid(*a)) or used[-1])
    kept = outq.gpu_stats(store, tr, max_nodes=3, reference_nodes=1)
    level, bucket, tick = used[-1]
    assert not tick and bucket == level == (300 if cells is None else 3600)
    # the same cells judged at query time, as a regrouped or per-tick range is
    monkeypatch.setattr(outq, "cell_grid", lambda *a: (level, bucket, True))
    judged = outq.gpu_stats(store, tr, max_nodes=3, reference_nodes=1)
    assert 8 * 3 <= len(kept[0]) <= 8 * 4  # the 3 likeliest nodes (counts ranked) and a reference
    pd.testing.assert_frame_equal(kept[0], judged[0])
    assert kept[1:] == judged[1:]
