"""The incident view's data: one interruption told whole (spans, cause, culprit, evidence,
restore, loss and cost, the hang its ranks were stuck in), or one hang the flight recorder
showed, and where to look next (the node's GPUs and the loss curve around it); without one,
the run's interruptions and hangs to pick from."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from app.data import node_health
from app.data.services import prices, store
from app.data.view import fragment, parse_time, run_label, time_range
from telemetry import logview, queries
from telemetry.detection import detection
from telemetry.metrics import summary
from telemetry.metrics.recovery import recovery_spans
from telemetry.queries import TimeRange, gpu_identity, log_files, offenders
from telemetry.queries import failures as failq
from telemetry.queries import hangs as hangq

AROUND = timedelta(minutes=30)  # the window the links open around an incident
HANG_BEFORE = timedelta(minutes=30)  # a hang this long before a stall's detection is its own


def incident(run_id: str | None, at: Any) -> dict[str, Any] | None:
    """The interruption of ``run_id`` that began at ``at`` (an ISO time from the URL), or None
    when there is none: its stored row and evidence (``failures.interruption_detail``) and
    ``spans`` (label, start, end: stalled until detected, down until training resumed, the lost
    steps redone), ``recovery_spans`` (where the recovery went: ``metrics.recovery``'s named
    spans and the ones it cannot date, with why; None for a planned stop), ``run_name``,
    ``gpus``, ``prices``, ``cost_usd`` (lost GPU-hours at the run's price; None when they are
    unknown), ``gpu_identity`` (the culprit GPU's index, UUID, PCI bus id, serial and model, each
    with why where unknown: ``queries.gpu_identity``), and ``links`` (``gpus``, ``training``: URL
    fragments of the views around it)."""
    when = parse_time(at) if isinstance(at, str) else None
    if not isinstance(run_id, str) or when is None:
        return None
    row = failq.interruption_detail(store(), run_id, when)
    if row is None:
        return None
    found = offenders.actions(store(), run_id, row["ts"])
    row |= offenders.action_of(found, row["ts"], row.get("source_shown"))
    row["offender"] = node_health.offender(row.get("host"))
    xid_lines = [e.get("line") for e in row["evidence"]  # the cause's first: it leads the list
                 if e.get("kind") == "xid" and e.get("host") == row.get("host")]  # fmt: skip
    row["gpu_identity"] = gpu_identity.identity(store(), row.get("host"), row.get("gpu"),
                                                xid_lines, row["ts"])  # fmt: skip
    start = pd.Timestamp(row["ts"]).to_pydatetime()
    times = detection(row)  # when it failed and when the job noticed (issue 57, 4)
    detected = times["noticed_at"]
    spans, resumed, ended = _spans(row, start, detected)
    book = prices(run_id)
    gh = row.get("lost_gpu_hours")
    last = max([s[2] for s in spans] + [start])
    hung_until = resumed or ended or last
    window = {"run": run_id, "range": "custom"}
    window |= {"start": (start - AROUND).isoformat(), "end": (last + AROUND).isoformat()}
    hung = hangs_between(run_id, start, hung_until)
    runs = queries.runs(store()).set_index("run_id")
    gpus = runs.at[run_id, "gpus"] if run_id in runs.index else None
    gpus = None if gpus is None or pd.isna(gpus) else gpus
    run = summary.run_summary(store(), run_id, detail=False)
    return {
        **row,
        **failq.incident_context(store(), run_id, start),
        "final_state": run["state"],
        "night": {"lost_gpu_hours": run["lost_gpu_hours"],
                  "lost_usd": None if run["lost_gpu_hours"] is None
                  else float(run["lost_gpu_hours"]) * book.gpu_hour,
                  "unexpected": run["interruptions"]["unexpected"],
                  "planned": run["interruptions"]["planned"]},  # fmt: skip
        "spans": spans,
        "recovery_spans": recovery_spans(store(), run_id, at=start).get(start.isoformat()),
        "hangs": hung,
        **times,
        "detected": detected,
        "resumed": resumed,
        "ended": ended,
        "run_name": run_label(run_id),
        "gpus": None if gpus is None else int(gpus),
        "prices": book,
        "cost_usd": None if gh is None else float(gh) * book.gpu_hour,
        "links": {
            "gpus": fragment(window | ({"node": row["host"]} if row.get("host") else {})),
            "training": fragment(window),
            "run": run_fragment(run_id),
        },
    }


def _spans(
    row: dict[str, Any], start: datetime, detected: datetime | None
) -> tuple[list[tuple[str, datetime, datetime]], datetime | None, datetime | None]:
    """The stop's spans, when training resumed and when a job that never resumed ended. The
    stall ends when the job noticed (``detected``); where no line dates that, the stall and
    the downtime are one span from the last progress, never a 0 s detection. An inferred stop
    without an end is one no progress followed (the job died or was stopped): it held its GPUs
    to ``ts + detect_s + restart_s`` (as goodput counts it), and its lost steps are the ones
    before it, since the last checkpoint."""
    end, held, rework = row.get("end_ts"), row.get("restart_s"), row.get("rework_s")
    died = end is None and row.get("source") == "inferred"
    spans = [("stalled until detected", start, detected)] if detected and detected > start else []
    after = detected if detected is not None and detected > start else start
    downtime = None if held is None else float(row.get("detect_s") or 0.0) + float(held)
    if died:
        ended = None if downtime is None else start + timedelta(seconds=downtime)
        if ended is not None and ended > after:
            spans.append(("held until the job ended" if detected else
                          "stalled until the job ended (its noticing not dated)", after, ended))
        if rework:
            spans.insert(0, ("steps since the last checkpoint, lost",
                             start - timedelta(seconds=float(rework)), start))  # fmt: skip
        return spans, None, ended
    # training resumed at the end of its downtime (an inferred stop's: when the first step
    # after the restored one began, before the next progress line that logged it)
    resumed = (start + timedelta(seconds=downtime) if downtime is not None
               else pd.Timestamp(end).to_pydatetime() if end is not None
               else None)  # fmt: skip
    if resumed is not None:
        spans.append(("down until training resumed", after, resumed))
        if rework:
            spans.append(("lost steps redone", resumed,
                          resumed + timedelta(seconds=float(rework))))  # fmt: skip
    return spans, resumed, None


def _hangs(run_id: str) -> list[dict[str, Any]]:
    return list(hangq.hangs(store(), run_id, limit=500).to_dict("records"))


def hangs_between(run_id: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The run's hangs (flight recorder) whose waiting began from ``HANG_BEFORE`` before
    ``start`` to ``end``: the collective an interruption's ranks were stuck in."""
    lo = start - HANG_BEFORE
    return [h for h in _hangs(run_id)
            if _time(h.get("ts")) is not None and lo <= _time(h["ts"]) <= end]  # fmt: skip


def hang(run_id: str | None, at: Any) -> dict[str, Any] | None:
    """The hang of ``run_id`` whose ranks began waiting at ``at`` (an ISO time from the URL),
    told as an incident: its row (``queries.hangs``), ``run_name`` and ``links`` (``gpus``: the
    culprit's node around it, ``training``, ``run``); None when there is none."""
    when = parse_time(at) if isinstance(at, str) else None
    if not isinstance(run_id, str) or when is None:
        return None
    found = [h for h in _hangs(run_id) if _time(h.get("ts")) == when]
    if not found:
        return None
    row = found[0]
    inc = _interruption_of(run_id, when)
    window = {"run": run_id, "range": "custom"}
    window |= {"start": (when - AROUND).isoformat(), "end": (when + AROUND).isoformat()}
    host = row.get("culprit_host")
    return {
        **row,
        "run_id": run_id,
        "run_name": run_label(run_id),
        "interruption": inc,
        "links": {
            "gpus": fragment(window | ({"node": host} if isinstance(host, str) else {})),
            "training": fragment(window),
            "run": run_fragment(run_id),
        },
    }


def _interruption_of(run_id: str, when: datetime) -> dict[str, Any] | None:
    """The interruption a hang at ``when`` stopped (the one whose hangs hold it, as the
    interruption's own view lists them), told whole: its spans, loss and evidence."""
    tr = time_range("all", run_id)
    if tr is None:
        return None
    listed = failq.interruption_list(store(), run_id, TimeRange(tr.start, tr.end))
    for ts in sorted(listed["ts"].dropna(), reverse=True):  # an undated one stopped no hang
        if pd.Timestamp(ts).to_pydatetime() - HANG_BEFORE > when:
            continue
        inc = incident(run_id, pd.Timestamp(ts).isoformat())
        if inc is not None and any(_time(h.get("ts")) == when for h in inc["hangs"]):
            return inc
    return None


def _time(value: Any) -> datetime | None:
    if value is None or (isinstance(value, float) and value != value) or value is pd.NaT:
        return None
    return pd.Timestamp(value).to_pydatetime()


def incidents(run_id: str | None) -> pd.DataFrame:
    """The run's interruptions, newest first (``failures.interruption_list``), each with
    ``at`` (its start as the incident view's URL names it)."""
    tr = time_range("all", run_id) if isinstance(run_id, str) else None
    if tr is None:
        return pd.DataFrame(columns=["ts", "at", "component", "category", "host", "planned"])
    df = failq.interruption_list(store(), run_id, TimeRange(tr.start, tr.end))
    # the incident view is addressed by a start time (``?at=``): one of a time unknown has
    # none to open it by, and is told on the Failures page only
    df = df[df["ts"].notna()]
    df = df.assign(at=[pd.Timestamp(t).isoformat() for t in df["ts"]], kind="interruption")
    hung = [
        {"ts": _time(h["ts"]), "at": pd.Timestamp(h["ts"]).isoformat(), "kind": "hang",
         "component": f"Hang in {h.get('op') or 'a collective'} #{h.get('seq_id')}",
         "category": "flight recorder", "host": h.get("culprit_host"), "planned": False}
        for h in _hangs(run_id) if _time(h.get("ts")) is not None
    ]  # fmt: skip
    if not hung:
        return df
    both = pd.concat([df, pd.DataFrame(hung)], ignore_index=True)
    return both.sort_values("ts", ascending=False, kind="stable").reset_index(drop=True)


def incident_at(ts: datetime | pd.Timestamp) -> str:
    """How the incident view's URL names an interruption's start (``?at=...``)."""
    return pd.Timestamp(ts).isoformat()


def run_fragment(run_id: str | None) -> str:
    """The URL fragment of the run's whole range (the run's other views)."""
    return fragment({"run": run_id or "", "range": "all"})


def raw_log(run_id: str | None, at: Any, index: Any) -> dict[str, Any]:
    """The raw log around evidence line ``index`` of the interruption of ``run_id`` that began
    at ``at``: ``origin`` (its ``file:line``), ``path``, ``line``, ``lines`` [(number, text)],
    ``note`` (why there are none, or that the file changed). The file is the one the store
    says the origin's label was read from (``queries.log_files``), never one a request names."""
    when = parse_time(at) if isinstance(at, str) else None
    row = (failq.interruption_detail(store(), run_id, when)
           if isinstance(run_id, str) and when is not None else None)  # fmt: skip
    if row is None and when is not None:  # a hang's page tells the stop it caused
        row = (hang(run_id, at) or {}).get("interruption")
    evidence = (row or {}).get("evidence") or []
    if not isinstance(index, int) or not 0 <= index < len(evidence):
        return {"origin": None, "path": None, "line": None, "lines": [],
                "note": "No such evidence line in this run's interruptions."}  # fmt: skip
    e = evidence[index]
    origin = e.get("origin")
    where = logview.split_origin(origin)
    out = {"origin": origin, "path": None, "line": None, "lines": [], "note": None}
    if where is None:
        return out | {"note": f"This line names no file and line ({origin or 'no origin'}): "
                              "it was posted or simulated, not read from a log."}  # fmt: skip
    path = log_files.path_of(store(), run_id, where[0])
    if path is None:
        return out | {"line": where[1], "note": f"{where[0]} is not a text log this store "
                      "read (a record file, or imported before file paths were kept: import it "
                      "again to open it here)."}  # fmt: skip
    got = logview.around(path, where[1], e.get("line"))
    return out | {"path": got.path, "line": got.line, "lines": got.lines, "note": got.note}


def names_a_line(origin: Any) -> bool:
    """Whether an evidence line's origin is a ``file:line`` (one a raw log can open)."""
    return logview.split_origin(origin) is not None
