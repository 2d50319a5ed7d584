"""Overview queries: the fleet's series and its "now" (GPUs reporting, health, hottest), the
tiers' newest checkpoints, and the active alerts of a run at the end of a time range.

Each alert is a row (severity, alert, detail); thresholds are the product's operating rules and
live here, beside the SQL that applies them, so the Overview and any future notifier agree.

Long module: the fleet's "now" and every alert rule read together (#59 moves the rules to a
metrics package of their own).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import pandas as pd

from telemetry.derive.derive import open_stall
from telemetry.queries import JOB_NODE_SQL, TimeRange, pick_level
from telemetry.queries.hangs import open_hang
from telemetry.queries.run_end import run_end
from telemetry.queries.targets import SCRAPED, report_time, target_alerts
from telemetry.queries.training import loss_spikes
from telemetry.store import Store
from telemetry.utilization import ALLOCATED_MIB, REAL_SQL
from telemetry.vocabulary import BUSY_PCT, HOT_C, IDLE_PCT, TIERS

# Rollup columns a chart may ask for; names are checked here, never interpolated from input.
FLEET_METRICS = {
    "util_avg": ("GPU utilization", "%"),
    "temp_avg": ("Mean GPU temperature", "°C"),
    "temp_max": ("Hottest GPU temperature", "°C"),
    "power_w": ("Fleet power", "W"),
    "fb_used_avg": ("Framebuffer used", "MiB"),
    "sm_clock_avg": ("SM clock", "MHz"),
    "tensor_avg": ("Tensor pipe active", "ratio"),
    "real_avg": ("Real utilization", "%"),
}


def fleet_series(store: Store, tr: TimeRange, max_points: int = 1500) -> pd.DataFrame:
    """Fleet rollup rows in the range: ts, gpus, util_avg, temp_avg, temp_max, power_w, ..."""
    level = pick_level(store, tr, max_points)
    if level not in store.rollup_levels():
        return store.df(
            """SELECT ts, count(*) AS nodes, sum(n) AS gpus, sum(util_s) / sum(n) AS util_avg,
                      min(util_min) AS util_min, sum(temp_s) / sum(n) AS temp_avg,
                      max(temp_max) AS temp_max, sum(power_s) AS power_w,
                      sum(fb_s) / sum(n) AS fb_used_avg, sum(clock_s) / sum(n) AS sm_clock_avg,
                      sum(tensor_s) / sum(n) AS tensor_avg,
                      sum(real_s) / nullif(sum(n) FILTER (WHERE real_s IS NOT NULL), 0)
                        AS real_avg, ? AS bucket_s
               FROM node_tick WHERE ts >= ? AND ts <= ? GROUP BY ts ORDER BY ts""",
            [level, tr.start, tr.end],
        )
    return store.df(
        """SELECT ts, nodes, gpus, util_avg, util_min, temp_avg, temp_max, power_w,
                  fb_used_avg, sm_clock_avg, tensor_avg, real_avg, bucket_s
           FROM fleet_rollup WHERE bucket_s = ? AND ts >= ? AND ts <= ? ORDER BY ts""",
        [level, tr.start, tr.end],
    )


class Latest(NamedTuple):
    """The newest GPU sample and scrape round at some time, and whether every exporter was
    down at the end: then no GPU is reporting, whatever the last samples said."""

    sample: datetime | None  # newest GPU sample
    round: datetime | None  # newest scrape round (or sample, for a store without rounds)
    all_down: bool


def now_table(store: Store, at: datetime | None) -> str:
    """Where the GPUs' samples at ``at`` (None: now) are read from: ``gpu_now`` (each GPU's
    newest sample, kept as batches arrive: ``batch_sql.NOW_SQL``) when ``at`` is at or after the
    newest sample, else ``gpu_samples`` (a range that ends in the past)."""
    newest = store.scalar("SELECT max(ts) FROM gpu_now")
    return "gpu_now" if newest is not None and (at is None or at >= newest) else "gpu_samples"


def latest_sample_and_round(store: Store, at: datetime | None = None) -> Latest:
    """:class:`Latest` at or before ``at``, read in one statement (one snapshot: two queries
    would see a round written between them as "all down").

    "All down" means: every target scraped since the newest sample was down in its latest
    scrape. Per target, so that with several ingest daemons one daemon's round of dead
    exporters does not hide the GPUs another daemon still reaches. Only scrape targets count:
    a training job that keeps posting metrics says nothing about the exporters."""
    samples = now_table(store, at)  # a fixed table name, never input
    at = at or datetime.max
    (row,) = store.rows(
        f"""WITH s AS (SELECT max(ts) AS last FROM {samples} WHERE ts <= ?),
                since AS (SELECT arg_max(up, t.ts) AS up FROM targets t, s
                          WHERE t.ts >= s.last AND t.ts <= ? AND {SCRAPED} GROUP BY t.target)
           SELECT (SELECT last FROM s),
                  (SELECT max(ts) FROM targets WHERE ts <= ? AND {SCRAPED}),
                  (SELECT count(*) FROM since), (SELECT bool_or(up) FROM since)""",
        [at, at, at],
    )
    sample, scraped, targets, any_up = row
    rounds = [t for t in (sample, scraped) if t is not None]
    newest = max(rounds) if rounds else None
    all_down = sample is not None and newest != sample and targets > 0 and not any_up
    return Latest(sample, newest, bool(all_down))


# Each GPU's newest sample within one sample interval of the newest sample anywhere: the fleet
# "now". Not the samples stamped with the newest time alone: with several ingest daemons (or a
# round delivered in parts) the newest round holds only part of the fleet, and the Overview
# then read, say, a spare node's idle GPUs as the whole fleet's utilization (0.0 %). Read from
# ``gpu_now`` (one row per GPU, see ``now_table``), else from the samples.
_NOW = {
    "gpu_now": """SELECT * FROM gpu_now
          WHERE ts > CAST(? AS TIMESTAMP) - to_microseconds(?) AND ts <= CAST(? AS TIMESTAMP)""",
    "gpu_samples": """SELECT * FROM gpu_samples
          WHERE ts > CAST(? AS TIMESTAMP) - to_microseconds(?) AND ts <= CAST(? AS TIMESTAMP)
          QUALIFY row_number() OVER (PARTITION BY gpu_id ORDER BY ts DESC) = 1""",
}


def _now_params(store: Store, last: datetime | None) -> list[object]:
    return [last, int(store.sample_interval_s() * 1e6), last]


def fleet_latest(store: Store) -> dict[str, float | int | datetime | None]:
    """The fleet now: GPUs reporting vs expected, health classes (``healthy``: neither
    ``degraded`` nor ``idle``), power, hottest, from each GPU's newest sample within one
    sample interval of the newest (see ``_NOW``). If the newest scrape rounds found every
    exporter down, nobody is reporting: all GPUs are silent (and ``last_sample`` says since
    when), not the values of the last round that answered."""
    last, now, all_down = latest_sample_and_round(store)
    expected = store.scalar("SELECT count(*) FROM gpus")
    if last is None or all_down:  # no GPU samples now (or a store of training jobs alone)
        n = int(expected)
        return {
            "ts": now,
            "last_sample": last,
            "expected": n,
            "reporting": 0,
            "healthy": 0,
            "degraded": 0,
            "idle": 0,
            "failed": n,
        }
    (row,) = store.rows(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT count(*), avg(util_pct), sum(power_w), max(temp_c),
                  count(*) FILTER (WHERE temp_c >= ? OR sm_clock_mhz < 0.85 * (
                      SELECT max(sm_clock_mhz) FROM s)
                      AND util_pct > ?),
                  count(*) FILTER (WHERE util_pct < ?)
           FROM s""",
        [*_now_params(store, last), HOT_C, BUSY_PCT, IDLE_PCT],
    )
    reporting, degraded, idle = int(row[0]), int(row[4]), int(row[5])
    return _by_role(store, last) | {
        "ts": last,
        "last_sample": last,
        "expected": int(expected),
        "reporting": reporting,
        "healthy": max(reporting - degraded - idle, 0),
        "util_avg": row[1],
        "power_w": row[2],
        "temp_max": row[3],
        "degraded": degraded,
        "idle": idle,
        "failed": int(expected) - reporting,
    }


# Each reporting GPU's role now, where the exporters say which GPUs run a job (``hpc_job`` or
# a pod, as the replay keeps them): "job", else "drained" (Slurm drained or downed its node),
# "spare" (a hot spare), "out of the job" (a job node that runs none: in repair, back as a
# spare) or "idle". A fleet mean over them read "78.7 %" for a job whose GPUs ran at ~97 %
# beside 16 idle spare GPUs (issue 57, 6).
_ROLE_NOW = """CASE WHEN g.hpc_job IS NOT NULL OR g.pod IS NOT NULL THEN 'job'
  WHEN g.host IN (SELECT host FROM slurm_nodes
                  WHERE regexp_matches(state, 'DOWN|DRAIN|FAIL|MAINT')) THEN 'drained'
  WHEN n.role = 'spare' THEN 'spare' WHEN n.role = 'job' THEN 'out of the job'
  ELSE 'idle' END"""


def _by_role(store: Store, last: datetime) -> dict[str, Any]:
    """The GPUs reporting now by role (``roles``: role -> GPUs, job first) and the mean
    utilization of those running a job (``util_job``); empty where no GPU is labelled with a
    job (nothing then says which GPUs are the job's)."""
    if not store.scalar(
        "SELECT count(*) FROM (SELECT 1 FROM gpus WHERE hpc_job IS NOT NULL OR pod IS NOT NULL"
        " LIMIT 1)"
    ):
        return {}
    rows = store.rows(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT role, count(*), avg(util_pct) FROM (
             SELECT {_ROLE_NOW} AS role, s.util_pct
             FROM s JOIN gpus g USING (gpu_id) LEFT JOIN nodes n USING (node_id))
           GROUP BY role ORDER BY role <> 'job', role""",
        _now_params(store, last),
    )
    job = [r for r in rows if r[0] == "job"]
    return {"roles": {r[0]: int(r[1]) for r in rows}, "util_job": job[0][2] if job else None}


def gpu_telemetry(store: Store) -> bool:
    """Whether the store holds any GPU telemetry (an inventory or a sample): a run known from
    its logs alone has none, and its pages say so once instead of "0 / 0" and empty charts."""
    return store.scalar("SELECT count(*) FROM (SELECT 1 FROM gpus LIMIT 1)") > 0 or (
        store.scalar("SELECT count(*) FROM (SELECT 1 FROM node_tick LIMIT 1)") > 0)


def run_shape(store: Store, run_id: str) -> dict[str, int | None]:
    """What the run's record (its logs, its Slurm job) says of its size: ``gpus`` (the world
    size), ``nodes``, ``per_node`` (GPUs per node, when both are known and divide); None where
    it does not say."""
    rows = store.rows("SELECT gpus, nodes FROM runs WHERE run_id = ?", [run_id])
    gpus, nodes = rows[0] if rows else (None, None)
    per = gpus // nodes if gpus and nodes and gpus % nodes == 0 else None
    return {"gpus": gpus, "nodes": nodes, "per_node": per}


def hottest_gpus(store: Store, limit: int = 10) -> pd.DataFrame:
    """The hottest GPUs now (each GPU's newest sample, as in ``fleet_latest``); none while
    every exporter is down (the last temperatures seen are not the current ones)."""
    last, _, all_down = latest_sample_and_round(store)
    if all_down:
        last = None  # matches no row: the table shows its empty state
    return store.df(
        f"""WITH s AS ({_NOW[now_table(store, last)]})
           SELECT g.host, g.gpu, round(s.temp_c::DOUBLE, 1) AS temp_c,
                  round(s.util_pct::DOUBLE, 1) AS util_pct,
                  round(s.sm_clock_mhz::DOUBLE) AS sm_clock_mhz,
                  round(s.power_w::DOUBLE, 1) AS power_w
           FROM s JOIN gpus g USING (gpu_id)
           ORDER BY s.temp_c DESC, g.host, g.gpu LIMIT ?""",
        [*_now_params(store, last), int(limit)],
    )


def checkpoint_ages(store: Store, run_id: str, now: datetime) -> pd.DataFrame:
    """Per tier: newest successful checkpoint end time, its step, and its age at ``now``."""
    df = store.df(
        """SELECT tier, max(end_ts) AS last_end, arg_max(step, end_ts) AS step, count(*) AS n
           FROM checkpoints WHERE run_id = ? AND status = 'ok' AND end_ts <= ?
           GROUP BY tier""",
        [run_id, now],
    )
    df["age_s"] = [(now - t).total_seconds() for t in df["last_end"]]
    order = {t: i for i, t in enumerate(TIERS)}
    return df.sort_values("tier", key=lambda s: s.map(order)).reset_index(drop=True)


LOW_UTIL_PCT = 80.0  # utilization below this while the job trains is wasted capacity
STALE_FACTOR = 2.0  # a tier is overdue after this many configured intervals without a checkpoint


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
    from telemetry.metrics.goodput import goodput, top_badput

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
    last = store.scalar(
        "SELECT max(ts) FROM train_metrics WHERE run_id = ? AND ts <= ?",
        [run_id, max(now, live_at)],
    )
    stopped = last is not None and store.rows(  # the data ends with a stop at the last step
        "SELECT planned, description, ts, source, rank, host FROM interruptions "
        "WHERE run_id = ? AND ts = ? "
        "AND end_ts IS NULL AND source = 'inferred' LIMIT 1",
        [run_id, last],
    )
    ended = run_end(store, run_id, max(now, live_at))
    hung = open_hang(store, run_id, max(now, live_at))
    if ended is not None:  # nothing is expected of a run after its end
        when = f"{ended['ts']:%Y-%m-%d %H:%M:%S} UTC"
        rows.append(("info", "Run finished", f"{ended['detail']} at {when} ({ended['origin']})",
                     "RunFinished"))
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
    if not training and ended is None:
        rows.append(
            (
                "critical",
                "Job not training",
                "no training step logged in the last 10 minutes of the range",
                "JobNotTraining",
            )
        )
    for desc, ts, source in store.rows(
        "SELECT description, ts, source FROM interruptions WHERE run_id = ? AND restarts > 1 "
        "AND coalesce(end_ts, ts) BETWEEN ? AND ? ORDER BY ts DESC LIMIT 1",
        [run_id, now - timedelta(hours=24), now],
    ):
        alert = ("critical", "Restart loop", desc, "RestartLoop")
        rows.append(_with_action(store, run_id, ts, source, alert))
    if ended is None:  # a finished run's tiers are not overdue
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


def _with_action(
    store: Store, run_id: str, ts: Any, source: str | None, alert: tuple[str, str, str, str]
) -> tuple[Any, ...]:
    """An alert about an interruption with what to do about it (``queries.offenders``): in
    its detail, read by people, and as ``action``/``action_reason`` for the receivers."""
    from telemetry.queries import offenders

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
    from telemetry.queries.node_health import findings

    found = findings(store, TimeRange(now - timedelta(hours=24), now))
    out = []
    for f in found.itertuples():
        gpu = "" if pd.isna(f.gpu) else str(int(f.gpu))
        where = f.host + (f" GPU {gpu}" if gpu else "")
        severity = "critical" if f.rule in ("row_remap_failure", "fatal_xid_repeat") else "warning"
        out.append((severity, f"Node health: {f.what} on {where}",
                    f"{f.action} ({f.evidence})", f"NodeHealth:{f.host}|{gpu}|{f.rule}"))
    return out


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
        # the job's nodes (``JOB_NODE_SQL``), and of them the GPUs the job holds now (busy, or
        # a process's memory on them, read from the samples at ``last`` alone: a join on the
        # sample time scanned every stored sample, 53 s at llama3-405b scale; unknown memory
        # counts as held): a hot spare, a drained
        # node or one taken out for repair (no process, no kernel) is idle by design, not
        # under-used by the job (#37)
        ((low, real),) = store.rows(
            f"""SELECT count(*) FILTER (WHERE coalesce({REAL_SQL}, s.util_pct) < ?),
                       count(*) FILTER (WHERE {REAL_SQL} IS NOT NULL)
               FROM {samples} s JOIN gpus g USING (gpu_id) JOIN nodes n USING (node_id)
               LEFT JOIN (SELECT gpu_id, fb_used_mib FROM gpu_samples WHERE ts = ?) f
                 USING (gpu_id)
               WHERE s.ts = ? AND {JOB_NODE_SQL} AND NOT (coalesce(s.util_pct, 0) < ?
                 AND coalesce(f.fb_used_mib, ?) < ?)""",
            [LOW_UTIL_PCT, last, last, IDLE_PCT, ALLOCATED_MIB, ALLOCATED_MIB],
        )
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
