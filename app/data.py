"""The app's data adapter: the one door from pages to ``telemetry``.

Pages import nothing from ``telemetry`` (tests/test_architecture.py and ruff's banned-api rule
hold them to it) and never see the ``Store``: ``create_app`` binds it here once, and every
function below takes what a view says (a run, a ``TimeRange`` from ``view_range``, a metric or
grouping) and returns frames, dicts or small frozen results. Whatever a page needs computed
(interval advice, overlays, counts) is computed in ``telemetry``; this module only adapts:
it binds the store, cleans what a browser sends, and re-exports the vocabulary pages show.

Long module: the one door from every page to the data; each function is a thin adapter.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pandas as pd

from telemetry import label_api, queries
from telemetry.cost import PriceBook, Prices, price_book
from telemetry.cost import money as money  # formatting re-export for the pages
from telemetry.cost import per_day_usd as per_day_usd  # the what-if's money, for the page
from telemetry.derive import derive
from telemetry.queries import TimeRange, gpu_rollup
from telemetry.queries import checkpoints as ckq
from telemetry.queries import failures as failq
from telemetry.queries import gpu_node as nodeq
from telemetry.queries import gpus as gpuq
from telemetry.queries import hangs as hangq
from telemetry.queries import outliers as outq
from telemetry.queries import overview as overq
from telemetry.queries import slurm as slurmq
from telemetry.queries import targets as targetq
from telemetry.queries import training as trainq
from telemetry.queries import workload as workq
from telemetry.queries.checkpoints import WhatIf
from telemetry.queries.failures import LLAMA3_MTBF_H as LLAMA3_MTBF_H  # vocabulary re-export
from telemetry.queries.gpu_node import EXTRA_FIELDS as EXTRA_FIELDS  # vocabulary re-export
from telemetry.queries.gpu_node import NODE_METRICS as NODE_METRICS  # vocabulary re-export
from telemetry.queries.gpus import GpuMetric, Heatmap
from telemetry.reliability import IntervalAdvice
from telemetry.store import Store
from telemetry.summary import run_summary
from telemetry.utilization import CLASS_TEXT as CLASS_TEXT  # vocabulary re-export
from telemetry.utilization import Basis
from telemetry.vocabulary import HOT_C, IDLE_PCT

_store: Store | None = None
_alerts: Any = None  # the serving process's AlertLoop (``bind_alerts``)
_prices: PriceBook = price_book(None, None, None)  # ``bind_prices``
_history: Any = None  # collect.prometheus.prom_history.PromHistory, bound by `serve --prometheus`

PRESETS: dict[str, float | None] = {  # seconds before the newest data; None = everything
    "1h": 3600.0,
    "6h": 6 * 3600.0,
    "24h": 86400.0,
    "7d": 7 * 86400.0,
    "all": None,
}


_on_bind: list[Callable[[], None]] = []


def on_bind(hook: Callable[[], None]) -> None:
    """Run ``hook`` whenever another store is bound (caches of the old store's data)."""
    _on_bind.append(hook)


def bind(store: Store) -> None:
    global _store
    old, _store = _store, store
    if store is not old:  # after the swap: whatever is computed from here on is of the new store
        for hook in _on_bind:
            hook()


def together(*reads: Callable[[], Any]) -> list[Any]:
    """The results of ``reads`` (functions of no argument), run at once, in order; the first
    error is raised. Reads a view needs that do not depend on each other: each query has its
    own DuckDB cursor and DuckDB works outside the GIL, so the first viewer after a write
    waits for the slowest of them, not their sum. Each read but the first gets a thread of
    its own, not a shared pool: under fifty users a pool's queue makes reads answered from the
    result cache wait behind other views' cold ones (benchmarks/reliability.py's load, one run
    each: callback p95 1.6 s with a three-worker pool, 1.0 s with threads)."""
    results: list[Any] = [None] * len(reads)
    errors: list[BaseException | None] = [None] * len(reads)

    def run(i: int) -> None:
        try:
            results[i] = reads[i]()
        except BaseException as exc:  # raised in the caller's thread below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(1, len(reads))]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results


def store() -> Store:
    if _store is None:
        raise RuntimeError("the dashboard is not bound to a store (use app.main.create_app)")
    return _store


def version() -> int:
    """The bound store's data version: it changes with every write (keys of cached replies)."""
    return store().version


def is_simulated() -> bool:
    return store().meta().get("simulated") == "true"


def scenario_description() -> str:
    return store().meta().get("scenario_description", "")


def run_simulation(run_id: str | None) -> str | None:
    """What the "Simulated data" banner says for the run on show, or None for a real run: a
    store may hold a replay beside an imported run, and only the replayed run is simulated.
    With no run at all, the store's own flag decides."""
    if run_id is None:
        return scenario_description() if is_simulated() else None
    row = runs().set_index("run_id")
    if run_id not in row.index or not bool(row.at[run_id, "simulated"]):
        return None
    meta = store().meta()
    same = meta.get("scenario") == row.at[run_id, "scenario"]
    return meta.get("scenario_description", "") if same else ""


def runs() -> pd.DataFrame:
    return queries.runs(store())


def run_options() -> list[dict[str, str]]:
    """The runs as dropdown options (label: the run's name, or its id when it has none: a run
    known from a log or a dump only; a null label broke every page's dropdown), oldest first."""
    return [
        {"label": r.name if isinstance(r.name, str) and r.name else str(r.run_id),
         "value": r.run_id}
        for r in runs().itertuples()
    ]  # fmt: skip


def default_run(runs: list[str]) -> str | None:
    """The run a page opens on: the newest that logged training metrics (not a Slurm job
    known only from accounting), else the newest of ``runs``."""
    trained = queries.newest_trained_run(store())
    return trained if trained in runs else (runs[-1] if runs else None)


def run_label(run_id: str) -> str:
    df = runs()
    names = dict(zip(df["run_id"], df["name"], strict=True))
    name = names.get(run_id)
    return name if isinstance(name, str) and name else run_id


def extent() -> TimeRange | None:
    return queries.data_extent(store())


_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?$")


def parse_time(text: str | None) -> datetime | None:
    """An ISO time from a URL or a chart (``2026-01-05 10:00:00.123``), or None for anything
    else (steps or token counts from a non-time axis, hostile strings)."""
    if (
        not isinstance(text, str)
        or not text
        or len(text) > 40
        or not _ISO.match(str(text).replace("Z", ""))
    ):
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "")).replace(tzinfo=None)
    except ValueError:
        return None


# -- callback inputs: what a browser sends, or what a crafted POST may send instead ----------
MAX_ID = 256


def clean_view(view: Any) -> dict[str, Any]:
    """The shared view reduced to what it may hold: a run id string, a known range preset (or
    ``custom``) and start/end strings. Anything else (wrong types, unknown presets, huge
    strings) is dropped, so a crafted callback payload reaches no query."""
    if not isinstance(view, dict):
        return {}
    out: dict[str, Any] = {}
    run = view.get("run")
    if isinstance(run, str) and 0 < len(run) <= MAX_ID:
        out["run"] = run
    rng = view.get("range")
    out["range"] = rng if isinstance(rng, str) and (rng in PRESETS or rng == "custom") else "all"
    for key in ("start", "end"):
        v = view.get(key)
        if isinstance(v, str) and len(v) <= 40:
            out[key] = v
    node = view.get("node")
    if isinstance(node, str) and 0 < len(node) <= MAX_ID:
        out["node"] = node
    return out


def fragment(view: Any) -> str:
    """The URL fragment of a view (``#run=…&range=24h`` or ``#run=…&from=…&to=…``, plus
    ``&node=…`` when the GPUs page drills into a node), so a link reproduces it."""
    v = clean_view(view)
    params = {"run": v.get("run") or ""}
    if v.get("range") == "custom":
        params |= {"from": v.get("start") or "", "to": v.get("end") or ""}
    else:
        params["range"] = v.get("range") or "all"
    if v.get("node"):
        params["node"] = v["node"]
    return "#" + urlencode(params)


def run_of(view: Any) -> str | None:
    """The view's run if the store has it (a stale link or a crafted payload may name another)."""
    run = clean_view(view).get("run")
    return run if run is not None and run in set(runs()["run_id"]) else None


def number(value: Any) -> float | None:
    """A finite number from an input, or None (empty, text, bool, NaN, ±inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def mapping(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def table_row(cell: Any, rows: Any) -> dict[str, Any] | None:
    """The row a DataTable's ``active_cell`` points at in its viewport, or None."""
    if not isinstance(cell, dict) or not isinstance(rows, list):
        return None
    i = cell.get("row")
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(rows):
        return None
    return rows[i] if isinstance(rows[i], dict) else None


def view_range(view: dict[str, Any] | None) -> TimeRange | None:
    """The time range a shared view describes: a zoomed window, or a preset ending at the
    newest data. None when the store holds nothing yet."""
    view = clean_view(view)
    if view.get("range") == "custom":
        start, end = parse_time(view.get("start")), parse_time(view.get("end"))
        if start is not None and end is not None and start < end:
            return TimeRange(start, end)
    return time_range(view.get("range"), view.get("run"))


def revision(view: dict[str, Any] | None) -> str:
    """Plotly ``uirevision``: the same while only live data changes (legend toggles survive a
    refresh), new when the run or the chosen range changes."""
    v = clean_view(view)
    return f"{v.get('run')}|{v.get('range')}|{v.get('start')}|{v.get('end')}"


def template(theme: str | None) -> str:
    return "plotly_white" if theme == "light" else "plotly_dark"


def time_range(preset: str | None, run: str | None = None) -> TimeRange | None:
    """The preset range ending at the newest data of ``run`` (the store's, without a run; not
    the wall clock: replays and backfills have their own time). "Whole run" is the run's own
    time within the stored data; a run that lies outside it (a Slurm job known only from
    accounting, an import of last month's logs) is shown over its own time."""
    ext = extent()
    if ext is None:
        return None
    base = _run_base(ext, run)
    span = PRESETS.get(preset or "all")
    start = base.start if span is None else max(base.start, base.end - timedelta(seconds=span))
    return TimeRange(start, base.end)


def _run_base(ext: TimeRange, run: str | None) -> TimeRange:
    own = queries.run_span(store(), run) if isinstance(run, str) and run else None
    if own is None:
        return ext
    end = own.end if own.end is not None else ext.end
    start = own.start
    if own.start <= ext.end and end >= ext.start:  # the run has data here: its part of it
        start, end = max(own.start, ext.start), min(end, ext.end)
    pad = max(timedelta(0), timedelta(minutes=1) - (end - start)) / 2
    return TimeRange(start - pad, end + pad)  # a job of seconds still gets a minute


# -- Overview ---------------------------------------------------------------------------------
def fleet_series(tr: TimeRange) -> pd.DataFrame:
    return queries.fleet_series(store(), tr)


def fleet_latest() -> dict[str, Any]:
    return queries.fleet_latest(store())


def hottest_gpus(limit: int = 8) -> pd.DataFrame:
    return queries.hottest_gpus(store(), limit)


def interruption_marks(run_id: str | None, tr: TimeRange | None = None) -> pd.DataFrame:
    """The interruptions in ``tr`` with what a chart marks them with (``MARK_COLUMNS``)."""
    return queries.interruptions(store(), run_id, tr, queries.MARK_COLUMNS)


def recent_interruptions(ints: pd.DataFrame, end: datetime, hours: float = 24.0) -> int:
    """How many of the ``interruptions`` frame ``ints`` came in the ``hours`` before ``end``."""
    return overq.recent_interruptions(ints, end, hours)


def checkpoint_ages(run_id: str, now: datetime) -> pd.DataFrame:
    return queries.checkpoint_ages(store(), run_id, now)


def summary(run_id: str) -> dict[str, Any]:
    """The run's figures the Overview's cards show (``run_summary`` without its detail)."""
    return run_summary(store(), run_id, detail=False)


def active_alerts(run_id: str | None, tr: TimeRange, targets_at: datetime) -> pd.DataFrame:
    """Alerts at the end of the range (severity, alert, detail), scrape targets at
    ``targets_at`` (see ``target_time``)."""
    return overq.active_alerts(store(), run_id, tr, targets_at=targets_at)


# -- scrape targets ----------------------------------------------------------------------------
def target_time(tr: TimeRange, live: bool) -> datetime:
    """When to report target health for a view: its end, or in a live view the newest round."""
    return targetq.report_time(store(), tr.end, live)


def target_health(at: datetime) -> pd.DataFrame | None:
    """Each scrape target's health at ``at``; None for a store that scrapes no target."""
    return targetq.target_health(store(), at) if targetq.has_targets(store()) else None


def target_counts(health: pd.DataFrame) -> dict[str, int]:
    """Targets per status (``up``, ``down``, ``stale``; 0 when none)."""
    return targetq.status_counts(health)


# -- Training ---------------------------------------------------------------------------------
def train_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    """The run's metrics in the range, with its restarts marked (``mark_restarts``)."""
    return trainq.mark_restarts(queries.train_series(store(), run_id, tr))


def loss_series(run_id: str, tr: TimeRange) -> pd.DataFrame:
    """The run's loss in the range (``LOSS_COLS``), with its restarts marked."""
    return trainq.mark_restarts(queries.loss_series(store(), run_id, tr))


def overlay_series(run_id: str, tr: TimeRange, overlay: Any, axis: str) -> dict[str, pd.DataFrame]:
    """The run's series and those of the ``overlay`` runs to compare (same time or steps)."""
    return trainq.overlay_series(store(), run_id, tr, overlay, axis)


def run_events(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return trainq.run_events(store(), run_id, tr)


def checkpoint_marks(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return trainq.checkpoint_marks(store(), run_id, tr)


def tokens_per_step(run_id: str) -> float:
    return trainq.tokens_per_step(store(), run_id)


def loss_spikes(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return trainq.loss_spikes(store(), run_id, tr)


# -- GPUs -------------------------------------------------------------------------------------
def gpu_metric(key: str) -> GpuMetric:
    """The GPU metric called ``key``; ``ValueError`` for any other name."""
    return gpuq.metric(key)


def gpu_threshold(key: str) -> float | None:
    """The operating threshold of a GPU metric (hot, idle) to mark on its charts, if any."""
    return {"temp": HOT_C, "util": IDLE_PCT, "real": IDLE_PCT}.get(key)


def gpu_heatmap(tr: TimeRange, key: str) -> Heatmap:
    return gpuq.heatmap(store(), tr, key)


def culprits(run_id: str | None, tr: TimeRange) -> pd.DataFrame:
    return failq.culprits(store(), run_id, tr)


def gpu_distribution(tr: TimeRange, key: str) -> pd.DataFrame:
    return gpuq.distribution(store(), tr, key)


LOW_UTIL_PCT = overq.LOW_UTIL_PCT  # vocabulary re-export


def gpus_below(tr: TimeRange) -> pd.DataFrame:
    return gpu_rollup.gpus_below(store(), tr, overq.LOW_UTIL_PCT)


def util_basis(tr: TimeRange) -> Basis:
    """What real utilization was measured from over ``tr`` (``telemetry.utilization``)."""
    return workq.basis(store(), tr)


def workload_classes(tr: TimeRange) -> pd.DataFrame:
    return workq.classes(store(), tr)


def gpu_outliers(tr: TimeRange) -> pd.DataFrame:
    return outq.outliers(store(), tr)


def outlier_reasons(outliers: pd.DataFrame) -> list[tuple[str, int]]:
    """(reason, GPUs) of an outlier table, in the table's reason order."""
    return outq.reason_counts(outliers)


def worst_node(tr: TimeRange) -> tuple[str, str] | None:
    """(host, why) of the node the GPUs page opens on before one is chosen; None: no samples."""
    return outq.worst_node(store(), tr)


def node_info(host: str) -> dict[str, Any] | None:
    """The node's inventory (host, rack, role, GPU count and model); None if no such node."""
    return gpuq.node_info(store(), host)


def node_gpu_series(host: str, tr: TimeRange) -> pd.DataFrame:
    """The node's GPUs over the range. Before the raw-retention horizon: from the per-GPU
    rollups when the bucket fits one, else from Prometheus when ``serve`` reads one
    (``bind_history``), else in buckets no finer than the finest per-GPU rollup."""
    from telemetry.collect.prometheus.prom_history import merged_node_series

    s = store()
    expired = s.raw_since()
    if expired is None or tr.start >= expired:
        return gpuq.node_gpu_series(s, host, tr)
    bucket = gpuq.nice_bucket(s, tr, gpuq.NODE_POINTS)
    if _history is not None and gpu_rollup.node_series_level(s, tr, bucket) is None:
        local = gpuq.node_gpu_series(s, host, tr)
        return merged_node_series(local, _history, host, tr.start, expired, bucket)
    finest = s.gpu_rollup_levels()
    return gpuq.node_gpu_series(s, host, tr, min_bucket=finest[0] if finest else 0)


def expired_note(tr: TimeRange, series: pd.DataFrame | None) -> str:
    """What the drill-down says when its range starts before the raw-retention horizon (""
    otherwise): which per-GPU lines are there and where they come from."""
    s = store()
    expired = s.raw_since()
    if expired is None or tr.start >= expired:
        return ""
    head = f"per-GPU samples before {expired:%Y-%m-%d %H:%M} UTC have expired (raw retention): "
    bucket = int(series["bucket_s"].iloc[0]) if series is not None and len(series) else 0
    if bucket and gpu_rollup.node_series_level(s, tr, bucket) is not None:
        return head + "these lines are the per-GPU averages kept in the rollups"
    if _history is not None:
        return head + f"read from {history_source()} instead"
    return head + "the heatmap keeps this node's averages from the rollups"


def bind_prices(book: PriceBook) -> None:
    """The prices money figures use (``serve --gpu-hour-price`` ...; defaults otherwise)."""
    global _prices
    _prices = book


def prices(run_id: Any) -> Prices:
    """A run's prices: its own (``--run-price``), else the server's, else the defaults."""
    return _prices.for_run(run_id if isinstance(run_id, str) else None)


def bind_alerts(loop: Any) -> None:
    """The serving process's alert delivery (an ``AlertLoop``), shown on the Overview."""
    global _alerts
    _alerts = loop


def delivers_alerts() -> bool:
    """Whether this server delivers alerts (``serve --alerts``)."""
    return _alerts is not None


def alert_delivery() -> dict[str, Any] | None:
    """How alert delivery goes (None: this server delivers none): each receiver's status,
    the alerts firing and silenced at the last evaluation, and an evaluation error if any."""
    if _alerts is None:
        return None
    d = _alerts.dispatcher
    return {
        "receivers": d.status(),
        "firing": len(d.firing),
        "silenced": len(d.silenced),
        "evaluated_at": d.evaluated_at,
        "error": _alerts.error,
    }


def firing_alerts() -> list[tuple[str, dict[str, str]]]:
    """(what to call it, its labels) of each alert firing at the last evaluation."""
    if _alerts is None:
        return []
    firing = list(_alerts.dispatcher.firing.values())
    return [
        (
            f"{f.alert.summary} ("
            + ", ".join(f"{k}={v}" for k, v in f.alert.labels.items() if k != "severity")
            + ")",
            {k: v for k, v in f.alert.labels.items() if k != "severity"},
        )
        for f in firing
    ]


def silences() -> list[Any]:
    """The silences in force (``alerting.Silence``)."""
    from telemetry.alerting import active_silences

    return active_silences(store())


def end_silence(silence_id: Any, token: Any) -> tuple[int, str]:
    """End the silence picked on the page: (status, message)."""
    if refused := _refused(token):
        return refused
    if not isinstance(silence_id, str) or not silence_id:
        return 400, "Pick a silence to end first."
    status, reply = label_api.apply_end_silence(store(), {"id": silence_id})
    if status != 200:
        return status, f"{status}: {reply['error']}"
    return 200, "Ended: its alerts are delivered again from the next evaluation."


def silence(alert: Any, duration: Any, by: Any, token: Any) -> tuple[int, str]:
    """Silence the alert picked on the page (its labels as JSON): (status, message)."""
    if refused := _refused(token):
        return refused
    try:
        matchers = json.loads(alert) if isinstance(alert, str) else None
    except ValueError:
        matchers = None
    if not isinstance(matchers, dict) or not matchers:
        return 400, "Pick a firing alert first."
    body = {
        "matchers": matchers,
        "duration": duration if isinstance(duration, str) else "4h",
        "by": by if isinstance(by, str) and by else "operator",
        "comment": "from the page",
    }
    status, reply = label_api.apply_silence(store(), body)
    if status != 200:
        return status, f"{status}: {reply['error']}"
    ends = reply["silence"]["ends_at"][:16].replace("T", " ")
    return 200, f"Silenced until {ends} UTC: it goes to no receiver until then."


def bind_history(history: Any) -> None:
    """Where per-GPU series older than the store's raw window are read (a ``PromHistory``)."""
    global _history
    _history = history


def history_source() -> str | None:
    """The server the drill-down reads expired per-GPU series from, if any."""
    return None if _history is None else ", ".join(c.url for c in _history.clients)


def node_metric(key: Any) -> tuple[str, str, str, str]:
    """(key, column, label, unit) of a further drill-down metric; the first for an unknown key."""
    key = key if isinstance(key, str) and key in NODE_METRICS else next(iter(NODE_METRICS))
    return (key, *NODE_METRICS[key][:3])


def node_more(host: str, tr: TimeRange, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The drill-down's further metric ``key`` of the node's GPUs, and what runs on them."""
    return nodeq.node_gpu_metric(store(), host, tr, key), nodeq.node_workload(store(), host)


# -- Failures ---------------------------------------------------------------------------------
def taxonomy_key(by: Any) -> str:
    """A grouping of the interruption taxonomy from an input: ``component`` unless it names
    another known one."""
    return by if isinstance(by, str) and by in failq.TAXONOMY_KEYS else "component"


def failure_summary(run_id: str | None, tr: TimeRange) -> dict[str, Any]:
    """MTBF, interruptions, downtime, lost GPU-hours and recovery of the run (None: all)."""
    return failq.reliability(store(), run_id, tr)


def taxonomy(run_id: str | None, tr: TimeRange, by: str) -> pd.DataFrame:
    return failq.taxonomy(store(), run_id, tr, by)


def failure_timeline(run_id: str | None, tr: TimeRange) -> pd.DataFrame:
    return failq.timeline(store(), run_id, tr)


def xid_table(run_id: str | None, tr: TimeRange) -> pd.DataFrame:
    return failq.xid_table(store(), run_id, tr)


def lemons(run_id: str | None, tr: TimeRange) -> pd.DataFrame:
    return failq.lemons(store(), run_id, tr)


def hangs(run_id: str | None) -> list[dict[str, Any]]:
    """The run's hangs from flight-recorder dumps (``queries.hangs``), as row dicts."""
    return list(hangq.hangs(store(), run_id).to_dict("records"))


# Interruptions one by one, their evidence, and operators' corrections of their causes.
_operator_token: str | None = None


def set_operator_token(token: str | None) -> None:
    """The token that allows corrections (``serve --operator-token-file``); None: read-only."""
    global _operator_token
    _operator_token = token or None


def corrections_allowed() -> bool:
    return _operator_token is not None and not store().read_only


def label_choices() -> tuple[dict[str, str], list[str]]:
    """Components (-> their category) and categories an operator may choose."""
    return derive.components(), derive.categories()


def interruption_list(run_id: str | None, tr: TimeRange) -> pd.DataFrame:
    """Interruptions in the range, newest first, each with a ``key`` naming it in the browser."""
    df = failq.interruption_list(store(), run_id, tr)
    keys = [
        f"{r}|{pd.Timestamp(t).isoformat()}" for r, t in zip(df["run_id"], df["ts"], strict=True)
    ]
    return df.assign(key=keys)


def _parse_key(key: Any) -> tuple[str, datetime] | None:
    if not isinstance(key, str) or "|" not in key or len(key) > 600:
        return None
    run, _, ts = key.rpartition("|")
    try:
        return run, datetime.fromisoformat(ts)
    except ValueError:
        return None


def interruption_detail(key: Any) -> dict[str, Any] | None:
    """The interruption a ``key`` names, with its evidence; None for a key naming none."""
    parsed = _parse_key(key)
    return None if parsed is None else failq.interruption_detail(store(), *parsed)


def _refused(token: Any) -> tuple[int, str] | None:
    """The 403 an operator write from a page gets (no operator token configured, or a wrong
    one given), as the HTTP API words it; None when it may go ahead."""
    if _operator_token is None:
        return 403, "403 Forbidden: " + label_api.FORBIDDEN_OFF
    if not label_api.operator_ok(token if isinstance(token, str) else None, _operator_token):
        return 403, "403 Forbidden: " + label_api.FORBIDDEN_TOKEN
    return None


def relabel(key: Any, component: Any, category: Any, by: Any, token: Any) -> tuple[int, str]:
    """Store a correction from the page: (HTTP-like status, message for the person)."""
    if refused := _refused(token):
        return refused
    parsed = _parse_key(key)
    if parsed is None:
        return 400, "Choose an interruption in the table first."
    body = {"run": parsed[0], "ts": parsed[1].isoformat(), "component": component}
    body |= {"category": category or None, "by": by if isinstance(by, str) and by else None}
    status, reply = label_api.apply_label(store(), body)
    if status != 200:
        return status, f"{status}: {reply['error']}"
    lab = reply["label"]
    return 200, f"Saved: {lab['component']} ({lab['category']}), by {lab['by']}."


# -- Checkpoints ------------------------------------------------------------------------------
def tier_stats(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return ckq.tier_stats(store(), run_id, tr)


def restores(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return ckq.restores(store(), run_id, tr)


def checkpoint_timeline(run_id: str, tr: TimeRange) -> pd.DataFrame:
    return ckq.timeline(store(), run_id, tr)


def checkpoint_model(run_id: str, tr: TimeRange, tiers: pd.DataFrame) -> dict[str, Any] | None:
    """The measured inputs of the interval models (``ModelInputs`` as a dict, as the page keeps
    it in the browser); ``tiers`` is the range's ``tier_stats``. None outside the run."""
    m = ckq.model_inputs(store(), run_id, tr, tiers)
    return {**m.as_dict(), "run_id": run_id} if m else None


def model_interval_s(model: Any) -> float | None:
    """The interval the advice compares against: the policy's, else the measured spacing."""
    return ckq.model_interval_s(mapping(model))


def interval_advice(model: Any) -> IntervalAdvice | None:
    """Young, Daly and ETTR-optimal intervals next to the configured one; None without a
    model, an interval or a measured write time."""
    return ckq.interval_advice(mapping(model))


def what_if_defaults(model: Any) -> tuple[float | None, float | None]:
    """What the empty what-if inputs show: the interval (min) and the blocking write (s), each
    rounded to two decimals; None where the model has no (or a zero) value."""
    m = mapping(model)
    configured, measured = number(model_interval_s(m)), number((m or {}).get("write_s"))
    return (
        round(configured / 60.0, 2) if configured else None,
        round(measured, 2) if measured else None,
    )


def _typed(value: Any, default: float, positive: bool) -> float:
    """An input's value, or ``default`` when empty, invalid, or the prefilled rounding of it."""
    value = number(value)
    if value is None or value < 0 or (positive and value == 0):
        return default
    return default if round(default, 2) == value else float(value)


def what_if(model: Any, interval_min: Any, write_s: Any) -> WhatIf | None:
    """The projected ETTR for the typed interval (min) and write time (s) next to the
    configured ones; empty or invalid inputs mean the configured value. None when the model
    has nothing to project (no checkpoints in the range)."""
    m = mapping(model)
    base = ckq.interval_advice(m)
    if m is None or base is None:
        return None
    interval_s = _typed(interval_min, base.configured_s / 60.0, positive=True) * 60.0
    return ckq.what_if(m, interval_s, _typed(write_s, base.write_s, positive=False))


# -- Slurm (telemetry.queries.slurm): node states, node events and job ends, jobs, a job's GPUs
def slurm_nodes() -> pd.DataFrame:
    return slurmq.node_states(store())


def slurm_events(tr: TimeRange) -> pd.DataFrame:
    return slurmq.node_events(store(), tr)


def slurm_jobs(tr: TimeRange) -> pd.DataFrame:
    return slurmq.jobs(store(), tr)


def slurm_job_gpus(job_id: str) -> pd.DataFrame:
    return slurmq.job_gpus(store(), str(job_id)[:64])
