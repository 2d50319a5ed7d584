"""Callback requests that are valid JSON but not callback envelopes get a 400 with a short JSON
reason from the real server, never a 500 or a stack; the next real request still works."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.conftest import Server

BAD = [
    ([], "a JSON object"),
    ({}, "names its output"),
    ({"output": None}, "names its output"),
    ({"output": "x.children"}, "lists its outputs"),
    ({"output": "x.children", "outputs": {}, "inputs": "all"}, "inputs must be a list"),
    ({"output": "x.children", "outputs": {}, "inputs": [], "changedPropIds": [1]}, "strings"),
    (
        {"output": "nope.children", "outputs": {"id": "nope", "property": "children"},
         "inputs": [], "changedPropIds": []},
        "no callback has that output",
    ),
]  # fmt: skip


def _post(url: str, body: object) -> tuple[int, str]:
    req = urllib.request.Request(
        url + "/_dash-update-component",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(("body", "reason"), BAD)
def test_a_malformed_envelope_is_a_400_with_a_reason(
    dev_server: Server, body: object, reason: str
) -> None:
    status, text = _post(dev_server.url, body)
    assert status == 400, text
    assert reason in json.loads(text)["error"] and "Traceback" not in text


def test_a_real_callback_still_answers(dev_server: Server) -> None:
    body = {
        "output": "last-updated.children",
        "outputs": {"id": "last-updated", "property": "children"},
        "inputs": [{"id": "refresh", "property": "n_intervals", "value": 1}],
        "changedPropIds": ["refresh.n_intervals"],
    }
    status, text = _post(dev_server.url, body)
    assert status == 200, text
    assert "last updated" in json.loads(text)["response"]["last-updated"]["children"]
