"""The ingest HTTP API on a real server: training metrics and run events, and property-based
fuzzing of every ingest endpoint with random and mutated bodies (no 5xx, every record
accounted for as stored or rejected, the store intact)."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.collect.scrape import Fetch, Target
from telemetry.collect.wire import CONTENT_TYPE, encode_round
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES, Server, start_server

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
