"""Property-based fuzzing of everything a stranger can send: Hypothesis throws generated callback
envelopes, record batches, forwarded rounds (around generated exposition texts), label requests
and exposition texts at the server's real endpoints and at the parser. None may answer 5xx,
show a traceback, crash the server, or, when it must be refused, change what is stored.

Budget: ``FACTORYFLOOR_FUZZ_EXAMPLES`` inputs in all (default ``CI_BUDGET``, well under a minute;
``benchmarks/reliability.py --fuzz 100000`` runs the full one and reports the counts). The bulk
goes through the app's Flask test client in this process (the same app, guard and blueprints
``serve`` mounts, over a copy of the dev store); a live ``factoryfloor serve --accept-ingest``
over HTTP gets every generator too, with a smaller share."""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import re
import shutil
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.ingest.exposition import parse
from telemetry.ingest.http import LogThrottle
from telemetry.store import Store
from tests.conftest import Server, start_server
from tests.fuzz_inputs import (
    Sent,
    budget,
    envelopes,
    expositions,
    labels,
    record_batches,
    rounds,
)

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

OPERATOR = "fuzz-operator-token-0123456789"
COUNTS: Counter[str] = Counter()
# Shares of the budget; an envelope that runs a real callback costs ~50 ms, a parse ~5 ms.
SHARES = {"envelopes": 0.20, "refused": 0.15, "records": 0.15, "rounds": 0.08,
          "exposition": 0.32, "live": 0.10}  # fmt: skip
HEALTH_ONLY = {"targets"}  # a refused post's health row: the one write a refusal makes


def _settings(share: str, floor: int = 50) -> Callable[[Any], Any]:
    return settings(
        max_examples=max(floor, int(budget() * SHARES[share])),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def digest(store: Store | Path, skip: set[str] = frozenset()) -> dict[str, tuple[int, int]]:  # type: ignore[assignment]
    """(rows, XOR of row hashes) per base table: equal digests, equal contents."""
    s = store if isinstance(store, Store) else Store(str(store), read_only=True)
    try:
        names = s.rows(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        )
        return {
            n: tuple(s.rows(f"SELECT count(*), coalesce(bit_xor(hash(t)), 0) FROM {n} t")[0])
            for (n,) in names
            if n not in skip
        }
    finally:
        if not isinstance(store, Store):
            s.close()


def check(status: int, body: bytes, sent: Sent) -> None:
    """What every answer must be: below 500, without a stack, a reason in JSON when refused,
    and a refusal for what must be refused."""
    text = body.decode("utf-8", "replace")
    assert status < 500, (status, text[:300], sent)
    assert "Traceback" not in text and 'File "' not in text, text[:300]
    if status >= 400:
        assert isinstance(json.loads(text).get("error"), str), text[:300]
    if sent.refused:
        assert 400 <= status < 500, (status, text[:300], sent)


# -- the app in this process ------------------------------------------------------------------


class App:
    def __init__(self, store: Store, client: Any, deps: list[dict[str, Any]]) -> None:
        self.store, self.client, self.deps = store, client, deps

    def send(self, sent: Sent) -> None:
        r = self.client.open(sent.path, method=sent.method, data=sent.body, headers=sent.headers)
        check(r.status_code, r.get_data(), sent)


@pytest.fixture(scope="module")
def app(dev_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    from app import guard
    from app.main import create_app
    from telemetry.ingest.http_api import IngestService, make_blueprint
    from telemetry.label_api import make_label_blueprint
    from telemetry.store import open_store

    path = tmp_path_factory.mktemp("fuzz") / "fuzz.duckdb"
    shutil.copy(dev_store, path)
    store = open_store(str(path), read_only=False)
    service = IngestService(store, into_replay=True)  # rounds land in the replay store
    dash_app = create_app(store)  # no operator token: every callback only reads
    guard.install(dash_app.server, None)
    dash_app.server.register_blueprint(make_blueprint(service, None))
    dash_app.server.register_blueprint(make_label_blueprint(store, OPERATOR))
    client = dash_app.server.test_client()
    deps = [d for d in client.get("/_dash-dependencies").get_json() if not d["clientside_function"]]
    yield App(store, client, deps)
    store.close()


@pytest.fixture(autouse=True)
def _report() -> Iterator[None]:
    """After each test, the counts so far to ``FACTORYFLOOR_FUZZ_REPORT`` (a long run that is
    stopped still says how far it got)."""
    yield
    if report := os.environ.get("FACTORYFLOOR_FUZZ_REPORT"):
        Path(report).write_text(json.dumps(dict(COUNTS)))


def test_callback_envelopes_never_fail_the_server_nor_write(app: App) -> None:
    before = digest(app.store)

    @_settings("envelopes")
    @given(st.data())
    def run(data: st.DataObject) -> None:
        app.send(data.draw(envelopes(app.deps)))
        COUNTS["envelopes"] += 1

    run()
    assert digest(app.store) == before  # callbacks read; no envelope writes


def test_what_must_be_refused_is_refused_and_changes_nothing(app: App) -> None:
    before = digest(app.store, HEALTH_ONLY)

    @_settings("refused")
    @given(record_batches(refused_only=True) | rounds(refused_only=True) | labels(OPERATOR))
    def run(sent: Sent) -> None:
        assert sent.refused
        app.send(sent)
        COUNTS["refused"] += 1

    run()
    assert digest(app.store, HEALTH_ONLY) == before


@pytest.mark.parametrize("kind", ["records", "rounds"])
def test_posts_are_stored_or_refused_with_reasons(app: App, kind: str) -> None:
    """Record batches with odd values, and rounds around generated exposition texts: what is
    valid is stored, the rest refused with a reason; never a 5xx."""

    @_settings(kind)
    @given(record_batches() if kind == "records" else rounds())
    def run(sent: Sent) -> None:
        app.send(sent)
        COUNTS[kind] += 1

    run()


def test_the_exposition_parser_never_raises() -> None:
    @_settings("exposition")
    @given(expositions() | st.text(max_size=300))
    def run(text: str) -> None:
        scrape = parse(text)  # never raises: bad lines are counted
        assert len(scrape.errors) <= text.count("\n") + 1
        try:
            parse(text, strict=True)
        except ValueError:
            pass  # strict mode names the first bad line, and raises nothing else
        COUNTS["exposition"] += 1

    run()


# -- a live server ----------------------------------------------------------------------------


def _http(srv: Server, sent: Sent) -> tuple[int, bytes]:
    url = urllib.parse.urlsplit(srv.url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=60)
    try:
        conn.request(sent.method, sent.path, body=sent.body, headers=sent.headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_a_live_server_takes_every_generator(
    dev_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same generators over HTTP to ``factoryfloor serve --accept-ingest``: the process
    survives them all, logs no traceback, and once stopped its store holds nothing they
    brought (refused posts' health rows aside). Only what must be refused, and callback
    envelopes (callbacks only read), is sent, so the store can be compared whole."""
    tmp = tmp_path_factory.mktemp("fuzz-live")
    path = tmp / "live.duckdb"
    shutil.copy(dev_store, path)
    before = digest(path, HEALTH_ONLY)
    (tmp / "operator").write_text(OPERATOR)
    log = tmp / "serve.log"
    srv = start_server(
        ["serve", "--store", str(path), "--accept-ingest", "--ingest-into-replay",
         "--operator-token-file", str(tmp / "operator")],
        log,
    )  # fmt: skip
    try:
        deps = json.loads(_http(srv, Sent("/_dash-dependencies", b"", method="GET"))[1])
        deps = [d for d in deps if not d["clientside_function"]]

        @_settings("live", floor=200)
        @given(
            st.one_of(
                envelopes(deps),
                record_batches(refused_only=True),
                rounds(refused_only=True),
                labels(OPERATOR),
            )
        )
        def run(sent: Sent) -> None:
            check(*_http(srv, sent), sent)
            COUNTS["live"] += 1

        t0 = time.monotonic()
        run()
        elapsed = time.monotonic() - t0
        assert srv.proc.poll() is None, log.read_text()[-2000:]
    finally:
        srv.stop()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    # Apart from the access log's line per request, a few lines per kind of failure at most in
    # each of the throttle's windows (and the line saying how many were left out of the last)
    throttle = LogThrottle(logging.getLogger())
    windows = math.ceil(elapsed / throttle.window_s) + 1
    failures = Counter(m.group(0) for m in re.finditer(r"\S+ failed: \w+", text))
    bound = (throttle.burst + 1) * windows
    assert all(n <= bound for n in failures.values()), (failures, bound)
    assert digest(path, HEALTH_ONLY) == before
