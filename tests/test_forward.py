"""The forwarding deployment: ingest daemon -> HTTP -> `serve --accept-ingest` -> store.

Everything is real: a dcgm-exporter endpoint on 127.0.0.1, the server and the daemon as
subprocesses of the real CLI, the spool on disk, the store a DuckDB file.
"""

from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from telemetry.ingest.spool import Spool, SpoolError
from telemetry.ingest.targets import Fetch, Target
from telemetry.ingest.wire import CONTENT_TYPE, WireError, decode_round, encode_round
from telemetry.store import Store
from tests.conftest import ROOT, Server, cli, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

PAGE = (ROOT / "sample_data" / "dcgm" / "default_h100.txt").read_text()


@pytest.fixture(scope="module")
def exporter(exporter: str) -> str:
    """The conftest exporter's default H100 page, as a daemon's --target."""
    return f"{exporter}/default_h100/metrics"


def _fetch(url: str = "http://node1:9400/metrics") -> Fetch:
    return Fetch(Target(url), PAGE, None, 0.01, 200)


def _stored_rounds(path: Path) -> list[tuple[datetime, int]]:
    """(round time, rows) per scrape round in the store: one targets row per target and round."""
    with Store(str(path), read_only=True) as s:
        return s.rows("SELECT ts, count(*) FROM targets GROUP BY ts ORDER BY ts")


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


# -- the wire format and the spool ---------------------------------------------------------------
def test_a_round_survives_the_wire() -> None:
    ts = datetime.utcnow().replace(microsecond=0)
    got_ts, interval, fetches = decode_round(encode_round(ts, [_fetch()], 15.0))
    assert (got_ts, interval) == (ts, 15.0)
    assert fetches[0].target.url == "http://node1:9400/metrics" and fetches[0].text == PAGE


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"not gzip", "not gzip"),
        (gzip.compress(b"{not json"), "not JSON"),
        (gzip.compress(b'{"format": "other"}'), "factoryfloor-round/1"),
        (gzip.compress(b"x" * 2000)[:-8], "truncated"),
        (gzip.compress(b" " * 5000), "larger than"),
    ],
)
def test_a_bad_round_is_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode_round(body, max_bytes=4096)


def test_a_round_with_a_hostile_target_is_refused() -> None:
    doc = json.loads(gzip.decompress(encode_round(datetime.utcnow(), [_fetch()], 15.0)))
    doc["fetches"][0]["url"] = "http://x';DROP/**/TABLE/**/gpus;--:9400/metrics"
    with pytest.raises(WireError, match="bad host"):
        decode_round(gzip.compress(json.dumps(doc).encode()))


def test_the_spool_is_durable_ordered_bounded_and_owned(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "sp", max_bytes=250)
    a, b = spool.put(b"a" * 100), spool.put(b"b" * 100)
    assert a is not None and b is not None
    assert spool.put(b"c" * 100) is None  # full: refused, the older two kept
    with pytest.raises(SpoolError, match="in use by PID"):
        Spool(tmp_path / "sp", max_bytes=250)  # one daemon per spool
    (tmp_path / "sp" / "000000000009-x.part").write_bytes(b"half")  # a crash mid-write
    spool.close()
    again = Spool(tmp_path / "sp", max_bytes=250)
    assert [i.read() for i in again.pending()] == [b"a" * 100, b"b" * 100]
    assert not list((tmp_path / "sp").glob("*.part"))
    again.ack(again.pending()[0])
    assert again.put(b"d" * 100) is not None  # room again, and after b in order
    assert [i.read()[:1] for i in again.pending()] == [b"b", b"d"]


# -- the server's API ------------------------------------------------------------------------------
@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    tok = tmp_path / "token"
    tok.write_text("s3cret-token-for-tests\n")
    srv = start_server(
        [
            "serve",
            "--store",
            str(tmp_path / "srv.duckdb"),
            "--accept-ingest",
            "--token-file",
            str(tok),
        ],
        tmp_path / "serve.log",
    )
    srv.token_file = tok  # type: ignore[attr-defined]
    srv.store = tmp_path / "srv.duckdb"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def test_the_scrape_endpoint_stores_a_batch_once_and_refuses_what_it_cannot_take(
    server: Server,
) -> None:
    url = server.url + "/api/v1/scrape"
    body = encode_round(datetime.utcnow(), [_fetch()], 15.0)
    good = {
        "Content-Type": CONTENT_TYPE,
        "Content-Encoding": "gzip",
        "X-Batch-Id": "batch-1",
        "Authorization": "Bearer s3cret-token-for-tests",
    }
    status, reply = _post(url, body, good)
    assert status == 200 and reply["samples"] > 0 and reply["duplicate"] is False
    status, reply = _post(url, body, good)  # a retry after a lost reply
    assert status == 200 and reply["duplicate"] is True
    cases = [
        ({**good, "Authorization": "Bearer wrong"}, body, 401, "token"),
        ({k: v for k, v in good.items() if k != "Authorization"}, body, 401, "token"),
        ({**good, "Content-Type": "text/plain"}, body, 415, "Content-Type"),
        ({**good, "X-Batch-Id": "../../etc/passwd"}, body, 400, "X-Batch-Id"),
        ({k: v for k, v in good.items() if k != "X-Batch-Id"}, body, 400, "X-Batch-Id"),
        ({**good, "X-Batch-Id": "b2"}, b"garbage", 400, "gzip"),
    ]
    for headers, data, want, words in cases:
        status, reply = _post(url, data, headers)
        assert status == want and words in reply["error"], (headers, reply)
    server.stop()
    assert len(_stored_rounds(server.store)) == 1  # type: ignore[attr-defined]


def test_a_read_only_server_says_how_to_accept_ingest(dev_server: Server) -> None:
    status, reply = _post(
        dev_server.url + "/api/v1/metrics",
        b'{"run": "r", "step": 1, "loss": 2.0}',
        {"Content-Type": "application/json"},
    )
    assert status == 503 and "--accept-ingest" in reply["error"]


# -- the daemon -----------------------------------------------------------------------------------
def _ingest(server_url: str, spool: Path, exporter: str, token: Path, *extra: str) -> list[str]:
    return [
        "ingest",
        "--server",
        server_url,
        "--spool",
        str(spool),
        "--target",
        exporter,
        "--token-file",
        str(token),
        *extra,
    ]


def test_the_spool_delivers_everything_once_the_server_is_back(
    tmp_path: Path, exporter: str
) -> None:
    tok = tmp_path / "token"
    tok.write_text("another-long-test-token")
    store = tmp_path / "srv.duckdb"
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    for _ in range(3):  # the server is down: each run spools its round and says so
        r = cli(*_ingest(dead, tmp_path / "spool", exporter, tok, "--once"))
        assert r.returncode == 3, r.stderr
        assert "rounds stay in" in r.stderr
    assert len(list((tmp_path / "spool").glob("*.batch"))) == 3
    srv = start_server(
        ["serve", "--store", str(store), "--accept-ingest", "--token-file", str(tok)],
        tmp_path / "serve.log",
    )
    try:
        r = cli(*_ingest(srv.url, tmp_path / "spool", exporter, tok, "--once"))
        assert r.returncode == 0, r.stderr
        assert "3 spooled rounds from an earlier run" in r.stderr
    finally:
        srv.stop()
    rounds = _stored_rounds(store)
    assert len(rounds) == 4 and all(n == 1 for _, n in rounds)  # every round, once
    assert not list((tmp_path / "spool").glob("*.batch"))


def test_the_server_scrapes_by_itself_from_a_scrape_config(tmp_path: Path, exporter: str) -> None:
    cfg = tmp_path / "scrape.yaml"
    cfg.write_text(f"interval: 1\ntimeout: 0.5\ntargets: ['{exporter}']\n")
    store = tmp_path / "srv.duckdb"
    srv = start_server(
        ["serve", "--store", str(store), "--scrape-config", str(cfg)], tmp_path / "serve.log"
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with urllib.request.urlopen(srv.url + "/api/v1/health", timeout=5) as r:
                if json.loads(r.read()).get("rounds", 0) >= 2:
                    break
            time.sleep(0.5)
    finally:
        srv.stop()
    assert len(_stored_rounds(store)) >= 2


@pytest.mark.parametrize(
    "args, words",
    [
        (["--server", "ftp://x", "--target", "a:1"], "not an http(s) URL"),
        (
            ["--server", "http://127.0.0.1:9", "--store", "x.duckdb", "--target", "a:1"],
            "not allowed with argument",
        ),
        (["--target", "a:1"], "one of the arguments --store --server is required"),
    ],
)
def test_ingest_argument_errors_are_one_line(args: list[str], words: str, tmp_path: Path) -> None:
    r = cli("ingest", "--spool", str(tmp_path / "sp"), *args)
    assert r.returncode != 0 and words in r.stderr
    assert "Traceback" not in r.stderr


def test_a_full_spool_keeps_the_old_rounds_and_says_so(tmp_path: Path, exporter: str) -> None:
    args = [
        "ingest",
        "--server",
        "http://127.0.0.1:9",
        "--spool",
        str(tmp_path / "sp"),
        "--target",
        exporter,
        "--spool-max-mb",
        "0.004",
        "--once",
    ]  # room for one round
    first, second = cli(*args), cli(*args)
    assert first.returncode == second.returncode == 3
    assert "spooled" in first.stderr
    assert "is full" in second.stderr and "NOT kept" in second.stderr, second.stderr
    assert len(list((tmp_path / "sp").glob("*.batch"))) == 1
