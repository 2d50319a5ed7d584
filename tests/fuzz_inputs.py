"""Hypothesis strategies for what strangers send the server: Dash callback envelopes (well
formed for a real callback with odd values, nearly well formed, or anything JSON), record
batches for ``/api/v1/{metrics,interruptions,checkpoints,runs}``, forwarded scrape rounds,
interruption labels, and Prometheus exposition texts. Shared by tests/test_fuzz_endpoints.py
(in-process bulk and a live ``serve``) and benchmarks/reliability.py.

Each generator says whether its input must be refused (``Sent.refused``): those may change
nothing stored but the posted source's health row (the ``targets`` table says "api:...
down: no valid records", which is how the dashboard shows a refused post)."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from telemetry.ingest.records import SCHEMAS
from telemetry.ingest.wire import CONTENT_TYPE, FORMAT
from tests.callback_fuzz import HOSTILE

BUDGET_VAR = "FACTORYFLOOR_FUZZ_EXAMPLES"
CI_BUDGET = 1_500  # generated inputs in all, in a default run (under a minute)


def budget() -> int:
    """Examples to generate in all: ``FACTORYFLOOR_FUZZ_EXAMPLES`` or the CI budget."""
    return int(os.environ.get(BUDGET_VAR) or CI_BUDGET)


@dataclass
class Sent:
    """One request: method, path, headers, body, and whether the server must refuse it."""

    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    refused: bool = False
    method: str = "POST"


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=24)
    | st.sampled_from([*HOSTILE[:-1], "\udcff", "a\x00b"])  # not the 100 kB one: too slow
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def _dumps(v: Any) -> bytes:
    return json.dumps(v, allow_nan=True).encode()


# -- Dash callback envelopes ------------------------------------------------------------------


def _item(dep: dict[str, Any], value: Any) -> Any:
    cid, prop = dep["id"], dep["property"]
    if cid.startswith("{"):
        pattern = json.loads(cid)
        concrete = {k: ("fuzz" if v == ["ALL"] else v) for k, v in pattern.items()}
        return [{"id": concrete, "property": prop, "value": value}]
    return {"id": cid, "property": prop, "value": value}


def _outputs(spec: str) -> Any:
    names = spec[2:-2].split("...") if spec.startswith("..") else [spec]
    out = []
    for name in names:
        cid, prop = name.rsplit(".", 1)
        prop = prop.split("@", 1)[0]
        out.append({"id": json.loads(cid) if cid.startswith("{") else cid, "property": prop})
    return out if spec.startswith("..") else out[0]


@st.composite
def envelopes(draw: st.DrawFn, deps: list[dict[str, Any]]) -> Sent:
    """A callback request: a real callback with odd values (answered 200/204, or 400 when the
    callback cannot use them), one of its parts broken (400), or any JSON at all (400)."""
    dep = draw(st.sampled_from(deps))
    body: dict[str, Any] = {
        "output": dep["output"],
        "outputs": _outputs(dep["output"]),
        "inputs": [_item(i, draw(json_values)) for i in dep["inputs"]],
        "state": [_item(s, draw(json_values)) for s in dep["state"]],
        "changedPropIds": [f"{dep['inputs'][0]['id']}.{dep['inputs'][0]['property']}"],
    }
    shape = draw(st.sampled_from(["real", "real", "broken", "broken", "any"]))
    if shape == "any":
        return Sent("/_dash-update-component", _dumps(draw(json_values)), _JSON, refused=True)
    if shape == "broken":
        key = draw(st.sampled_from(["output", "outputs", "inputs", "state", "changedPropIds"]))
        how = draw(st.sampled_from(["drop", "replace", "extra", "item"]))
        if how == "drop":
            body.pop(key)
        elif how == "replace" or not isinstance(body[key], list):
            body[key] = draw(json_values)
        elif how == "extra":
            body[key] = [*body[key], draw(json_values)]
        elif body[key]:
            body[key][draw(st.integers(0, len(body[key]) - 1))] = draw(json_values)
        else:
            body[key] = [draw(json_values)]
    # A broken envelope may still be a valid one by chance (a dropped empty state): the server
    # may then answer it, so only "any" JSON is certain to be refused.
    return Sent("/_dash-update-component", _dumps(body), _JSON)


_JSON = {"Content-Type": "application/json"}

# -- record batches ---------------------------------------------------------------------------

_ENDPOINT = {"train_metrics": "metrics", "interruptions": "interruptions",
             "checkpoints": "checkpoints", "runs": "runs"}  # fmt: skip
_NOW = datetime.utcnow()
_times = st.one_of(
    st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)).map(
        datetime.isoformat
    ),
    st.datetimes(min_value=_NOW - timedelta(days=30), max_value=_NOW).map(
        lambda d: d.isoformat() + "Z"
    ),
    st.floats(min_value=-1e12, max_value=1e12),
    st.text(max_size=30),
)
_words = st.sampled_from(
    ["fuzz-run", "fuzz-run-2", "GPU", "nvme", "pfs", "object", "ok", "failed", "automated",
     "manual", "none", "Faulty GPU", "planned", "h100-0001", "\ud800", "a\x00b", "x" * 300]
)  # fmt: skip


def _value(kind: str) -> st.SearchStrategy[Any]:
    typed = {
        "str": _words | st.text(max_size=40),
        "text": st.text(max_size=80),
        "num": st.integers(-(2**64), 2**64) | st.floats(allow_nan=True, allow_infinity=True),
        "bool": st.booleans(),
        "ts": _times,
        "json": st.dictionaries(st.text(max_size=6), _scalars, max_size=3).map(json.dumps),
    }[kind]
    return typed | typed | json_values  # mostly the right type, sometimes anything


@st.composite
def record_batches(draw: st.DrawFn, refused_only: bool = False) -> Sent:
    """A body for one record endpoint: records of its schema with odd values (some stored,
    some rejected with a reason), or anything else. ``refused_only``: no record names a run,
    so every one must be rejected."""
    kind = draw(st.sampled_from(list(_ENDPOINT)))
    fields = [f for f in SCHEMAS[kind] if f.name is not None]
    path = f"/api/v1/{_ENDPOINT[kind]}"
    headers = dict(_JSON)
    if draw(st.booleans()):
        headers["X-Batch-Id"] = draw(st.sampled_from(["b-1", "b-2", "../x", "", "é"]))
    shape = draw(st.sampled_from(["records", "records", "records", "json", "bytes"]))
    if shape == "bytes":
        return Sent(path, draw(st.binary(max_size=200)), headers, refused=True)
    if shape == "json":
        doc = draw(json_values)
        if not (isinstance(doc, dict | list)):
            return Sent(path, _dumps(doc), headers, refused=True)
        doc = [doc] if isinstance(doc, dict) else doc
        refused = all(not isinstance(r, dict) or not isinstance(r.get("run"), str) for r in doc)
        return Sent(path, _dumps(doc), headers, refused=refused)
    records = []
    for _ in range(draw(st.integers(1, 4))):
        rec: dict[str, Any] = {}
        for f in fields:
            if f.required or draw(st.integers(0, 2)) == 0:
                rec[f.name] = draw(_value(f.kind))  # type: ignore[index]
        if draw(st.integers(0, 5)) == 0:
            rec[draw(st.text(max_size=8))] = draw(_scalars)
        if refused_only:
            rec.pop("run", None)
        records.append(rec)
    body = records if len(records) > 1 or draw(st.booleans()) else records[0]
    refused = all(not isinstance(r.get("run"), str) for r in records)
    return Sent(path, _dumps(body), headers, refused=refused)


# -- exposition texts and forwarded rounds ----------------------------------------------------

_metric_names = st.sampled_from(
    ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
     "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
     "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "up", "x"]
) | st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)  # fmt: skip
_label_values = st.text(max_size=12) | st.sampled_from(
    ["0", "1", "7", "GPU-0", "host-1", 'a"b', "a\\nb", "\\", "40000", "-1"]
)
_label_names = st.sampled_from(
    ["gpu", "UUID", "Hostname", "device", "modelName", "pci_bus_id", "xid", "GPU_I_ID",
     "pod", "namespace", "container", "hpc_job", "window_size_in_ms", "err_code"]
) | st.text(max_size=6)  # fmt: skip
_sample_values = st.sampled_from(
    ["0", "1", "85", "-1", "NaN", "+Inf", "-Inf", "9223372036854775807", "1e400", "0x10", "",
     "1 1700000000000", "2 -5", "abc", "1.5e-3"]
) | st.floats(allow_nan=True, allow_infinity=True).map(repr)  # fmt: skip


@st.composite
def expositions(draw: st.DrawFn) -> str:
    """A dcgm-exporter-like page: samples with odd labels and values, comments, and junk."""
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.text(max_size=60)))
        elif kind == 1:
            name = draw(_metric_names)
            lines.append(f"# {draw(st.sampled_from(['HELP', 'TYPE', 'x']))} {name} "
                         f"{draw(st.sampled_from(['gauge', 'counter', 'junk', '']))}")  # fmt: skip
        else:
            labels = draw(st.dictionaries(_label_names, _label_values, max_size=6))
            inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
            if draw(st.integers(0, 9)) == 0:
                inner = inner[: draw(st.integers(0, len(inner)))]  # cut mid-label
            lines.append(f"{draw(_metric_names)}{{{inner}}} {draw(_sample_values)}")
    return draw(st.sampled_from(["\n", "\r\n", "\n\n"])).join(lines)


def round_doc(ts: datetime, texts: list[str | None], interval: Any = 15.0) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "ts": ts.isoformat(),
        "interval_s": interval,
        "fetches": [
            {"url": f"http://fuzz-{i}:9400/metrics", "labels": {}, "text": t,
             "error": None if t is not None else "connection refused", "duration_s": 0.1,
             "status": 200 if t is not None else None}
            for i, t in enumerate(texts)
        ],
    }  # fmt: skip


@st.composite
def rounds(draw: st.DrawFn, refused_only: bool = False) -> Sent:
    """A forwarded round for ``/api/v1/scrape``: real wire format around fuzzed exposition
    texts (stored: the parser counts what it rejects), or a round broken in one field, in its
    gzip framing or in its headers (refused). ``refused_only``: always broken."""
    ts = datetime.utcnow().replace(microsecond=0) - timedelta(
        seconds=draw(st.integers(0, 86400))
    )
    texts = draw(st.lists(st.none() | expositions(), min_size=1, max_size=3))
    doc = round_doc(ts, texts)
    broken = refused_only or draw(st.integers(0, 2)) == 0
    # A stored batch id is answered "duplicate" (200) before its body is read: a round that
    # must be refused never carries the id of one that may have been stored.
    bid = f"{'bad' if broken else 'fuzz'}-{draw(st.integers(0, 2**62))}"
    headers = {"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip", "X-Batch-Id": bid}
    if not broken:
        return Sent("/api/v1/scrape", gzip.compress(_dumps(doc)), headers)
    how = draw(st.sampled_from(["field", "fetch", "json", "gzip", "header"]))
    if how == "field":  # a value each field refuses (an odd but valid one is not "broken")
        bad_field = {
            "format": json_values.filter(lambda v: v != FORMAT),
            "ts": st.sampled_from([None, 5, "", "yesterday", "2026-13-01T00:00:00",
                                   "1999-01-01T00:00:00", "2026-01-01T00:00:00+02:00"]),
            "interval_s": st.sampled_from([None, "15", True, 0, 0.05, -1, 86401, 1e308]),
            "fetches": json_values.filter(lambda v: not isinstance(v, list)),
        }  # fmt: skip
        key = draw(st.sampled_from(sorted(bad_field)))
        doc[key] = draw(bad_field[key])
    elif how == "fetch":
        key = draw(st.sampled_from(["url", "labels", "text", "duration_s", "status"]))
        bad = {"url": st.sampled_from(["", "ftp://x", "http://", 5]), "labels": st.just([1]),
               "text": st.integers(), "duration_s": st.sampled_from(["1", None, True]),
               "status": st.sampled_from(["200", 1.5, True])}[key]  # fmt: skip
        doc["fetches"][0][key] = draw(bad)
        if key == "text":
            doc["fetches"][0]["error"] = None
    elif how == "json":
        return Sent("/api/v1/scrape", gzip.compress(draw(st.binary(max_size=80))), headers, True)
    elif how == "gzip":
        return Sent("/api/v1/scrape", draw(st.binary(max_size=80)), headers, refused=True)
    else:
        bad = {"Content-Type": ["", "text/plain", "application/json"],
               "Content-Encoding": ["", "deflate", "br"], "X-Batch-Id": ["", "../x", "a" * 80]}
        k = draw(st.sampled_from(sorted(bad)))
        headers[k] = draw(st.sampled_from(bad[k]))  # fmt: skip
    return Sent("/api/v1/scrape", gzip.compress(_dumps(doc)), headers, refused=True)


# -- interruption labels ----------------------------------------------------------------------


@st.composite
def labels(draw: st.DrawFn, operator_token: str) -> Sent:
    """A correction: without or with a wrong token (403), or with the token and a body that
    names no interruption, an unknown cause or odd types (400/404): all refused (the fuzzed
    store's interruptions are at times these never name)."""
    body = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "run": _words | json_values,
                "ts": _times | json_values,
                "component": _words | st.sampled_from(["GPU", "Faulty GPU", "Network"]),
                "category": _words | json_values,
                "by": _words | json_values,
            },
        )
        | json_values
    )
    token = draw(st.sampled_from([operator_token, operator_token, "wrong-token-0123456789", ""]))
    headers = {**_JSON, **({"X-Operator-Token": token} if token else {})}
    return Sent("/api/v1/interruptions/label", _dumps(body), headers, refused=True)
