"""A zoom (or a double-click reset) on any time chart becomes the view's window, by the URL.

Every chart reports a relayout as it is first drawn (``{"autosize": true}``): 3-9 per page
load. The browser passes on only those that name the x axis's range (``ffShell.zoomRelayouts``
in ``assets/15-shell.js``), so page loads make no request here; which of those is a zoom is
still ``zoom``'s call, on the server.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, ClientsideFunction, Input, Output, State

from app.data.view import clean_view, fragment, parse_time
from app.shell.view import same
from app.ui import TIMECHART


def zoom(relayout: dict[str, Any] | None) -> tuple[str, str] | None | bool:
    """(start, end) from a chart's relayoutData; True for a reset; None for anything else."""
    if not relayout or not isinstance(relayout, dict):
        return None
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        return str(relayout["xaxis.range[0]"]), str(relayout["xaxis.range[1]"])
    span = relayout.get("xaxis.range")
    if isinstance(span, list | tuple) and len(span) == 2:
        return str(span[0]), str(span[1])
    if relayout.get("xaxis.autorange"):
        return True
    return None


def register(app: dash.Dash) -> None:
    app.clientside_callback(
        ClientsideFunction("ffShell", "zoomRelayouts"),
        Output("zoom-relayouts", "data"),
        Input({"type": TIMECHART, "id": ALL}, "relayoutData"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("url", "hash", allow_duplicate=True),
        Input("zoom-relayouts", "data"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    def _zoom_to_url(relayouts, view):  # type: ignore[no-untyped-def]
        """A zoom (or a double-click reset) on any time chart: the zoomed window, in the URL."""
        if not isinstance(relayouts, dict) or view is None:
            raise dash.exceptions.PreventUpdate
        # Several charts can fire in one batch (an autosize beside the user's zoom): the
        # first that is a zoom or a reset counts, wherever it is in the list.
        events = relayouts.get("relayouts")
        events = events if isinstance(events, list) else []
        zooms = [z for v in events if (z := zoom(v)) is not None]
        if not zooms:
            raise dash.exceptions.PreventUpdate
        first = zooms[0]
        view = clean_view(view)
        if first is True:
            new = view | {"range": "all", "start": None, "end": None}
        else:
            start, end = parse_time(first[0]), parse_time(first[1])
            if start is None or end is None or start >= end:
                raise dash.exceptions.PreventUpdate
            new = view | {"range": "custom", "start": start.isoformat(), "end": end.isoformat()}
        if same(new, view):
            raise dash.exceptions.PreventUpdate
        return fragment(new)
