"""Overview queries: the active alerts of a run at the end of a time range.

Each alert is a row (severity, alert, detail); thresholds are the product's operating rules and
live here, beside the SQL that applies them, so the Overview and any future notifier agree.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pandas as pd

from telemetry.derive.derive import open_stall
from telemetry.queries import TimeRange, latest_sample_and_round, now_table
from telemetry.queries.targets import target_alerts
from telemetry.queries.training import loss_spikes
from telemetry.store import Store
from telemetry.utilization import REAL_SQL
from telemetry.vocabulary import HOT_C

LOW_UTIL_PCT = 80.0  # utilization below this while the job trains is wasted capacity
STALE_FACTOR = 2.0  # a tier is overdue after this many configured intervals without a checkpoint


def _tier_intervals(policy_json: str | None) -> dict[str, float]:
    p = json.loads(policy_json or "{}")
    nvme = float(p.get("nvme_interval_s", 0) or 0)
    pfs = nvme * float(p.get("pfs_every", 0) or 0)
    obj = pfs * float(p.get("object_every", 0) or 0)
    return {k: v for k, v in {"nvme": nvme, "pfs": pfs, "object": obj}.items() if v > 0}


def active_alerts(
    store: Store, run_id: str | None, tr: TimeRange, targets_at: datetime | None = None
) -> pd.DataFrame:
    """Alerts at ``tr.end``: hot GPUs, low utilization while training, silent GPUs, XIDs in
    the last 24 h, scrape targets down or stale (at ``targets_at``, default ``tr.end``), and
    for a run: overdue checkpoint tiers, loss spikes in the last hour, job not training."""
    now = tr.end
    rows: list[tuple[str, str, str, str]] = []
    last, scraped, all_down = latest_sample_and_round(store, now)
    training = run_id is not None and store.scalar(
        "SELECT count(*) FROM train_metrics WHERE run_id = ? AND ts BETWEEN ? AND ?",
        [run_id, now - timedelta(minutes=10), now],
    )
    if all_down:  # the newest rounds found every exporter down
        expected = store.scalar("SELECT count(*) FROM gpus")
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
    rows += target_alerts(store, targets_at or now)
    if run_id is not None:  # an ingest store may hold GPU telemetry without a training run
        rows += _run_alerts(store, run_id, tr, bool(training), targets_at or now)
    return _ordered(rows)


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
    stopped = stall and store.rows(
        "SELECT planned, description FROM interruptions WHERE run_id = ? AND ts = ? "
        "AND end_ts IS NULL AND source = 'inferred' LIMIT 1",
        [run_id, stall["since"]],
    )
    if stopped:  # the data ends with the stop's cause: it stopped, it is not stalling
        planned, desc = stopped[0]
        rows.append(("warning" if planned else "critical", "Run stopped", desc, "RunStopped"))
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
    if not training:
        rows.append(
            (
                "critical",
                "Job not training",
                "no training step logged in the last 10 minutes of the range",
                "JobNotTraining",
            )
        )
    for (desc,) in store.rows(
        "SELECT description FROM interruptions WHERE run_id = ? AND restarts > 1 "
        "AND coalesce(end_ts, ts) BETWEEN ? AND ? ORDER BY ts DESC LIMIT 1",
        [run_id, now - timedelta(hours=24), now],
    ):
        rows.append(("critical", "Restart loop", desc, "RestartLoop"))
    rows += _checkpoint_alerts(store, run_id, now)
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


def _ordered(rows: list[tuple[str, str, str, str]]) -> pd.DataFrame:
    order = {"critical": 0, "warning": 1, "info": 2}
    df = pd.DataFrame(rows, columns=["severity", "alert", "detail", "key"])
    return df.sort_values("severity", key=lambda s: s.map(order), kind="stable").reset_index(
        drop=True
    )


def _xid_alerts(store: Store, now: datetime) -> list[tuple[str, str, str, str]]:
    xids = store.df(
        """SELECT xid, count(*) AS n, string_agg(DISTINCT host, ', ') AS hosts FROM xid_events
           WHERE ts BETWEEN ? AND ? GROUP BY xid ORDER BY n DESC""",
        [now - timedelta(hours=24), now],
    )
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
    samples = now_table(store, last)  # a fixed table name, never input
    hot = store.df(
        f"""SELECT g.host, g.gpu, s.temp_c FROM {samples} s JOIN gpus g USING (gpu_id)
           WHERE s.ts = ? AND s.temp_c >= ? ORDER BY s.temp_c DESC""",
        [last, HOT_C],
    )
    if not hot.empty:
        top = ", ".join(f"{r.host}/{r.gpu} {r.temp_c:.0f} °C" for r in hot.head(3).itertuples())
        out.append(("warning", f"{len(hot)} GPU(s) ≥ {HOT_C:.0f} °C", top, "GpuHot"))
    expected = store.scalar("SELECT count(*) FROM gpus")
    reporting = store.scalar(f"SELECT count(*) FROM {samples} WHERE ts = ?", [last])
    if expected and reporting < expected:
        out.append(
            (
                "warning",
                f"{expected - reporting} GPU(s) not reporting",
                f"{reporting:,} of {expected:,} GPUs sent a sample at {last:%H:%M:%S}",
                "GpuNotReporting",
            )
        )
    if training:
        # real utilization where a GPU reports the profiling fields (a rank spinning in a
        # collective reads 100 % on GPU_UTIL), else GPU_UTIL (``telemetry.utilization``)
        ((low, real),) = store.rows(
            f"""SELECT count(*) FILTER (WHERE coalesce({REAL_SQL}, s.util_pct) < ?),
                       count(*) FILTER (WHERE {REAL_SQL} IS NOT NULL)
               FROM {samples} s JOIN gpus g USING (gpu_id) JOIN nodes n USING (node_id)
               WHERE s.ts = ? AND n.role = 'job'""",
            [LOW_UTIL_PCT, last],
        )
        if low:
            basis = "real utilization" if real else "GPU_UTIL"
            out.append(
                (
                    "warning",
                    f"{low} GPU(s) < {LOW_UTIL_PCT:.0f} % utilized",
                    f"by {basis}, while the job is training (job nodes as first scheduled)",
                    "GpuLowUtilization",
                )
            )
    return out


def _checkpoint_alerts(store: Store, run_id: str, now: datetime) -> list[tuple[str, str, str, str]]:
    policy = store.scalar("SELECT ckpt_policy FROM runs WHERE run_id = ?", [run_id])
    out = []
    last = dict(
        store.rows(
            """SELECT tier, max(end_ts) FROM checkpoints
           WHERE run_id = ? AND status = 'ok' AND end_ts <= ? GROUP BY tier""",
            [run_id, now],
        )
    )
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
