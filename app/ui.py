"""Small building blocks every page uses: time charts wired to the shared time range, KPI
cards, exportable tables, and a guard that turns a failing callback into a visible message."""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable
from typing import Any

import dash_bootstrap_components as dbc
import pandas as pd
from dash import dash_table, dcc, html
from dash.exceptions import PreventUpdate

from app import figures

log = logging.getLogger("factoryfloor.app")

TIMECHART = "timechart"  # pattern-matching type of charts whose zoom narrows the shared range


def graph_config(name: str) -> dict[str, Any]:
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": f"factoryfloor-{name}", "scale": 2},
    }


def time_graph(name: str, **style: Any) -> html.Div:
    """A chart with a time x-axis: zooming it narrows the time range on every page. The outer
    ``id`` (``name``) is stable for tests and CSS; the graph's own id is pattern-matched."""
    return html.Div(
        dcc.Graph(id={"type": TIMECHART, "id": name}, config=graph_config(name), style=style),
        id=name,
    )


def graph(name: str) -> html.Div:
    return html.Div(dcc.Graph(id={"type": "chart", "id": name}, config=graph_config(name)), id=name)


def card(title: str, value: str, sub: str = "", id_: str = "", colour: str = "") -> dbc.Col:
    body = dbc.CardBody(
        [
            html.Div(title, className="text-body-secondary small"),
            html.Div(value, className=f"fs-4 fw-semibold {colour}", **({"id": id_} if id_ else {})),
            html.Div(sub, className="small text-body-secondary"),
        ]
    )
    return dbc.Col(dbc.Card(body, class_name="h-100"), xs=6, md=4, xl=2)


def table(
    id_: str,
    df: pd.DataFrame,
    columns: dict[str, str] | None = None,
    page_size: int = 10,
    **kw: Any,
) -> dash_table.DataTable:
    """An exportable (CSV), sortable table. ``columns`` maps frame column -> header with unit.
    Cell values are rendered as text by DataTable, so hostile strings stay inert."""
    columns = columns or {c: c for c in df.columns}
    return dash_table.DataTable(
        id=id_,
        data=df[list(columns)].to_dict("records") if not df.empty else [],
        columns=[{"name": h, "id": c} for c, h in columns.items()],
        page_size=page_size,
        sort_action="native",
        export_format="csv",
        export_headers="display",
        style_as_list_view=True,
        style_table={"overflowX": "auto"},
        style_header={
            "fontWeight": "600",
            "backgroundColor": "var(--bs-tertiary-bg)",
            "color": "var(--bs-body-color)",
        },
        style_cell={
            "backgroundColor": "var(--bs-body-bg)",
            "color": "var(--bs-body-color)",
            "fontSize": "0.85rem",
            "textAlign": "left",
            "padding": "4px 8px",
            "maxWidth": "28rem",
            "overflow": "hidden",
            "textOverflow": "ellipsis",
        },
        **kw,
    )


def guarded(*fallback_kinds: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a page callback: on an unexpected error, log the traceback and return, for each
    output, a visible error (a "figure" gets an error figure, anything else an alert)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except PreventUpdate:
                raise
            except Exception as exc:  # shown to the user instead of a blank page
                log.error(  # bounded: a crafted input may be 100 KB long
                    "callback %s failed:\n%s", fn.__name__, traceback.format_exc()[-4000:]
                )
                msg = f"Could not load this view: {type(exc).__name__}: {exc}"[:300]
                out = [
                    figures.empty("Error", msg)
                    if kind == "figure"
                    else dbc.Alert(msg, color="danger", class_name="small")
                    for kind in fallback_kinds
                ]
                return out[0] if len(out) == 1 else tuple(out)

        return wrapper

    return deco
