"""Every page survives any stored time. Rows dated 9999-12-31, 0001-01-01 and just past
pandas' nanosecond range (1677, 2262) are put into a real store through its insert path, as an
old import or another source might have left them; the real server then answers every
callback of every page, as a browser asks (each page's own initial values, several views,
a link to the year 9999) with no callback failing and no header saying "data to 9999" (issue
55: the Overview, Failures and Training callbacks raised OverflowError and
OutOfBoundsDatetime)."""

from __future__ import annotations

import json
import re
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from telemetry.store import Store
from tests.callback_fuzz import parse_outputs, post_callback
from tests.conftest import build_store, start_server

EXTREMES = [datetime(9999, 12, 31, 23, 59, 59), datetime(1, 1, 1), datetime(2262, 4, 12),
            datetime(1677, 9, 21)]
PAGES = ["/", "/training", "/gpus", "/failures", "/checkpoints", "/incident", "/jobs"]
FAR = "far"  # a run whose only times are the extremes


def _put(store: Store, table: str, rows: list[dict[str, Any]]) -> None:
    cols = store.rows("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                      "ORDER BY ordinal_position", [table])
    store.append(table, pa.table({c: [r.get(c) for r in rows] for (c,) in cols}))


def _poison(path: Path) -> str:
    with Store(str(path)) as s:
        run = s.rows("SELECT run_id FROM runs ORDER BY start_ts LIMIT 1")[0][0]
        for i, t in enumerate(EXTREMES):
            _put(s, "signals", [{"ts": t, "run_id": run, "host": "h100-0000", "kind": "xid",
                                 "xid": 79, "detail": "Xid 79", "origin": f"k.log:{i}",
                                 "line": "NVRM: Xid", "source": "kernel"}])
            _put(s, "xid_events", [{"ts": t, "host": "h100-0000", "gpu": 0, "xid": 79,
                                    "run_id": run, "source": "kernel"}])
            for r, step in ((run, 10**9 + i), (FAR, i)):
                _put(s, "train_metrics", [{"run_id": r, "ts": t, "step": step, "loss": 1.0,
                                           "attempt": 0}])
            _put(s, "checkpoints", [{"run_id": run, "step": 10**9 + i, "tier": "pfs",
                                     "start_ts": t, "end_ts": t, "status": "ok"}])
            _put(s, "checkpoint_events", [{"ts": t, "run_id": run, "kind": "save_end",
                                           "step": 10**9 + i, "origin": f"j.log:{i}"}])
            _put(s, "interruptions", [{"run_id": run, "ts": t, "component": "GPU",
                                       "category": "Faulty GPU", "planned": False,
                                       "node_lost": False, "source": "inferred"}])
        _put(s, "runs", [{"run_id": FAR, "name": FAR, "start_ts": EXTREMES[1],
                          "end_ts": EXTREMES[0], "simulated": False}])
    return run


def _walk(node: Any, found: dict[tuple[str, str], Any]) -> None:
    """Every component's initial property values in a layout: (id, prop) -> value."""
    if isinstance(node, list):
        for n in node:
            _walk(n, found)
    elif isinstance(node, dict):
        props = node.get("props")
        if not isinstance(props, dict):  # a callback's reply around a layout
            for v in node.values():
                _walk(v, found)
            return
        if isinstance(props.get("id"), str):
            found.update({(props["id"], k): v for k, v in props.items()})
        for v in props.values():
            _walk(v, found)


def _initial_values(base: str, deps: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """What the browser holds before any callback: the shell's and every page's layout."""
    with urllib.request.urlopen(base + "/_dash-layout", timeout=60) as r:
        found: dict[tuple[str, str], Any] = {}
        _walk(json.loads(r.read()), found)
    router = next(d for d in deps if "_pages_content.children" in d["output"])
    for page in PAGES:
        body = {"output": router["output"], "outputs": parse_outputs(router["output"]),
                "inputs": [{"id": "_pages_location", "property": "pathname", "value": page},
                           {"id": "_pages_location", "property": "search", "value": ""}],
                "state": [], "changedPropIds": ["_pages_location.pathname"]}
        code, reply = post_callback(base, body, timeout=60)
        assert code == 200, reply[:300]
        _walk(json.loads(reply), found)
    return found


def _ask_every_callback(base: str, view: dict[str, Any]) -> list[tuple[int, str, str]]:
    with urllib.request.urlopen(base + "/_dash-dependencies", timeout=30) as r:
        deps = json.loads(r.read())
    initial = _initial_values(base, deps)
    initial[("view", "data")] = view
    replies = []
    for dep in deps:
        if dep.get("clientside_function") or "_pages" in dep["output"]:
            continue

        def item(d: dict[str, str]) -> Any:
            if d["id"].startswith("{"):  # a pattern input: none drawn yet
                return []
            return {"id": d["id"], "property": d["property"],
                    "value": initial.get((d["id"], d["property"]))}

        inputs = [item(i) for i in dep["inputs"]]
        first = next(i for i in inputs if isinstance(i, dict))
        outputs = parse_outputs(dep["output"])
        multi = len(outputs) > 1 or dep["output"].startswith("..")
        body = {"output": dep["output"], "outputs": outputs if multi else outputs[0],
                "inputs": inputs, "state": [item(s) for s in dep["state"]],
                "changedPropIds": [f"{first['id']}.{first['property']}"]}
        code, reply = post_callback(base, body, timeout=120)
        replies.append((code, dep["output"][:80], reply))
    return replies


@pytest.mark.live
def test_every_callback_survives_any_stored_time(tmp_path: Path) -> None:
    path = build_store(tmp_path / "x.duckdb", seed=1, days=0.25)
    run = _poison(path)
    srv = start_server(["serve", "--store", str(path)], tmp_path / "serve.log")
    views = [{"run": run, "range": "all"}, {"run": run, "range": "24h"}, {"range": "all"},
             {"run": FAR, "range": "all"}, {"run": FAR, "range": "1h"},
             {"run": run, "range": "custom", "start": "0001-01-01", "end": "9999-12-31T23:59:59"},
             {"run": run, "range": "custom", "start": "9999-12-30", "end": "9999-12-31"}]
    try:
        replies = {i: _ask_every_callback(srv.url, v) for i, v in enumerate(views)}
    finally:
        srv.stop()
    failed = [ln for ln in srv.log.read_text().splitlines() if "failed:" in ln]
    assert failed == [], failed[:5]
    every = [r for rs in replies.values() for r in rs]
    assert [(c, o) for c, o, _ in every if c >= 500] == []
    assert [o for _, o, r in every if "Could not load" in r] == []
    assert sum(c == 200 for c, _, _ in every) >= 100  # the pages answered, with data
    # No header, card or chart shows an extreme time (a custom link's own text is echoed in
    # its URL and its charts' uirevision: that is the link, not data).
    dated = re.compile(r"9999-12-3|Dec 31,? 9999|0001-01-01|1677-09|2262-04")
    presets = [r for i, rs in replies.items() if views[i]["range"] != "custom" for r in rs]
    assert [(o, m[0]) for _, o, r in presets if (m := dated.search(r))] == []
