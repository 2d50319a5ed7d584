"""Training-job records: validation policy, atomic storage, and a store filled only through them
rendering through the dashboard's queries."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry import queries
from telemetry.ingest.records import FIELD_KINDS, KINDS, SCHEMAS, store_records, validate
from telemetry.metrics.alert_rules import active_alerts
from telemetry.metrics.summary import run_summary, store_summary
from telemetry.queries import TimeRange, checkpoints, failures, training
from telemetry.queries import overview as overq
from telemetry.store import Store

NOW = datetime(2026, 11, 20, 12, 0, 0)
T0 = NOW - timedelta(hours=3)
HOSTILE = ["<img src=x onerror=alert(1)>", "'; DROP TABLE runs; --"]


def metric(step: int, run: str = "llm-1", **kw: Any) -> dict[str, Any]:
    ts = (T0 + timedelta(seconds=10 * step)).isoformat() + "Z"
    return {"run": run, "step": step, "ts": ts, "loss": 4.0 - step / 1000} | kw


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(str(tmp_path / "records.duckdb"))
    yield s
    s.close()


def count(store: Store, table: str) -> int:
    return int(store.scalar(f"SELECT count(*) FROM {table}"))  # table names from the test


def whole(store: Store) -> TimeRange:
    ext = queries.data_extent(store)
    assert ext is not None
    return ext


def test_schemas_are_the_store_tables_column_for_column(store: Store) -> None:
    names = {"VARCHAR": "string", "TIMESTAMP": "timestamp[us]", "BIGINT": "int64"}
    names |= {"INTEGER": "int32", "SMALLINT": "int16", "DOUBLE": "double", "FLOAT": "float"}
    names |= {"BOOLEAN": "bool"}
    for kind in KINDS:
        cols = store.rows(
            """SELECT column_name, data_type FROM information_schema.columns
               WHERE table_name = ? ORDER BY ordinal_position""",
            [kind],
        )
        assert [(c, names[t]) for c, t in cols] == [(f.column, str(f.type)) for f in SCHEMAS[kind]]
        frame = validate(kind, []).frame
        assert list(frame.columns) == [c for c, _ in cols]


def test_a_field_name_has_one_meaning_in_every_kind() -> None:
    for fields in SCHEMAS.values():
        for f in fields:
            if f.name is not None:
                assert FIELD_KINDS[f.name] == f.kind, f.name


def test_metrics_are_stored_and_the_loss_curve_is_queryable(store: Store) -> None:
    rep = store_records(store, "train_metrics", [metric(s, lr=3e-4) for s in range(200)], now=NOW)
    assert (rep.stored, rep.rejected, rep.duplicate, rep.runs_created) == (200, [], False, 1)
    series = queries.train_series(store, "llm-1", whole(store))
    assert list(series["step"]) == list(range(200))
    assert series["loss"].iloc[-1] == pytest.approx(4.0 - 199 / 1000, rel=1e-6)
    assert training.step_span(store, "llm-1", whole(store)) == (0, 199)
    run = queries.runs(store).iloc[0]
    assert (run["run_id"], run["name"], bool(run["simulated"])) == ("llm-1", "llm-1", False)
    assert run["start_ts"] == T0


def test_partly_bad_batch_stores_the_good_and_names_the_bad(store: Store) -> None:
    batch: list[Any] = [metric(0), {"run": "llm-1", "step": -1, "loss": 1.0}, "loss=3", metric(1)]
    batch.append(metric(2, loss=math.nan))
    rep = store_records(store, "train_metrics", batch, now=NOW)
    assert rep.stored == 2 and count(store, "train_metrics") == 2
    reasons = {r.index: r.reason for r in rep.rejected}
    assert set(reasons) == {1, 2, 4}
    assert "step" in reasons[1] and ">= 0" in reasons[1]
    assert "not a JSON object" in reasons[2]
    assert "loss is nan" in reasons[4]


def test_a_repeated_batch_id_writes_nothing_twice(store: Store) -> None:
    batch = [metric(s) for s in range(10)]
    first = store_records(store, "train_metrics", batch, batch_id="job-7:0", now=NOW)
    again = store_records(store, "train_metrics", batch, batch_id="job-7:0", now=NOW)
    assert (first.stored, first.duplicate) == (10, False)
    assert (again.stored, again.duplicate) == (0, True)
    assert count(store, "train_metrics") == 10 and count(store, "runs") == 1


def test_the_same_step_posted_twice_without_a_batch_id_is_stored_twice(store: Store) -> None:
    """Without a batch id nothing tells a retry from a step logged again (the loop restarted
    from a checkpoint): train_metrics is append-only, so both rows are kept, neither replaced
    nor dropped, and neither post is a duplicate. The README's remedy for retries is
    ``X-Batch-Id`` (a batch with one is stored at most once)."""
    first = store_records(store, "train_metrics", [metric(7, loss=2.0)], now=NOW)
    again = store_records(store, "train_metrics", [metric(7, loss=1.5)], now=NOW)
    assert (first.stored, first.duplicate, first.runs_created) == (1, False, 1)
    assert (again.stored, again.duplicate, again.runs_created) == (1, False, 0)
    rows = store.rows("SELECT run_id, step, loss FROM train_metrics ORDER BY loss")
    assert rows == [("llm-1", 7, 1.5), ("llm-1", 7, 2.0)]
    assert count(store, "runs") == 1
    assert list(queries.train_series(store, "llm-1", whole(store))["step"]) == [7, 7]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_are_stored_as_plain_text(store: Store, text: str) -> None:
    event = {"run": text, "ts": T0.isoformat(), "host": text, "component": text}
    event |= {"category": "Unknown", "description": text}
    assert store_records(store, "train_metrics", [metric(1, run=text)], now=NOW).stored == 1
    assert store_records(store, "interruptions", [event], now=NOW).stored == 1
    assert list(queries.runs(store)["run_id"]) == [text]
    row = queries.interruptions(store, text).iloc[0]
    assert (row["host"], row["component"], row["description"]) == (text, text, text)
    assert count(store, "runs") == 1 and count(store, "train_metrics") == 1


@pytest.mark.parametrize(
    "record, words",
    [
        ({"loss": math.inf}, "loss is inf"),
        ({"loss": -math.inf}, "loss is -inf"),
        ({"loss": 1e39}, "out of range"),
        ({"step": 2**64}, "out of range"),
        ({"step": True}, "must be a number"),
        ({"step": "12"}, "must be a number"),
        ({"step": 1.5}, "must be an integer"),
        ({"ts": (NOW + timedelta(days=2)).isoformat()}, "future"),
        ({"ts": NOW.timestamp() * 1000}, "milliseconds"),
        ({"ts": "1999-12-31T23:59:59"}, "before 2000"),
        ({"ts": "yesterday"}, "not a valid time"),
        ({"ts": 1e300}, "not a valid time"),
        ({"ts": math.nan}, "not a valid time"),
        ({"mfu": 45.0}, "between 0 and 1"),
        ({"lr": -1e-4}, ">= 0"),
        ({"run": "x" * 257}, "longer than 256"),
        ({"run": "   "}, "empty"),
        ({"run": "a\nb"}, "control characters"),
        ({"run": "\ud800"}, "not valid Unicode"),
        ({"run": 7}, "must be a string"),
        ({"run": None}, "missing required field 'run'"),
        ({"loss": None}, "no metric"),
    ],
)
def test_bad_metric_values_are_rejected_with_a_reason(record: dict[str, Any], words: str) -> None:
    rec = {"run": "r", "step": 1, "loss": 2.5} | record
    v = validate("train_metrics", [rec], now=NOW)
    assert v.frame.empty and len(v.rejected) == 1
    assert words in v.rejected[0].reason


@pytest.mark.parametrize(
    "kind, record, words",
    [
        ("checkpoints", {"tier": "tape"}, "tier 'tape' is not one of nvme, pfs, object"),
        ("checkpoints", {"status": "done"}, "status"),
        ("checkpoints", {"start_ts": "2026-11-20T11:00:00"}, "start_ts is after end_ts"),
        ("checkpoints", {"write_s": 1e300}, "between 0"),
        ("interruptions", {"category": "Cosmic rays"}, "not one of GPU"),
        ("interruptions", {"planned": True}, "planned is true but category is 'GPU'"),
        ("interruptions", {"recovery": "prayer"}, "recovery"),
        ("interruptions", {"gpu": 40000}, "out of range"),
        ("interruptions", {"description": "x" * 5000}, "longer than 4096"),
        ("runs", {"ckpt_policy": "{not json"}, "not valid JSON"),
        ("runs", {"gpus": 0}, ">= 1"),
        ("runs", {"end_ts": "2001-01-01"}, "start_ts is after end_ts"),
    ],
)
def test_bad_event_values_are_rejected(kind: str, record: dict[str, Any], words: str) -> None:
    base = {
        "checkpoints": {"run": "r", "step": 5, "tier": "nvme", "end_ts": "2026-11-20T10:00:00"},
        "interruptions": {"run": "r", "ts": T0.isoformat(), "component": "Faulty GPU"}
        | {"category": "GPU"},
        "runs": {"run": "r", "start_ts": "2026-01-01T00:00:00Z"},
    }[kind]
    v = validate(kind, [base | record], now=NOW)
    assert v.frame.empty and words in v.rejected[0].reason


def test_times_are_utc_whatever_their_notation() -> None:
    unix_s = (datetime(2026, 11, 20, 9, 0) - datetime(1970, 1, 1)).total_seconds()
    recs = [
        metric(1, ts="2026-11-20T11:00:00+02:00"),
        metric(2, ts="2026-11-20T09:00:00Z"),
        metric(3, ts=unix_s),
        metric(4, ts=int(unix_s)),
        metric(5, ts="2026-11-20 09:00:00"),
    ]
    v = validate("train_metrics", recs, now=NOW)
    assert list(v.frame["ts"]) == [datetime(2026, 11, 20, 9, 0)] * 5
    unstamped = validate("train_metrics", [{"run": "r", "step": 1, "loss": 2.0}], now=NOW)
    assert unstamped.frame["ts"].iloc[0] == NOW


def test_unknown_keys_are_ignored_and_counted() -> None:
    v = validate("train_metrics", [metric(1, los=2.0), metric(2, los=2.0, extra=1)], now=NOW)
    assert len(v.frame) == 2 and v.ignored_fields == {"los": 2, "extra": 1}


def test_metrics_never_overwrite_a_runs_metadata(store: Store) -> None:
    meta = {"run": "llm-1", "name": "Llama 8B", "gpus": 64, "nodes": 8}
    meta |= {"start_ts": "2026-11-20T10:00:00Z", "ckpt_policy": {"nvme_interval_s": 600}}
    assert store_records(store, "runs", [meta], now=NOW).runs_created == 1
    store_records(store, "train_metrics", [metric(s) for s in range(5)], now=NOW)
    run = store.rows("SELECT name, gpus, nodes, start_ts, ckpt_policy FROM runs")[0]
    # Older metrics moved the start earlier; nothing else changed.
    assert run == ("Llama 8B", 64, 8, T0, '{"nvme_interval_s": 600}')
    store_records(store, "runs", [{"run": "llm-1", "end_ts": NOW.isoformat()}], now=NOW)
    assert store.rows("SELECT name, gpus, end_ts FROM runs") == [("Llama 8B", 64, NOW)]


def test_several_updates_of_one_run_in_a_batch_merge(store: Store) -> None:
    batch = [{"run": "r", "gpus": 8}, {"run": "r", "nodes": 1}, {"run": "r", "gpus": 16}]
    assert store_records(store, "runs", batch, now=NOW).stored == 3
    assert store.rows("SELECT run_id, name, gpus, nodes FROM runs") == [("r", None, 16, 1)]


def test_event_defaults_follow_the_replay_conventions() -> None:
    planned = {"run": "r", "ts": T0.isoformat(), "component": "Planned maintenance"}
    ints = validate("interruptions", [planned | {"category": "Planned"}], now=NOW).frame
    assert bool(ints["planned"].iloc[0]) and not bool(ints["node_lost"].iloc[0])
    ck = {"run": "r", "step": 100, "tier": "pfs", "end_ts": "2026-11-20T10:01:00"}
    both = validate("checkpoints", [ck | {"start_ts": "2026-11-20T10:00:00"}, ck], now=NOW).frame
    assert list(both["write_s"].fillna(-1)) == [60.0, -1]  # unknown stays unknown
    assert list(both["status"]) == ["ok", "ok"]


def fill_like_a_training_job(store: Store) -> None:
    """Metrics, an interruption and checkpoints with only the fields a job knows."""
    store_records(store, "train_metrics", [metric(s) for s in range(600)], now=NOW)
    bare = {"run": "llm-1", "ts": (T0 + timedelta(minutes=30)).isoformat()}
    store_records(
        store, "interruptions", [bare | {"component": "Faulty GPU", "category": "GPU"}], now=NOW
    )
    cks = [
        {"run": "llm-1", "step": 60 * k, "tier": "nvme"}
        | {"end_ts": (T0 + timedelta(minutes=10 * k)).isoformat()}
        for k in range(1, 10)
    ]
    store_records(store, "checkpoints", cks, now=NOW)


def test_a_store_filled_by_records_alone_renders(store: Store) -> None:
    fill_like_a_training_job(store)
    tr = whole(store)
    s = run_summary(store, "llm-1")
    assert (s["gpus"], s["model_params"], s["mfu"]) == (None, None, None)
    # No tokens posted: ETTR from the steps and their median time (no gap: all productive).
    assert (s["ettr"], s["ettr_basis"]) == (1.0, "steps")
    assert s["steps"] == 599 and s["interruptions"]["unexpected"] == 1
    assert store_summary(store)["runs"][0]["checkpoints"]["nvme"]["count"] == 9
    assert overq.fleet_latest(store)["failed"] == 0
    events = training.run_events(store, "llm-1", tr)
    assert events["failed_step"].iloc[0] == 180  # the last step logged by then
    assert events["restored_step"].iloc[0] == 180 and events["resumed"].iloc[0] == events["ts"][0]
    assert checkpoints.model_inputs(store, "llm-1", tr).write_s is None  # type: ignore[union-attr]
    assert failures.reliability(store, "llm-1", tr)["unexpected"] == 1
    for call in (
        lambda: training.loss_spikes(store, "llm-1", tr),
        lambda: training.checkpoint_marks(store, "llm-1", tr),
        lambda: failures.taxonomy(store, "llm-1", tr),
        lambda: failures.timeline(store, "llm-1", tr),
        lambda: failures.xid_table(store, "llm-1", tr),
        lambda: failures.lemons(store, "llm-1", tr),
        lambda: checkpoints.tier_stats(store, "llm-1", tr),
        lambda: checkpoints.timeline(store, "llm-1", tr),
        lambda: checkpoints.restores(store, "llm-1", tr),
        lambda: overq.fleet_series(store, tr),
        lambda: active_alerts(store, "llm-1", tr),
    ):
        call()


# -- property: nothing a sender posts makes store_records raise --------------------------------
_names = st.sampled_from(sorted(FIELD_KINDS) + ["junk", ""])
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=300),
    st.sampled_from(["nvme", "GPU", "Planned", "ok", "2026-11-20T10:00:00Z", "r1", *HOSTILE]),
    st.floats(min_value=9.5e8, max_value=1.9e9),
)
_values = st.one_of(_scalars, st.lists(_scalars, max_size=3), st.dictionaries(st.text(), _scalars))
_VALID = [  # one valid record of every kind, which the strategy then damages at random
    metric(1),
    {"run": "r1", "ts": "2026-11-20T10:00:00Z", "component": "NIC", "category": "Host"},
    {"run": "r1", "step": 10, "tier": "nvme", "end_ts": "2026-11-20T10:00:00Z"},
    {"run": "r2", "gpus": 8},
]
_near_valid = st.builds(
    lambda base, changes: base | changes,
    st.sampled_from(_VALID),
    st.dictionaries(_names, _values, max_size=2),
)
_records = st.lists(
    st.one_of(_near_valid, st.dictionaries(_names, _values, max_size=12), _scalars), max_size=12
)


@pytest.fixture(scope="module")
def shared_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as d:
        s = Store(str(Path(d) / "fuzz.duckdb"))
        yield s
        s.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    records=_records,
    batch_id=st.one_of(st.none(), st.text(st.characters(codec="utf-8"), max_size=4)),
)
def test_any_json_like_batch_is_stored_or_rejected_never_raises(
    shared_store: Store, kind: str, records: list[Any], batch_id: str | None
) -> None:
    before = count(shared_store, kind)
    rep = store_records(shared_store, kind, records, batch_id=batch_id)
    if rep.duplicate:  # a batch id seen before: nothing written, the same rejections
        assert rep.stored == 0 and count(shared_store, kind) == before
        return
    assert rep.stored + len(rep.rejected) == len(records)
    if kind != "runs":  # runs rows merge by run id
        assert count(shared_store, kind) == before + rep.stored
