"""The header's absolute time picker and "zoom to this run".

"Time…" opens a box with the view's window as two UTC times (From, To), filled from the view
whatever set it (a preset, a zoom, a link). "Apply" makes the typed window the view; "Zoom to
this run" makes it the run's own time (``app.data.view.time_range("all", run)``, whose span is
``telemetry.queries.run_time.run_bounds``: one definition). Both go through the URL, as every
change of the view does (``app.main``), so the window can be linked and back/forward work.
A window that is not one (unparsable, From not before To) is said in the box, and the view
stays as it was.
"""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, ctx, html, no_update

from app.data.view import clean_view, fragment, parse_time, time_range, view_range

SHOWN = "%Y-%m-%dT%H:%M:%S"  # what an <input type=datetime-local step=1> holds


def control() -> html.Div:
    """The "Time…" button and its box."""
    field = {"type": "datetime-local", "step": 1, "size": "sm"}
    box = dbc.Popover(
        dbc.PopoverBody(
            [
                dbc.Label("From (UTC)", html_for="tp-from", class_name="small mb-0"),
                dbc.Input(id="tp-from", **field),
                dbc.Label("To (UTC)", html_for="tp-to", class_name="small mb-0 mt-1"),
                dbc.Input(id="tp-to", **field),
                html.Div(
                    [
                        dbc.Button("Apply", id="tp-apply", size="sm", class_name="me-2"),
                        dbc.Button("Zoom to this run", id="tp-run", size="sm",
                                   color="secondary", outline=True),  # fmt: skip
                    ],
                    className="mt-2",
                ),
                html.Div(id="tp-msg", className="small text-danger mt-1", role="status"),
            ]
        ),
        target="tp-open",
        trigger="legacy",
        placement="bottom",
        id="tp-box",
    )
    return html.Div([dbc.Button("Time…", id="tp-open", size="sm", color="secondary",
                                outline=True, class_name="text-light"), box])  # fmt: skip


def _shown(view: Any) -> tuple[str, str] | None:
    tr = view_range(view)
    return None if tr is None else (f"{tr.start:{SHOWN}}", f"{tr.end:{SHOWN}}")


def register(app: dash.Dash) -> None:
    @app.callback(
        Output("tp-from", "value"),
        Output("tp-to", "value"),
        Input("view", "data"),
        State("tp-from", "value"),
        State("tp-to", "value"),
    )
    def _fill(view, typed_from, typed_to):  # type: ignore[no-untyped-def]
        """The view's window, whatever set it. A window the box already holds (the one just
        applied) is not written again: the reply may land after the user typed on, and would
        undo what they typed."""
        shown = _shown(view) if view is not None else None
        shown = shown if shown is not None else ("", "")
        if shown == (typed_from, typed_to):
            raise dash.exceptions.PreventUpdate
        return shown

    @app.callback(
        Output("url", "hash", allow_duplicate=True),
        Output("tp-msg", "children"),
        Input("tp-apply", "n_clicks"),
        Input("tp-run", "n_clicks"),
        State("tp-from", "value"),
        State("tp-to", "value"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    def _apply(_apply, _run, start, end, view):  # type: ignore[no-untyped-def]
        """The typed window, or the run's own time, as the view (through the URL)."""
        if view is None:
            raise dash.exceptions.PreventUpdate
        view = clean_view(view)
        if ctx.triggered_id == "tp-run":
            tr = time_range("all", view.get("run"))
            if tr is None:
                return no_update, "The store holds no data yet."
            t0, t1 = tr.start, tr.end
        else:
            t0, t1 = parse_time(start), parse_time(end)
            if t0 is None or t1 is None:
                return no_update, "Give From and To as dates and times (UTC)."
            if t0 >= t1:
                return no_update, "From must be before To."
        new = view | {"range": "custom", "start": t0.isoformat(), "end": t1.isoformat()}
        return fragment(new), ""
