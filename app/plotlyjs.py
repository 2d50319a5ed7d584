"""Which plotly.js the browser gets: plotly's own *cartesian* partial bundle, not the full one.

Every chart here is a ``scatter``, ``bar`` or ``heatmap``. The full plotly.js (4.8 MB, maps,
3-D, WebGL and 40 trace types) took ~650 ms of the browser's one main thread to evaluate on
each page load, while Dash's renderer and the first charts waited behind it; plotly's
cartesian bundle (1.5 MB, the same plotly.js version, published by plotly on npm as
``plotly.js-cartesian-dist-min``, MIT, kept unmodified in ``app/static/``) takes ~250 ms.

Dash's renderer asks for plotly.js at one fixed address (``_dash-component-suites/plotly/
package_data/plotly.min.js``, loaded by the first graph); this module answers that address
with the bundle. A figure with a trace type outside the bundle would draw nothing, so the
test suite's figure check (``FACTORYFLOOR_CHECK_FIGURES``) refuses one (``check_traces``), and
a plotly.py upgrade that changes plotly.js's version fails ``tests/test_plotlyjs.py`` until the
bundle is replaced by the same version's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from flask import Flask, Response, send_file

BUNDLE = Path(__file__).parent / "static" / "plotly-cartesian.min.js"
VERSION = "4.1.1"
SHA256 = "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"
# The trace modules the bundle holds (its README), the only types a figure may use.
TRACES = frozenset(
    "bar box contour heatmap histogram histogram2d histogram2dcontour image pie scatter"
    " scatterternary violin".split()
)
URL = "_dash-component-suites/plotly/package_data/plotly.min.js"


def check_traces(types: Iterable[str]) -> None:
    """ValueError when a trace type is not in the bundle the browser gets."""
    if missing := sorted(set(types) - TRACES):
        raise ValueError(
            f"trace type {', '.join(missing)} is not in plotly.js's cartesian bundle"
            f" (app/plotlyjs.py); it would draw nothing"
        )


def install(server: Flask, prefix: str = "/") -> None:
    """Answer the renderer's plotly.js address with the cartesian bundle (revalidated by
    its ETag, as Dash serves an unversioned address)."""

    def _bundle() -> Response:
        return send_file(BUNDLE, mimetype="application/javascript", conditional=True, etag=True)

    server.add_url_rule(prefix + URL, "factoryfloor_plotlyjs", _bundle)
