"""The one table helper (app/ui.py ``table``) on AG Grid: cells as text, ids that name rows,
columns that keep their words whole, and the click that finds its row."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import html
from dash._utils import to_json

from app.data.view import table_row
from app.ui import SMALL_ROWS, table

HOSTILE = '<img src=x onerror="alert(1)">'


def _grid(box: html.Div) -> tuple[Any, Any]:
    """The Export button and the grid of a table."""
    export, grid = box.children
    return export, grid


def test_cells_are_text_and_unknown_is_a_dash() -> None:
    df = pd.DataFrame({"host": [HOSTILE, "h100-0004"], "temp_c": [88.5, float("nan")]})
    box = table("x-table", df, {"host": "Host", "temp_c": "°C"})
    _, grid = _grid(box)
    props = grid.to_plotly_json()["props"]
    assert not props.get("dangerously_allow_code")
    for col in props["columnDefs"]:
        assert "cellRenderer" not in col and "cellRendererSelector" not in col
    assert [c["headerName"] for c in props["columnDefs"]] == ["Host", "°C"]
    assert props["rowData"][0]["host"] == HOSTILE  # the literal string, drawn as text
    assert "–" in props["columnDefs"][1]["valueFormatter"]["function"]
    assert box.to_plotly_json()["props"]["data-export"] == "x"


def test_a_column_of_nothing_known_is_drawn() -> None:
    """A column where no value is known (pandas' string dtype keeps them missing)."""
    df = pd.DataFrame({"host": pd.Series([None, None], dtype="str"), "n": [1.0, None]})
    _, grid = _grid(table("n-table", df))
    assert [c["flex"] for c in grid.columnDefs] == [1, 1]
    assert to_json([r["host"] for r in grid.rowData]) == "[null,null]"  # drawn as "–"


def test_row_ids_name_rows_and_a_click_finds_its_row() -> None:
    df = pd.DataFrame({"host": ["a", "a", "b"], "gpu": [1, 1, 2], "why": ["x", "y", "z"]})
    _, grid = _grid(table("t-table", df, row_id=["host", "gpu"], clickable=True))
    rows = grid.rowData
    assert [r["id"] for r in rows] == ["a|1", "a|1#2", "b|2"]  # unique, in order
    assert grid.getRowId == "params.data.id"
    assert table_row({"rowId": "a|1#2", "colId": "why"}, rows) == rows[1]
    for bad in (None, {"rowId": 5}, {"rowId": "nope"}, {"rowIndex": 0}, "a|1"):
        assert table_row(bad, rows) is None
    assert table_row({"rowId": "a|1"}, "not rows") is None


def test_columns_keep_their_longest_words_whole() -> None:
    df = pd.DataFrame({"ts": ["2026-01-05 10:00:00"], "n": [3], "host": ["h100-0004"]})
    _, grid = _grid(table("w-table", df, {"ts": "Start (UTC)", "n": "Evidence", "host": "Host"}))
    widths = {c["field"]: c["minWidth"] for c in grid.columnDefs}
    assert widths["ts"] > widths["host"] > 60  # a date, then a host, each on one line
    assert widths["n"] > 70  # the header "Evidence" (and its sort arrow), not the digit "3"


def test_a_big_table_scrolls_and_a_small_one_is_as_tall_as_its_rows() -> None:
    small = _grid(table("s-table", pd.DataFrame({"a": range(SMALL_ROWS)})))[1]
    big = _grid(table("b-table", pd.DataFrame({"a": range(10_000)})))[1]
    assert small.dashGridOptions["domLayout"] == "autoHeight"
    assert "domLayout" not in big.dashGridOptions and big.style["height"]
    assert len(big.rowData) == 10_000
