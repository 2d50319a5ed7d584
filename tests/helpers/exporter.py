"""dcgm-exporter fixture text over real HTTP (the ``exporter`` fixture serves it)."""

from __future__ import annotations

import http.server
import time
from collections.abc import Callable


class ExporterHandler(http.server.BaseHTTPRequestHandler):
    """dcgm-exporter fixture text over real HTTP: ``/<fixture>/metrics`` for every file in
    ``sample_data/dcgm``, ``/slow`` (answers after 3 s), ``/error`` (HTTP 500), ``/truncated``
    (a body shorter than its Content-Length), and any route a test adds to ``routes`` (a text,
    or a callable giving the text of each request)."""

    routes: dict[str, str | Callable[[], str]] = {}

    def log_message(self, *_args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path
        if path == "/slow/metrics":
            time.sleep(3)
        if path == "/error/metrics":
            self.send_error(500, "exporter crashed")
            return
        route = self.routes.get(path, "")
        body = (route() if callable(route) else route).encode()
        if path == "/truncated/metrics":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 5000))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if not body:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
