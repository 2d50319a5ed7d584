"""Run-level reliability figures computed from the store (the ``summary`` command and Overview).

Everything is derived from stored rows, so a replayed store and an ingested one are summarised
the same way. Definitions (Kokolis et al., HPCA 2025):

- ``ettr``: productive time / wall time, where productive time is the time the surviving steps
  would take at the run's measured throughput (tokens trained / mean tokens per second).
- ``mtbf_hours``: wall hours / unexpected interruptions.
- ``lost_gpu_hours``: GPUs x (detection + restart + recomputation of rolled-back steps). A
  stop nothing resumed (a job that hung or crashed and died) costs the wait until the job
  noticed, the time it held its GPUs after that, and every step since its last checkpoint
  (since its first step when none is known); null where none of these is known, never 0.
- ``by_component`` / ``by_category``: unexpected interruptions only, keyed by the reference
  table's names (the basis of the Llama 3 table); planned ones are counted in ``planned``.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from telemetry.cost import PriceBook, price_book, run_cost
from telemetry.detection import as_json, detection
from telemetry.metrics.goodput import goodput, goodput_money
from telemetry.metrics.jobs_export import recent_jobs
from telemetry.metrics.recovery import recovery_spans
from telemetry.queries import TimeRange, energy, offenders, run_time, workload
from telemetry.queries import hangs as hangq
from telemetry.queries import run_summary as rs
from telemetry.queries.accounting import summary_block as accounting_block
from telemetry.queries.checkpoints import tier_figures
from telemetry.queries.failures import candidates
from telemetry.queries.failures import missing as _missing
from telemetry.queries.node_health import summary_block as node_health_block
from telemetry.queries.run_end import quiet_end, run_end, stop_end
from telemetry.store import Store
from telemetry.vocabulary import TIERS


def _run_ids(store: Store) -> list[str]:
    return rs.run_ids(store)


def _num(value: Any) -> float | None:
    """A stored number, or None where the store holds NULL (an ingested run may not say how
    many GPUs it has; pandas shows that as NaN, NA or NaT)."""
    return None if value is None or pd.isna(value) else float(value)


def _int(value: Any, per: Any = 1) -> int | None:
    num = _num(value)
    return None if num is None else int(num / max(per, 1))


def _known_sum(values: pd.Series) -> int | None:
    """A count summed over interruptions: 0 without any, None when none of them knows it
    (posted without it, a job stopped before it printed a step), never 0 by omission."""
    if values.empty:
        return 0
    return None if values.isna().all() else int(values.sum())


def _round(value: float | None, digits: int, per: float = 1.0) -> float | None:
    return None if value is None else round(value / per, digits)


def _hours(seconds: pd.Series) -> float | None:
    """Hours of a sum of seconds; 0 without a term (no interruption), None when no term is
    known (every interruption posted without the figure). To 6 places (0.004 s): the cost
    multiplies them by the GPUs and the price (3 places were a cent off on 16 GPUs)."""
    if len(seconds) and seconds.isna().all():
        return None
    return round(float(seconds.sum()) / 3600.0, 6)


def _time(value: Any) -> Any:
    return None if value is None or pd.isna(value) else value


def run_summary(store: Store, run_id: str, detail: bool = True) -> dict[str, Any]:
    """Reliability figures of one run. A figure the store does not know is None (null in
    ``summary --json``, "–" on a page), never 0: GPUs, model size, MFU, tokens of a run posted
    or logged without them; ETTR without a throughput or step time; a sum whose every term is
    unknown (downtime of interruptions posted without their durations). A sum over some known
    terms counts the unknown ones as 0. Without ``detail`` (the Overview's cards) the
    interruption list, checkpoint tiers, restores, Slurm jobs and utilization are left out:
    the list alone is every interruption's evidence parsed, ~50 ms over the 419 of a 54-day
    run, for cards that show counts."""
    e = _ettr_inputs(store, run_id)
    run, last, start, end, tm = e["run"], e["last"], e["start"], e["end"], e["tm"]
    wall_s, tokens, basis = e["wall_s"], e["tokens"], e["basis"]
    loss, mfu = _num(tm["loss"]), _num(tm["mfu"])
    ints = rs.causes(store, run_id)
    unexpected = ints[~ints["planned"].astype(bool)]
    n_unexp = int(unexpected["n"].sum())
    wall_h = wall_s / 3600.0
    # a run whose data has no time (a log without a wall-clock time) has no wall time: unknown;
    # nor does one seen at one instant (a paste of its failure lines): it ran, for how long no
    # line says, so 0 h would be a figure made up
    timed = None not in (start, end)
    lasted = timed and end > start
    out = {
        "run_id": run_id,
        "name": run["name"],
        "scenario": run["scenario"],
        "simulated": bool(run["simulated"]),
        "gpu_model": run["gpu_model"],
        "gpus": _int(run["gpus"]),
        "nodes": _int(run["nodes"]),
        "model_params": _num(run["model_params"]),
        "wall_hours": round(wall_h, 3) if lasted else None,
        # the wall's own ends (``run_time.run_wall``): the span every page shows for the run
        "wall_start": start.isoformat() if timed else None,
        "wall_end": end.isoformat() if timed else None,
        "steps": _int(tm["step"]),
        "tokens": tokens,
        "last_loss": None if loss is None else round(loss, 4),
        "ettr": _ettr(e),
        "ettr_basis": basis,
        "mtbf_hours": _round(run_time.mtbf(store, run_id).hours, 6),
        "mfu": None if mfu is None else round(mfu, 4),
        "interruptions": {
            "unexpected": n_unexp,
            "planned": int(ints.loc[ints["planned"].astype(bool), "n"].sum()),
            "by_component": {
                str(k): int(v)
                for k, v in unexpected.groupby("component")["n"]
                .sum()
                .sort_values(ascending=False)
                .items()
            },
            "by_category": {
                str(k): int(v)
                for k, v in unexpected.groupby("category")["n"]
                .sum()
                .sort_values(ascending=False)
                .items()
            },
            "downtime_hours": _hours(ints["down_s"]),
            "rework_hours": _hours(ints["rework_s"]),
            "lost_steps": _known_sum(ints["lost_steps"]),
            "inferred": int(ints.loc[ints["source"] == "inferred", "n"].sum()),
            "corrected": int(ints["corrected"].sum()),
        },
        # None when no interruption knows it (the run's GPU count is unknown), never 0
        "lost_gpu_hours": None
        if ints.empty or ints["gh"].isna().all()
        else round(float(ints["gh"].sum()), 3),  # to the cent of its cost, as each page's
        "energy": _energy(store, run_id, start, end, tokens, both=detail),
    }
    out["hangs"] = hangs(store, run_id)
    out["state"], out["ended"] = _state(store, run_id, last)
    if detail:
        out["goodput"] = goodput(store, run_id, energy=True)
        out["interruptions"]["list"] = _interruption_list(store, run_id, out["goodput"])
        out |= _details(store, run_id) | {"utilization": _utilization(store, start, end)}
    return out


def _ettr_inputs(store: Store, run_id: str) -> dict[str, Any]:
    """What ETTR is computed from (module doc): the run's row, its newest record (``last``),
    its wall time to it, its training metrics' totals (``tm``) and the productive seconds with
    their ``basis`` (tokens / throughput, else the steps at the median step time)."""
    run = rs.run_row(store, run_id)
    last = run_time.last_record(store, run_id)
    wall = run_time.run_wall(store, run_id)  # the wall time every page takes (#57)
    start = _time(run["start_ts"])
    end = None if wall is None else wall.end
    wall_s = 0.0 if wall is None else (wall.end - wall.start).total_seconds()
    tm = rs.train_totals(store, run_id)
    tokens, tps = _num(tm["tokens"]), _num(tm["tps"])
    productive_s = tokens / tps if tokens and tps and tps > 0 else 0.0
    basis = "tokens" if tokens and tps else None
    if basis is None:  # a log without tokens: surviving steps x the median step time
        steps_s = _step_seconds(store, run_id)
        if steps_s is not None:
            productive_s, basis = steps_s, "steps"
    return {"run": run, "last": last, "start": start, "end": end, "wall_s": wall_s, "tm": tm,
            "tokens": tokens, "productive_s": productive_s, "basis": basis}  # fmt: skip


def _ettr(e: dict[str, Any]) -> float | None:
    wall_s, basis = e["wall_s"], e["basis"]
    return round(min(e["productive_s"] / wall_s, 1.0), 4) if wall_s > 0 and basis else None


def measured_ettr(store: Store, run_id: str) -> float | None:
    """The run's ETTR as ``run_summary`` gives it, read alone (3 statements, not its 13)."""
    return _ettr(_ettr_inputs(store, run_id))


def run_state(store: Store, run_id: str) -> str:
    """The run's state as ``run_summary`` gives it ("finished", "stopped", "unknown",
    "running"), read alone: the header says whether new data is still to be expected."""
    return _state(store, run_id, run_time.last_record(store, run_id))[0]


def _state(store: Store, run_id: str, last: Any) -> tuple[str, dict[str, Any] | None]:
    """The run at its data's end: "stopped" in Slurm's words (``run_end.stop_end``), "finished"
    (how, when, the line or job that says it), "stopped" (its data ends with an interruption
    nobody restarted), "unknown" (a log that
    ended long ago saying neither: ``run_end.quiet_end``), else "running"."""
    # judged at the run's newest record (a closing line comes after the last step), never at
    # a later time: a live replay's record ends in the future
    newest = rs.newest_record(store, run_id, last)
    # Slurm's word first (its job's end state, or its lines at the log's end), as the Jobs page
    stop = stop_end(store, run_id, newest) if last is not None else None
    if stop is not None:
        return stop["state"], stop | {"ts": stop["ts"].isoformat()}
    ended = run_end(store, run_id, newest) if last is not None else None
    if ended is not None:
        return ended["state"], ended | {"ts": ended["ts"].isoformat()}
    open_stop = rs.open_stops(store, run_id)
    quiet = None if open_stop else quiet_end(store, run_id, newest)
    if quiet is not None:  # a log that ended saying nothing of how: not "running" (#57, 5)
        return quiet["state"], quiet | {"ts": quiet["ts"].isoformat()}
    return ("stopped" if open_stop else "running"), None


def _details(store: Store, run_id: str) -> dict[str, Any]:
    """A run's checkpoints per tier, restores per tier and Slurm jobs."""
    ck = tier_figures(store, run_id).set_index("tier")  # the Checkpoints page's figures
    restores = rs.restores_per_tier(store, run_id)
    return {
        "checkpoints": {
            t: {
                "count": int(ck.loc[t, "n"]),
                "failed": int(ck.loc[t, "failed"]),
                # over the writes that know it (a save known from the log only: no size, and
                # no write time when its lines carry one time), never unknown counted as 0
                "mean_write_s": _round(_num(ck.loc[t, "write_mean_s"]), 3),
                "timed": int(ck.loc[t, "timed"]),
                "bytes": _int(ck.loc[t, "bytes"]),  # total of the sizes known
                "bytes_per_checkpoint": _int(ck.loc[t, "bytes_avg"]),
                "sized": int(ck.loc[t, "sized"]),
                "blocking_hours": _round(_num(ck.loc[t, "blocking_s"]), 3, 3600.0),
            }
            for t in TIERS
            if t in ck.index
        },
        "restores": {str(k): int(v) for k, v in restores.items()},
        "slurm_jobs": slurm_jobs(store, run_id),
    }


def _utilization(store: Store, start: Any, end: Any) -> dict[str, Any] | None:
    """Real utilization and GPU-hours per workload class over the run's time, the whole fleet
    (``queries.workload``); None when nothing dates the run."""
    if start is None or end is None or end <= start:
        return None
    return workload.totals(store, TimeRange(start, end)) | {
        "scope": "GPUs of the whole fleet while the run ran"
    }


def _energy(
    store: Store, run_id: str, start: Any, end: Any, tokens: float | None, both: bool = True
) -> dict[str, Any]:
    """The run's GPU energy over its time (``queries.energy``: its own GPUs where the store
    knows them, else the fleet's, said in ``scope``; which basis, and per million tokens;
    ``both`` bases, or power x time only without a counter); nulls when nothing dates the run
    or measured power."""
    scope = "GPUs of the whole fleet while the run ran (not CPUs, network, cooling)"
    e: energy.Energy | None = None
    if start is None or end is None or end <= start:
        e = energy.Energy(None, None, None, None)
    else:
        e = energy.run_energy(store, run_id, TimeRange(start, end), both)
        if e is not None:
            jobs, nodes = energy.run_jobs(store, run_id)
            scope = (
                f"GPUs of the run's {jobs} Slurm job(s) on {nodes} node(s) while they ran "
                "(not CPUs, network, cooling)"
            )
        else:
            e = energy.energy(store, TimeRange(start, end), both)
    return {
        "kwh": _round(e.kwh, 1),
        "basis": e.basis,
        "kwh_counter": _round(e.kwh_counter, 1),
        "kwh_power": _round(e.kwh_power, 1),
        "kwh_per_million_tokens": _round(energy.per_million_tokens(e.kwh, tokens), 6),
        "scope": scope,
    }


def hangs(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's hangs found in flight-recorder dumps, oldest first: the collective the ranks
    diverged on, the ranks that never called it and their hosts, the culprit."""
    keep = ("ts", "process_group", "pg_desc", "seq_id", "op", "input_sizes", "ranks",
            "missing_ranks", "stuck_ranks", "culprit_rank", "culprit_host", "hosts",
            "culprit_frames", "story")  # fmt: skip
    out = []
    for row in hangq.hangs(store, run_id).to_dict("records"):
        out.append({k: _plain(row[k]) for k in keep})
    return out


def _plain(v: Any) -> Any:
    """A value as JSON takes it: arrays as lists, NaN and NaT as null, numpy as Python."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if v is None or (isinstance(v, float) and v != v) or v is pd.NaT:
        return None
    return v


def slurm_jobs(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The Slurm jobs (each requeue a record) of a run, oldest first, with their end states."""
    rows = rs.slurm_job_rows(store, run_id)
    keys = ("job_id", "requeue", "name", "user", "partition", "nodes", "state", "reason",
            "exit_code", "start", "end")  # fmt: skip
    return [
        {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in zip(keys, r, strict=True)}
        for r in rows
    ]


def _step_seconds(store: Store, run_id: str) -> float | None:
    """Productive seconds of a run without tokens: the steps it trained (first to last
    stored) x its median seconds per step between consecutive progress lines."""
    per_step, steps = rs.step_time(store, run_id)
    if not per_step or per_step <= 0 or not steps:  # no step time (one timestamp for all)
        return None
    return float(per_step) * float(steps)


def _interruption_list(
    store: Store, run_id: str, block: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Each interruption of the run, oldest first, with its source, confidence, correction
    and evidence (parsed), what to do about it (``action``, ``action_reason``:
    ``queries.offenders``) and where its recovery went (``recovery_spans``, and
    ``recovery_unknown``: the spans the records do not date, with why; ``metrics.recovery``)
    and its two detection times (``failed_at``, ``noticed_at``, ``failed_unknown``,
    ``noticed_unknown``, ``wait_s``, ``stall_s``: ``telemetry.detection``), as ``summary
    --json`` shows them."""
    df = rs.interruption_rows(store, run_id)
    todo = offenders.actions(store, run_id) if len(df) else {}
    went = recovery_spans(store, run_id, block) if len(df) else {}
    planned = {"spans": [], "unknown": [{"name": "recovery", "reason": "a planned stop"}]}
    untimed = {"spans": [], "unknown": [{"name": "recovery", "reason": "the stop's time is "
                                         "unknown: no line of its log has a wall-clock time"}]}
    out = []
    for rec in df.to_dict("records"):
        row = {k: (None if _missing(v) else v) for k, v in rec.items()}
        for k in ("ts", "end_ts"):
            row[k] = None if row[k] is None else row[k].isoformat()
        for k in ("gpu", "rank", "xid", "restored_step", "lost_steps"):
            row[k] = _int(row[k])
        row["planned"] = bool(row["planned"])
        row["evidence"] = json.loads(row["evidence"]) if row["evidence"] else []
        row["culprit_candidates"] = candidates(row["culprit_candidates"])  # host/rank unknown
        # when it failed and when the job noticed (telemetry.detection; issue 57, 4)
        row |= as_json(detection(rec))
        for k in ("failed_ts", "noticed_ts", "detect_s"):
            row.pop(k)
        row |= offenders.action_of(todo, rec["ts"], row["source"])  # what to do (issue 58)
        spans = went.get(row["ts"], planned) if row["ts"] is not None else untimed
        row |= {"recovery_spans": spans["spans"], "recovery_unknown": spans["unknown"]}
        out.append(row)
    return out


JOBS_DAYS = 7.0  # summary's jobs: those of the last week of the store's data


def store_summary(
    store: Store, prices: PriceBook | None = None, jobs_days: float = JOBS_DAYS
) -> dict[str, Any]:
    """Every run's summary, each with its ``cost`` at ``prices`` (the defaults when None), and
    the jobs that ran in the last ``jobs_days`` of the store's data (``queries.jobs``)."""
    meta = store.meta()
    book = prices or price_book(None, None, None)
    runs = []
    for r in _run_ids(store):
        s = run_summary(store, r)
        price = book.for_run(r)
        if s.get("goodput"):
            s["goodput"] |= goodput_money(s["goodput"], s.get("gpus"), price.gpu_hour)
        runs.append({**s, "cost": run_cost(s, price)})
    return {
        "store": store.path,
        "source": meta.get("source", "unknown"),
        "simulated": meta.get("simulated") == "true",
        "gpu_samples": rs.gpu_sample_count(store),
        "runs": runs,
        # the Slurm cluster's GPU-hours per day (telemetry.queries.accounting)
        "accounting": accounting_block(store, book.default.gpu_hour),
        "accounting_price": book.default.per_gpu_hour(),
        "jobs": recent_jobs(store, jobs_days),
        # Slurm's drained nodes now, node-health findings and repairs of the last 7 days
        "node_health": node_health_block(store),
    }
