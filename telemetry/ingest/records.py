"""Training-job records (runs, metrics, interruptions, checkpoints) as JSON-like dicts: checked
field by field, then stored in one atomic batch.

Every way training data arrives (the HTTP endpoint the training loop posts to, JSONL/CSV logs,
TensorBoard event files) ends here, so there is one policy:

- A batch is a list of records (dicts with the field names of ``SCHEMAS``). Valid records of a
  partly bad batch are stored; each bad record is reported as a ``Rejection`` with its index in
  the batch and the reason in words. Nothing raises for bad records.
- A record is bad when it is not an object, lacks a required field, has a value of the wrong
  type (``"5"`` is not a step: importers convert text cells, senders send numbers), a
  non-finite or out-of-range number (NaN/±Inf loss, a negative step, an MFU above 1), a time
  that is not ISO-8601 or unix seconds or lies before 2000 or more than a day in the future,
  a word outside its vocabulary (tier, category, status, recovery), a string with control
  characters or unencodable text, or an id longer than ``MAX_ID_CHARS``.
- Unknown keys are ignored, never stored, and counted per key in ``ignored_fields`` so that a
  typo (``"los"``) is visible in the reply instead of silently losing a metric.
- Times: ISO-8601 strings (an offset or ``Z`` is converted to UTC, a naive time is taken as
  UTC) or unix seconds; stored as naive UTC. A metric without ``ts`` is stamped "now".
- A record naming a run that ``runs`` lacks creates a minimal run row (name = run id,
  ``simulated`` false, start = the earliest time seen) in the same transaction. An existing
  run's metadata is never overwritten by metrics; only its ``start_ts`` moves earlier when
  older data arrives. ``end_ts`` stays NULL unless a ``runs`` record sets it: the dashboard
  then treats the run as running up to its newest data.
- A ``runs`` record updates the fields it carries and keeps the stored ones it omits.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pyarrow as pa

from telemetry.errors import DuplicateBatchError
from telemetry.reference import llama3_interruptions
from telemetry.store import Store
from telemetry.vocabulary import PLANNED_CATEGORY, TIERS

KINDS = ("runs", "train_metrics", "interruptions", "checkpoints")
MAX_ID_CHARS = 256  # run ids, host names, components, names
MAX_TEXT_CHARS = 4096  # descriptions, checkpoint policies
EARLIEST = datetime(2000, 1, 1)
FUTURE_SLACK = timedelta(days=1)
CATEGORIES = tuple(dict.fromkeys([c.category for c in llama3_interruptions()] + [PLANNED_CATEGORY]))
RESTORE_TIERS = (*TIERS, "none")
STATUSES = ("ok", "failed")
RECOVERIES = ("automated", "manual")
METRICS = ("loss", "tokens", "lr", "grad_norm", "tokens_per_s", "mfu")
_MAX_IGNORED_KEYS = 20
# Unicode's bidirectional controls: in a name they make it display as another
# ("run-\u202egnp.exe" shows as "run-exe.png"). Free text (descriptions) may need them.
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
UNSAFE_NAME = re.compile(f"[\x00-\x1f\x7f{BIDI}]")  # what an id, host or label value may not hold
_CONTROL = {  # ids allow no control character; free text allows tabs and line breaks
    "str": UNSAFE_NAME,
    "text": re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"),
}
_MAX_DURATION_S = 1e8  # ~3 years: longer durations are unit mistakes
_FLOAT32_MAX = 3.4028234e38
_INT_RANGE = {pa.int16(): 2**15 - 1, pa.int32(): 2**31 - 1, pa.int64(): 2**63 - 1}


class _Bad(ValueError):
    """One record's reason for rejection."""


@dataclass(frozen=True)
class Field:
    """One stored column; ``name`` is the JSON key (``None``: filled by the store path)."""

    column: str
    type: pa.DataType
    name: str | None = None
    kind: str = "num"  # str | text | num | bool | ts | json
    required: bool = False
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()


def _f(column: str, type_: pa.DataType, kind: str = "num", **kw: Any) -> Field:
    return Field(column, type_, kw.pop("name", column), kind, **kw)


_RUN = _f("run_id", pa.string(), "str", name="run", required=True)
_F64, _F32, _TS, _STR = pa.float64(), pa.float32(), pa.timestamp("us"), pa.string()

# Columns in the store's order and types (tests compare them with the live schema).
SCHEMAS: dict[str, tuple[Field, ...]] = {
    "runs": (
        _RUN,
        _f("name", _STR, "str"),
        _f("model_params", _F64, lo=1.0),
        _f("gpu_model", _STR, "str"),
        _f("gpus", pa.int32(), lo=1),
        _f("nodes", pa.int32(), lo=1),
        _f("start_ts", _TS, "ts"),
        _f("end_ts", _TS, "ts"),
        _f("tokens_per_step", _F64, lo=1.0),
        _f("peak_flops_per_gpu", _F64, lo=1.0),
        _f("ckpt_policy", _STR, "json"),
        Field("source", _STR),
        Field("scenario", _STR),
        Field("seed", pa.int64()),
        Field("simulated", pa.bool_()),
    ),
    "train_metrics": (
        _RUN,
        _f("ts", _TS, "ts"),
        _f("step", pa.int64(), required=True, lo=0),
        _f("tokens", _F64, lo=0),
        _f("loss", _F32),
        _f("lr", _F32, lo=0),
        _f("grad_norm", _F32, lo=0),
        _f("tokens_per_s", _F32, lo=0),
        _f("mfu", _F32, lo=0, hi=1),
        _f("attempt", pa.int32(), lo=0),
    ),
    "interruptions": (
        _RUN,
        _f("ts", _TS, "ts", required=True),
        _f("host", _STR, "str"),
        _f("gpu", pa.int16(), lo=0),
        _f("component", _STR, "str", required=True),
        _f("category", _STR, "str", required=True, choices=CATEGORIES),
        _f("xid", pa.int16(), lo=1),
        _f("planned", pa.bool_(), "bool"),
        _f("node_lost", pa.bool_(), "bool"),
        _f("detect_s", _F64, lo=0, hi=_MAX_DURATION_S),
        _f("restart_s", _F64, lo=0, hi=_MAX_DURATION_S),
        _f("recovery", _STR, "str", choices=RECOVERIES),
        _f("restored_tier", _STR, "str", choices=RESTORE_TIERS),
        _f("restored_step", pa.int64(), lo=0),
        _f("lost_steps", pa.int64(), lo=0),
        _f("rework_s", _F64, lo=0, hi=_MAX_DURATION_S),
        _f("lost_gpu_hours", _F64, lo=0),
        _f("description", _STR, "text"),
        # Filled by the store path: a posted record's source, or the inference's columns.
        Field("source", _STR),
        Field("confidence", _F64),
        Field("evidence", _STR),
        Field("end_ts", _TS),
        Field("labelled_by", _STR),
        Field("labelled_at", _TS),
        Field("orig_component", _STR),
        Field("orig_category", _STR),
        _f("rank", pa.int32(), lo=0),  # the culprit's rank, when the job knows it
        Field("restarts", pa.int32()),
        Field("culprit_candidates", _STR),  # the inference's: who it may be, and why unnamed
        Field("culprit_reason", _STR),
        # the inference's: when the failure began and when the job noticed (issue 57, 4)
        Field("failed_ts", _TS),
        Field("noticed_ts", _TS),
    ),
    "checkpoints": (
        _RUN,
        _f("step", pa.int64(), required=True, lo=0),
        _f("tier", _STR, "str", required=True, choices=TIERS),
        _f("start_ts", _TS, "ts"),
        _f("end_ts", _TS, "ts", required=True),
        _f("bytes", pa.int64(), lo=0),
        _f("write_s", _F64, lo=0, hi=_MAX_DURATION_S),
        _f("blocking_s", _F64, lo=0, hi=_MAX_DURATION_S),
        _f("status", _STR, "str", choices=STATUSES),
        _f("path", _STR, "text"),
        Field("format", _STR),
    ),
}

# JSON field -> value kind, the same in every record kind (importers convert CSV cells by it).
FIELD_KINDS: dict[str, str] = {
    f.name: f.kind for fields in SCHEMAS.values() for f in fields if f.name is not None
}


@dataclass(frozen=True)
class Rejection:
    index: int  # position of the record in the batch
    reason: str


@dataclass(frozen=True)
class Validated:
    kind: str
    frame: pd.DataFrame  # the good records, columns and types as the store table
    rejected: list[Rejection]
    ignored_fields: dict[str, int] = field(default_factory=dict)  # unknown key -> records


@dataclass(frozen=True)
class RecordReport:
    stored: int  # records written (0 for a duplicate batch)
    rejected: list[Rejection]
    duplicate: bool = False  # the batch id was stored before: nothing written
    ignored_fields: dict[str, int] = field(default_factory=dict)
    runs_created: int = 0


# -- values ------------------------------------------------------------------------------------
def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(f: Field, value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{f.name} must be a string, got {_show(value)}")
    if len(value) > limit:
        raise _Bad(f"{f.name} is longer than {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad(f"{f.name} is not valid Unicode text") from None
    if found := _CONTROL[f.kind].search(value):
        what = "a bidirectional-override character" if found[0] > "\x7f" else "control characters"
        raise _Bad(f"{f.name} contains {what} (U+{ord(found[0]):04X})")
    if f.required and not value.strip():
        raise _Bad(f"{f.name} is empty")
    if f.choices and value not in f.choices:
        raise _Bad(f"{f.name} {_show(value)} is not one of {', '.join(f.choices)}")
    return value


def _number(f: Field, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"{f.name} must be a number, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Bad(f"{f.name} is {value}; it must be a finite number")
    limit = _INT_RANGE.get(f.type)
    if limit is not None:
        if isinstance(value, float) and not value.is_integer():
            raise _Bad(f"{f.name} must be an integer, got {_show(value)}")
        value = int(value)
        if abs(value) > limit:
            raise _Bad(f"{f.name} {value} is out of range")
    elif f.type == _F32 and abs(value) > _FLOAT32_MAX:
        raise _Bad(f"{f.name} {value:g} is out of range")
    if (f.lo is not None and value < f.lo) or (f.hi is not None and value > f.hi):
        bounds = f">= {f.lo:g}" if f.hi is None else f"between {f.lo:g} and {f.hi:g}"
        raise _Bad(f"{f.name} must be {bounds}, got {_show(value)}")
    return value if limit is not None else float(value)


def parse_time(value: Any, now: datetime, name: str = "ts") -> datetime:
    """An ISO-8601 string or unix seconds as a naive UTC datetime within [2000, now + 1 day].
    Raises ``ValueError`` saying what is wrong."""
    try:
        if isinstance(value, str):
            if len(value) > 40:
                raise _Bad(f"{name} is too long to be a time")
            t = datetime.fromisoformat(value.strip())
            t = t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo is not None else t
        elif isinstance(value, int | float) and not isinstance(value, bool):
            t = datetime.fromtimestamp(value, UTC).replace(tzinfo=None)
        else:
            raise _Bad(f"{name} must be an ISO-8601 string or unix seconds, got {_show(value)}")
    except (ValueError, OverflowError, OSError) as exc:
        if isinstance(exc, _Bad):
            raise
        hint = " (milliseconds? send seconds)" if _looks_like_ms(value) else ""
        raise _Bad(f"{name} {_show(value)} is not a valid time{hint}") from None
    if t < EARLIEST:
        raise _Bad(f"{name} {t:%Y-%m-%d} is before {EARLIEST:%Y}")
    if t > now + FUTURE_SLACK:
        hint = " (milliseconds? send seconds)" if _looks_like_ms(value) else ""
        raise _Bad(f"{name} {t:%Y-%m-%d %H:%M} is more than a day in the future{hint}")
    return t


def _looks_like_ms(value: Any) -> bool:
    return isinstance(value, int | float) and 1e11 < abs(value) < 1e14


def _policy(f: Field, value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _Bad(f"{f.name} is not valid JSON") from None
    if not isinstance(value, dict):
        raise _Bad(f"{f.name} must be a JSON object")
    try:
        text = json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        raise _Bad(f"{f.name} holds values that are not plain JSON") from None
    return _text(Field(f.column, _STR, f.name, "text"), text, MAX_TEXT_CHARS)


def _value(f: Field, value: Any, now: datetime) -> Any:
    if f.kind in ("str", "text"):
        return _text(f, value, MAX_ID_CHARS if f.kind == "str" else MAX_TEXT_CHARS)
    if f.kind == "ts":
        return parse_time(value, now, f.name or f.column)
    if f.kind == "json":
        return _policy(f, value)
    if f.kind == "bool":
        if not isinstance(value, bool):
            raise _Bad(f"{f.name} must be true or false, got {_show(value)}")
        return value
    return _number(f, value)


# -- records -----------------------------------------------------------------------------------
def _metrics_rules(row: dict[str, Any], now: datetime) -> None:
    if all(row.get(m) is None for m in METRICS):
        raise _Bad(f"no metric: give loss or one of {', '.join(METRICS[1:])}")
    row["ts"] = row.get("ts") or now
    row["attempt"] = 0 if row.get("attempt") is None else row["attempt"]


def _interruption_rules(row: dict[str, Any], now: datetime) -> None:
    is_planned = row["category"] == PLANNED_CATEGORY
    if row.get("planned") is None:
        row["planned"] = is_planned
    elif row["planned"] != is_planned:
        raise _Bad(f"planned is {str(row['planned']).lower()} but category is {row['category']!r}")
    row["node_lost"] = bool(row.get("node_lost"))


def _checkpoint_rules(row: dict[str, Any], now: datetime) -> None:
    end, write_s, start = row["end_ts"], row.get("write_s"), row.get("start_ts")
    if start is not None and start > end:
        raise _Bad("start_ts is after end_ts")
    if start is None:  # without a write time the checkpoint is placed at its end
        row["start_ts"] = end - timedelta(seconds=write_s or 0.0)
    elif write_s is None:
        row["write_s"] = (end - start).total_seconds()
    row["status"] = row.get("status") or "ok"


def _run_rules(row: dict[str, Any], now: datetime) -> None:
    if row.get("start_ts") and row.get("end_ts") and row["start_ts"] > row["end_ts"]:
        raise _Bad("start_ts is after end_ts")


_RULES: dict[str, Callable[[dict[str, Any], datetime], None]] = {
    "runs": _run_rules,
    "train_metrics": _metrics_rules,
    "interruptions": _interruption_rules,
    "checkpoints": _checkpoint_rules,
}


def _row(kind: str, record: Any, now: datetime) -> dict[str, Any]:
    if not isinstance(record, Mapping):
        raise _Bad(f"record is not a JSON object but {type(record).__name__}")
    row: dict[str, Any] = {}
    for f in SCHEMAS[kind]:
        value = record.get(f.name) if f.name is not None else None
        if value is None:
            if f.required:
                raise _Bad(f"missing required field {f.name!r}")
            continue
        row[f.column] = _value(f, value, now)
    _RULES[kind](row, now)
    return row


def frame(kind: str, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows (dicts by column name, missing = NULL) as a frame shaped like the store table."""
    fields = SCHEMAS[kind]
    table = pa.table(
        {f.column: pa.array([r.get(f.column) for r in rows], type=f.type) for f in fields}
    )
    return table.to_pandas(types_mapper=pd.ArrowDtype)


def validate(kind: str, records: Sequence[Any], now: datetime | None = None) -> Validated:
    """Check ``records`` of ``kind`` (see the module docstring for the policy). ``now`` (naive
    UTC, default the clock) stamps metrics without ``ts`` and bounds future times. Raises
    ``ValueError`` only for an unknown kind or a batch that is not a list."""
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(records, list | tuple):
        raise ValueError("records must be a list of objects")
    now = now or datetime.now(UTC).replace(tzinfo=None)
    known = {f.name for f in SCHEMAS[kind]}
    rows, rejected, ignored = [], [], Counter[str]()
    for i, record in enumerate(records):
        try:
            rows.append(_row(kind, record, now))
        except _Bad as exc:
            rejected.append(Rejection(i, str(exc)))
            continue
        for key in record:
            name = str(key)[:64]
            if key not in known and (name in ignored or len(ignored) < _MAX_IGNORED_KEYS):
                ignored[name] += 1
    return Validated(kind, frame(kind, rows), rejected, dict(ignored))


# -- storing -----------------------------------------------------------------------------------
# Creating a missing run is check-then-write: one lock keeps two batches that both name a new
# run from racing (the store's own lock covers a single append, not the check before it).
_RUNS_LOCK = threading.Lock()
_RUN_COLUMNS = [f.column for f in SCHEMAS["runs"]]
_FIRST_TS = {"train_metrics": "ts", "interruptions": "ts", "checkpoints": "start_ts"}


def _stored_runs(store: Store, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = store.rows(
        f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE list_contains(?, run_id)", [run_ids]
    )
    return {r[0]: dict(zip(_RUN_COLUMNS, r, strict=True)) for r in rows}


def _runs_update(store: Store, v: Validated, source: str) -> tuple[list[dict[str, Any]], int]:
    """Run rows to upsert with this batch, and how many of them are new runs."""
    df = v.frame
    if df.empty:
        return [], 0
    if v.kind == "runs":
        merged: dict[str, dict[str, Any]] = {}
        for rec in df.to_dict("records"):
            new = {k: x for k, x in rec.items() if not pd.isna(x)}
            merged.setdefault(rec["run_id"], {}).update(new)
        stored = _stored_runs(store, list(merged))
        new = {"source": source, "simulated": False}
        out = [stored.get(r, new) | row for r, row in merged.items()]
        return out, len(merged) - len(stored)
    first = df.groupby("run_id")[_FIRST_TS[v.kind]].min()
    stored = _stored_runs(store, list(first.index))
    out = []
    for run_id, ts in first.items():
        ts = ts.to_pydatetime()
        row = stored.get(run_id)
        if row is None:
            out.append(
                {"run_id": run_id, "name": run_id, "start_ts": ts, "source": source}
                | {"simulated": False}
            )
        elif row["start_ts"] is None or row["start_ts"] > ts:
            out.append(row | {"start_ts": ts})
    return out, len(first) - len(stored)


def store_records(
    store: Store,
    kind: str,
    records: Sequence[Any] | Validated,
    batch_id: str | None = None,
    source: str = "ingest",
    now: datetime | None = None,
) -> RecordReport:
    """Validate ``records`` of ``kind`` (or take them as ``validate`` or ``ingest.columnar``
    checked them: a ``Validated``) and store the good ones, with any run rows they need,
    in one ``append_many`` call. With ``batch_id`` a repeated batch writes nothing and the
    report says ``duplicate``. Store errors (``StoreError``) propagate; bad records do not."""
    v = records if isinstance(records, Validated) else validate(kind, records, now)
    if kind == "interruptions" and not v.frame.empty:
        v.frame["source"] = pd.array([source] * len(v.frame), dtype=v.frame["source"].dtype)
    with _RUNS_LOCK:
        runs, created = _runs_update(store, v, source)
        batches = {} if kind == "runs" else {kind: v.frame}
        if runs:
            batches["runs"] = frame("runs", runs)
        if v.frame.empty:  # nothing to store: the batch id stays unused, so a corrected
            return RecordReport(0, v.rejected, False, v.ignored_fields)  # retry is not lost
        try:
            store.append_many(batches, batch_id=batch_id, kind=kind)
        except DuplicateBatchError:
            return RecordReport(0, v.rejected, True, v.ignored_fields)
    return RecordReport(len(v.frame), v.rejected, False, v.ignored_fields, created)
