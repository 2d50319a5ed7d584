"""Security at the HTTP boundary: crafted Dash callback payloads, hostile URLs and ingest
bodies (with an SQL audit proving no input became SQL), the access token, body limits and
browser security headers, against the real server."""

from __future__ import annotations

import gzip
import http.client
import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from app.guard import MAX_DASH_BODY
from telemetry.ingest.http import MAX_JSON_BODY, MAX_ROUND_BODY, MAX_ROUND_DECODED
from telemetry.ingest.records import CATEGORIES, store_records
from telemetry.ingest.targets import Fetch, Target
from telemetry.ingest.wire import CONTENT_TYPE, encode_round
from telemetry.store import Store
from telemetry.store.connection import SQL_AUDIT_ENV
from tests.callback_fuzz import MARKER, SQLI, fuzz_callbacks, fuzz_urls
from tests.conftest import DCGM_FIXTURES, Server, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

TABLES = ("runs", "gpus", "nodes", "gpu_samples", "train_metrics", "interruptions", "checkpoints")


def _counts(path: Path) -> dict[str, int]:
    with Store(str(path), read_only=True) as s:
        return {t: int(s.scalar(f"SELECT count(*) FROM {t}")) for t in TABLES}


# -- SQL injection: a canary in every payload, an audit of every SQL text ----------------------
def audited_server(
    args: list[str], tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Server, Path]:
    """A server that logs each SQL text its store executes. Only the child inherits the
    setting: this process's own stores (which read back what the server stored) are not
    audited, so their queries cannot put the marker into the log."""
    audit = tmp / "sql-audit.log"
    monkeypatch.setenv(SQL_AUDIT_ENV, str(audit))
    try:
        return start_server(args, tmp / "serve.log"), audit
    finally:
        monkeypatch.delenv(SQL_AUDIT_ENV)


def assert_no_marker_in_sql(audit: Path) -> None:
    lines = audit.read_text().splitlines()
    assert any("FROM runs" in ln for ln in lines), "the audit logged nothing: is it on?"
    leaked = [ln for ln in lines if MARKER in ln]
    assert leaked == [], f"user input became SQL: {leaked[:3]}"


def test_the_sql_audit_sees_a_value_pasted_into_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The canary can fail: a query built from the marker shows up in the audit."""
    audit = tmp_path / "audit.log"
    monkeypatch.setenv(SQL_AUDIT_ENV, str(audit))
    with Store(str(tmp_path / "s.duckdb")) as s:
        s.scalar(f"SELECT count(*) FROM runs WHERE run_id = '{SQLI[1]}'")  # the bug it catches
    with pytest.raises(AssertionError, match="user input became SQL"):
        assert_no_marker_in_sql(audit)
    monkeypatch.delenv(SQL_AUDIT_ENV)
    with Store(str(tmp_path / "s.duckdb")) as s:  # off: the plain DuckDB connection
        assert isinstance(s.cursor(), duckdb.DuckDBPyConnection)


def test_crafted_callback_payloads_reach_no_sql_and_break_nothing(
    dev_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every declared callback, hostile values in every input, and hostile URLs, against a
    server that holds the store read-write (so an injection could write): no 5xx, nothing
    changed, and no SQL the server ran contains the payloads' marker."""
    path = tmp_path / "rw.duckdb"
    shutil.copy(dev_store, path)
    with Store(str(path)) as s:  # runs named like the payloads: they pass the "known run" check
        assert store_records(s, "runs", [{"run": p, "gpus": 8} for p in SQLI]).stored == len(SQLI)
    before = _counts(path)
    srv, audit = audited_server(
        ["serve", "--store", str(path), "--accept-ingest"], tmp_path, monkeypatch
    )
    try:
        report = fuzz_callbacks(srv.url, rounds=4, seed=7)
        urls = fuzz_urls(srv.url)
    finally:
        srv.stop()
    assert report["sent"] >= 60
    assert report["failures"] == [], report["failures"][:3]
    assert urls["failures"] == [], urls["failures"][:3]
    # Callbacks answered with the hostile values: they reached the code that queries.
    assert report["echoed"] >= 5, report
    assert_no_marker_in_sql(audit)
    assert _counts(path) == before
    for leak in ("/tmp/leak.csv", "/tmp/evil.duckdb"):
        assert not Path(leak).exists()


def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url, data=data, method="POST", headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _hostile_records(now: str) -> dict[str, list[dict[str, Any]]]:
    """Each record kind with the payloads in every free-text field."""
    return {
        "runs": [{"run": p, "name": p, "gpu_model": p, "gpus": 8} for p in SQLI],
        "metrics": [{"run": p, "step": 1, "loss": 1.0, "ts": now} for p in SQLI],
        "interruptions": [
            {
                "run": p,
                "ts": now,
                "host": p,
                "component": p,
                "category": CATEGORIES[0],
                "description": p,
            }
            for p in SQLI
        ],  # fmt: skip
        "checkpoints": [{"run": p, "step": 1, "tier": "nvme", "end_ts": now} for p in SQLI]
        + [{"run": "job", "step": 1, "tier": SQLI[1], "end_ts": now}],  # refused, with reason
    }


def _hostile_round() -> bytes:
    """A scrape round whose exporter names its host (and whose target is labelled) by a
    payload: those become stored ``gpus``/``nodes`` rows."""
    page = (DCGM_FIXTURES / "default_h100.txt").read_text()
    page = page.replace('Hostname="dgx-h100-017"', f'Hostname="{SQLI[1]}"')
    target = Target("http://n1:9400/metrics", {"job": SQLI[0]})
    return encode_round(datetime.utcnow(), [Fetch(target, page, None, 0.1, 200)], 15.0)


def test_hostile_ingest_bodies_are_stored_as_values_never_as_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "ingest.duckdb"
    srv, audit = audited_server(
        ["serve", "--store", str(store), "--accept-ingest"], tmp_path, monkeypatch
    )
    now = datetime.utcnow().replace(microsecond=0).isoformat() + "Z"
    api = srv.url + "/api/v1/"
    try:
        for kind, records in _hostile_records(now).items():
            status, rep = _post(api + kind, records, {"X-Batch-Id": f"{MARKER}-{kind}"})
            assert status == 200 and rep["stored"] == len(SQLI), (kind, rep)
        assert MARKER in rep["rejected"][0]["reason"]  # the bad tier, quoted back
        status, rep = _post(api + "metrics", [], {"X-Batch-Id": SQLI[1]})
        assert status == 400 and "X-Batch-Id" in rep["error"]
        round_hdrs = {"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"}
        status, rep = _post(
            api + "scrape", _hostile_round(), {**round_hdrs, "X-Batch-Id": f"{MARKER}-round"}
        )
        assert status == 200 and rep["samples"] > 0, rep
        urls = fuzz_urls(srv.url)
    finally:
        srv.stop()
    assert urls["failures"] == [], urls["failures"][:3]
    like = [f"%{MARKER}%"]
    with Store(str(store), read_only=True) as s:  # the payloads arrived, as values
        for table, column in [
            ("runs", "run_id"),
            ("runs", "gpu_model"),
            ("train_metrics", "run_id"),
            ("interruptions", "host"),
            ("interruptions", "description"),
            ("checkpoints", "run_id"),
            ("gpus", "host"),
            ("ingest_batches", "batch_id"),
        ]:
            n = s.scalar(f"SELECT count(*) FROM {table} WHERE {column} LIKE ?", like)
            assert n > 0, (table, column)
    assert_no_marker_in_sql(audit)


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


# -- body limits: every endpoint refuses what it will not read, with a reason -----------------
@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("limits")
    srv = start_server(
        ["serve", "--store", str(tmp / "s.duckdb"), "--accept-ingest"], tmp / "serve.log"
    )
    yield srv
    srv.stop()


def raw_request(
    srv: Server,
    path: str,
    headers: dict[str, str],
    body: bytes = b"",
    chunked: bool = False,
    method: str = "POST",
) -> tuple[int, str]:
    """A request with exactly these headers, which urllib would correct: a Content-Length larger
    than the body sent, or a chunked body with none. Returns the status and the reason."""
    url = urllib.parse.urlsplit(srv.url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        payload: Any = iter([body]) if chunked else body  # an iterator is sent chunked
        conn.request(method, path, body=payload, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read())["error"]
    finally:
        conn.close()


_ROUND_HEADERS = {"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"}
_JSON = {"Content-Type": "application/json"}
_ENDPOINT_LIMITS = [
    ("/api/v1/scrape", {**_ROUND_HEADERS, "X-Batch-Id": "too-big"}, MAX_ROUND_BODY),
    *[(f"/api/v1/{k}", _JSON, MAX_JSON_BODY) for k in ("metrics", "interruptions", "checkpoints")],
    ("/api/v1/runs", _JSON, MAX_JSON_BODY),
    ("/login", {"Content-Type": "application/x-www-form-urlencoded"}, MAX_DASH_BODY),
    ("/_dash-update-component", _JSON, MAX_DASH_BODY),
]


@pytest.mark.parametrize("path, headers, limit", _ENDPOINT_LIMITS)
def test_a_body_over_the_limit_is_refused_before_it_is_read(
    ingest: Server, path: str, headers: dict[str, str], limit: int
) -> None:
    """The declared length alone decides: 2 bytes are sent, so a server that read the body
    first would wait for the rest and time out instead of answering."""
    status, reason = raw_request(ingest, path, {**headers, "Content-Length": str(limit + 1)}, b"{}")
    assert status == 413 and f"{limit + 1:,} bytes is over" in reason, reason


def test_round_limits_bound_what_two_decoding_slots_hold() -> None:
    """Two rounds decode at once; each holds its body and decoded text (the review found
    2 x (512 MB + 1 GiB) before). A 2,048-node round is ~15 MB gzip'd, ~130 MB decoded."""
    assert 15 * 2**20 < MAX_ROUND_BODY and 130 * 2**20 < MAX_ROUND_DECODED
    assert 2 * (MAX_ROUND_BODY + MAX_ROUND_DECODED) <= 2**30


@pytest.mark.parametrize(
    "path, headers",
    [
        ("/api/v1/metrics", _JSON),
        ("/api/v1/scrape", {**_ROUND_HEADERS, "X-Batch-Id": "chunked"}),
        ("/_dash-update-component", _JSON),
    ],
)
def test_a_body_without_a_length_is_refused(
    ingest: Server, path: str, headers: dict[str, str]
) -> None:
    status, reason = raw_request(ingest, path, headers, b"[]", chunked=True)
    assert status == 411 and "Content-Length" in reason, reason


@pytest.mark.parametrize(
    "path, headers, body, words",
    [
        ("/api/v1/metrics", _JSON, b'{"run": "caf\xe9", "step": 1, "loss": 1}', "not UTF-8"),
        ("/api/v1/runs", _JSON, json.dumps({"run": "x"}).encode("utf-16"), "not UTF-8"),
        ("/api/v1/metrics", _JSON, b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
        (
            "/api/v1/scrape",
            {**_ROUND_HEADERS, "X-Batch-Id": "deep"},
            gzip.compress(b"[" * 50_000 + b"]" * 50_000),
            "nested too deeply",
        ),
        ("/_dash-update-component", _JSON, b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    ],
)
def test_a_body_the_server_cannot_read_is_a_400_with_a_reason(
    ingest: Server, path: str, headers: dict[str, str], body: bytes, words: str
) -> None:
    """Not a 500: Python's JSON parser raises RecursionError on deep nesting, and a Latin-1 or
    UTF-16 body is not the UTF-8 that JSON is."""
    status, reason = raw_request(ingest, path, {**headers, "Content-Length": str(len(body))}, body)
    assert status == 400 and words in reason, reason


@pytest.mark.parametrize(
    "method, path, want, words",
    [
        ("POST", "/api/v1/metric", 404, "no endpoint /api/v1/metric;"),
        ("GET", "/api/v1/metrics", 405, "takes POST only"),
        ("DELETE", "/api/v1/runs", 405, "takes POST only"),
        ("POST", "/api/v1/health", 405, "takes GET only"),
    ],
)
def test_an_unknown_endpoint_or_method_is_a_4xx_with_a_reason(
    ingest: Server, method: str, path: str, want: int, words: str
) -> None:
    """Not the dashboard's catch-all page route (a 200 HTML page, or a bare HTML 405)."""
    status, reason = raw_request(
        ingest, path, {**_JSON, "Content-Length": "2"}, b"[]", method=method
    )
    assert status == want and words in reason, reason
