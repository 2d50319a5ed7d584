"""The Content-Security-Policy allows no ``eval``: every page draws its charts in Chromium with
no violation reported. ``'unsafe-inline'`` stays for scripts because Dash writes its renderer's
start and its inline clientside callbacks into the page (without it nothing is drawn)."""

from __future__ import annotations

import urllib.request

from playwright.sync_api import Page

from tests.conftest import Server
from tests.ui.test_readable import scroll_through

PAGES = ["/", "/training", "/gpus", "/failures", "/checkpoints", "/incident", "/jobs"]
LISTEN = """document.addEventListener('securitypolicyviolation', e =>
  (window.__csp = window.__csp || []).push(`${e.violatedDirective} ${e.blockedURI}`))"""
DRAWN = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .map(p => Boolean(p._fullLayout))"""


def test_no_page_needs_eval(page: Page, dev_server: Server) -> None:
    with urllib.request.urlopen(dev_server.url + "/", timeout=30) as r:
        csp = r.headers["Content-Security-Policy"]
    assert "'unsafe-eval'" not in csp and "script-src 'self' 'unsafe-inline'" in csp, csp
    page.add_init_script(LISTEN)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    charts = 0
    for path in PAGES:
        page.goto(dev_server.url + path)
        page.wait_for_load_state("networkidle")
        scroll_through(page)  # the parts drawn when scrolled near run their scripts too
        page.wait_for_load_state("networkidle")
        assert page.evaluate("() => window.__csp || []") == [], path
        drawn = page.evaluate(DRAWN)
        assert all(drawn), (path, drawn)
        charts += len(drawn)
    assert charts >= 10 and errors == [], (charts, errors)
