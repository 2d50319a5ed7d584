"""Security at the HTTP boundary: crafted Dash callback payloads, the access token, body
limits and browser security headers, against the real server."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from telemetry.store import Store
from tests.callback_fuzz import fuzz_callbacks
from tests.conftest import Server, start_server

TABLES = ("runs", "gpus", "nodes", "gpu_samples", "train_metrics", "interruptions", "checkpoints")


def _counts(path: Path) -> dict[str, int]:
    with Store(str(path), read_only=True) as s:
        return {t: int(s.scalar(f"SELECT count(*) FROM {t}")) for t in TABLES}


def test_crafted_callback_payloads_reach_no_sql_and_break_nothing(
    dev_store: Path, tmp_path: Path
) -> None:
    """Every declared callback, hostile values in every input, against a server that holds
    the store read-write (so an injection could write): no 5xx, nothing changed."""
    path = tmp_path / "rw.duckdb"
    shutil.copy(dev_store, path)
    before = _counts(path)
    srv = start_server(["serve", "--store", str(path), "--accept-ingest"], tmp_path / "s.log")
    try:
        report = fuzz_callbacks(srv.url, rounds=4, seed=7)
    finally:
        srv.stop()
    assert report["sent"] >= 60
    assert report["failures"] == [], report["failures"][:3]
    assert _counts(path) == before
    for leak in ("/tmp/leak.csv", "/tmp/evil.duckdb"):
        assert not Path(leak).exists()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, dev_store: Path) -> Server:
    tmp = tmp_path_factory.mktemp("locked")
    tok = tmp / "token"
    tok.write_text("correct-horse-battery-staple\n")
    srv = start_server(
        ["serve", "--store", str(dev_store), "--token-file", str(tok)], tmp / "serve.log"
    )
    yield srv
    srv.stop()


def test_with_a_token_nothing_is_served_without_it(locked: Server) -> None:
    status, headers, _ = _get(locked.url + "/gpus", {"Accept": "text/html"})
    assert status == 303 and headers["Location"] == "/login?next=/gpus"
    for path in ("/_dash-layout", "/_dash-dependencies", "/api/v1/health", "/api/v1/nothing"):
        assert _get(locked.url + path, {"Accept": "application/json"})[0] == 401, path
    ok = {"Authorization": "Bearer correct-horse-battery-staple"}
    assert _get(locked.url + "/_dash-layout", ok)[0] == 200
    assert _get(locked.url + "/_dash-layout", {"Authorization": "Bearer wrong"})[0] == 401


def _login(url: str, token: str, nxt: str) -> tuple[int, dict[str, str]]:
    body = urllib.parse.urlencode({"token": token, "next": nxt}).encode()
    req = urllib.request.Request(url + "/login", data=body, method="POST")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_signing_in_sets_a_cookie_that_is_not_the_token(locked: Server) -> None:
    status, headers = _login(locked.url, "wrong", "/")
    assert status == 401 and "Set-Cookie" not in headers
    for evil in ("//evil.example/x", "/\t/evil.example", "/\\evil.example", "https://e.x/"):
        status, headers = _login(locked.url, "correct-horse-battery-staple", evil)
        assert status == 303 and headers["Location"] == "/", evil  # no open redirect
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "correct-horse" not in cookie
    value = cookie.split(";", 1)[0]
    assert _get(locked.url + "/_dash-layout", {"Cookie": value})[0] == 200


def test_bodies_over_the_limit_are_refused_and_headers_protect_the_page(
    dev_server: Server,
) -> None:
    status, headers, _ = _get(dev_server.url + "/")
    assert status == 200
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    big = json.dumps({"output": "x", "inputs": [], "pad": "x" * (2 * 2**20)}).encode()
    req = urllib.request.Request(
        dev_server.url + "/_dash-update-component",
        data=big,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=30)
    assert exc.value.code == 413 and b"limit" in exc.value.read()
