"""What the browser keeps itself, answered there with no request: the theme, and the run on
show for the names of CSV exports (``window.ffRun``, read by ``assets/30-export.js``).

The theme is set on <html> (Bootstrap's colour mode) and kept in localStorage, which the
page's <head> reads before anything is drawn (``app.main``'s index): a light page does not
flash dark on reload. The functions are ``ffShell`` in ``assets/15-shell.js``.
"""

from __future__ import annotations

import dash
from dash import ClientsideFunction, Input, Output


def register(app: dash.Dash) -> None:
    app.clientside_callback(
        ClientsideFunction("ffShell", "theme"),
        Output("theme-store", "data"),
        Input("theme-switch", "value"),
    )
    app.clientside_callback(
        ClientsideFunction("ffShell", "exportRun"),
        Output("export-run", "data"),
        Input("view", "data"),
    )
