"""Live refresh: the tick on and off (the Live switch), and runs that appear while open."""

from __future__ import annotations

import dash
from dash import Input, Output, State, no_update

from app.data.view import default_run, run_ids, run_options


def register(app: dash.Dash) -> None:
    @app.callback(
        Output("run-select", "options", allow_duplicate=True),
        Output("run-select", "value", allow_duplicate=True),
        Input("refresh", "n_intervals"),
        State("run-select", "value"),
        State("run-select", "options"),
        State("runs-all", "value"),
        prevent_initial_call=True,
    )
    def _runs_live(_n, run, options, all_jobs):  # type: ignore[no-untyped-def]
        """Live: list runs that appeared since the page loaded; when the shown run is gone (or
        there was none yet), pick the newest trained, which ``app.shell.view`` then takes into
        the view."""
        opts = run_options(all_jobs is True, keep=run)
        runs = run_ids()
        opts_out = opts if opts != options else no_update
        if runs and run not in runs:
            return opts_out, default_run(runs)
        if opts_out is no_update:
            raise dash.exceptions.PreventUpdate
        return opts_out, no_update


def register_switch(app: dash.Dash) -> None:
    @app.callback(Output("refresh", "disabled"), Input("live-switch", "value"))
    def _live(on: bool) -> bool:
        return not on
