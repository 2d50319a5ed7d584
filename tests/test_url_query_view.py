"""A link that names the run in its query string (``/failures?run=X``, as a person types one)
opens that run, as ``#run=X`` does: the run picker took only the fragment, so ``?run=X``
opened the newest run instead. Asked of ``serve`` as the browser asks it (its callback
endpoint), on a store of two runs imported with the user's command."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.callback_fuzz import parse_outputs, post_callback
from tests.conftest import Server, cli, start_server
from tests.test_failure_only_logs import WATCHDOG, XID79, _write

pytestmark = pytest.mark.live  # a real server: run one at a time

OLD, NEW = "older", "newer"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("query")
    path = tmp / "s.duckdb"
    for run, lines, year in ((OLD, XID79, "2023"), (NEW, WATCHDOG, "2024")):
        log = _write(tmp / f"{run}.log", lines)
        r = cli("import", "--store", str(path), "--run", run, "--year", year, str(log))
        assert r.returncode == 0, (r.stdout, r.stderr)
    srv = start_server(["serve", "--store", str(path)], tmp / "serve.log")
    yield srv
    srv.stop()


def _opened(server: Server, url_hash: str, search: str) -> dict[str, Any]:
    """The view and pickers the shell sets for a page opened at ``search`` + ``url_hash``."""
    with urllib.request.urlopen(server.url + "/_dash-dependencies", timeout=30) as r:
        deps = json.loads(r.read())
    dep = next(d for d in deps if "view.data" in d["output"] and
               any(i["id"] == "runs-all" for i in d["inputs"]))  # fmt: skip
    values = {("url", "hash"): url_hash, ("url", "search"): search,
              ("run-select", "value"): None, ("range-select", "value"): "all",
              ("runs-all", "value"): False, ("view", "data"): None,
              ("run-select", "options"): []}  # fmt: skip

    def item(spec: dict[str, Any]) -> dict[str, Any]:
        return spec | {"value": values.get((spec["id"], spec["property"]))}

    body = {
        "output": dep["output"],
        "outputs": parse_outputs(dep["output"]),
        "inputs": [item(i) for i in dep["inputs"]],
        "state": [item(s) for s in dep["state"]],
        "changedPropIds": ["url.hash", "url.search"],
    }
    status, text = post_callback(server.url, body)
    assert status == 200, text
    return json.loads(text)["response"]


def test_a_run_named_in_the_query_string_is_opened(server: Server) -> None:
    assert _opened(server, "", "")["view"]["data"]["run"] == NEW  # the newest by default
    got = _opened(server, "", f"?run={OLD}&range=24h")
    assert got["view"]["data"]["run"] == OLD and got["run-select"]["value"] == OLD
    assert got["view"]["data"]["range"] == "24h" and got["range-select"]["value"] == "24h"
    # the fragment, the view's own place in the URL, wins over the query string
    assert _opened(server, f"#run={NEW}&range=all", f"?run={OLD}")["view"]["data"]["run"] == NEW
    # a query string naming no stored run, or only another page's key: the newest run
    assert _opened(server, "", "?run=nope")["view"]["data"]["run"] == NEW
    assert _opened(server, "", "?at=2024-06-26T06:24:44")["view"]["data"]["run"] == NEW
