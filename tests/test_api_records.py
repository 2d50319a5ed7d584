"""The ingest HTTP API on a real server: training metrics and run events, property-based
fuzzing of every ingest endpoint with random and mutated bodies (no 5xx, every record
accounted for as stored or rejected, the store intact), and the write limits: the in-flight
cap (429 with Retry-After) and rounds over the decoded bound stored in parts, exactly once."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.ingest.forward import Forwarder
from telemetry.ingest.http import Limits
from telemetry.ingest.spool import Spool
from telemetry.ingest.targets import Fetch, Target
from telemetry.ingest.wire import CONTENT_TYPE, encode_round
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES, Server, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

HOSTILE = ["<img src=x onerror=alert(1)>", "'; DROP TABLE runs; --", "x" * 300, "\x00\x1b[31m"]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api")
    srv = start_server(
        ["serve", "--store", str(tmp / "api.duckdb"), "--accept-ingest"], tmp / "serve.log"
    )
    srv.store = tmp / "api.duckdb"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def post(
    srv: Server,
    path: str,
    body: Any,
    ctype: str = "application/json",
    raw: bool = False,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(
        srv.url + path,
        data=data,
        method="POST",
        headers={"Content-Type": ctype, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_metrics_posted_by_a_training_loop_are_stored(api: Server) -> None:
    now = datetime.utcnow().replace(microsecond=0).isoformat() + "Z"
    recs = [{"run": "job-a", "step": s, "ts": now, "loss": 3.0 - s / 100} for s in range(50)]
    status, rep = post(api, "/api/v1/metrics", recs)
    assert status == 200 and rep["stored"] == 50 and rep["rejected"] == []
    status, rep = post(api, "/api/v1/metrics", {"run": "job-a", "step": 50, "loss": 2.5, "los": 1})
    assert status == 200 and rep["ignored_fields"] == {"los": 1}  # a typo is reported


def test_a_partly_bad_batch_stores_the_good_and_lists_the_bad(api: Server) -> None:
    recs: list[Any] = [
        {"run": "job-b", "step": 1, "loss": 2.0},
        {"run": "job-b", "step": -1, "loss": 2.0},
        {"run": "job-b", "step": 2, "loss": float("nan")},
        "not an object",
        {"run": "job-b", "step": 3, "loss": 1.9, "ts": "3026-01-01T00:00:00Z"},
        {"run": "job-b", "step": 4, "loss": 1.8},
    ]
    body = json.dumps(recs).replace("NaN", "NaN").encode()  # Python writes NaN; JSON has none
    status, rep = post(api, "/api/v1/metrics", body, raw=True)
    assert status == 200 and rep["stored"] == 2
    assert [r["index"] for r in rep["rejected"]] == [1, 2, 3, 4]
    assert all(r["reason"] for r in rep["rejected"])


@pytest.mark.parametrize(
    "path, body, ctype, want, words",
    [
        ("/api/v1/metrics", [{"run": "x"}], "application/json", 422, "no valid records"),
        ("/api/v1/metrics", [], "application/json", 422, "no records"),
        ("/api/v1/metrics", b"{oops", "application/json", 400, "not JSON"),
        (
            "/api/v1/metrics",
            {"run": "x", "step": 1, "loss": 1},
            "text/plain",
            415,
            "application/json",
        ),
        (
            "/api/v1/checkpoints",
            {"run": "x", "step": 1, "tier": "floppy"},
            "application/json",
            422,
            "no valid records",
        ),
    ],
)
def test_what_the_api_cannot_take_is_a_4xx_with_a_reason(
    api: Server, path: str, body: Any, ctype: str, want: int, words: str
) -> None:
    status, rep = post(api, path, body, ctype=ctype, raw=isinstance(body, bytes))
    assert status == want and words in rep["error"], rep


def test_an_oversized_body_is_refused_before_it_is_read(api: Server) -> None:
    status, rep = post(api, "/api/v1/metrics", b"[" + b" " * (17 * 2**20) + b"]", raw=True)
    assert status == 413 and "over this endpoint" in rep["error"]


def test_hostile_strings_are_stored_as_text(api: Server) -> None:
    recs = [{"run": h[:256], "step": 1, "loss": 1.0} for h in HOSTILE]
    status, rep = post(api, "/api/v1/metrics", recs)
    assert status == 200
    stored = {h for h in HOSTILE if len(h) <= 256 and "\x00" not in h and "\x1b" not in h}
    assert rep["stored"] == len(recs) - len(rep["rejected"]) >= len(stored) - 1
    status, rep = post(api, "/api/v1/runs", {"run": "'; DROP TABLE runs; --", "gpus": 8})
    assert status == 200


def test_a_rejected_batch_does_not_use_up_its_id(api: Server) -> None:
    """A batch with nothing valid is refused (422); the corrected retry under the same id is
    stored, not answered 'duplicate'."""
    hdr = {"X-Batch-Id": "retry-after-fix"}
    status, _ = post(api, "/api/v1/metrics", [{"run": "job-c", "step": "one"}], headers=hdr)
    assert status == 422
    status, rep = post(
        api, "/api/v1/metrics", [{"run": "job-c", "step": 1, "loss": 2}], headers=hdr
    )
    assert status == 200 and rep["stored"] == 1 and not rep["duplicate"]


# -- fuzzing ----------------------------------------------------------------------------------
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=5)
    ),
    max_leaves=20,
)
_field_names = st.sampled_from(
    [
        "run",
        "step",
        "ts",
        "loss",
        "tokens",
        "lr",
        "grad_norm",
        "mfu",
        "tier",
        "end_ts",
        "start_ts",
        "component",
        "category",
        "host",
        "gpu",
        "xid",
        "planned",
        "bytes",
        "write_s",
        "name",
        "gpus",
    ]
)
_record = st.dictionaries(_field_names, _json, max_size=8) | _json
_FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(
    endpoint=st.sampled_from(["metrics", "interruptions", "checkpoints", "runs"]),
    records=st.lists(_record, min_size=1, max_size=6),
)
def test_random_records_never_break_an_endpoint(
    api: Server, endpoint: str, records: list[Any]
) -> None:
    status, rep = post(api, f"/api/v1/{endpoint}", records)
    assert status in (200, 422), rep
    assert rep["stored"] + len(rep["rejected"]) == len(records)


PAGE = (DCGM_FIXTURES / "default_h100.txt").read_text()
NODE_PAGE = len(json.dumps(PAGE)) + 150  # one node's fetch on the wire (8 GPUs), and a margin
_ROUND = encode_round(
    datetime.utcnow(), [Fetch(Target("http://n1:9400/metrics"), PAGE, None, 0.1, 200)], 15.0
)


@_FUZZ
@given(data=st.data())
def test_mutated_scrape_rounds_are_refused_cleanly(api: Server, data: st.DataObject) -> None:
    doc = json.loads(gzip.decompress(_ROUND))
    how = data.draw(st.sampled_from(["bytes", "field", "text"]))
    if how == "bytes":  # flip bytes of the gzip'd body
        body = bytearray(_ROUND)
        for i in data.draw(st.lists(st.integers(0, len(body) - 1), min_size=1, max_size=8)):
            body[i] ^= data.draw(st.integers(1, 255))
        raw = bytes(body)
    else:
        if how == "field":
            key = data.draw(st.sampled_from(["ts", "interval_s", "fetches", "format"]))
            doc[key] = data.draw(_json)
        else:
            f = doc["fetches"][0]
            f[data.draw(st.sampled_from(list(f)))] = data.draw(_json)
        raw = gzip.compress(json.dumps(doc).encode())
    status, rep = post(
        api,
        "/api/v1/scrape",
        raw,
        ctype=CONTENT_TYPE,
        raw=True,
        headers={"Content-Encoding": "gzip", "X-Batch-Id": f"fuzz-{data.draw(st.uuids())}"},
    )
    assert status in (200, 400), rep  # stored (a still-valid round) or refused with a reason
    assert "error" in rep or "samples" in rep or rep.get("duplicate") is True


def test_after_the_fuzzing_the_store_is_intact_and_the_log_clean(api: Server) -> None:
    api.stop()
    log = api.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    with Store(str(api.store), read_only=True) as s:  # type: ignore[attr-defined]
        assert s.scalar("SELECT count(*) FROM train_metrics WHERE run_id = 'job-a'") == 51
        names = {r[0] for r in s.rows("SELECT run_id FROM runs")}
        assert "'; DROP TABLE runs; --" in names and "<img src=x onerror=alert(1)>" in names


# -- limits: in-flight writes, oversized rounds ------------------------------------------------
# A real HTTP server on 127.0.0.1 in this process, mounting what ``serve`` mounts for writes
# (the guard, the ingest API, the corrections API) with limits lowered so a test can reach them.

OPERATOR = "limits-operator-token-0123456789"


class Limited:
    def __init__(self, path: Path, limits: Limits) -> None:
        from flask import Flask
        from werkzeug.serving import make_server

        from app import guard
        from telemetry.ingest.http_api import IngestService, make_blueprint
        from telemetry.label_api import make_label_blueprint

        self.store = Store(str(path))
        service = IngestService(self.store, limits=limits)
        app = Flask("limits")
        guard.install(app, None)
        app.register_blueprint(make_blueprint(service, None))
        app.register_blueprint(make_label_blueprint(self.store, OPERATOR, service.gate))
        self.http = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.http.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.store.close()


@pytest.fixture
def limited(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Limited]:
    srv = Limited(tmp_path / "limits.duckdb", request.param)
    yield srv
    srv.close()


def _raw(port: int, path: str, headers: dict[str, str], body: bytes) -> socket.socket:
    """A request whose headers and the first ``body`` bytes are sent, the rest held back."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode() + body)
    return sock


def _status(sock: socket.socket) -> int:
    return int(sock.recv(65536).split(b" ", 2)[1])


def _post_status(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(url + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers
    except urllib.error.HTTPError as exc:
        return exc.code, (exc.headers, json.loads(exc.read()))


@pytest.mark.parametrize("limited", [Limits(max_writes=1)], indirect=True)
@pytest.mark.parametrize(
    "path, headers",
    [
        ("/api/v1/metrics", {"Content-Type": "application/json"}),
        ("/api/v1/interruptions/label",
         {"Content-Type": "application/json", "X-Operator-Token": OPERATOR}),
    ],
)  # fmt: skip
def test_a_write_over_the_in_flight_cap_is_429_with_retry_after(
    limited: Limited, path: str, headers: dict[str, str]
) -> None:
    body = json.dumps({"run": "cap", "step": 1, "loss": 1.0}).encode()
    # One write in flight: its body arrives slowly (a slow client holds its slot).
    held = _raw(limited.port, path, {**headers, "Content-Length": str(len(body))}, body[:5])
    time.sleep(0.3)
    status, (resp_headers, reply) = _post_status(limited.url, path, body, headers)
    assert status == 429 and resp_headers["Retry-After"] == "1", reply
    assert "1 writes already in flight" in reply["error"]
    held.sendall(body[5:])  # the first write completes and frees its slot
    assert _status(held) in (200, 400)  # stored (metrics) / no interruption there (label)
    held.close()
    assert _post_status(limited.url, path, body, headers)[0] in (200, 400)


def _fleet_round(nodes: int, ts: datetime) -> list[Fetch]:
    return [
        Fetch(Target(f"http://node-{i:03d}:9400/metrics"), PAGE.replace(
            'Hostname="dgx-h100-017"', f'Hostname="node-{i:03d}"'), None, 0.1, 200)
        for i in range(nodes)
    ]  # fmt: skip


def _stored(store: Store, ts: datetime) -> tuple[int, int, int]:
    """(targets rows, GPU sample rows, distinct GPUs) of the round at ``ts``."""
    return (
        store.scalar("SELECT count(*) FROM targets WHERE ts = ?", [ts]),
        store.scalar("SELECT count(*) FROM gpu_samples WHERE ts = ?", [ts]),
        store.scalar("SELECT count(DISTINCT gpu_id) FROM gpu_samples WHERE ts = ?", [ts]),
    )


@pytest.mark.parametrize("limited", [Limits(round_decoded=3 * NODE_PAGE)], indirect=True)
def test_a_round_over_the_decoded_bound_is_stored_in_parts_exactly_once(
    limited: Limited, tmp_path: Path
) -> None:
    """The forwarder knows the bound: 8 nodes go as parts of at most 3 nodes' text, each
    stored once; a part delivered again is a duplicate; the parts of two identical rounds
    continue every target's unchanged count (the sink takes the parts as one round)."""
    spool = Spool(tmp_path / "spool", 2**30)
    fwd = Forwarder(limited.url, spool, log=lambda _l: None, max_round_bytes=3 * NODE_PAGE)
    t0 = datetime.utcnow().replace(microsecond=0)
    assert fwd.submit(t0, _fleet_round(8, t0), 15.0)
    parts = spool.pending()
    assert len(parts) == 3 and fwd.split == 1
    kept = [(p.batch_id, p.read()) for p in parts]
    assert fwd.drain() and fwd.delivered == 3 and fwd.rejected == 0
    assert _stored(limited.store, t0) == (8, 64, 64)
    for bid, body in kept:  # redelivered (a crash before the ack): stored once all the same
        spool.put(body, bid)
    assert fwd.drain() and fwd.duplicates == 3
    assert _stored(limited.store, t0) == (8, 64, 64)
    t1 = t0 + timedelta(seconds=15)
    assert fwd.submit(t1, _fleet_round(8, t1), 15.0) and fwd.drain()
    unchanged = limited.store.rows("SELECT target, unchanged FROM targets WHERE ts = ?", [t1])
    assert len(unchanged) == 8 and {u for _, u in unchanged} == {1}, unchanged


@pytest.mark.parametrize("limited", [Limits(round_decoded=3 * NODE_PAGE)], indirect=True)
def test_a_round_the_server_finds_too_large_is_split_on_its_413(
    limited: Limited, tmp_path: Path
) -> None:
    """A forwarder with a larger bound (or a round spooled before the server's bound was
    lowered): the server's 413 names its bound, the forwarder splits the spooled round into
    parts under ids derived from the batch's and delivers them; a split repeated after a
    crash (the round still spooled) sends the same ids, stored once."""
    spool = Spool(tmp_path / "spool", 2**30)
    lines: list[str] = []
    fwd = Forwarder(limited.url, spool, log=lines.append)
    t0 = datetime.utcnow().replace(microsecond=0)
    assert fwd.submit(t0, _fleet_round(8, t0), 15.0)
    (whole,) = spool.pending()
    body = whole.read()
    assert fwd.drain() and fwd.split == 1 and fwd.rejected == 0, lines
    assert any("split into 3 parts" in line for line in lines), lines
    assert _stored(limited.store, t0) == (8, 64, 64)
    spool.put(body, whole.batch_id)  # as if the forwarder died before removing it
    assert fwd.drain() and fwd.duplicates == 3
    assert _stored(limited.store, t0) == (8, 64, 64)
    batches = limited.store.scalar("SELECT count(*) FROM ingest_batches")
    assert batches == 3


@pytest.mark.parametrize("limited", [Limits(round_decoded=NODE_PAGE // 2)], indirect=True)
def test_a_single_target_over_the_bound_is_refused_with_the_reason(
    limited: Limited, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 2**30)
    lines: list[str] = []
    fwd = Forwarder(limited.url, spool, log=lines.append)
    t0 = datetime.utcnow().replace(microsecond=0)
    assert fwd.submit(t0, _fleet_round(1, t0), 15.0) and fwd.drain()
    assert fwd.rejected == 1 and not spool.pending()
    assert any("once decompressed" in line for line in lines), lines
    assert _stored(limited.store, t0) == (0, 0, 0)
