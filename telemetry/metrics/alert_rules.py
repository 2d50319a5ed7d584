"""The alert rules: what the Overview shows as active alerts at the end of a time range and
``telemetry.alerting`` evaluates, groups and hands on. Each alert is a row (severity, alert,
detail, key, and for an interruption the action to take); the thresholds are the product's
operating rules and live here, beside the rules that apply them, so the Overview and the
notifier agree. The rows they judge are read by ``telemetry.queries`` (``queries.overview``'s
facts, the targets, hangs, run ends, loss spikes, node-health findings): no SQL here.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.derive.derive import open_stall
from telemetry.metrics.goodput import goodput, top_badput
from telemetry.queries import TimeRange, offenders, run_time
from telemetry.queries import overview as ov
from telemetry.queries.hangs import open_hang
from telemetry.queries.node_health import findings
from telemetry.queries.run_end import run_end
from telemetry.queries.slow_ranks import slow_ranks
from telemetry.queries.targets import report_time, target_alerts
from telemetry.queries.training import loss_spikes
from telemetry.store import Store
from telemetry.vocabulary import HOT_C

LOW_UTIL_PCT = 80.0  # utilization below this while the job trains is wasted capacity
STALE_FACTOR = 2.0  # a tier is overdue after this many configured intervals without a checkpoint
SLOW_WINDOWS = 2  # straggler report windows a rank must be flagged in before it is alerted
SLOW_LOOKBACK = timedelta(hours=1)  # the report windows a slow rank is judged over


def _tier_intervals(policy_json: str | None) -> dict[str, float]:
    p = json.loads(policy_json or "{}")
    nvme = float(p.get("nvme_interval_s", 0) or 0)
    pfs = nvme * float(p.get("pfs_every", 0) or 0)
    obj = pfs * float(p.get("object_every", 0) or 0)
    return {k: v for k, v in {"nvme": nvme, "pfs": pfs, "object": obj}.items() if v > 0}


def active_alerts(
    store: Store,
    run_id: str | None,
    tr: TimeRange,
    targets_at: datetime | None = None,
    rules: Any = None,
) -> pd.DataFrame:
    """Alerts at ``tr.end``: hot GPUs, low utilization while training, silent GPUs, XIDs in
    the last 24 h, scrape targets down or stale (at ``targets_at``, default ``tr.end``), and
    for a run: overdue checkpoint tiers, loss spikes in the last hour, job not training, and
    with the alerts file's ``rules`` (``alerting.Rules``) goodput below its threshold."""
    now = tr.end
    rows: list[tuple[str, str, str, str]] = []
    last, scraped, all_down = ov.latest_sample_and_round(store, now)
    training = run_id is not None and ov.steps_logged(
        store, run_id, now - timedelta(minutes=10), now
    )
    if all_down:  # the newest rounds found every exporter down
        expected = ov.gpu_count(store)
        rows.append(
            (
                "critical",
                f"All {expected:,} GPU(s) not reporting",
                f"no GPU sample since {last:%Y-%m-%d %H:%M:%S}; the last scrape round "
                f"({scraped:%H:%M:%S}) reached no exporter",
                "FleetNotReporting",
            )
        )
    elif last is not None:
        rows += _gpu_alerts(store, last, bool(training))
    rows += _xid_alerts(store, now)
    rows += health_alerts(store, now)
    rows += target_alerts(store, targets_at or now)
    if run_id is not None:  # an ingest store may hold GPU telemetry without a training run
        watched = report_time(store, now, (targets_at or now) > now, imports=False)
        rows += _run_alerts(store, run_id, tr, bool(training), watched)
        if rules is not None and getattr(rules, "goodput_below", None) is not None:
            rows += _goodput_alert(store, run_id, tr.end, rules)
    return _ordered(rows)


def _goodput_alert(
    store: Store, run_id: str, end: datetime, rules: Any
) -> list[tuple[str, str, str, str]]:
    """``GoodputLow`` when the run's goodput over the rule's window ending at ``end`` (the
    data's end, as every "last N" here) is below the alerts file's threshold."""
    window = TimeRange(end - timedelta(seconds=rules.goodput_window_s), end)
    block = goodput(store, run_id, window, detail=False)
    if block is None or block["goodput"] is None or block["goodput"] >= rules.goodput_below:
        return []
    top = top_badput(block)
    most = "" if top is None else f"; most lost: {top[0].replace('_', ' ')} {top[1] * 100:.1f} %"
    span = block["window_s"] / 3600
    return [("warning", "Goodput low",
             f"{block['goodput'] * 100:.1f} % over the last {span:,.1f} h of data (below "
             f"{rules.goodput_below * 100:.0f} %){most}", "GoodputLow")]  # fmt: skip


def recent_interruptions(ints: pd.DataFrame, end: datetime, hours: float = 24.0) -> int:
    """How many interruptions of ``ints`` (an ``interruptions`` frame) came in the ``hours``
    before ``end``."""
    return int((ints["ts"] > end - timedelta(hours=hours)).sum()) if not ints.empty else 0


def _run_alerts(
    store: Store, run_id: str, tr: TimeRange, training: bool, live_at: datetime
) -> list[tuple[str, str, str, str]]:
    """Alerts of the run at the end of the range; a stall is judged at ``live_at`` (in a live
    view the newest round of any source: followed logs keep reporting while the job is silent)."""
    now = tr.end
    rows = []
    stall = open_stall(store, run_id, max(now, live_at))
    last = ov.last_step_at(store, run_id, max(now, live_at))
    # the data ends with a stop at the last step, or a run that logged no step with its stop
    stopped = (ov.inferred_stop_at(store, run_id, last) if last is not None
               else ov.open_stop_before(store, run_id, max(now, live_at)))  # fmt: skip
    ended = run_end(store, run_id, max(now, live_at))
    hung = open_hang(store, run_id, max(now, live_at))
    if ended is not None:  # nothing is expected of a run after its end
        when = f"{ended['ts']:%Y-%m-%d %H:%M:%S} UTC"
        rows.append(
            (
                "info",
                "Run finished",
                f"{ended['detail']} at {when} ({ended['origin']})",
                "RunFinished",
            )
        )
    elif hung is not None:  # the dumps tell more than the silence: who never arrived
        desc, rank, host = hung
        rows.append(("critical", "Run hung", desc, _culprit_key("RunHung", rank, host)))
    elif stopped:  # the data ends with the stop's cause: it stopped, it is not stalling
        planned, desc, ts, source, rank, host = stopped[0]
        sev = "warning" if planned else "critical"
        alert = (sev, "Run stopped", desc, _culprit_key("RunStopped", rank, host))
        rows.append(_with_action(store, run_id, ts, source, alert))
    elif stall is not None:  # sooner than "not training": k x its own step interval
        rows.append(
            (
                "critical",
                "Run stalled",
                f"no progress since {stall['since']:%H:%M:%S} UTC (step {stall['step']:,}), "
                f"{stall['stalled_s'] / 60:.1f} min (stalled after {stall['threshold_s']:.0f} s: "
                "several times its usual interval between steps)",
                "RunStalled",
            )
        )
    # "not training" is news of a run expected to train: not of one that ended or whose stop
    # is told above (nothing resumed it: "Run stopped" says why), nor of one no line dates
    # (no step logged in a window of another run's time says nothing of it)
    if not training and ended is None and not stopped and not run_time.undated(store, run_id):
        rows.append(
            (
                "critical",
                "Job not training",
                "no training step logged in the last 10 minutes of the range",
                "JobNotTraining",
            )
        )
    for desc, ts, source in ov.restart_loop(store, run_id, now - timedelta(hours=24), now):
        alert = ("critical", "Restart loop", desc, "RestartLoop")
        rows.append(_with_action(store, run_id, ts, source, alert))
    if ended is None:  # a finished run's tiers are not overdue, nor its ranks slow
        rows += _checkpoint_alerts(store, run_id, now)
        rows += _slow_rank_alerts(store, run_id, max(now, live_at))
    hour = TimeRange(max(tr.start, now - timedelta(hours=1)), now)
    for sp in loss_spikes(store, run_id, hour).itertuples():
        rows.append(
            (
                "warning",
                "Loss spike",
                f"step {sp.step:,}: {sp.loss:.3f} vs {sp.baseline:.3f} (+{sp.jump_pct:.0f} %)",
                "LossSpike",
            )
        )
    return rows


def _slow_rank_alerts(store: Store, run_id: str, now: datetime) -> list[tuple[str, str, str, str]]:
    """``RankSlow`` per rank the run's own straggler reports keep naming (``queries.slow_ranks``
    over the last ``SLOW_LOOKBACK``): flagged in ``SLOW_WINDOWS`` report windows or more and
    slow on the whole (chronic). A rank slow in one window only (a loaded host's hiccup) names
    nobody: the alert names a rank and its host, and a wrong one would send someone to drain
    a healthy node."""
    rows = []
    for e in slow_ranks(store, run_id, TimeRange(now - SLOW_LOOKBACK, now)):
        if e["windows"] < SLOW_WINDOWS or not e["chronic"]:
            continue
        where = f" on {e['host']}" if e["host"] else " (its host not logged)"
        score = f"score {e['score']:.2f} in its newest report" if e["score"] is not None else (
            "named by the straggler warnings")  # fmt: skip
        desc = (f"rank {e['rank']}{where} is slow: {score}, flagged in {e['windows']} of "
                f"{e['seen']} report windows ({e['source']}; 1.0: the reference rank)")  # fmt: skip
        rows.append(("warning", "Rank slow", desc, _culprit_key("RankSlow", e["rank"], e["host"])))
    return rows


def _with_action(
    store: Store, run_id: str, ts: Any, source: str | None, alert: tuple[str, str, str, str]
) -> tuple[Any, ...]:
    """An alert about an interruption with what to do about it (``queries.offenders``): in
    its detail, read by people, and as ``action``/``action_reason`` for the receivers."""
    todo = offenders.action_of(offenders.actions(store, run_id, ts), ts, source)
    if todo["action"] is None:
        return alert
    sev, name, desc, key = alert
    desc = f"{desc}. Action: {todo['action_text']} ({todo['action_reason']})"
    return (sev, name, desc, key, todo["action"], todo["action_reason"])


ALERT_COLUMNS = ["severity", "alert", "detail", "key", "action", "action_reason"]


def _culprit_key(name: str, rank: Any, host: Any) -> str:
    """An alert's key with the culprit it names (``alerting`` makes it the ``culprit`` label):
    the logs placing the culprit's host after its rank was named is news for the receivers, a
    new alert (the rank-only one resolves), not only changed words they are never sent."""
    known = rank is not None and not pd.isna(rank)
    who = (f"rank {int(rank)}" if known else "") + (f" on {host}" if known and host else
                                                     f"host {host}" if host else "")  # fmt: skip
    return f"{name}:{who}" if who else name


def _ordered(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    order = {"critical": 0, "warning": 1, "info": 2}
    padded = [tuple(r) + (None,) * (len(ALERT_COLUMNS) - len(r)) for r in rows]
    df = pd.DataFrame(padded, columns=ALERT_COLUMNS)
    return df.sort_values("severity", key=lambda s: s.map(order), kind="stable").reset_index(
        drop=True
    )


def health_alerts(store: Store, now: datetime) -> list[tuple[str, str, str, str]]:
    """``NodeHealth`` per finding of the node-health rules in the last 24 h
    (``queries.node_health``): its key names the node, GPU and rule (``alerting`` makes them
    labels); the recommended action and the evidence are its description."""
    found = findings(store, TimeRange(now - timedelta(hours=24), now))
    out = []
    for f in found.itertuples():
        gpu = "" if pd.isna(f.gpu) else str(int(f.gpu))
        where = f.host + (f" GPU {gpu}" if gpu else "")
        severity = "critical" if f.rule in ("row_remap_failure", "fatal_xid_repeat") else "warning"
        out.append(
            (
                severity,
                f"Node health: {f.what} on {where}",
                f"{f.action} ({f.evidence})",
                f"NodeHealth:{f.host}|{gpu}|{f.rule}",
            )
        )
    return out


def _xid_alerts(store: Store, now: datetime) -> list[tuple[str, str, str, str]]:
    xids = ov.xid_counts(store, now - timedelta(hours=24), now)
    return [
        (
            "warning",
            f"XID {x.xid} seen",
            f"{x.n}× in the last 24 h on {x.hosts}",
            f"XidSeen:{x.xid}",
        )
        for x in xids.itertuples()
    ]


def _gpu_alerts(store: Store, last: datetime, training: bool) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    # the samples at ``last``: the newest of their GPUs when ``last`` is the newest sample
    hot = ov.hot_gpus_at(store, last, HOT_C)
    if not hot.empty:
        top = ", ".join(f"{r.host}/{r.gpu} {r.temp_c:.0f} °C" for r in hot.head(3).itertuples())
        out.append(("warning", f"{len(hot)} GPU(s) ≥ {HOT_C:.0f} °C", top, "GpuHot"))
    expected = ov.gpu_count(store)
    reporting = ov.reporting_at(store, last)
    if expected and reporting < expected:
        out.append(
            (
                "warning",
                f"{expected - reporting} GPU(s) not reporting",
                f"{reporting:,} of {expected:,} GPUs sent a sample at {last:%H:%M:%S}",
                "GpuNotReporting",
            )
        )
    if training:  # the GPUs the job holds, by real utilization where reported
        low, real = ov.low_util_at(store, last, LOW_UTIL_PCT)
        if low:
            basis = "real utilization" if real else "GPU_UTIL"
            out.append(
                (
                    "warning",
                    f"{low} GPU(s) < {LOW_UTIL_PCT:.0f} % utilized",
                    f"by {basis}, on the job's nodes while it trains (spares, drained nodes "
                    "left out)",
                    "GpuLowUtilization",
                )
            )
    return out


def _checkpoint_alerts(store: Store, run_id: str, now: datetime) -> list[tuple[str, str, str, str]]:
    policy = ov.checkpoint_policy(store, run_id)
    out = []
    last = ov.last_ok_checkpoints(store, run_id, now)
    for tier, interval in _tier_intervals(policy).items():
        done = last.get(tier)
        if done is None:
            continue
        age = (now - done).total_seconds()
        if age > STALE_FACTOR * interval:
            out.append(
                (
                    "warning",
                    f"No {tier} checkpoint for {age / 60:.0f} min",
                    f"configured every {interval / 60:.0f} min",
                    f"CheckpointOverdue:{tier}",
                )
            )
    return out
