"""Exclusion windows (#38, 1): an operator (token required, as for relabelling) posts a window
a run's goodput leaves out of its wall time (maintenance); the categories still add up to what
is left. Through a real ``serve`` on 127.0.0.1; hostile and wrong bodies are refused, nothing
stored."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from telemetry.metrics.goodput import goodput
from telemetry.store import Store
from tests.cluster_fixture import RUN
from tests.conftest import imported_night, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

TOKEN = "goodput-operator-token-0123456789"


def _post(url: str, body: object, token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"} | ({"X-Operator-Token": token} if token else {})
    req = urllib.request.Request(url + "/api/v1/goodput/exclusions",
                                 json.dumps(body).encode(), headers)  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_operators_window_leaves_the_denominator(tmp_path: Path) -> None:
    store = imported_night(tmp_path)
    with Store(str(store), read_only=True) as s:
        before = goodput(s, RUN)
    assert before is not None and before["excluded_s"] == 0
    token = tmp_path / "op"
    token.write_text(TOKEN + "\n")
    srv = start_server(["serve", "--store", str(store), "--accept-ingest",
                        "--operator-token-file", str(token)], tmp_path / "serve.log")  # fmt: skip
    window = {"run": RUN, "start": "2026-03-01T11:25:00Z", "end": "2026-03-01T11:40:00Z",
              "reason": "maintenance: IB switch swap", "by": "sre"}  # fmt: skip
    try:
        assert _post(srv.url, window, token=None)[0] == 403  # no token: nothing changed
        assert _post(srv.url, window, token="wrong-token-0123456789")[0] == 403
        for bad, says in (
            (window | {"end": "2026-03-01T11:00:00Z"}, "end must be after start"),
            (window | {"end": "2026-04-15T00:00:00Z"}, "at most 31 days"),
            (window | {"start": "<img src=x onerror=alert(1)>"}, "not an ISO-8601 time"),
            (window | {"run": "no-such-run"}, "no run 'no-such-run'"),
            (window | {"reason": "a\x00b"}, "printable text"),
            ([1, 2], "JSON object"),
        ):
            status, reply = _post(srv.url, bad)
            assert status in (400, 404) and says in reply["error"], (bad, reply)
        status, reply = _post(srv.url, window)
        assert status == 200 and reply["exclusion"]["reason"] == "maintenance: IB switch swap"
    finally:
        srv.stop()
    with Store(str(store), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM goodput_exclusions") == 1  # the refused: none
        after = goodput(s, RUN)
    assert after is not None and after["excluded_s"] == 15 * 60
    assert after["window_s"] == before["window_s"] - 15 * 60
    assert round(sum(after["seconds"].values()), 3) == after["window_s"]
    # the window held the second failure's downtime: less recovery, a higher goodput
    assert after["seconds"]["recovery"] < before["seconds"]["recovery"]
    assert after["goodput"] > before["goodput"]
