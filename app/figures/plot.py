"""Figures as plain data: the few plotly.py calls the builders make, on dicts.

plotly.py's ``graph_objects`` validate every property on every assignment, parse each keyword
into a property path and deep-copy the figure to serialise it: at fleet scale that was most of
a callback's time once its queries were cached (100-280 ms a reply; a py-spy profile of the
server put 60-70 % of it in plotly's object machinery). The builders draw with a handful of
trace types and layout calls, and their output is fixed by tests, so they build the figure's
JSON form directly: ``Figure`` keeps ``data`` (a list of trace dicts) and ``layout`` (a dict)
and offers the calls they use with plotly's semantics (nested keywords ``title_font_color``,
compound properties merged on update, an axis ``title`` given as text). Values are made
JSON-ready when a trace or layout is set (pandas objects become arrays, timestamps datetimes),
and numeric arrays are sent as plotly's typed arrays, as plotly.py does.

Nothing here validates a property name: the tests do (``check``; and every figure a server
sends is checked when ``FACTORYFLOOR_CHECK_FIGURES=1``, as the test suite runs it, in
``app.ui``), through plotly.py's own validators, so a misspelt property still fails a test
instead of being ignored by the browser.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from _plotly_utils.utils import is_skipped_key, to_typed_array_spec

# the property names of the layout and of the traces drawn here that contain an underscore
# (plotly.py's list for them): not split into a path
_UNSPLIT = frozenset({"paper_bgcolor", "plot_bgcolor", "error_x", "error_y", "copy_ystyle"})
# values JSON-ready as they are (orjson's own types)
JSON_LEAVES = frozenset({str, int, float, bool, type(None), datetime})


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: pandas objects as numpy arrays (object arrays and lists
    element by element), timestamps as ``datetime``, missing values as ``None``."""
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if isinstance(value, pd.Series | pd.Index | pd.DataFrame):
        value = value.to_numpy()
    if isinstance(value, np.ndarray):  # numbers and times stay arrays; the rest, lists
        return plain(value.tolist()) if value.dtype.kind in "OUS" else value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if all(type(v) in JSON_LEAVES for v in value):  # most lists: numbers or text already
            return list(value)
        return [plain(v) for v in value]
    if value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, np.datetime64):
        return None if np.isnat(value) else pd.Timestamp(value).to_pydatetime()
    if isinstance(value, np.generic):
        return value.item()
    return value  # datetime, and anything orjson or plotly's encoder knows


def _nest(key: str, value: Any) -> tuple[str, Any]:
    """A plotly keyword (``title_font_color``) as its top-level key and nested value."""
    if "_" not in key or key in _UNSPLIT:
        return key, value
    head, *rest = key.split("_")
    for part in reversed(rest):
        value = {part: value}
    return head, value


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """plotly's update: compound properties (dicts) merge, anything else is replaced, None
    unsets; a ``title`` given as text is the title's ``text``; keywords with ``_`` are
    paths."""
    for raw_key, raw in update.items():
        key, value = _nest(raw_key, raw)
        if value is None:  # unset, as plotly.py does
            into.pop(key, None)
            continue
        if key == "title" and isinstance(value, str):
            value = {"text": value}
        if isinstance(value, dict):
            inner = into.get(key)
            if not isinstance(inner, dict):
                inner = into[key] = {}
            _merge(inner, value)
        else:
            into[key] = plain(value)


def trace(kind: str, **props: Any) -> dict[str, Any]:
    """A trace of type ``kind`` (``scatter``, ``bar``, ``heatmap``)."""
    out: dict[str, Any] = {"type": kind}
    _merge(out, props)
    return out


Scatter = functools.partial(trace, "scatter")
Bar = functools.partial(trace, "bar")
Heatmap = functools.partial(trace, "heatmap")

_VLINE_ANCHOR = {"left": "right", "right": "left"}


class Figure:
    """A plotly figure as data: ``data`` (trace dicts) and ``layout`` (a dict)."""

    __slots__ = ("data", "layout")

    def __init__(self, layout: dict[str, Any] | None = None) -> None:
        self.data: list[dict[str, Any]] = []
        self.layout: dict[str, Any] = dict(layout or {})

    def add_trace(self, trace_: dict[str, Any]) -> Figure:
        self.data.append(trace_)
        return self

    def update_layout(self, props: dict[str, Any] | None = None, **kw: Any) -> Figure:
        _merge(self.layout, (props or {}) | kw)
        return self

    def update_xaxes(self, **kw: Any) -> Figure:
        return self.update_layout(xaxis=kw)

    def update_yaxes(self, **kw: Any) -> Figure:
        return self.update_layout(yaxis=kw)

    def add_annotation(self, **kw: Any) -> Figure:
        note: dict[str, Any] = {}
        _merge(note, kw)
        self.layout.setdefault("annotations", []).append(note)
        return self

    def add_vline(
        self,
        x: float,
        line: dict[str, Any] | None = None,
        annotation_text: str = "",
        annotation_position: str = "top right",
    ) -> Figure:
        """A vertical line across the plot at ``x``, labelled at its top (plotly's shape and
        annotation in the y axis' domain)."""
        shape = {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1}
        self.layout.setdefault("shapes", []).append(
            shape | {"yref": "y domain", "line": dict(line or {})}
        )
        if annotation_text:
            side = annotation_position.split()[-1]
            self.add_annotation(
                text=annotation_text,
                showarrow=False,
                x=x,
                xref="x",
                y=1,
                yref="y domain",
                xanchor=_VLINE_ANCHOR.get(side, "center"),
                yanchor="top",
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The figure as plotly's JSON form, arrays as arrays (``go.Figure(fig.to_dict())``
        gives plotly.py's object, validated)."""
        return {"data": self.data, "layout": self.layout}

    def to_plotly_json(self) -> dict[str, Any]:
        """What is sent to the browser: numeric arrays as plotly.js typed arrays."""
        # the template is plotly's own, shared by every figure and holds no array: as it is
        layout = {k: v if k == "template" else _sent(v, k) for k, v in self.layout.items()}
        return {"data": _sent(self.data), "layout": layout}


def _sent(value: Any, key: str | None = "") -> Any:
    """``value`` with its dicts and lists copied and the numeric arrays that are a property's
    value (``key``; None for a list's items) as plotly.js typed arrays: plotly.py's
    ``convert_to_base64``, without walking the template."""
    if isinstance(value, dict):
        return {k: _sent(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if all(type(v) in JSON_LEAVES for v in value):  # text, numbers: nothing to convert
            return list(value)
        return [_sent(v, None) for v in value]
    if key is not None and isinstance(value, np.ndarray) and not is_skipped_key(key):
        return to_typed_array_spec(value)
    return value


def check(fig: Figure | dict[str, Any]) -> Any:
    """``fig`` through plotly.py's validators: a ``plotly.graph_objects.Figure`` (for tests to
    read as objects), or ValueError naming the property plotly does not know, or a trace type
    the browser's plotly.js bundle lacks."""
    import plotly.graph_objects as go

    from app import plotlyjs

    as_dict = fig.to_dict() if isinstance(fig, Figure) else fig
    plotlyjs.check_traces(t.get("type", "scatter") for t in as_dict.get("data", []))
    return go.Figure(as_dict)
