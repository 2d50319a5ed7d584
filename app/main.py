"""The Dash app factory and the page shell (navigation, run selector, time range, live refresh).

``create_app(store)`` binds the data adapter to an open ``Store`` and builds the app; nothing is
loaded at import time. Pages live in ``app/pages`` (one module each, callbacks beside them).

Shared view state lives in one ``dcc.Store`` (``view``): the run and the time range, either a
preset relative to the newest data or an absolute window set by zooming any time chart. It is
mirrored in the URL fragment (``#run=…&range=24h`` or ``#run=…&from=…&to=…``) so a link
reproduces the view and the browser's back/forward buttons move through earlier views. (The
fragment, not the query string: Dash Pages re-renders the whole page when the query changes.)
Pages only read it.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import dash
import dash_bootstrap_components as dbc
import flask
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update

from app import guard, plotlyjs
from app.data.services import Services, bind
from app.data.view import (
    MAX_ID,
    PRESETS,
    ago,
    clean_view,
    data_age,
    default_run,
    extent,
    fragment,
    parse_time,
    run_extent,
    run_ids,
    run_label,
    run_options,
    run_simulation,
)
from app.ui import TIMECHART
from telemetry import env
from telemetry.store import Store

ASSETS = Path(__file__).resolve().parent.parent / "assets"
REFRESH_MS = 10_000
DEFAULT_THEME = "dark"  # a browser that has not chosen light (the theme switch, localStorage)
# Warning text readable on both themes: Bootstrap's emphasis colour (#664d03 on white, #ffda6a on
# dark); "text-warning" is the same yellow-orange on both, unreadable on white (issue 57).
WARN_TEXT = "text-warning-emphasis"
RANGE_OPTIONS = [
    ("1h", "Last hour"),
    ("6h", "Last 6 h"),
    ("24h", "Last 24 h"),
    ("7d", "Last 7 days"),
    ("all", "Whole run"),
    ("custom", "Zoomed window"),
]

# The head's script sets the theme before anything is drawn, and takes the browser's own trim
# and number parsing before Dash's polyfill replaces them (put back by assets/05-natives.js).
_INDEX = """<!DOCTYPE html>
<html lang="en" data-bs-theme="dark">
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}
<script>try{if(localStorage.getItem("ff-theme")==="light")document.documentElement.setAttribute("data-bs-theme","light")}catch(e){}
window.ffNatives=[[String.prototype,"trim"],[String.prototype,"trimStart"],
[String.prototype,"trimEnd"],[String.prototype,"trimLeft"],[String.prototype,"trimRight"],
[window,"parseInt"],[window,"parseFloat"],[Number,"parseInt"],[Number,"parseFloat"]]
.map(function(p){return [p[0],p[1],p[0][p[1]]]});</script>
</head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""


def _kept_switch(id_: str, label: str) -> dbc.Switch:
    """A navbar switch, off at first and remembered in this browser (localStorage): reloads
    and links keep it."""
    return dbc.Switch(id=id_, label=label, value=False, persistence=True,
                      persistence_type="local", class_name="ms-1 mb-0",
                      label_class_name="text-light")  # fmt: skip


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


def _banner(run_id: str | None) -> Any:
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


def _layout() -> html.Div:
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


def _view_from_url(url_hash: str | None, runs: list[str]) -> dict[str, Any]:
    text = url_hash if isinstance(url_hash, str) else ""  # a crafted POST may send anything
    q = {k: v[0] for k, v in parse_qs(text.lstrip("#?")).items() if v}
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


def _zoom(relayout: dict[str, Any] | None) -> tuple[str, str] | None | bool:
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


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two views that show the same thing (one may spell an unset field as None)."""
    return a is not None and b is not None and clean_view(a) == clean_view(b)


def _register_shell_callbacks(app: dash.Dash) -> None:
    pages = list(dash.page_registry.values())

    @app.callback(
        Output("view", "data"),
        Output("url", "hash"),
        Output("run-select", "value"),
        Output("run-select", "options"),
        Output("range-select", "value"),
        Input("url", "hash"),
        Input("run-select", "value"),
        Input("range-select", "value"),
        Input("runs-all", "value"),
        State("view", "data"),
        State("run-select", "options"),
    )
    def _sync(url_hash, run, preset, all_jobs, view, options):  # type: ignore[no-untyped-def]
        # Neither the live tick nor chart relayouts are inputs here: Dash drops the reply of a
        # callback that is triggered again while in flight, so a tick, or a relayout event a
        # chart emits on its own (autosize), landing during a change would silently undo it.
        # Zooms reach the view through the URL (``_zoom_to_url``), as every other change does.
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
            new = _view_from_url(url_hash, runs)
            if _same(new, view):  # the URL we just wrote: nothing changed, nothing to redraw
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
        if _same(new, view):  # the pickers show the view again (a stale run, "custom" picked)
            if run == new["run"] and preset == new["range"] and opts_out is no_update:
                raise dash.exceptions.PreventUpdate
            return no_update, no_update, new["run"], opts_out, new["range"]
        return new, fragment(new), new["run"], opts_out, new["range"]

    # Every chart reports a relayout as it is first drawn (``{"autosize": true}``): 3-9 per
    # page load. The browser passes on only those that name the x axis's range, so page loads
    # make no request here; which of those is a zoom is still ``_zoom``'s call, on the server.
    app.clientside_callback(
        """function(relayouts){
          var ctx = window.dash_clientside.callback_context, out = [];
          (ctx.triggered || []).forEach(function(t){
            var v = t.value;
            if (v && typeof v === 'object' && Object.keys(v).some(function(k){
                  return k.indexOf('xaxis.range') === 0 || k === 'xaxis.autorange';}))
              out.push(v);
          });
          if (!out.length) return window.dash_clientside.no_update;
          window.ffZooms = (window.ffZooms || 0) + 1;
          return {n: window.ffZooms, relayouts: out};
        }""",
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
        zooms = [z for v in events if (z := _zoom(v)) is not None]
        if not zooms:
            raise dash.exceptions.PreventUpdate
        zoom = zooms[0]
        view = clean_view(view)
        if zoom is True:
            new = view | {"range": "all", "start": None, "end": None}
        else:
            start, end = parse_time(zoom[0]), parse_time(zoom[1])
            if start is None or end is None or start >= end:
                raise dash.exceptions.PreventUpdate
            new = view | {"range": "custom", "start": start.isoformat(), "end": end.isoformat()}
        if _same(new, view):
            raise dash.exceptions.PreventUpdate
        return fragment(new)

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
        there was none yet), pick the newest trained, which ``_sync`` then takes into the view."""
        opts = run_options(all_jobs is True, keep=run)
        runs = run_ids()
        opts_out = opts if opts != options else no_update
        if runs and run not in runs:
            return opts_out, default_run(runs)
        if opts_out is no_update:
            raise dash.exceptions.PreventUpdate
        return opts_out, no_update

    @app.callback(
        *[Output(f"nav-{p['module'].split('.')[-1]}", "href") for p in pages],
        Output("sim-banner-box", "children"),
        Output("last-updated", "children"),
        Output("data-age", "children"),
        Output("data-age", "className"),
        Input("view", "data"),
        Input("refresh", "n_intervals"),
        Input("live-switch", "value"),
    )
    def _header(view: Any, _n: int | None, live: Any) -> tuple[Any, ...]:
        """The shell's parts that follow the view: the pages' links (which carry it), the
        simulation banner, the data's span and its age. One callback, not four: Dash's renderer
        runs at most 12 callbacks at once, and a page's own slowest ones queued behind these
        (the GPUs page's drill-down started after the first answers, not with the others). A
        refresh tick alone changes only the times."""
        tick = set(ctx.triggered_prop_ids) == {"refresh.n_intervals"}
        nav = [no_update] * len(pages) if tick else _nav(view)
        banner = no_update if tick else _sim_banner(view)
        return *nav, banner, _updated(view), *_age(view, live)

    def _nav(view: Any) -> list[str]:
        view = clean_view(view)
        query = fragment(view) if view.get("run") else ""
        return [p["relative_path"] + query for p in pages]

    def _sim_banner(view: Any) -> Any:
        if view is None:  # the view is not set yet: no banner rather than the wrong one
            return []
        return _banner(clean_view(view).get("run"))

    def _updated(view: Any) -> str:
        """The selected run's own time (the store's without a run), and the newest data."""
        ext = extent()
        if ext is None:
            return "No data stored yet."
        own = run_extent(clean_view(view).get("run")) or ext
        return (
            f"Data {own.start:%Y-%m-%d %H:%M} – {own.end:%Y-%m-%d %H:%M:%S} UTC · "
            f"last updated {ext.end:%H:%M:%S} UTC"
        )

    def _age(view: Any, live: Any) -> tuple[str, str]:
        """How old the shown run's newest data is; with Live on and nothing new, says so."""
        run = clean_view(view).get("run")
        age = data_age(run)
        if age is None:
            return "", ""
        whose = f"{run_label(run)}: " if run else ""
        text = f"{whose}data to {age['end']:%Y-%m-%d %H:%M} UTC, {ago(age['age_s'])} ago"
        if live is True and age["stale"]:
            return text + " · Live, but nothing new has arrived since", WARN_TEXT
        return text, ""

    @app.callback(Output("refresh", "disabled"), Input("live-switch", "value"))
    def _live(on: bool) -> bool:
        return not on

    # The theme is set on <html> (Bootstrap's colour mode) and kept in localStorage, which the
    # page's <head> reads before anything is drawn: a light page does not flash dark on reload.
    app.clientside_callback(
        "function(light){var t = light ? 'light' : '" + DEFAULT_THEME + "';"
        " document.documentElement.setAttribute('data-bs-theme', t);"
        " try { localStorage.setItem('ff-theme', t); } catch (e) {} return t;}",
        Output("theme-store", "data"),
        Input("theme-switch", "value"),
    )
    app.clientside_callback(
        "function(view){window.ffRun = (view && view.run) || null; return window.ffRun;}",
        Output("export-run", "data"),
        Input("view", "data"),
    )


def create_app(services: Services | Store) -> dash.Dash:
    """Build the dashboard over an open store and what serves it beside (``Services``: prices,
    alert delivery, the Prometheus history, the operator token that allows corrections on the
    Failures page); a store alone is served with none of them. The store must stay open while
    serving."""
    bind(services)
    store = services.store if isinstance(services, Services) else services
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
    guard.install_envelope_check(app.server, lambda: app.callback_map)
    if env.result_cache_per_request():  # cold benchmarks: every callback as after a write
        app.server.before_request(lambda: _forget_before_callbacks(store))
    plotlyjs.install(app.server, app.config.requests_pathname_prefix)
    return app


def _forget_before_callbacks(store: Store) -> None:
    if flask.request.path.endswith("/_dash-update-component"):
        store.forget_results()


def warm_landing() -> threading.Thread:
    """Build the landing view (the Overview of the newest run, whole range, default theme) on a
    thread of its own, started with the server: the first person to open the dashboard after a
    start asks for it about half a second later (the page's scripts load first), and then waits
    for this build (the caches' single flight) instead of starting it, with DuckDB's blocks
    already read. A failure is only logged: the browser's request builds the view again and
    shows the error."""

    def run() -> None:
        try:
            view = _view_from_url("", run_ids())
            sys.modules[dash.page_registry["pages.overview"]["module"]].warm(view, DEFAULT_THEME)
        except Exception:  # noqa: BLE001 (a warm-up never stops the server)
            logging.getLogger("factoryfloor.app").exception("warming the landing view failed")

    thread = threading.Thread(target=run, name="warm-landing", daemon=True)
    thread.start()
    return thread


def run_server(app: dash.Dash, host: str, port: int) -> None:
    """Serve with waitress (``app.wsgi``), a production WSGI server, until interrupted."""
    from app import guard, wsgi

    wsgi.serve(app.server, host, port, body_limit=guard.body_limit)
