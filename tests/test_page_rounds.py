"""A page asks for all of its charts at once when it opens. A callback fed by another
callback's output waits for that output's reply *and* for the browser to draw it before its
own request leaves: on the GPUs page at llama3-405b scale the per-GPU "more" chart, chained on
the drill-down's heading, was asked for only once the first eight charts were drawn, ~0.6 s
of the page's 1.2 s. So no callback may take its input from another callback's output except
the links below, each for a reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

# Inputs written by other callbacks on purpose, and why.
CHAINED = {
    "url.hash": "the view follows the URL, which the app also writes (links, back, zoom)",
    "run-select.value": "the view follows the run picker, which follows the run list",
    "range-select.value": "the view follows the range picker",
    "zoom-relayouts.data": "a zoom is written to the URL after it is collected",
    "node-pick.data": "a node clicked in the heatmap or the outlier table goes into the URL",
    "spike-pick.data": "a loss spike clicked in its table goes into the URL as its hour",
    "fail-labelled.data": "a label an operator saves is shown where it was made",
    "fail-selected.data": "the evidence follows the interruption clicked in the table",
    "fail-label-component.value": "a component's categories follow the component picked",
    "ov-silence-msg.children": "the silence list follows a silence made or ended",
    "ov-silence-end-msg.children": "the silence list follows a silence made or ended",
    "ov-ack-msg.children": "the alert lists follow an acknowledgement made",
    "inc-log-lines.data": "the raw log's search filters the lines read once when it opened "
    "(a click, not a page load), not the file again per keystroke",
    "ck-model.data": "the what-if starts from the checkpoint model the cards measured",
    "ck-whatif-interval.value": "the what-if follows its sliders, which follow the model",
    "ck-whatif-write.value": "the what-if follows its sliders, which follow the model",
}


def _outputs(key: str) -> list[str]:
    return [part.split("@")[0] for part in key.strip(".").split("...")]


def _name(item: dict) -> str:
    ident = item["id"]
    if isinstance(ident, dict):
        ident = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return f"{ident}.{item['property']}"


# Run in a fresh interpreter: Dash hands its global callback list to the first app that serves
# and clears it, and modules imported once (``pages/_silences.py``) do not register again.
_DUMP = """
import json, sys
import dash._callback
from app.main import create_app
from telemetry.store import Store
app = create_app(Store(sys.argv[1], read_only=True))
out = [{"output": c["output"], "inputs": c["inputs"]}
       for c in [*app._callback_list, *dash._callback.GLOBAL_CALLBACK_LIST]]
print(json.dumps(out))
"""


def test_no_callback_waits_for_another_unless_it_must(dev_store: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _DUMP, str(dev_store)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    callbacks = {c["output"]: c for c in json.loads(done.stdout.splitlines()[-1])}
    written = {out for key in callbacks for out in _outputs(key)}
    assert "gpu-node-host.children" in written  # the pages' callbacks are all seen
    chained = {
        _name(item): key
        for key, spec in callbacks.items()
        for item in spec["inputs"]
        if _name(item) in written and not _name(item).startswith(("view.", "refresh.", "theme-"))
    }
    unexplained = {name: key for name, key in chained.items() if name not in CHAINED}
    assert unexplained == {}, "a callback waits for another's reply and the browser's drawing"
    assert set(CHAINED) <= set(chained), "a listed link is gone: drop it from CHAINED"
