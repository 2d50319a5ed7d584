"""The raw log around an evidence line, on the incident view: each line's "raw log" link
(``/incident?at=...&log=N``, so a link to it can be shared) opens a dialog with its
``file:line``, the 20 lines either side (the evidence line marked) and a search over them.
The file is the one the store says the line came from (``app.data.incident.raw_log``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash_bootstrap_components as dbc
from dash import Input, Output, callback, dcc, html, no_update

from app.data import incident as data
from app.data.view import run_of
from app.ui import guarded

MAX_INDEX = 100_000  # an evidence index in the URL; anything else is not one
MAX_SEARCH = 200  # characters of a search


def index_of(value: Any) -> int | None:
    """The evidence index a URL's ``log`` names, or None."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and int(text) < MAX_INDEX else None


def link(at: str, index: int, fragment: str) -> dcc.Link:
    return dcc.Link("raw log", href="/incident?" + urlencode({"at": at, "log": index}) + fragment,
                    className="small ms-2 inc-raw-link")  # fmt: skip


def dialog(index: Any) -> html.Div:
    """The dialog (closed until a ``log`` is named) and what it reads."""
    return html.Div(
        [
            dcc.Store(id="inc-log", data=index_of(index)),
            dcc.Store(id="inc-log-lines"),
            dbc.Modal(
                [
                    dbc.ModalHeader(dbc.ModalTitle("Raw log", id="inc-log-title")),
                    dbc.ModalBody(
                        [
                            html.Div(id="inc-log-note", className="small mb-2", role="status"),
                            dbc.Input(id="inc-log-search", type="search", size="sm",
                                      placeholder="Search these lines", debounce=False,
                                      maxLength=MAX_SEARCH, class_name="mb-2"),  # fmt: skip
                            html.Div(id="inc-log-count", className="small text-body-secondary"),
                            html.Div(id="inc-log-body", className="font-monospace small"),
                        ]
                    ),
                ],
                id="inc-log-modal",
                size="xl",
                scrollable=True,
                is_open=False,
            ),
        ]
    )


@callback(
    Output("inc-log-modal", "is_open"),
    Output("inc-log-title", "children"),
    Output("inc-log-note", "children"),
    Output("inc-log-lines", "data"),
    Input("view", "data"),
    Input("inc-at", "data"),
    Input("inc-log", "data"),
)
@guarded("alert", "alert", "alert", "alert", remember=False)  # the file may change unwritten
def _open(view: dict[str, Any] | None, at: Any, index: Any):  # type: ignore[no-untyped-def]
    i = index_of(index)
    if i is None:
        return False, no_update, no_update, None
    got = data.raw_log(run_of(view), at, i)
    title = got["origin"] or "Raw log"
    note = got["note"] or (f"{got['path']}, lines {got['lines'][0][0]:,}-{got['lines'][-1][0]:,}"
                           if got["lines"] else "")  # fmt: skip
    return True, title, note, {"line": got["line"], "lines": got["lines"]}


@callback(
    Output("inc-log-body", "children"),
    Output("inc-log-count", "children"),
    Input("inc-log-lines", "data"),
    Input("inc-log-search", "value"),
)
@guarded("alert", "alert", remember=False)
def _show(held: Any, search: Any):  # type: ignore[no-untyped-def]
    rows = held.get("lines") if isinstance(held, dict) else None
    if not isinstance(rows, list):
        return [], ""
    want = search.strip()[:MAX_SEARCH].lower() if isinstance(search, str) else ""
    shown = [r for r in rows if not want or want in str(r[1]).lower()]
    count = f"{len(shown)} of {len(rows)} lines match" if want else f"{len(rows)} lines"
    return [_line(n, t, n == held.get("line"), want) for n, t in shown], count


def _line(number: int, text: str, here: bool, want: str) -> html.Div:
    return html.Div(
        [html.Span(f"{number:>7} ", className="text-body-secondary"), *_marked(str(text), want)],
        className="inc-log-line" + (" inc-log-here bg-warning-subtle fw-semibold" if here else ""),
        style={"whiteSpace": "pre-wrap", "wordBreak": "break-all"},
    )


def _marked(text: str, want: str) -> list[Any]:
    """``text`` with each match of ``want`` (lower case) in a ``mark``."""
    if not want:
        return [text]
    out: list[Any] = []
    low, at = text.lower(), 0
    while (hit := low.find(want, at)) >= 0:
        out += [text[at:hit], html.Mark(text[hit : hit + len(want)])]
        at = hit + len(want)
    return [*out, text[at:]]
