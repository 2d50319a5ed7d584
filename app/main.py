"""The Dash app factory: ``create_app(store)`` binds the data adapter to an open ``Store`` and
builds the app; nothing is loaded at import time. Pages live in ``app/pages`` (one module each,
callbacks beside them); the shell around them (navigation, run selector, time range, live
refresh; the shared view in the URL) in ``app/shell``, one module per concern.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import dash
import flask

from app import guard, plotlyjs, shell
from app.data.services import Services, bind
from app.data.view import run_ids
from app.shell.layout import layout
from app.shell.view import view_from_url
from telemetry import env
from telemetry.store import Store

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DEFAULT_THEME = "dark"  # a browser that has not chosen light (the theme switch, localStorage)

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
    app.layout = layout
    shell.register(app)
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
            view = view_from_url("", run_ids())
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
