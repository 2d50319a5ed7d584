"""Alerts that leave the dashboard: the rules the Overview shows (``metrics.alert_rules``),
evaluated by the serving process, grouped, silenced and handed to receivers (``notify``).

One file (TOML) configures it, given to ``serve --alerts FILE``::

    external_url = "http://factoryfloor.example:8050"   # generatorURL: the view behind an alert
    evaluate_every = "30s"
    history_days = 90                   # resolved alerts older than this leave alert_history

    [route]
    group_by = ["alertname", "run"]     # one notification per group, not per alert
    group_wait = "30s"                  # a new group waits this long for its siblings
    group_interval = "5m"               # changes to a notified group wait this long
    repeat_interval = "4h"              # an unchanged group is sent again after this

    [[receiver]]
    name = "oncall"
    type = "alertmanager"               # POST /api/v2/alerts; Alertmanager groups and routes
    url = "http://127.0.0.1:9093"

    [[receiver]]
    name = "chatops"
    type = "webhook"                    # JSON body (Alertmanager's webhook shape), HMAC-signed
    url = "https://hooks.example/ff"
    secret_file = "/etc/factoryfloor/hook-secret"

An alert's identity is its labels (``alertname``, ``severity``, ``run`` and the rule's own,
such as ``xid`` or ``tier``); its summary and description (the Overview's words) are
annotations, which may change while it fires. Silences (``alert_silences`` in the store, set
with the operator token) match labels exactly and hold until they end.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from telemetry.errors import FactoryFloorError
from telemetry.ingest.since import parse_duration as parse_duration_s
from telemetry.metrics.alert_rules import active_alerts
from telemetry.queries import TimeRange, data_extent, live_runs, running_jobs
from telemetry.queries.outliers import duration_text
from telemetry.queries.targets import report_time
from telemetry.store import Store

KINDS = ("alertmanager", "webhook")


@dataclass(frozen=True)
class Receiver:
    name: str
    kind: str  # "alertmanager" | "webhook"
    url: str
    secret: bytes | None = field(default=None, repr=False)  # webhook HMAC key (secret_file)
    timeout_s: float = 5.0


@dataclass(frozen=True)
class Route:
    group_by: tuple[str, ...] = ("alertname", "run")
    group_wait_s: float = 30.0
    group_interval_s: float = 300.0
    repeat_interval_s: float = 4 * 3600.0


@dataclass(frozen=True)
class Rules:
    """Thresholds of the alerts file's ``[rules]`` (an unset rule raises nothing):
    ``goodput_below`` (0..1): a run's goodput over the last ``goodput_window`` of its data
    below it raises ``GoodputLow``."""

    goodput_below: float | None = None
    goodput_window_s: float = 86400.0


@dataclass(frozen=True)
class AlertConfig:
    receivers: tuple[Receiver, ...]
    route: Route = field(default_factory=Route)
    external_url: str = "http://127.0.0.1:8050"
    evaluate_every_s: float = 30.0
    rules: Rules = field(default_factory=Rules)
    history_days: float = 90.0  # resolved episodes kept this long in alert_history


def parse_duration(value: Any, where: str) -> timedelta:
    """``30s``, ``5m``, ``4h``, ``1d`` as a timedelta; ValueError naming ``where`` otherwise."""
    try:
        return timedelta(seconds=_seconds(value, where))
    except FactoryFloorError as exc:
        raise ValueError(str(exc)) from None


MAX_DURATION_S = 366 * 86400.0  # no interval, wait or silence of ours is longer than a year


def _seconds(value: Any, where: str) -> float:
    text = str(value).strip()[:40]
    try:
        seconds = parse_duration_s(text, allow_zero=True)
        if seconds <= MAX_DURATION_S:
            return seconds
    except ValueError:
        pass
    raise FactoryFloorError(
        f"{where}: {text!r} is not a duration of at most a year (like 30s, 5m, 4h, 1d)"
    )


def _http_url(value: Any, where: str) -> str:
    url = str(value)
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok or any(c.isspace() or ord(c) < 0x20 for c in url):
        raise FactoryFloorError(f"{where}: {url[:200]!r} is not an http(s) URL")
    return url.rstrip("/")


_RECEIVER_KEYS = {"name", "type", "url", "secret_file", "timeout"}
_ROUTE_KEYS = {"group_by", "group_wait", "group_interval", "repeat_interval"}


def load_config(path: str) -> AlertConfig:
    """The alert delivery file at ``path``; FactoryFloorError naming the file and the key for
    anything unreadable or wrong (before ``serve`` binds, so a typo never starts silently)."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise FactoryFloorError(f"--alerts {path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FactoryFloorError(f"--alerts {path}: not TOML ({exc})") from None
    known = {"external_url", "evaluate_every", "history_days", "route", "receiver", "rules"}
    if unknown := sorted(set(doc) - known):
        raise FactoryFloorError(f"--alerts {path}: unknown key(s) {', '.join(unknown)}")
    receivers = []
    given = doc.get("receiver", [])
    if not isinstance(given, list):
        raise FactoryFloorError(
            f"--alerts {path}: receiver must be a list of [[receiver]] tables, each with a "
            "type (one of alertmanager, webhook) and a url"
        )
    for i, r in enumerate(given):
        where = f"--alerts {path}: receiver {i + 1}"
        if not isinstance(r, dict) or r.get("type") not in KINDS:
            raise FactoryFloorError(f"{where}: type must be one of {', '.join(KINDS)}")
        if unknown := sorted(set(r) - _RECEIVER_KEYS):
            raise FactoryFloorError(f"{where}: unknown key(s) {', '.join(unknown)}")
        name = str(r.get("name") or f"{r['type']}-{i + 1}")
        secret = None
        if r.get("secret_file"):
            try:
                secret = Path(str(r["secret_file"])).read_bytes().strip()
            except OSError as exc:
                raise FactoryFloorError(
                    f"{where}: cannot read secret_file ({exc.strerror})"
                ) from None
            if len(secret) < 16:
                raise FactoryFloorError(f"{where}: the secret is shorter than 16 characters")
        timeout = max(_seconds(r.get("timeout", "5s"), f"{where} timeout"), 0.1)
        receivers.append(
            Receiver(name, r["type"], _http_url(r.get("url"), f"{where} url"), secret, timeout)
        )
    if not receivers:
        raise FactoryFloorError(f"--alerts {path}: no [[receiver]] configured")
    if len({r.name for r in receivers}) < len(receivers):
        raise FactoryFloorError(f"--alerts {path}: receiver names must differ")
    rt = doc.get("route", {})
    if not isinstance(rt, dict) or not isinstance(rt.get("group_by", []), list):
        raise FactoryFloorError(f"--alerts {path}: [route] must be a table, group_by a list")
    if unknown := sorted(set(rt) - _ROUTE_KEYS):
        raise FactoryFloorError(f"--alerts {path}: [route]: unknown key(s) {', '.join(unknown)}")
    route = Route(
        group_by=tuple(str(x) for x in rt.get("group_by", Route.group_by)),
        group_wait_s=_seconds(rt.get("group_wait", "30s"), f"--alerts {path}: group_wait"),
        group_interval_s=_seconds(
            rt.get("group_interval", "5m"), f"--alerts {path}: group_interval"
        ),
        repeat_interval_s=_seconds(
            rt.get("repeat_interval", "4h"), f"--alerts {path}: repeat_interval"
        ),
    )
    return AlertConfig(
        receivers=tuple(receivers),
        route=route,
        rules=_rules(doc.get("rules", {}), f"--alerts {path}: [rules]"),
        external_url=_http_url(
            doc.get("external_url", AlertConfig.external_url), f"--alerts {path}: external_url"
        ),
        evaluate_every_s=max(
            _seconds(doc.get("evaluate_every", "30s"), f"--alerts {path}: evaluate_every"), 1.0
        ),
        history_days=_days(doc.get("history_days", AlertConfig.history_days), path),
    )


def _days(value: Any, path: str) -> float:
    """``history_days``: a positive number of days (a resolved alert kept less than a day
    would leave the "resolved in this range" list before anyone read it)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 36500:
        raise FactoryFloorError(
            f"--alerts {path}: history_days must be a number of days from 1 to 36500, not {value!r}"
        )
    return float(value)


_RULE_KEYS = {"goodput_below", "goodput_window"}


def _rules(doc: Any, where: str) -> Rules:
    if not isinstance(doc, dict):
        raise FactoryFloorError(f"{where} must be a table")
    if unknown := sorted(set(doc) - _RULE_KEYS):
        raise FactoryFloorError(f"{where}: unknown key(s) {', '.join(unknown)}")
    below = doc.get("goodput_below")
    if below is not None:
        if isinstance(below, bool) or not isinstance(below, int | float) or not 0 < below < 1:
            raise FactoryFloorError(
                f"{where}: goodput_below must be a fraction between 0 and 1 (0.85 for 85 %), "
                f"not {str(below)[:40]!r}"
            )
        below = float(below)
    window = _seconds(doc.get("goodput_window", "1d"), f"{where} goodput_window")
    if window < 3600:
        raise FactoryFloorError(f"{where}: goodput_window must be at least 1h")
    return Rules(below, window)


# -- alerts ------------------------------------------------------------------------------------
# The Overview's alert key -> the page that shows it (generatorURL).
_PAGE = {
    "gpu": "/gpus",
    "xid": "/failures",
    "target": "/",
    "run": "/training",
    "ckpt": "/checkpoints",
}


@dataclass(frozen=True)
class Alert:
    labels: dict[str, str]
    summary: str
    description: str
    annotations: dict[str, str] = field(default_factory=dict)  # more than the two above

    @property
    def fingerprint(self) -> str:
        raw = json.dumps(sorted(self.labels.items())).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def from_overview(rows: Any, run_id: str | None, job_id: str | None = None) -> list[Alert]:
    """Alerts from ``metrics.alert_rules.active_alerts`` rows (severity, alert, detail, key):
    ``key`` is ``name`` or ``name:value`` (``XidSeen:79``, ``CheckpointOverdue:pfs``). A run's
    alerts name the run, and its Slurm job (``job``) while one runs it."""
    out = []
    for r in rows.itertuples():
        name, _, value = str(r.key).partition(":")
        labels = {"alertname": name, "severity": str(r.severity)}
        if run_id and name in RUN_ALERTS:
            labels["run"] = run_id
            if job_id:
                labels["job"] = job_id
        if name == "NodeHealth":  # node|gpu|rule: a label each (no gpu: a node's finding)
            node, gpu, rule = (["", ""] + value.rsplit("|", 2))[-3:]  # a host may hold "|"
            labels |= {"node": node, "rule": rule} | ({"gpu": gpu} if gpu else {})
        elif value:
            labels[LABEL_OF.get(name, "key")] = value
        todo = getattr(r, "action", None)  # an interruption's: what to do (issue 58)
        extra = {"action": str(todo), "action_reason": str(r.action_reason)} if todo else {}
        out.append(Alert(labels, str(r.alert), str(r.detail), extra))
    return out


RUN_ALERTS = {"RunStalled", "RunHung", "RunStopped", "RunFinished", "RestartLoop", "JobNotTraining",
              "CheckpointOverdue", "LossSpike", "GpuLowUtilization", "GoodputLow",
              "RankSlow"}  # fmt: skip
LABEL_OF = {"XidSeen": "xid", "CheckpointOverdue": "tier", "TargetsDown": "status",
            "RunStopped": "culprit", "RunHung": "culprit", "RankSlow": "culprit"}  # fmt: skip


def generator_url(base: str, alert: Alert) -> str:
    """The view that shows ``alert``: its page, the run, the last 6 hours (the dashboard's
    shareable link form, ``#run=...&range=6h``)."""
    name = alert.labels["alertname"]
    page = (
        _PAGE["xid"]
        if name in ("XidSeen", "RunHung")  # the hang's card and its dumps' story
        else _PAGE["ckpt"]
        if name == "CheckpointOverdue"
        else _PAGE["gpu"]
        if name.startswith("Gpu") or name == "NodeHealth"
        else _PAGE["run"]
        if name in ("RunStalled", "RunStopped", "RestartLoop", "JobNotTraining", "LossSpike")
        else "/"
    )
    view = {"run": alert.labels["run"]} if "run" in alert.labels else {}
    return f"{base}{page}#{urlencode({**view, 'range': '6h'})}"


@dataclass(frozen=True)
class Silence:
    matchers: dict[str, str]
    ends_at: datetime
    created_by: str
    comment: str
    id: str = ""

    def matches(self, alert: Alert, now: datetime) -> bool:
        return now < self.ends_at and all(
            alert.labels.get(k) == v for k, v in self.matchers.items()
        )


def group_key(alert: Alert, group_by: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, alert.labels.get(k, "")) for k in group_by)


@dataclass
class Firing:
    alert: Alert
    starts_at: datetime
    ends_at: datetime | None = None  # set when it resolved

    def doc(self, base: str, now: datetime, hold: timedelta) -> dict[str, Any]:
        """Alertmanager's alert shape (API v2 and webhook alike)."""
        ends = self.ends_at or now + hold
        return {
            "status": "resolved" if self.ends_at else "firing",
            "labels": self.alert.labels,
            "annotations": {"summary": self.alert.summary, "description": self.alert.description}
            | self.alert.annotations,
            "startsAt": _iso(self.starts_at),
            "endsAt": _iso(ends),
            "generatorURL": generator_url(base, self.alert),
            "fingerprint": self.alert.fingerprint,
        }


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- silences and evaluation against a store ---------------------------------------------------
MAX_SILENCE = timedelta(days=30)


def add_silence(
    store: Store, matchers: dict[str, str], duration: timedelta, created_by: str, comment: str
) -> Silence:
    """Store a silence of the alerts whose labels equal every matcher, for ``duration``;
    ValueError for an empty matcher set, a label or value that is not a short string, or a
    duration outside (0, 30 d]."""
    if (
        not matchers
        or not all(
            isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= 64 and len(v) <= 200
            for k, v in matchers.items()
        )
        or len(matchers) > 8
    ):
        raise ValueError("matchers: 1 to 8 label=value pairs of short strings")
    if not timedelta(0) < duration <= MAX_SILENCE:
        raise ValueError("duration must be more than 0 and at most 30 days")
    now = datetime.now(UTC).replace(tzinfo=None)
    s = Silence(dict(matchers), now + duration, created_by[:100], comment[:500], uuid.uuid4().hex)
    with store.transaction() as con:
        con.execute(
            "INSERT INTO alert_silences VALUES (?, ?, ?, ?, ?, ?)",
            [s.id, json.dumps(s.matchers), now, s.ends_at, s.created_by, s.comment],
        )
    return s


def active_silences(store: Store, now: datetime | None = None) -> list[Silence]:
    now = now or datetime.now(UTC).replace(tzinfo=None)
    rows = store.rows(
        "SELECT matchers, ends_at, created_by, comment, id FROM alert_silences "
        "WHERE ends_at > ? ORDER BY starts_at",
        [now],
    )
    return [Silence(json.loads(m), e, c or "", t or "", i or "") for m, e, c, t, i in rows]


def end_silence(store: Store, silence_id: str) -> bool:
    """End a silence now (its alerts are delivered again from the next evaluation); False
    when no silence in force has that id."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.transaction() as con:
        (n,) = con.execute(
            "UPDATE alert_silences SET ends_at = ? WHERE id = ? AND ends_at > ?",
            [now, str(silence_id)[:64], now],
        ).fetchone()
    return bool(n)


STALE_AFTER_S = 300.0  # no new round for this long (or 10 sample intervals): data stale


def store_alerts(
    store: Store, now: datetime | None = None, rules: Rules | None = None
) -> list[Alert]:
    """The alerts the live Overview shows over the last 6 hours of data, for every run that
    is live there (``queries.live_runs``: the newest run, any other that logged a step in
    those hours or whose Slurm job still runs, while not ended; each names its run and its
    job), and ``DataStale`` when no source has written for ``STALE_AFTER_S`` (or ten sample
    intervals) by the wall clock (``now``): the alerts above describe the last data, and at
    3 a.m. a stopped pipeline is the news. An alert of the fleet (hot GPUs, XIDs, targets) is
    listed once, whichever run's view found it."""
    extent = data_extent(store)
    if extent is None:
        return []
    tr = TimeRange(max(extent.start, extent.end - timedelta(hours=6)), extent.end)
    # judged as the live Overview judges them: targets and stalls at the newest round of any
    # source (followed logs keep reporting while the job is silent)
    at = report_time(store, extent.end, live=True)
    out: list[Alert] = []
    seen: set[str] = set()
    runs = live_runs(store, tr)
    jobs = running_jobs(store, runs, max(at, tr.end))
    for run in runs or [None]:
        found = active_alerts(store, run, tr, targets_at=at, rules=rules)
        for alert in from_overview(found, run, jobs.get(run or "")):
            if alert.fingerprint not in seen:
                seen.add(alert.fingerprint)
                out.append(alert)
    now = now or datetime.now(UTC).replace(tzinfo=None)
    newest = max(at, extent.end)
    quiet = (now - newest).total_seconds()
    if quiet > max(STALE_AFTER_S, 10 * store.sample_interval_s()):
        labels = {"alertname": "DataStale", "severity": "critical"}
        out.insert(0, Alert(labels, f"No new data for {duration_text(quiet)}",
                            f"newest round {newest:%Y-%m-%d %H:%M:%S} UTC: the alerts below "
                            "describe it; is the ingest running?"))  # fmt: skip
    return out
