"""Prometheus remote_write 1.0 into ``serve --accept-ingest``: a real Prometheus (Debian's)
scrapes the exporters through file_sd and forwards them with one ``remote_write`` entry (small
batches, so a scrape is split across requests); every round the server writes holds exactly
what a direct scrape of the same exporters stores. Bad bodies, wrong types and a missing token
get the ingest API's clear errors; a resent request is stored once."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import cramjam
import pytest

from telemetry.ingest.remote_write import encode
from telemetry.store import Store
from tests.conftest import Server, cli, start_server
from tests.prom_fixture import COLS, TsdbServer, _frozen_farm, stored  # noqa: F401 (a fixture)
from tests.test_exporters import FarmThread

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

TOKEN = "rw-test-token-0123456789"


def post(
    srv: Server, body: bytes, ctype: str = "application/x-protobuf", enc: str = "snappy",
    token: str | None = TOKEN,
) -> tuple[int, dict[str, Any]]:  # fmt: skip
    headers = {"Content-Type": ctype, "Content-Encoding": enc}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(srv.url + "/api/v1/write", body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def token_server(store: Path) -> Server:
    """``serve --accept-ingest`` into ``store`` with ``TOKEN`` (in a file beside it)."""
    token = store.parent / "token"
    token.write_text(TOKEN + "\n")
    return start_server(
        ["serve", "--store", str(store), "--accept-ingest", "--token-file", str(token)],
        store.parent / "serve.log",
    )


def forwarding(srv: Server, targets: Path) -> TsdbServer:
    """A real Prometheus scraping ``targets`` every 2 s and remote-writing to ``srv`` (a
    ``token_server``: its directory holds the token file and Prometheus's data)."""
    tmp = srv.log.parent
    return TsdbServer("prometheus", tmp, targets, remote_write=f"{srv.url}/api/v1/write",
                      token_file=str(tmp / "token"), interval="2")  # fmt: skip


def test_prometheus_remote_write_stores_what_a_direct_scrape_stores(
    frozen_farm: tuple[FarmThread, Path], tmp_path: Path
) -> None:
    ft, targets = frozen_farm
    sim = ft.farm.sim
    up = sum(not sim.down(n) for n in range(sim.n_hosts))
    direct = tmp_path / "direct.duckdb"
    r = cli("ingest", "--store", str(direct), "--once", "--targets-file", str(targets))
    assert r.returncode == 0, r.stderr
    store = tmp_path / "rw.duckdb"
    srv = token_server(store)
    try:
        with forwarding(srv, targets) as prom:
            prom.wait_scraped(up)
            time.sleep(24)  # windows are written once the data is 5 s past them
        _check_refusals(srv)
    finally:
        srv.stop()
    a = stored(direct)
    with Store(str(store), read_only=True) as s:
        rounds = [r[0] for r in s.rows("SELECT DISTINCT ts FROM gpu_samples ORDER BY 1")]
        # stopped (SIGTERM), the server wrote the windows it still held staged
        assert s.scalar("SELECT count(*) FROM remote_write_staging") == 0
    assert len(rounds) >= 6
    full = judged = 0
    for ts in rounds:
        b = stored(store, ts)
        if ("n1", 0) in b["samples"]:  # the request _check_refusals sent (stored once)
            assert b["samples"][("n1", 0)][COLS.index("temp_c")] == 55.0
            continue
        judged += 1
        assert b["gpus"] == a["gpus"] | {("n1", 0): (None,) * 6}  # every GPU, with attribution
        # each round holds the direct scrape's values for the GPUs it holds, nothing else; a
        # window written at shutdown may hold part of the sender's last scrape: the fields
        # that came are the direct scrape's, the others unknown (None), never another value
        for key, vals in b["samples"].items():
            want = a["samples"][key]
            assert all(v is None or v == w for v, w in zip(vals, want, strict=True)), (ts, key)
        assert b["extras"].items() <= a["extras"].items()
        full += b["samples"] == a["samples"] and b["extras"] == a["extras"]
    # a window misses a target only when a scrape straddles it, or is the sender's last
    # (the refusal check's round above is not one of Prometheus's: it is not counted here)
    assert full >= judged - 4, "a window misses a target only when a scrape straddles it"
    b = stored(store)
    assert a["xids"] and b["xids"] == a["xids"]  # the XID once, not once per round
    assert b["targets"] == a["targets"]  # the node in repair is down here too
    assert len(a["samples"]) == 8 * up


def _check_refusals(srv: Server) -> None:
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "n1", "job": "dcgm"}
    now_ms = int(time.time() * 1000)  # within the receiver's accepted window (7 days back)
    body = encode([(labels, [(55.0, now_ms - 3_600_000)])])
    assert post(srv, body, token=None)[0] == 401
    assert post(srv, body, token="wrong")[0] == 401
    status, reply = post(srv, body, ctype="application/json")
    assert status == 415 and "application/x-protobuf" in reply["error"]
    assert post(srv, body, enc="gzip")[0] == 415
    status, reply = post(srv, b"\x05hello")
    assert status == 400 and "snappy" in reply["error"]
    status, reply = post(srv, b"\xff\xff\xff\xff\x7f" + b"x" * 10)
    assert status == 400 and "limit" in reply["error"]
    status, reply = post(srv, bytes(cramjam.snappy.compress_raw(b"\xff\xfe not protobuf")))
    assert status == 400 and "WriteRequest" in reply["error"]
    first = post(srv, body)
    assert first[0] == 200 and first[1]["duplicate"] is False and first[1]["samples"] == 1
    again = post(srv, body)  # a sender resending after a lost reply
    assert again[0] == 200 and again[1]["duplicate"] is True
