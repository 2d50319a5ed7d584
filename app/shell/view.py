"""The shared view (the run and the time range), kept in step with the URL and the pickers.

The view lives in one ``dcc.Store`` (``view``): the run and the time range, either a preset
relative to the newest data or an absolute window set by zooming any time chart. It is mirrored
in the URL fragment (``#run=…&range=24h`` or ``#run=…&from=…&to=…``) so a link reproduces the
view and the browser's back/forward buttons move through earlier views. (The fragment, not the
query string: Dash Pages re-renders the whole page when the query changes.) A link that says the
view in its query string instead (``/failures?run=X``) opens that view; the fragment written
then says it, and wins over the query string from there on. Pages only read it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import dash
from dash import Input, Output, State, ctx, no_update

from app.data.view import (
    MAX_ID,
    PRESETS,
    clean_view,
    default_run,
    fragment,
    parse_time,
    run_ids,
    run_options,
)

VIEW_KEYS = ("run", "range", "from", "to", "node")  # what a URL may say of the view


def _query(text: Any) -> dict[str, str]:
    text = text if isinstance(text, str) else ""  # a crafted POST may send anything
    return {k: v[0] for k, v in parse_qs(text.lstrip("#?")).items() if v}


def view_from_url(
    url_hash: str | None, runs: list[str], search: str | None = None
) -> dict[str, Any]:
    """The view a URL fragment names, else (a fragment naming none of it) the query string
    (``/failures?run=X``, as a person types a link); the newest trained run and the whole range
    for what it does not name (or names wrongly)."""
    q = _query(url_hash)
    if not any(k in q for k in VIEW_KEYS):
        q = _query(search)
    run = q.get("run") if q.get("run") in runs else default_run(runs)
    node = q.get("node") if 0 < len(q.get("node") or "") <= MAX_ID else None
    start, end = parse_time(q.get("from")), parse_time(q.get("to"))
    if start is not None and end is not None and start < end:
        return {
            "run": run,
            "range": "custom",
            "start": start.isoformat(),
            "end": end.isoformat(),
            "node": node,
        }
    preset = q.get("range") if q.get("range") in PRESETS else "all"
    return {"run": run, "range": preset, "start": None, "end": None, "node": node}


def same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two views that show the same thing (one may spell an unset field as None)."""
    return a is not None and b is not None and clean_view(a) == clean_view(b)


def register(app: dash.Dash) -> None:
    @app.callback(
        Output("view", "data"),
        Output("url", "hash"),
        Output("run-select", "value"),
        Output("run-select", "options"),
        Output("range-select", "value"),
        Input("url", "hash"),
        Input("url", "search"),
        Input("run-select", "value"),
        Input("range-select", "value"),
        Input("runs-all", "value"),
        State("view", "data"),
        State("run-select", "options"),
    )
    def _sync(url_hash, search, run, preset, all_jobs, view, options):  # type: ignore[no-untyped-def]
        # Neither the live tick nor chart relayouts are inputs here: Dash drops the reply of a
        # callback that is triggered again while in flight, so a tick, or a relayout event a
        # chart emits on its own (autosize), landing during a change would silently undo it.
        # Zooms reach the view through the URL (``app.shell.zoom``), as every other change does.
        # Dash merges the triggers of calls queued together (a link opened while the "All jobs"
        # switch's call waits): every input that changed counts, a link's first.
        trigs = {str(i) for i in ctx.triggered_prop_ids.values()}
        view = clean_view(view) if view is not None else None  # as a crafted POST may send
        runs = run_ids()  # a link may name any run, listed in the picker or not
        shown = run if "run-select" in trigs else (view or {}).get("run")
        opts = run_options(all_jobs is True, keep=shown)
        opts_out = opts if opts != options else no_update
        if trigs == {"runs-all"} and view is not None:  # the list only: the view stays
            if opts_out is no_update:
                raise dash.exceptions.PreventUpdate
            return no_update, no_update, no_update, opts_out, no_update
        if "url" in trigs or view is None:
            new = view_from_url(url_hash, runs, search)
            if same(new, view):  # the URL we just wrote: nothing changed, nothing to redraw
                if opts_out is no_update:
                    raise dash.exceptions.PreventUpdate
                return no_update, no_update, no_update, opts_out, no_update
            opts = run_options(all_jobs is True, keep=new["run"])  # the linked run is listed
            return new, no_update, new["run"], opts, new["range"]
        new = dict(view)
        if "run-select" in trigs and run in runs:  # a stale or cleared value: the view's run
            new["run"] = run
        if "range-select" in trigs and preset != "custom":  # "custom" is set by a zoom only
            new |= {"range": preset, "start": None, "end": None}
        if new.get("run") not in runs:
            new["run"] = default_run(runs)
        if same(new, view):  # the pickers show the view again (a stale run, "custom" picked)
            if run == new["run"] and preset == new["range"] and opts_out is no_update:
                raise dash.exceptions.PreventUpdate
            return no_update, no_update, new["run"], opts_out, new["range"]
        return new, fragment(new), new["run"], opts_out, new["range"]
