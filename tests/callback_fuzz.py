"""Crafted POSTs to Dash's ``/_dash-update-component``: every callback the server declares,
with hostile values in every input and state (SQL injection, markup, wrong types, huge
numbers, path tricks), and GETs of hostile URLs. Shared by tests/test_security.py and
benchmarks/reliability.py.

Every injection payload carries ``MARKER``: a server run with ``FACTORYFLOOR_SQL_AUDIT`` logs
each SQL text it executes, and a test requires that none contains the marker. That catches a
read injection (``x' OR '1'='1``) too, which changes no row count and answers 200."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

MARKER = "ZZINJ"  # in no SQL the store runs, nor in any data but what these payloads put there
SQLI = [
    f"{MARKER}'; DROP TABLE runs; --",
    f"{MARKER}' OR '1'='1",
    f"1; DELETE FROM gpu_samples -- {MARKER}",
    f"h100-0000' UNION SELECT * FROM meta -- {MARKER}",
    f"\"; ATTACH '/tmp/evil.duckdb' AS e; -- {MARKER}",
    f"COPY gpus TO '/tmp/leak.csv' -- {MARKER}",
]
MARKUP = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "javascript:alert(1)"]
ODD: list[Any] = [None, "", -1, 10**18, 1e308, [], {}, ["a", 1], {"$ne": 1}, True, "x" * 100_000]
HOSTILE: list[Any] = SQLI + MARKUP + ODD


def _views(rng: random.Random) -> Any:
    return rng.choice(
        [
            {"run": rng.choice(SQLI), "range": "all"},
            {"run": rng.choice(SQLI), "range": "24h", "node": rng.choice(SQLI)},
            {"run": "dev-64-s1", "range": "custom", "start": rng.choice(SQLI), "end": "2026"},
            {"run": rng.choice(SQLI), "range": rng.choice(SQLI + ["custom", "24h"])},
            {"run": ["x"], "range": {"a": 1}, "start": 5, "end": None},
            rng.choice(HOSTILE),
        ]
    )


def hostile_value(prop: str, cid: Any, rng: random.Random) -> Any:
    """A hostile value shaped (or deliberately mis-shaped) for the property."""
    if cid == "view" and prop == "data":
        return _views(rng)
    if prop == "hash":  # the view a link describes: each field hostile in turn
        evil = rng.choice(SQLI)
        return "#" + rng.choice(
            [
                urlencode({"run": evil, "range": "all"}),
                urlencode({"run": evil, "from": evil, "to": "2026", "range": "custom"}),
                urlencode({"run": evil, "range": evil, "node": evil}),
                "run=<img src=x onerror=alert(1)>",
            ]
        )
    if prop == "relayoutData":
        return {"xaxis.range[0]": rng.choice(SQLI), "xaxis.range[1]": rng.choice(HOSTILE)}
    if prop == "clickData":
        return {"points": [{"x": rng.choice(HOSTILE), "y": rng.choice(SQLI + MARKUP)}]}
    if prop == "cellClicked":  # a grid's click: the row id names a row of its rowData
        return {
            "rowId": rng.choice([*SQLI, 5, None]),
            "rowIndex": rng.choice([0, 10**9, -5]),
            "colId": rng.choice(SQLI),
            "value": rng.choice(HOSTILE),
        }
    if prop == "rowData":
        evil = rng.choice(SQLI)
        return [{"id": evil, "host": evil, "step": rng.choice(HOSTILE), "ts": rng.choice(SQLI)}]
    # Dash's own page router takes what a browser's location can hold (it answers 500 to a
    # pathname that does not start with "/", which no browser sends).
    if prop == "pathname":
        return rng.choice(
            ["/../../etc/passwd", f"/gpus'; DROP TABLE gpus; -- {MARKER}", "/%00", "/<b>"]
        )
    if prop == "search":
        return rng.choice(["", "?" + urlencode({"run": rng.choice(SQLI)}), "?x=<script>"])
    return rng.choice(HOSTILE)


def post_callback(
    base: str, body: object, headers: dict[str, str] | None = None, timeout: float = 30
) -> tuple[int, str]:
    """POST a callback request to ``base``'s Dash as the browser does: the status and the
    reply's text (an error status's too)."""
    req = urllib.request.Request(
        base + "/_dash-update-component",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def parse_outputs(spec: str) -> list[dict[str, Any]]:
    multi = spec.startswith("..") and spec.endswith("..")
    parts = spec[2:-2].split("...") if multi else [spec]
    out = []
    for p in parts:
        cid, prop = p.rsplit(".", 1)
        prop = prop.split("@", 1)[0]
        out.append({"id": json.loads(cid) if cid.startswith("{") else cid, "property": prop})
    return out


def _item(dep: dict[str, Any], rng: random.Random) -> Any:
    cid, prop = dep["id"], dep["property"]
    if cid.startswith("{"):  # a pattern-matching (ALL) input: a list of concrete ids
        pattern = json.loads(cid)
        concrete = {k: ("fuzz" if v == ["ALL"] else v) for k, v in pattern.items()}
        return [{"id": concrete, "property": prop, "value": hostile_value(prop, concrete, rng)}]
    return {"id": cid, "property": prop, "value": hostile_value(prop, cid, rng)}


def fuzz_callbacks(
    base: str, rounds: int = 5, seed: int = 0, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """POST ``rounds`` hostile payloads to every declared callback. Returns counts by HTTP
    status, the callbacks that answered 5xx (with the first bytes of the reply), and how many
    replies echo ``MARKER`` (proof that hostile values got past Dash into the callbacks)."""
    rng = random.Random(seed)
    req = urllib.request.Request(base + "/_dash-dependencies", headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as r:
        deps = json.loads(r.read())
    statuses: dict[int, int] = {}
    failures: list[str] = []
    sent = echoed = 0
    for dep in deps:
        if dep.get("clientside_function"):  # runs in the browser; the server has no handler
            continue
        outputs = parse_outputs(dep["output"])
        for _ in range(rounds):
            inputs = [_item(i, rng) for i in dep["inputs"]]
            first = inputs[0][0] if isinstance(inputs[0], list) else inputs[0]
            first_id = first["id"] if isinstance(first["id"], str) else json.dumps(first["id"])
            multi = len(outputs) > 1 or dep["output"].startswith("..")
            body = {
                "output": dep["output"],
                "outputs": outputs if multi else outputs[0],
                "inputs": inputs,
                "state": [_item(s, rng) for s in dep["state"]],
                "changedPropIds": [f"{first_id}.{first['property']}"],
            }
            sent += 1
            code, reply = post_callback(base, body, headers, timeout=60)
            if code >= 500:
                failures.append(f"{dep['output'][:60]}: {reply[:200]!r}")
            statuses[code] = statuses.get(code, 0) + 1
            echoed += MARKER in reply
    return {"sent": sent, "statuses": statuses, "failures": failures, "echoed": echoed}


def hostile_urls() -> list[str]:
    """Paths and query strings carrying every injection payload: pages, Dash's own routes, the
    login form's ``next`` and the ingest API."""
    paths = ["/", "/gpus", "/training", "/_dash-layout", "/login", "/api/v1/health"]
    urls = [f"{p}?{urlencode({'run': s, 'next': s, 'node': s})}" for p in paths for s in SQLI]
    return urls + [f"/{quote(s)}" for s in SQLI] + [f"/api/v1/{quote(s)}" for s in SQLI]


def fuzz_urls(base: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """GET every ``hostile_urls()``. Returns counts by status and the URLs that answered 5xx."""
    statuses: dict[int, int] = {}
    failures: list[str] = []
    for url in hostile_urls():
        req = urllib.request.Request(base + url, headers={"Accept": "text/html", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                code = r.status
        except urllib.error.HTTPError as exc:
            code = exc.code
        statuses[code] = statuses.get(code, 0) + 1
        if code >= 500:
            failures.append(url)
    return {"sent": len(hostile_urls()), "statuses": statuses, "failures": failures}
