"""What every page shares: the view a browser sends (run, range, node), cleaned and turned
into a ``TimeRange``; the runs to choose from; what a page tells its charts (theme, revision)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from app.data.services import bound, store
from telemetry import queries
from telemetry.cost import money as money  # formatting re-export for the pages
from telemetry.cost import per_day_usd as per_day_usd  # the what-if's money, for the page
from telemetry.metrics.summary import run_state
from telemetry.queries import SHOWN_FROM, SHOWN_TO, TimeRange, run_time
from telemetry.queries.failures import LLAMA3_MTBF_H as LLAMA3_MTBF_H  # vocabulary re-export
from telemetry.queries.gpu_node import EXTRA_FIELDS as EXTRA_FIELDS  # vocabulary re-export
from telemetry.queries.gpu_node import NODE_METRICS as NODE_METRICS  # vocabulary re-export
from telemetry.utilization import CLASS_TEXT as CLASS_TEXT  # vocabulary re-export

PRESETS: dict[str, float | None] = {  # seconds before the newest data; None = everything
    "1h": 3600.0,
    "6h": 6 * 3600.0,
    "24h": 86400.0,
    "7d": 7 * 86400.0,
    "all": None,
}


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


runs = bound(queries.runs)


SHOW_JOBS = 3  # Slurm job ids named in a run's label; more are counted


def _run_label(name: Any, run_id: str, jobs: list[str]) -> str:
    label = name if isinstance(name, str) and name else str(run_id)
    if not jobs or label in (f"slurm-{jobs[0]}", jobs[0]):
        return label
    more = f" +{len(jobs) - SHOW_JOBS}" if len(jobs) > SHOW_JOBS else ""
    word = "job" if len(jobs) == 1 else "jobs"
    return f"{label} · Slurm {word} {', '.join(jobs[:SHOW_JOBS])}{more}"


def run_options(all_runs: bool = False, keep: Any = None) -> list[dict[str, str]]:
    """The runs as dropdown options, oldest first. Label: the run's name (its id when it has
    none: a run known from a log or a dump only; a null label broke every page's dropdown) and
    the Slurm jobs that ran it (the jobs are grouped under their run, not listed apart). A run
    made for a Slurm job that trained nothing (an interactive or eval job: the Jobs page's
    rows) is listed only with ``all_runs``, or when it is the one on show (``keep``)."""
    df = queries.run_picker(store())
    out = []
    for run_id, name, for_job, trained, jobs in zip(
        df["run_id"].tolist(), df["name"].tolist(), df["made_for_job"].tolist(),
        df["trained"].tolist(), df["jobs"].tolist(), strict=True,
    ):  # fmt: skip
        if for_job and not trained and not all_runs and run_id != keep:
            continue
        out.append({"label": _run_label(name, run_id, list(jobs)), "value": run_id})
    return out


def run_ids() -> list[str]:
    """Every run's id, oldest first (listed in the picker or not: a link may name any)."""
    return [str(r) for r in runs()["run_id"].tolist()]


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


extent = bound(queries.data_extent)


def run_extent(run: Any) -> TimeRange | None:
    """The selected run's own time within the stored data (a run outside it: its own time),
    the store's without a run; None when nothing is stored."""
    ext = extent()
    if ext is None or not isinstance(run, str) or not run:
        return ext
    return _run_extent(ext, run)


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


def table_row(clicked: Any, rows: Any) -> dict[str, Any] | None:
    """The row of a grid's ``rowData`` that its ``cellClicked`` names (by the row id that
    ``app.ui.table`` gives each row), or None."""
    row_id = clicked.get("rowId") if isinstance(clicked, dict) else None
    if not isinstance(row_id, str) or not isinstance(rows, list):
        return None
    return next((r for r in rows if isinstance(r, dict) and r.get("id") == row_id), None)


def view_range(view: dict[str, Any] | None) -> TimeRange | None:
    """The time range a shared view describes: a zoomed window, or a preset ending at the
    newest data. None when the store holds nothing yet."""
    view = clean_view(view)
    if view.get("range") == "custom":
        start, end = parse_time(view.get("start")), parse_time(view.get("end"))
        if start is not None and end is not None and start < end:
            return TimeRange(start, end).shown()  # a link to the year 9999 shows its edge
    return time_range(view.get("range"), view.get("run"))


# what a chart over time says in a store no line dates (``undated_range``): no axis made up
NO_TIME = "Time unknown: no stored line gives a wall-clock time"


def undated_range(view: dict[str, Any] | None) -> TimeRange | None:
    """The range a page counts the view's run over when the store holds runs but no time at
    all (every log imported gave no wall-clock time: ``extent()`` is None): every time a page
    can show, so what it counts is the run's undated rows, as ``summary`` counts them. Never a
    chart's axis (that would be a made-up time). None when a time is stored, or the view names
    no stored run (every run's wall time would be this range's 230 years)."""
    if extent() is not None or run_of(view) is None:
        return None
    return TimeRange(SHOWN_FROM, SHOWN_TO)


def unset_text(view: dict[str, Any] | None, nothing: str) -> str:
    """What a page says where its range is None: ``nothing`` (the page's "no data stored yet")
    when nothing is stored, ``NO_TIME`` in a store no line dates (it holds runs: not "no
    data")."""
    return NO_TIME if undated_range(view) is not None else nothing


_undated = bound(run_time.undated)


def run_undated(run: Any) -> bool:
    """Whether ``run`` is a stored run no line dates (``run_time.undated``): a page says its
    time is unknown, never the store's or another run's time."""
    return isinstance(run, str) and bool(run) and _undated(run)


def counted_range(view: dict[str, Any] | None) -> TimeRange | None:
    """The range a page's counts and lists run over: the view's (``view_range``), else, in a
    store no line dates, ``undated_range``. None when nothing is stored."""
    return view_range(view) or undated_range(view)


def revision(view: dict[str, Any] | None) -> str:
    """Plotly ``uirevision``: the same while only live data changes (legend toggles survive a
    refresh), new when the run or the chosen range changes."""
    v = clean_view(view)
    return f"{v.get('run')}|{v.get('range')}|{v.get('start')}|{v.get('end')}"


def template(theme: str | None) -> str:
    return "plotly_white" if theme == "light" else "plotly_dark"


def last_instant(start: datetime, end: datetime) -> datetime:
    """The last instant of a range ending at ``end`` (not in it): what day it ends on, so a
    range ending at midnight ends the day before (no empty day after it)."""
    return max(min(start, end), end - timedelta(microseconds=1))


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
    own = _run_extent(ext, run)
    start, end = own.start, own.end
    pad = max(timedelta(0), timedelta(minutes=1) - (end - start)) / 2
    return TimeRange(start - pad, end + pad)  # a job of seconds still gets a minute


def _run_extent(ext: TimeRange, run: str | None) -> TimeRange:
    own = run_time.run_bounds(store(), run) if isinstance(run, str) and run else None
    if own is None:
        return ext
    end = own.end if own.end is not None else ext.end
    start = own.start
    if own.start <= ext.end and end >= ext.start:  # the run has data here: to its end in it
        # from the run's own start (its first sample may come seconds later): the whole run's
        # figures over this range are its summary's (#57, 7)
        end = min(end, ext.end)
    return TimeRange(start, end)


STALE_LIVE_S = 300.0  # Live on and nothing newer than this: the header says so


def data_age(run: Any, now: datetime | None = None) -> dict[str, Any] | None:
    """How old the newest data of ``run`` is (the store's, without a run): ``start`` and
    ``end`` of its data, ``age_s`` from ``end`` to ``now`` (the wall clock: what the header
    states is how old the data is, the one place the machine's clock is the right one), and
    ``stale`` when that is more than ``STALE_LIVE_S``, and, for stale data, the run's ``state``
    as ``summary`` gives it (None without a run or while data arrives). A run no line dates
    (``run_undated``): ``start``, ``end`` and ``age_s`` None (its time is unknown, not the
    store's), with its ``state``. None for an empty store."""
    run = run if isinstance(run, str) and run else None
    if run is not None and run_undated(run):
        return {"start": None, "end": None, "age_s": None, "stale": False,
                "state": run_state(store(), run)}  # fmt: skip
    ext = extent()
    if ext is None:
        return None
    own = _run_extent(ext, run)
    age = ((now or datetime.now(UTC).replace(tzinfo=None)) - own.end).total_seconds()
    stale = age > STALE_LIVE_S
    # the header refreshes every few seconds: the run's state (5 small queries) is read only
    # where it changes what the header says, for data that stopped arriving
    state = run_state(store(), run) if run is not None and stale else None
    return {"start": own.start, "end": own.end, "age_s": age, "stale": stale, "state": state}


def ago(seconds: float) -> str:
    """``42 s``, ``12 min``, ``5.2 h``, ``272 days``: how long ago, as a person says it."""
    s = max(seconds, 0.0)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:,.0f} days"
