"""Scrapes ask for gzip, as Prometheus does, and take gzip'd answers (exporters behind a proxy
send them), over a real HTTP server on 127.0.0.1; a gzip bomb or broken gzip is a target down
with a reason, not memory exhaustion."""

from __future__ import annotations

import gzip
import http.server
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from telemetry.collect.dcgm.scrape import MAX_BODY_BYTES, fetch, scrape_round
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Target
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES

TEXT = (DCGM_FIXTURES / "default_h100.txt").read_bytes()


def _bomb_member(size: int = 64 << 20) -> bytes:
    """One gzip member of ``size`` zero bytes (~64 KB on the wire)."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    return b"".join(c.compress(chunk) for _ in range(size >> 20)) + c.flush()


BOMB = _bomb_member() * 16  # 1 GiB of zeros once inflated, ~1 MB sent


class GzipExporter(http.server.BaseHTTPRequestHandler):
    seen_accept: list[str] = []  # the Accept-Encoding of every request

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen_accept.append(self.headers.get("Accept-Encoding", ""))
        route = self.path.split("?", 1)[0]
        plain = route == "/plain/metrics"
        body = {
            "/plain/metrics": TEXT,
            "/gzip/metrics": gzip.compress(TEXT),
            "/members/metrics": gzip.compress(TEXT[:5000]) + gzip.compress(TEXT[5000:]),
            "/bomb/metrics": BOMB,
            "/truncated/metrics": gzip.compress(TEXT)[:-300],
            "/garbage/metrics": b"\x1f\x8b this is not deflate data at all\n",
        }.get(route)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if not plain:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scraper stopped reading the bomb, as it should


@pytest.fixture(scope="module")
def gz() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GzipExporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_scrapes_ask_for_gzip_and_store_the_same_samples_as_plain_text(
    tmp_path: Path, gz: str
) -> None:
    GzipExporter.seen_accept.clear()
    got = {}
    for route in ("plain", "gzip", "members"):
        with Store(str(tmp_path / f"{route}.duckdb")) as store:
            rep = StoreSink(store).write(
                datetime(2026, 3, 1, 12), scrape_round([Target(f"{gz}/{route}/metrics")], 2.0)
            )
            assert rep.up == 1 and rep.samples == 8, store.rows("SELECT error FROM targets")
            got[route] = store.rows(
                "SELECT * EXCLUDE (ts) FROM gpu_samples ORDER BY gpu_id"
            ) + store.rows("SELECT gpu_id, field, value FROM gpu_samples_extra ORDER BY ALL")
    assert got["gzip"] == got["plain"] and got["members"] == got["plain"]
    assert GzipExporter.seen_accept == ["gzip"] * 3


def test_a_gzip_bomb_is_a_target_down_without_inflating_it(gz: str) -> None:
    tracemalloc.start()
    try:
        f = fetch(Target(f"{gz}/bomb/metrics"), 10.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f.text is None
    assert f.error == f"gzip body larger than {MAX_BODY_BYTES:,} bytes once decompressed"
    assert peak < 3 * MAX_BODY_BYTES  # not the 1 GiB it inflates to


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        ("truncated", "truncated gzip body"),
        ("garbage", "not gzip data although its Content-Encoding says gzip"),
    ],
)
def test_broken_gzip_is_a_target_down_with_the_reason(gz: str, route: str, reason: str) -> None:
    f = fetch(Target(f"{gz}/{route}/metrics"), 5.0)
    assert f.text is None and f.error is not None and f.error.startswith(reason), f.error
