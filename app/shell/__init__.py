"""The page shell around every page: its layout and its callbacks, one module per concern.

- ``layout``: the navbar (pages, run picker, range, Live, theme), the banner box, the stores.
- ``view``: the shared view (run and time range) kept in step with the URL and the pickers.
- ``zoom``: a zoom on any time chart, into the URL.
- ``live``: the refresh tick on and off, and runs that appear while the page is open.
- ``header``: what follows the view above the page (links, banner, the data's span and age).
- ``timepicker``: the absolute From/To window and "Zoom to this run".
- ``browser``: what the browser keeps itself (the theme, the run that names CSV exports).

The shell's JavaScript lives in ``assets/15-shell.js`` (the ``ffShell`` namespace), served as
every other asset.
"""

from __future__ import annotations

import dash

from app.shell import browser, header, live, timepicker, view, zoom


def register(app: dash.Dash) -> None:
    """Register the shell's callbacks on ``app`` (after the pages are registered: the header
    links to each)."""
    # The order the callbacks had when they were one function in app/main.py, so the app's
    # callback list (what the renderer is sent) is the same as before the split.
    for register_one in (
        timepicker.register,  # absolute From/To and "zoom to this run"
        view.register,
        zoom.register,
        live.register,
        header.register,
        live.register_switch,
        browser.register,
    ):
        register_one(app)
