"""Small building blocks every page uses: the inputs every page callback shares, time charts
wired to the shared time range, KPI cards, exportable tables, and a guard that turns a failing
callback into a visible message."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import numpy as np
import orjson
import pandas as pd
from dash import Input, dcc, html
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


def lazy(name: str, part: Component) -> html.Div:
    """A part of a page far below its first screen, drawn when it is scrolled near (as
    Grafana draws a dashboard's panels): ``assets/37-lazy.js`` watches it and sets its store
    ``{name}-seen`` once it comes within a screen's height of the view. Its callbacks take
    ``seen_input(name)`` last and answer nothing before (``unseen``). The GPUs page's three
    bottom cards cost about 0.4 s of a 1.4 s first load on a 2-core machine, drawn where
    nobody looks yet."""
    return html.Div(
        [dcc.Store(id=f"{name}-seen"), part], className="ff-lazy", **{"data-seen": f"{name}-seen"}
    )


def seen_input(name: str) -> Input:
    """The input of a ``lazy`` part's callbacks: whether the part has been scrolled near."""
    return Input(f"{name}-seen", "data")


def unseen(seen: Any) -> None:
    """Answer nothing while a ``lazy`` part has not been scrolled near: the view changing or
    the live tick before then draws nothing nobody sees."""
    if seen is not True:
        raise PreventUpdate


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


RowId = str | list[str] | None  # the column(s) of a frame that name a row


def _row_ids(df: pd.DataFrame, row_id: str | list[str]) -> list[str]:
    """One string per row from its ``row_id`` column(s), unique (a repeat gets "#2", "#3"):
    the grid keeps a row's place, selection and sort through a refresh by it."""
    keys = [row_id] if isinstance(row_id, str) else row_id
    parts = zip(*(df[k].astype(str).tolist() for k in keys), strict=True)
    ids = ["|".join(p) for p in parts]
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
        out.append(i if seen[i] == 1 else f"{i}#{seen[i]}")
    return out


TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # a table's times (not ISO's "T" and fractions)


def _rows(df: pd.DataFrame, columns: dict[str, str], row_id: RowId) -> list[dict[str, Any]]:
    if df.empty:
        return []
    # column by column (to_dict("records") iterates pandas' Arrow strings cell by cell: ~5x),
    # from the frame's own columns (selecting them first copies every one); times as every
    # page writes them (not ISO's "T" and fractions)
    cols = {
        c: (df[c].dt.strftime(TIME_FORMAT) if df[c].dtype.kind == "M" else df[c]).tolist()
        for c in columns
        if c in df.columns
    }
    if row_id:
        cols["id"] = _row_ids(df, row_id)
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


SMALL_ROWS = 15  # up to this many rows a table is as tall as its rows; past it, it scrolls
ROW_BUFFER = 3
_SPACE = re.compile(r"\s")
LONGEST_WORD = 32  # characters kept whole in a cell: a longer word (a path) may break
# "–" for a value that is not known (null: NaN, NaT, None reach the browser as null)
UNKNOWN = {"function": "params.value == null ? '–' : params.value"}


# Widths of characters in the tables' 0.8rem (12.8 px) type, as Chromium draws them with the
# fonts of a Linux machine (wider than most): a class of characters per width.
_CHAR_PX = [
    (4.6, set("'ijlIJ,. /:;\\|f-()[]t!r")),
    (6.8, set('sz*_`?c"')),
    (7.9, set("LFPTYEkvxy")),
    (8.2, set("0123456789$abdeghnopqu{}S")),
    (11.0, set("mwMW%@#+<=>^~OQGD&")),
]


_PX = {c: px for px, chars in _CHAR_PX for c in chars}


def _text_px(word: str) -> float:
    """About how wide ``word`` is in a table's cell or header (others: 7.9, capitals 9.0)."""
    return sum(_PX.get(c) or (9.0 if c.isupper() else 7.9) for c in word)


# A name in capitals joined by underscores (an XID's mnemonic: XID 79's has 41 characters) is
# kept whole up to this length: broken mid-word it read as two names (#57).
_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
LONGEST_NAME = 48


def _whole(word: str) -> bool:
    """Whether a cell keeps ``word`` on one line (a longer one, a path, may break)."""
    n = len(word)
    return n <= LONGEST_WORD or (n <= LONGEST_NAME and _NAME.fullmatch(word) is not None)


def _longest_px(texts: Iterable[str]) -> float:
    """The widest word kept whole (``_whole``) of ``texts``."""
    words = {w for t in set(texts) for w in t.split() if _whole(w)}
    longest = sorted(words, key=len)[-20:]  # the widest is among the longest
    return max((_text_px(w) for w in longest), default=0.0)


def _min_width(texts: list[str], header: str, header_icons_px: int) -> int:
    """A column's minimum width (px) from its known values as text: its longest word, and its
    header's, stay whole. A browser wrapping a narrow cell breaks words anywhere (AG Grid's
    wrapped cells may), which splits a date ("2026-" / "01-05"), a host ("h100-" / "0004")
    or a header ("Categ" / "ory"); the old DataTable never did, and neither does this table."""
    cell = _longest_px(texts)
    head = _longest_px([header]) + header_icons_px
    return round(max(cell, head, 24.0)) + 12  # + the cell's padding and border


def _flex(texts: list[str], numeric: bool, header: str) -> int:
    """A column's share of the width: long texts (a reason, a log line) get more than a
    number, so they wrap onto fewer lines."""
    if not texts or numeric:
        return 1
    typical = float(np.median([len(t) for t in texts]))
    return int(min(max(typical, len(header) / 2) // 12 + 1, 4))


def _column(df: pd.DataFrame, col: str, header: str, hidden: bool, icons_px: int) -> dict[str, Any]:
    values = df[col] if col in df.columns else pd.Series(dtype=object)
    numeric = values.dtype.kind in "biuf"
    if values.dtype.kind == "M":  # every time is written alike (``_rows``): one is enough
        texts = [f"{v:{TIME_FORMAT}}" for v in values.dropna().head(1).tolist()]
    elif numeric:  # (numpy's own NaN test: pandas' dropna costs more than the rest)
        a = values.to_numpy()
        texts = [str(v) for v in (a[~np.isnan(a)] if a.dtype.kind == "f" else a).tolist()]
    else:
        texts = [str(v) for v in values.dropna().tolist()]  # one pass, width and flex
    out: dict[str, Any] = {
        "field": col,
        "headerName": header,
        "filter": "agNumberColumnFilter" if numeric else "agTextColumnFilter",
        "flex": _flex(texts, numeric, header),
        "minWidth": _min_width(texts, header, icons_px),
        "valueFormatter": UNKNOWN,
    }
    if not numeric and _wraps(texts):
        # Only a column that can wrap sizes its rows: AG Grid measures every cell of an
        # auto-height column as it is drawn (a forced style pass each), 0.4 s of a page's
        # 1.4 s on /failures when every column did.
        out |= {"wrapText": True, "autoHeight": True}
    if hidden:
        out["hide"] = True
    return out


def _wraps(texts: list[str]) -> bool:
    """Whether a cell of these texts can take more than one line: one with a space in it (a
    reason, a time), or a word longer than ``_min_width`` keeps whole (a path)."""
    return any(len(t) > LONGEST_WORD or _SPACE.search(t) for t in set(texts))


def table(
    id_: str,
    df: pd.DataFrame,
    columns: dict[str, str] | None = None,
    row_id: RowId = None,
    hidden: list[str] | tuple[str, ...] = (),
    export_hidden: bool = False,
    clickable: bool = False,
) -> html.Div:
    """An exportable (CSV), sortable, filterable table on AG Grid. ``columns`` maps frame
    column -> header with unit; ``hidden`` columns are not shown (but exported with
    ``export_hidden``). Cells are rendered as text (no HTML renderer), so hostile strings stay
    inert. Each column has a filter, in a row under the headers. A table of more than
    ``SMALL_ROWS`` rows has a fixed height and scrolls (AG Grid draws only the rows in view);
    a smaller one is as tall as its rows.

    The user's sort, filter and selected row survive the live refresh and a change of view (each
    draws a new grid) for the browser session. With ``row_id`` (a column of ``df``, or several)
    each row carries it as its id (``rowData[i]["id"]``), so a click names the row
    (``cellClicked["rowId"]``, see ``app.data.view.table_row``) and a selection is kept by it;
    ``clickable`` tables highlight the clicked row.

    Cells wrap at spaces in the page's own font and nothing is cut with an ellipsis; columns
    share the card's width: on a 1366 px laptop every column of every table stays readable
    inside its card (tests/ui/test_fit.py)."""
    columns = columns or {c: c for c in df.columns}
    big = len(df) > SMALL_ROWS
    icons_px = 20  # the sort arrow (the filters are in a row of their own, not in the header)
    options: dict[str, Any] = {
        "suppressFieldDotNotation": True,  # a field named "a.b" is a column, not a path
        "ensureDomOrder": True,
        "enableCellTextSelection": True,  # copy a host name out of a cell
        "animateRows": False,
        "suppressCellFocus": not clickable,
    }
    if not big:
        options["domLayout"] = "autoHeight"
    else:
        # rows drawn beyond the scrolled-to ones (AG Grid's default 10): each drawn row's
        # wrapping cells are measured one by one as the table first appears
        options["rowBuffer"] = ROW_BUFFER
    if clickable:
        options["rowSelection"] = {
            "mode": "singleRow", "checkboxes": False, "enableClickSelection": True
        }  # fmt: skip
    grid = dag.AgGrid(
        id=id_,
        rowData=_rows(df, columns, row_id),
        columnDefs=[_column(df, c, h, c in hidden, icons_px) for c, h in columns.items()],
        defaultColDef={
            "sortable": True,
            "resizable": True,
            "wrapHeaderText": True,
            "autoHeaderHeight": True,
            "floatingFilter": True,
            "suppressHeaderMenuButton": True,  # its pin/autosize would only cost header room
        },
        **({"getRowId": "params.data.id"} if row_id else {}),
        dashGridOptions=options,
        csvExportParams={
            "fileName": f"factoryfloor-{export_name(id_)}.csv",
            # formulas neutralised, as every CSV the product writes (telemetry.csv_safe)
            "processCellCallback": {"function": "ffCsvCell(params)"},
        },
        className="ff-grid",
        style={"height": "32rem" if big else None, "width": "100%"},
        # A refresh draws a new grid: the filter and selection come back through Dash's
        # persistence, the sort through assets/35-grid-sort.js.
        persistence=True,
        persistence_type="session",
        persisted_props=["filterModel", "selectedRows"],
        eventListeners={"sortChanged": [f"ffSortSave(params, {json.dumps(id_)})"]},
    )
    export = html.Button("Export", className="export mb-1", type="button")
    attrs = {"data-export": export_name(id_), "data-grid": id_}
    if export_hidden:
        attrs["data-export-all"] = "true"
    return html.Div([export, grid], id=f"{id_}-box", className="ff-table", **attrs)


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
    "figure" gets an error figure, a "style" the layout's, anything else an alert). Errors are
    not remembered."""

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
                    else {}  # a style: the component as laid out
                    if kind == "style"
                    else dbc.Alert(msg, color="danger", class_name="small")
                    for kind in fallback_kinds
                ]
                return out[0] if len(out) == 1 else tuple(out)

        return wrapper

    return deco
