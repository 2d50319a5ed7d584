"""Small building blocks every page uses: the inputs every page callback shares, time charts
wired to the shared time range, KPI cards, exportable tables, and a guard that turns a failing
callback into a visible message."""

from __future__ import annotations

import functools
import inspect
import logging
import traceback
from collections.abc import Callable
from typing import Any

import dash_bootstrap_components as dbc
import numpy as np
import orjson
import pandas as pd
from dash import Input, dash_table, dcc, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app import figures
from app.data.services import on_bind, version
from app.figures import plot
from app.figures.plot import Figure
from telemetry import env
from telemetry.store.cache import ResultCache

log = logging.getLogger("factoryfloor.app")

TIMECHART = "timechart"  # pattern-matching type of charts whose zoom narrows the shared range


def view_inputs(themed: bool = True) -> list[Input]:
    """The inputs of a page callback that redraws with the shared view: the view (run, range,
    node), the live tick and, for callbacks that draw figures (``themed``), the theme. The
    callback takes them first, in this order: ``(view, _n, theme, ...)``; the tick's parameter
    starts with "_" so that it is not part of the remembered reply's key (see ``guarded``)."""
    inputs = [Input("view", "data"), Input("refresh", "n_intervals")]
    return [*inputs, Input("theme-store", "data")] if themed else inputs


def graph_config(name: str) -> dict[str, Any]:
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": f"factoryfloor-{name}", "scale": 2},
    }


def time_graph(name: str, **style: Any) -> html.Div:
    """A chart with a time x-axis: zooming it narrows the time range on every page. The outer
    ``id`` (``name``) is stable for tests and CSS; the graph's own id is pattern-matched."""
    return html.Div(
        dcc.Graph(
            id={"type": TIMECHART, "id": name},
            figure=figures.PLACEHOLDER,
            config=graph_config(name),
            style=style,
        ),
        id=name,
    )


def operator_token_input(id_: str) -> dbc.Input:
    """The operator token field of a form that writes (corrections, silences): masked, never
    offered to the browser's autofill."""
    return dbc.Input(
        id=id_, type="password", placeholder="Operator token", size="sm", autocomplete="off"
    )


def graph(name: str) -> html.Div:
    chart = dcc.Graph(
        id={"type": "chart", "id": name}, figure=figures.PLACEHOLDER, config=graph_config(name)
    )
    return html.Div(chart, id=name)


def card(title: str, value: str, sub: str = "", id_: str = "", colour: str = "") -> dbc.Col:
    body = dbc.CardBody(
        [
            html.Div(title, className="text-body-secondary small"),
            html.Div(value, className=f"fs-4 fw-semibold {colour}", **({"id": id_} if id_ else {})),
            html.Div(sub, className="small text-body-secondary"),
        ]
    )
    return dbc.Col(dbc.Card(body, class_name="h-100"), xs=6, md=4, xl=2)


def _rows(df: pd.DataFrame, columns: dict[str, str], row_id: str | None) -> list[dict[str, Any]]:
    if df.empty:
        return []
    shown = df[list(columns)]
    stamps = [c for c in shown.columns if pd.api.types.is_datetime64_any_dtype(shown[c])]
    if stamps:  # as every page writes a time (DataTable would show ISO's "T" and fractions)
        shown = shown.assign(**{c: shown[c].dt.strftime("%Y-%m-%d %H:%M:%S") for c in stamps})
    # column by column (to_dict("records") iterates pandas' Arrow strings cell by cell: ~5x)
    cols = {c: shown[c].tolist() for c in shown.columns}
    if row_id:
        cols["id"] = df[row_id].tolist()
    return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]


# What each table's CSV export is called (``factoryfloor-<name>-<run>.csv``, named in the
# browser by assets/30-export.js); a table not listed is named after its id.
EXPORT_NAMES = {
    "ov-hot-table": "overview-hottest-gpus",
    "ov-targets-table": "overview-sources-down",
    "tr-spike-table": "training-loss-spikes",
    "gpu-outlier-table": "gpus-outliers",
    "fail-int-table": "failures-interruptions",
    "fail-tax-table": "failures-taxonomy",
    "fail-xid-table": "failures-xids",
    "fail-lemon-table": "failures-node-ranking",
    "ck-tiers-table": "checkpoints-tiers",
    "ck-restores-table": "checkpoints-restores",
}


def export_name(id_: str) -> str:
    return EXPORT_NAMES.get(id_) or id_.removesuffix("-table")


def _unbroken(df: pd.DataFrame, columns: dict[str, str], hidden: list[str]) -> list[dict[str, Any]]:
    """Per column, a minimum width that keeps its hyphenated words whole: a browser breaks a
    wrapped cell after a hyphen, which splits a date ("2026-" / "01-05") or a host name
    ("h100-" / "0004") over two lines. Words up to 16 characters are kept whole."""
    out = []
    for col in columns:
        if col not in df.columns or col in hidden or df.empty or df[col].dtype.kind in "biuf":
            continue
        joined = [len(w) for v in df[col].tolist() for w in str(v).split() if "-" in w]
        longest = min(max(joined), 16) if joined else 0
        if longest > 4:
            width = f"calc({longest}ch + 12px)"  # cells are border-box: the padding too
            out.append({"if": {"column_id": col}, "minWidth": width})
    return out


def table(
    id_: str,
    df: pd.DataFrame,
    columns: dict[str, str] | None = None,
    page_size: int = 10,
    row_id: str | None = None,
    **kw: Any,
) -> html.Div:
    """An exportable (CSV), sortable table. ``columns`` maps frame column -> header with unit.
    Cell values are rendered as text by DataTable, so hostile strings stay inert. The user's
    sort and filter persist (per browser session) when a refresh redraws the table, as every
    live tick does. (The page does not: a page past the end of new data would show nothing.)
    With ``row_id`` (a column of ``df``) each row carries it as its id, so a click on a cell
    names the row (``active_cell["row_id"]``).

    Cells wrap at spaces in the page's own (proportional) font and nothing is cut with an
    ellipsis: on a 1366 px laptop every column of every table stays readable inside its card
    (tests/ui/test_fit.py)."""
    columns = columns or {c: c for c in df.columns}
    kw = {
        "persistence": True,
        "persistence_type": "session",
        "persisted_props": ["sort_by", "filter_query"],
    } | kw
    cell = {
        "backgroundColor": "var(--bs-body-bg)",
        "color": "var(--bs-body-color)",
        "fontFamily": "var(--bs-body-font-family)",
        "fontSize": "0.8rem",
        "textAlign": "left",
        "padding": "3px 6px",
        "whiteSpace": "normal",
        "height": "auto",
        "minWidth": "2.5rem",
        "verticalAlign": "top",
    }
    dt = dash_table.DataTable(
        id=id_,
        # (a style for a hidden column stops DataTable from drawing at all)
        style_cell_conditional=_unbroken(df, columns, kw.get("hidden_columns") or []),
        data=_rows(df, columns, row_id),
        columns=[{"name": h, "id": c} for c, h in columns.items()],
        page_size=page_size,
        sort_action="native",
        export_format="csv",
        export_headers="display",
        style_as_list_view=True,
        style_table={"overflowX": "auto", "maxWidth": "100%"},
        style_header={
            "fontWeight": "600",
            "backgroundColor": "var(--bs-tertiary-bg)",
            "color": "var(--bs-body-color)",
            "verticalAlign": "bottom",
        },
        style_cell=cell,
        **kw,
    )
    return html.Div(dt, className="ff-table", **{"data-export": export_name(id_)})


# Replies of page callbacks, per store version. A page callback is a pure function of its
# inputs and the stored data, so fifty engineers looking at the same view between two writes
# cost one figure build, not fifty (building and serialising plotly figures, not the queries,
# is what saturates the server's one Python process under load). Parameters whose names start
# with "_" (the live tick) do not change the reply and are left out of the key. Replies are
# kept in their serialisable form (a figure as its dict), shared read-only between requests.
_REPLIES = ResultCache(max_bytes=64 * 2**20, sizeof=lambda value: _reply_bytes(value))
# FACTORYFLOOR_REPLY_CACHE=0 builds every reply (benchmarks/dashboard.py measures the build).
_MEMO = env.reply_cache()
_MAX_KEY = 4096  # a crafted request with a huge input is answered, not remembered
on_bind(_REPLIES.clear)  # replies of another store are not this store's


def _reply_bytes(value: Any) -> int:
    """About what a reply holds in memory (arrays by their bytes, everything else roughly)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + 100
    if isinstance(value, str | bytes):
        return len(value) + 50
    if isinstance(value, dict):
        return sum(_reply_bytes(v) + 50 for v in value.values()) + 100
    if isinstance(value, list | tuple):
        return sum(_reply_bytes(v) for v in value) + 8 * len(value) + 50
    if isinstance(value, Component):
        return _reply_bytes(value.to_plotly_json()["props"]) + 100
    return 32


def _frozen(value: Any) -> Any:
    """The reply as sent, built once here: figures and components as their JSON form, so
    that Dash serialises a reply in one pass of orjson (given a component, plotly's encoder
    falls back to walking the whole reply in Python, every figure's arrays included)."""
    if type(value) in plot.JSON_LEAVES:  # most of a reply: a table's cells
        return value
    if isinstance(value, Figure):
        if env.check_figures():  # the test suite: plotly.py's validators first
            plot.check(value)
        return value.to_plotly_json()
    if isinstance(value, Component):
        out = value.to_plotly_json()
        return out | {"props": {k: _frozen(v) for k, v in out["props"].items()}}
    if isinstance(value, tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, list):
        return [_frozen(v) for v in value]
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def _memo_key(fn: Callable[..., Any], names: list[str], args: tuple[Any, ...]) -> Any:
    if len(args) != len(names):
        return None
    read = {n: a for n, a in zip(names, args, strict=True) if not n.startswith("_")}
    try:
        text = orjson.dumps(read, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    if len(text) > _MAX_KEY:
        return None
    return (fn.__module__, fn.__qualname__, text)


def guarded(
    *fallback_kinds: str, remember: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a page callback: replies are remembered per store version (see ``_REPLIES``;
    ``remember=False`` for a reply that changes without a write, such as alert delivery); on
    an unexpected error, log the traceback and return, for each output, a visible error (a
    "figure" gets an error figure, anything else an alert). Errors are not remembered."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        names = list(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                key = None if kwargs or not (_MEMO and remember) else _memo_key(fn, names, args)
                if key is None:
                    return _frozen(fn(*args, **kwargs))
                at = version()
                return _REPLIES.get(key, at, lambda: _frozen(fn(*args)))
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
