"""Callback requests that are valid JSON but not callback envelopes, or envelopes that do not
match the callback they name item for item, get a 400 with a short JSON reason from the real
server, never a 500 or a stack; a callback that fails on the values it is sent is a 400 too,
logged in one rate-limited line; the next real request still works."""

from __future__ import annotations

import json
import logging
import re
import traceback
import urllib.error
import urllib.request

import pytest

from app.guard import OneLine
from telemetry.ingest.http import LogThrottle
from tests.callback_fuzz import post_callback
from tests.conftest import Server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

_JOB = {"id": "gpus-slurm-job", "property": "value", "value": None}
_INPUT = {"id": "refresh", "property": "n_intervals", "value": 1}
_REAL = {  # the GPUs page's Slurm job picker: no job picked yet
    "output": "gpus-slurm-job-gpus.children",
    "outputs": {"id": "gpus-slurm-job-gpus", "property": "children"},
    "inputs": [_JOB, _INPUT],
    "changedPropIds": ["refresh.n_intervals"],
}
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
    # A real callback's output, its parts not the callback's (Dash answered each with a 500).
    ({**_REAL, "inputs": []}, "inputs must list the callback's 2 inputs (got 0)"),
    ({**_REAL, "inputs": [_JOB, _JOB]}, "inputs[1] is not the callback's refresh.n_intervals"),
    ({**_REAL, "inputs": [{}, _INPUT]}, "inputs[0] is not the callback's gpus-slurm-job.value"),
    ({**_REAL, "inputs": [{**_JOB, "id": "nope"}, _INPUT]}, "inputs[0] is not the callback's"),
    ({**_REAL, "inputs": [{**_JOB, "id": {"a": 1}}, _INPUT]}, "inputs[0] is not the callback's"),
    ({**_REAL, "inputs": [[_JOB], _INPUT]}, "inputs[0] is not the callback's"),
    ({**_REAL, "state": [_INPUT]}, "state must list the callback's 0 state (got 1)"),
    ({**_REAL, "outputs": {"id": 1}},
     "outputs[0] is not the callback's gpus-slurm-job-gpus.children"),
    ({**_REAL, "outputs": []}, "outputs[0] is not the callback's"),
    ({**_REAL, "outputs": [{"id": "gpus-slurm-job-gpus", "property": "children"}] * 2},
     "outputs[0] is not the callback's"),
]  # fmt: skip


def _post(url: str, body: object) -> tuple[int, str]:
    return post_callback(url, body, timeout=10)


@pytest.mark.parametrize(("body", "reason"), BAD)
def test_a_malformed_envelope_is_a_400_with_a_reason(
    dev_server: Server, body: object, reason: str
) -> None:
    status, text = _post(dev_server.url, body)
    assert status == 400, text
    assert reason in json.loads(text)["error"] and "Traceback" not in text


def test_a_real_callback_still_answers(dev_server: Server) -> None:
    status, text = _post(dev_server.url, _REAL)
    assert status == 200, text
    assert "Pick a job to see its GPUs" in json.dumps(json.loads(text)["response"])


def test_a_callback_failing_on_its_values_is_a_400_and_a_burst_logs_a_few_lines(
    dev_server: Server,
) -> None:
    """Dash's own page router takes the location's ``search`` as a string; a dict makes it
    raise. Forty such requests: each a 400 with the exception's name and no stack, and the
    server log gets a handful of one-line reports, no traceback."""
    body = {
        "output": ".._pages_content.children..._pages_store.data..",
        "outputs": [{"id": "_pages_content", "property": "children"},
                    {"id": "_pages_store", "property": "data"}],
        "inputs": [{"id": "_pages_location", "property": "pathname", "value": "/"},
                   {"id": "_pages_location", "property": "search", "value": {"a": 1}}],
        "changedPropIds": ["_pages_location.search"],
    }  # fmt: skip
    for _ in range(40):
        status, text = _post(dev_server.url, body)
        assert status == 400, text
        assert "cannot answer these inputs (AttributeError)" in json.loads(text)["error"]
        assert "Traceback" not in text and "File" not in text
    log = dev_server.log.read_text()
    lines = re.findall(r".*_pages_content.* failed: AttributeError.*", log)
    assert 1 <= len(lines) <= LogThrottle(logging.getLogger()).burst, lines
    assert "Traceback" not in log and "dash/_pages.py:" in lines[0]  # where, in one line


def test_a_missing_component_file_is_a_404(dev_server: Server) -> None:
    req = urllib.request.Request(dev_server.url + "/_dash-component-suites/nope/x.js")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 404
    assert json.loads(err.value.read())["error"] == "no such component file"


def test_a_logged_traceback_becomes_one_rate_limited_line() -> None:
    """What a page callback's error log (app.ui) turns into on a served app's logger."""
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("factoryfloor.test-one-line")
    logger.propagate = False
    logger.addHandler(type("H", (logging.Handler,), {"emit": lambda _s, r: records.append(r)})())
    logger.addFilter(OneLine(LogThrottle(logger, burst=3)))
    for _ in range(20):
        try:
            {}["missing"]  # noqa: B018
        except KeyError:
            logger.error("callback _fleet failed:\n%s", traceback.format_exc())
    assert len(records) == 3
    line = records[0].getMessage()
    assert "\n" not in line and line.startswith("callback _fleet failed: KeyError: 'missing'")
    assert "test_envelopes.py" in line  # where it was raised


def test_a_window_rolling_over_says_how_many_were_left_out_without_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The "N more like ... not logged" line goes through the same logger, whose filter asks
    the throttle again: it once waited for ever on the throttle's own lock (found by the
    100,000-input fuzz run, where a busy server's next error log hung its request thread)."""
    import threading

    from telemetry.ingest import http

    clock = [1000.0]  # the throttle's clock, moved by hand: no test of timing
    monkeypatch.setattr(http.time, "monotonic", lambda: clock[0])
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("factoryfloor.test-roll-over")
    logger.propagate = False
    logger.addHandler(type("H", (logging.Handler,), {"emit": lambda _s, r: records.append(r)})())
    logger.addFilter(OneLine(LogThrottle(logger, burst=2, window_s=60)))

    def burst() -> None:
        for _ in range(2):
            for _ in range(10):
                logger.error("callback _fleet failed: boom")
            clock[0] += 61  # past the window: the next line first reports the last one
        logger.error("callback _fleet failed: boom")

    t = threading.Thread(target=burst, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "logging hung on the throttle's lock"
    said = [r.getMessage() for r in records]
    left_out = "8 more like 'factoryfloor.test-roll-over:callback _fleet failed: boom' in 61 s"
    assert said == ["callback _fleet failed: boom"] * 2 + [f"{left_out} not logged"] \
        + ["callback _fleet failed: boom"] * 2 + [f"{left_out} not logged"] \
        + ["callback _fleet failed: boom"]  # fmt: skip


def _item(spec: dict, value: object = None) -> object:
    """What Dash's renderer sends for a declared input, state or output: a pattern id with
    ALL is a list of matching items (one here), MATCH/ALLSMALLER one item, a plain id one item."""
    cid, prop = spec["id"], spec["property"]
    if not cid.startswith("{"):
        return {"id": cid, "property": prop, "value": value}
    pattern = json.loads(cid)
    concrete = {k: ("x" if isinstance(v, list) else v) for k, v in pattern.items()}
    one = {"id": concrete, "property": prop, "value": value}
    return [one] if ["ALL"] in pattern.values() else one


def _outputs(output: str) -> object:
    names = output[2:-2].split("...") if output.startswith("..") else [output]
    items = []
    for name in names:
        base, at, dup = name.partition("@")
        cid, prop = base.rsplit(".", 1)
        item = _item({"id": cid, "property": prop + at + dup})
        if isinstance(item, dict):
            item.pop("value")
        items.append(item)
    return items if output.startswith("..") else items[0]


def test_every_callback_the_app_declares_passes_the_guard_as_the_browser_sends_it(
    store: object,
) -> None:
    """The guard must never refuse what the page itself sends. ``allow_duplicate`` outputs
    (``url.hash@<hash>``: the chart zoom that writes the URL, the live run list) once got a
    400 for every zoom: the browser console filled with errors and the URL stopped following."""
    from app.guard import envelope_problem
    from app.main import create_app

    callbacks = create_app(store).callback_map  # type: ignore[arg-type]
    duplicates = [o for o in callbacks if "@" in o]
    assert duplicates, "the app declares allow_duplicate outputs; this test must see them"
    for output, spec in callbacks.items():
        body = {
            "output": output,
            "outputs": _outputs(output),
            "inputs": [_item(s, 1) for s in spec["inputs"]],
            "state": [_item(s) for s in spec["state"]],
            "changedPropIds": [],
        }
        assert envelope_problem(body, callbacks) is None, output


def test_our_callbacks_take_values_of_the_wrong_type_as_no_choice(store: object) -> None:
    """Values a browser never sends but a crafted POST may (found by the fuzz run): a dict for
    the URL fragment, a list for a component or a metric. Each is read as no choice, never an
    exception (which the guard would answer with a 400 and a log line)."""
    from dash import no_update

    from app.main import create_app
    from app.pages._interruptions import _category
    from app.shell.view import view_from_url

    create_app(store)  # type: ignore[arg-type]  # bound here, not by whichever test ran before

    view = view_from_url({"run": "x"}, ["a", "b"])  # type: ignore[arg-type]
    assert view["run"] == "b"  # the newest run, as for an empty fragment
    assert _category(["GPU"]) is no_update
