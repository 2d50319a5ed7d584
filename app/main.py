"""The Dash app factory and the page shell (navigation, run selector, time range, live refresh).

``create_app(store)`` binds the data adapter to an open ``Store`` and builds the app; nothing is
loaded at import time. Pages live in ``app/pages`` (one module each, callbacks beside them).
"""

from __future__ import annotations

from pathlib import Path

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from app import data
from telemetry.store import Store

ASSETS = Path(__file__).resolve().parent.parent / "assets"
REFRESH_MS = 10_000

_INDEX = """<!DOCTYPE html>
<html lang="en" data-bs-theme="dark">
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}</head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""


def _navbar() -> dbc.Navbar:
    links = [
        dbc.NavLink(
            p["name"],
            href=p["relative_path"],
            active="exact",
            id=f"nav-{p['module'].split('.')[-1]}",
        )
        for p in dash.page_registry.values()
    ]
    return dbc.Navbar(
        dbc.Container(
            [
                dbc.NavbarBrand("Factory Floor", href="/", class_name="fw-bold"),
                dbc.Nav(links, navbar=True, class_name="me-auto"),
                html.Div(
                    [
                        dcc.Dropdown(
                            id="run-select",
                            clearable=False,
                            placeholder="run",
                            style={"minWidth": "220px"},
                        ),
                        dcc.Dropdown(
                            id="range-select",
                            clearable=False,
                            value="all",
                            options=[
                                {"label": lbl, "value": v}
                                for v, lbl in (
                                    ("1h", "Last hour"),
                                    ("6h", "Last 6 h"),
                                    ("24h", "Last 24 h"),
                                    ("7d", "Last 7 days"),
                                    ("all", "Whole run"),
                                )
                            ],
                            style={"minWidth": "140px"},
                        ),
                        dbc.Switch(
                            id="theme-switch", label="Light", value=False, class_name="ms-2 mb-0"
                        ),
                    ],
                    className="d-flex align-items-center gap-2",
                ),
            ],
            fluid=True,
        ),
        color="dark",
        dark=True,
        class_name="mb-2 border-bottom",
    )


def _banner() -> html.Div:
    if not data.is_simulated():
        return html.Div(id="sim-banner")
    return dbc.Alert(
        [
            html.Strong("Simulated data. "),
            "This store was filled by the Factory Floor replay engine, a seeded simulation of a "
            "training cluster, not by a real cluster. ",
            html.Span(data.scenario_description()),
        ],
        id="sim-banner",
        color="warning",
        class_name="py-1 px-3 mb-2 small",
    )


def _layout() -> html.Div:
    return html.Div(
        [
            dcc.Location(id="url", refresh="callback-nav"),
            dcc.Interval(id="refresh", interval=REFRESH_MS),
            dcc.Store(id="theme-store"),
            _navbar(),
            dbc.Container(
                [
                    _banner(),
                    html.Div(id="last-updated", className="text-body-secondary small mb-2"),
                    dash.page_container,
                ],
                fluid=True,
            ),
        ]
    )


def _register_shell_callbacks(app: dash.Dash) -> None:
    @app.callback(
        Output("run-select", "options"),
        Output("run-select", "value"),
        Input("refresh", "n_intervals"),
        State("run-select", "value"),
    )
    def _runs(_n: int | None, current: str | None):  # type: ignore[no-untyped-def]
        df = data.runs()
        opts = [{"label": f"{r.name}", "value": r.run_id} for r in df.itertuples()]
        ids = list(df["run_id"])
        value = current if current in ids else (ids[-1] if ids else None)
        return opts, value

    @app.callback(Output("last-updated", "children"), Input("refresh", "n_intervals"))
    def _updated(_n: int | None) -> str:
        ext = data.extent()
        if ext is None:
            return "No data stored yet."
        return (
            f"Data from {ext.start:%Y-%m-%d %H:%M} to {ext.end:%Y-%m-%d %H:%M:%S} UTC (last update)"
        )

    app.clientside_callback(
        "function(light){document.documentElement.setAttribute('data-bs-theme',"
        " light ? 'light' : 'dark'); return window.dash_clientside.no_update;}",
        Output("theme-store", "data"),
        Input("theme-switch", "value"),
    )


def create_app(store: Store) -> dash.Dash:
    """Build the dashboard over an open store. The store must stay open while serving."""
    data.bind(store)
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).parent / "pages"),
        assets_folder=str(ASSETS),
        serve_locally=True,
        title="Factory Floor",
        suppress_callback_exceptions=True,
        external_stylesheets=[],
    )
    app.index_string = _INDEX
    app.layout = _layout
    _register_shell_callbacks(app)
    return app


def run_server(app: dash.Dash, host: str, port: int) -> None:
    app.run(host=host, port=port, debug=False, threaded=True)
