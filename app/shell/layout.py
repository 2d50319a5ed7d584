"""The shell's layout: the navbar, the banner and status line, and the stores pages share."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import dcc, html

from app.data.view import run_simulation
from app.shell import timepicker

REFRESH_MS = 10_000
RANGE_OPTIONS = [
    ("1h", "Last hour"),
    ("6h", "Last 6 h"),
    ("24h", "Last 24 h"),
    ("7d", "Last 7 days"),
    ("all", "Whole run"),
    ("custom", "Zoomed window"),
]


def nav_id(page: dict[str, Any]) -> str:
    """The id of a page's navbar link (``nav-overview``)."""
    return f"nav-{page['module'].split('.')[-1]}"


def _kept_switch(id_: str, label: str) -> dbc.Switch:
    """A navbar switch, off at first and remembered in this browser (localStorage): reloads
    and links keep it."""
    return dbc.Switch(id=id_, label=label, value=False, persistence=True,
                      persistence_type="local", class_name="ms-1 mb-0",
                      label_class_name="text-light")  # fmt: skip


def _navbar() -> dbc.Navbar:
    links = [
        dbc.NavLink(p["name"], href=p["relative_path"], active="exact", id=nav_id(p))
        for p in dash.page_registry.values()
    ]
    controls = html.Div(
        [
            dcc.Dropdown(
                id="run-select", clearable=False, placeholder="Run", style={"minWidth": "220px"}
            ),
            _kept_switch("runs-all", "All jobs"),  # runs of jobs that trained nothing
            dcc.Dropdown(
                id="range-select",
                clearable=False,
                value="all",
                options=[{"label": lbl, "value": v} for v, lbl in RANGE_OPTIONS],
                style={"minWidth": "150px"},
            ),
            timepicker.control(),  # absolute From/To and "zoom to this run"
            dbc.Switch(
                id="live-switch",
                label="Live",
                value=True,
                class_name="ms-2 mb-0",
                label_class_name="text-light",
            ),
            _kept_switch("theme-switch", "Light"),
        ],
        className="d-flex align-items-center gap-2 flex-wrap",
    )
    return dbc.Navbar(
        dbc.Container(
            [
                dbc.NavbarBrand("Factory Floor", href="/", class_name="fw-bold"),
                dbc.Nav(links, navbar=True, class_name="me-auto"),
                controls,
            ],
            fluid=True,
        ),
        color="dark",
        dark=True,
        class_name="mb-2 border-bottom",
    )


def banner(run_id: str | None) -> Any:
    """The "Simulated data" banner, for a replayed run only (it follows the run, not the
    store: an imported real run beside a replay gets none)."""
    description = run_simulation(run_id)
    if description is None:
        return []
    return dbc.Alert(
        [
            html.Strong("Simulated data. "),
            "This run was produced by the Factory Floor replay engine, a seeded simulation of a "
            "training cluster, not by a real cluster. ",
            html.Span(description),
        ],
        id="sim-banner",
        color="warning",
        class_name="py-1 px-3 mb-2 small",
    )


def layout() -> html.Div:
    return html.Div(
        [
            dcc.Location(id="url", refresh="callback-nav"),
            dcc.Interval(id="refresh", interval=REFRESH_MS),
            dcc.Store(id="view"),
            dcc.Store(id="theme-store"),
            dcc.Store(id="export-run"),  # the shown run, for the names of CSV exports
            dcc.Store(id="zoom-relayouts"),  # time charts' relayouts that may be zooms
            dcc.Store(id="node-pick"),  # a node clicked on the GPUs page (app.pages.gpus)
            dcc.Store(id="spike-pick"),  # a loss spike clicked (app.pages.training)
            _navbar(),
            dbc.Container(
                [
                    html.Div(id="sim-banner-box"),
                    html.Div(
                        [
                            html.Span(id="last-updated"),
                            html.Span(" · ", className="mx-1"),
                            html.Span(id="data-age"),
                        ],
                        className="text-body-secondary small mb-2",
                    ),
                    dash.page_container,
                ],
                fluid=True,
            ),
        ]
    )
