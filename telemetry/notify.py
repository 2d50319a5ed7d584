"""Alert delivery: which alert goes to which receiver when, and the HTTP that carries it.

``Dispatcher.evaluate`` takes the alerts firing now (``telemetry.alerting``) and decides what
to send:

- an **Alertmanager** receiver gets every firing alert at every evaluation (``POST
  /api/v2/alerts``, ``endsAt`` a few evaluations ahead, so that Alertmanager resolves it by
  itself if Factory Floor goes away) and each resolved one, ``endsAt`` its end, until a
  snapshot carrying it was delivered;
  Alertmanager groups, routes, repeats and silences on its side;
- a **webhook** receiver gets one notification per group (``route.group_by``): a new group
  after ``group_wait``, a changed one (an alert joined or resolved) no sooner than
  ``group_interval`` after the last, an unchanged one again after ``repeat_interval``; a
  resolved alert is forgotten only once a notification carrying it was delivered (one that
  was not leaves the group changed, so it goes again). The body is Alertmanager's webhook
  shape. With a secret, ``X-FactoryFloor-Timestamp: <unix s>`` and
  ``X-FactoryFloor-Signature: sha256=<hex>``, the HMAC-SHA256 of ``<timestamp>.<body>`` with
  the receiver's secret (as Stripe and Slack sign): a receiver checks the signature and that
  the timestamp is recent (``verify_signature``), so a captured notification cannot be
  replayed later.

Silenced alerts go to no receiver: a webhook hears nothing more of one (not "resolved"),
Alertmanager is told it ended (or it would keep paging). Each receiver has its own sender
thread and a bounded queue (Alertmanager's holds only the newest snapshot): a receiver that
does not answer is retried with backoff (1 s doubling to 60 s) and shown in ``status()``, and
never blocks the evaluation, let alone ingest.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from telemetry.alerting import Alert, AlertConfig, Firing, Receiver, Silence, group_key

log = logging.getLogger("factoryfloor.alerts")
QUEUE_MAX = 256  # notifications waiting per receiver; older ones are dropped past it
MAX_ATTEMPTS = 8  # per notification (1 + 2 + ... + 60 s of backoff, about 3 min)
BACKOFF_MAX_S = 60.0
HOLD_MIN_S = 300.0


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


SIGNATURE_TOLERANCE_S = 300  # how old a signed notification a receiver should still accept


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """``X-FactoryFloor-Signature`` of a webhook body sent at ``timestamp`` (unix s, text)."""
    mac = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify_signature(
    secret: bytes,
    timestamp: str,
    body: bytes,
    signature: str,
    now_s: float | None = None,
    tolerance_s: float = SIGNATURE_TOLERANCE_S,
) -> bool:
    """Whether a webhook notification is Factory Floor's and recent: ``signature`` and
    ``timestamp`` as received in its two headers, ``body`` as received (bytes). A replay of an
    old notification fails the time check; a changed body or timestamp fails the HMAC."""
    if not timestamp.isdigit():
        return False
    now_s = time.time() if now_s is None else now_s
    if abs(now_s - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body).encode(), signature.encode())


@dataclass
class ReceiverStatus:
    name: str
    kind: str
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    pending: int = 0
    attempt: int = 0  # of the notification being sent now (0: idle)
    last_ok: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None


@dataclass
class _Group:
    created: datetime
    alerts: dict[str, Firing] = field(default_factory=dict)
    sent_at: datetime | None = None
    sent_state: frozenset[tuple[str, str]] = frozenset()  # (fingerprint, status) last sent


Done = Callable[[bool], None] | None  # told whether a notification was delivered


def _report(done: Done, delivered: bool) -> None:
    if done is not None:
        try:
            done(delivered)
        except Exception:  # noqa: BLE001 (bookkeeping must not end the sender)
            log.exception("alert delivery bookkeeping failed")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None  # the 3xx surfaces as an HTTPError: not delivered


_OPENER = urllib.request.build_opener(_NoRedirect)


class Sender:
    """One receiver's queue and thread: POSTs each notification until it is accepted (2xx),
    with backoff, or gives up after ``MAX_ATTEMPTS``; a 4xx other than 429 is not retried (the
    receiver will not accept it later either)."""

    def __init__(self, receiver: Receiver, stop: threading.Event) -> None:
        self.receiver = receiver
        self.status = ReceiverStatus(receiver.name, receiver.kind)
        self._q: queue.Queue[tuple[str, bytes, Done]] = queue.Queue(QUEUE_MAX)
        self._stop = stop
        self._lock = threading.Lock()
        self.thread = threading.Thread(
            target=self._run, name=f"alerts-{receiver.name}", daemon=True
        )

    def put(self, path: str, body: bytes, latest_only: bool = False, done: Done = None) -> None:
        """Queue a notification; ``done(delivered)`` is called once it was accepted, given up
        or dropped. ``latest_only`` first drops what is still queued (a snapshot of every firing
        alert supersedes the older ones: a receiver back after an outage gets the present, not
        hours of replayed states)."""
        while latest_only:
            try:
                _report(self._q.get_nowait()[2], False)
            except queue.Empty:
                break
        while True:
            try:
                self._q.put_nowait((path, body, done))
                break
            except queue.Full:
                try:
                    old = self._q.get_nowait()  # the oldest gives way: the newest state matters
                    with self._lock:
                        self.status.dropped += 1
                    _report(old[2], False)
                except queue.Empty:
                    pass
        with self._lock:
            self.status.pending = self._q.qsize()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                path, body, done = self._q.get(timeout=0.5)
            except queue.Empty:
                continue
            with self._lock:
                self.status.attempt = 1  # in flight from here: not idle
                self.status.pending = self._q.qsize()
            delivered = False
            try:
                delivered = self._deliver(path, body)
            except Exception as exc:  # noqa: BLE001 (the sender must outlive any one message)
                log.exception("alert receiver %s: delivery failed", self.receiver.name)
                with self._lock:
                    self.status.failed += 1
                    self.status.attempt = 0
                    self.status.last_error = f"{type(exc).__name__}: {exc}"[:200]
                    self.status.last_error_at = utcnow()
            _report(done, delivered)
            with self._lock:
                self.status.pending = self._q.qsize()

    def _deliver(self, path: str, body: bytes) -> bool:
        delay = 1.0
        for attempt in range(1, MAX_ATTEMPTS + 1):
            with self._lock:
                self.status.attempt = attempt
            error, retry = self._post(path, body)
            with self._lock:
                if error is None:
                    self.status.sent += 1
                    self.status.last_ok = utcnow()
                    self.status.attempt = 0
                    return True
                self.status.last_error, self.status.last_error_at = error, utcnow()
            log.warning("alert receiver %s: %s (attempt %d)", self.receiver.name, error, attempt)
            if not retry or self._stop.wait(delay):
                break
            delay = min(delay * 2, BACKOFF_MAX_S)
        with self._lock:
            self.status.failed += 1
            self.status.attempt = 0
        return False

    def _post(self, path: str, body: bytes) -> tuple[str | None, bool]:
        """(None, _) when accepted, else (why, whether to try again)."""
        headers = {"Content-Type": "application/json", "User-Agent": "factoryfloor-alerts"}
        if self.receiver.secret is not None:
            stamp = str(int(time.time()))
            headers["X-FactoryFloor-Timestamp"] = stamp
            headers["X-FactoryFloor-Signature"] = sign(self.receiver.secret, stamp, body)
        req = urllib.request.Request(self.receiver.url + path, body, headers, method="POST")
        try:
            with _OPENER.open(req, timeout=self.receiver.timeout_s) as r:
                r.read(1 << 16)
            return None, False
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:  # a redirect would turn the POST into a bodiless GET
                where = (exc.headers.get("Location") or "?")[:100]
                return f"HTTP {exc.code} redirect to {where} (not followed)", False
            retry = exc.code >= 500 or exc.code == 429
            return f"HTTP {exc.code} {exc.reason}", retry
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return f"unreachable ({reason})", True
        except (http.client.HTTPException, ValueError) as exc:  # not HTTP, cut short, bad URL
            return f"bad reply ({type(exc).__name__}: {str(exc)[:100]})", True

    def snapshot(self) -> ReceiverStatus:
        with self._lock:
            return ReceiverStatus(**vars(self.status))


class Dispatcher:
    """The firing set, its groups and the senders; ``evaluate`` is called by one thread."""

    def __init__(self, config: AlertConfig, stop: threading.Event | None = None) -> None:
        self.config = config
        self._stop = stop or threading.Event()
        self.senders = [Sender(r, self._stop) for r in config.receivers]
        self.firing: dict[str, Firing] = {}
        self.silenced: set[str] = set()
        self._groups: dict[str, dict[tuple[tuple[str, str], ...], _Group]] = {
            r.name: {} for r in config.receivers
        }
        # per Alertmanager: alerts that ended, until a snapshot carrying their end is delivered
        self._ended: dict[str, dict[str, Firing]] = {r.name: {} for r in config.receivers}
        self.evaluated_at: datetime | None = None
        # reentrant: a sender's ``put`` under it may report a dropped notification at once,
        # and that report takes it again (a plain lock deadlocked the evaluation)
        self._lock = threading.RLock()

    def start(self) -> None:
        for s in self.senders:
            s.thread.start()

    def resume(self, firing: list[Firing], now: datetime | None = None) -> None:
        """Take up the alerts that fired when the last process stopped (``alert_history``),
        before the first evaluation: one still firing keeps its start (``startsAt``), one that
        ended meanwhile is resolved at the first evaluation, so Alertmanager gets its
        ``endsAt`` and a webhook its resolution (each group counts as told, as it was)."""
        now = now or utcnow()
        for f in firing:
            self.firing[f.alert.fingerprint] = f
        with self._lock:
            for groups in self._groups.values():
                for f in firing:
                    key = group_key(f.alert, self.config.route.group_by)
                    g = groups.setdefault(key, _Group(created=now, sent_at=now))
                    g.alerts[f.alert.fingerprint] = f
                    g.sent_state |= {(f.alert.fingerprint, "firing")}

    def evaluate(
        self, alerts: list[Alert], silences: list[Silence], now: datetime | None = None
    ) -> None:
        now = now or utcnow()
        current: dict[str, Alert] = {}
        for a in alerts:  # one alert per label set (two loss spikes are one LossSpike)
            current.setdefault(a.fingerprint, a)
        self.silenced = {
            fp for fp, a in current.items() if any(s.matches(a, now) for s in silences)
        }
        resolved, hushed = [], []
        for fp, f in list(self.firing.items()):
            if fp not in current or fp in self.silenced:
                f.ends_at = now
                (hushed if fp in current else resolved).append(f)
                del self.firing[fp]
        for fp, a in current.items():
            if fp in self.silenced:
                continue
            if fp in self.firing:
                self.firing[fp].alert = a  # the words may change while it fires
            else:
                self.firing[fp] = Firing(a, now)
        # endsAt ahead of now: if Factory Floor stops, Alertmanager resolves by itself; at
        # least 5 min, so a slow retry never lands after the hold (firing/resolved flapping)
        hold = timedelta(seconds=max(4 * self.config.evaluate_every_s, HOLD_MIN_S))
        for sender in self.senders:
            with self._lock:  # the senders' acknowledgements change the groups and ends too
                if sender.receiver.kind == "alertmanager":
                    self._alertmanager(sender, resolved + hushed, now, hold)
                else:
                    self._webhook(sender, resolved, hushed, now, hold)
        self.evaluated_at = now

    def _alertmanager(
        self, sender: Sender, ends: list[Firing], now: datetime, hold: timedelta
    ) -> None:
        """The snapshot for one Alertmanager: the alerts firing, and those that ended
        (resolved, or silenced: else Alertmanager would keep paging them) until a snapshot
        carrying their end was delivered. Each snapshot supersedes the last one still queued,
        so an end carried only once was lost when the next came before the receiver took it
        (Alertmanager then paged it until the ``endsAt`` hold ran out)."""
        ended = self._ended[sender.receiver.name]
        ended.update((f.alert.fingerprint, f) for f in ends)
        for fp in self.firing:  # firing again: its new episode is in the snapshot
            ended.pop(fp, None)
        carried = dict(ended)
        docs = [f.doc(self.config.external_url, now, hold)
                for f in [*self.firing.values(), *carried.values()]]  # fmt: skip
        if not docs:
            return

        def done(delivered: bool) -> None:
            if not delivered:  # carried again by the next snapshot
                return
            with self._lock:
                for fp, f in carried.items():
                    if ended.get(fp) is f:  # Alertmanager has its end
                        del ended[fp]

        sender.put("/api/v2/alerts", json.dumps(docs).encode(), latest_only=True, done=done)

    def _webhook(
        self,
        sender: Sender,
        resolved: list[Firing],
        hushed: list[Firing],
        now: datetime,
        hold: timedelta,
    ) -> None:
        route = self.config.route
        groups = self._groups[sender.receiver.name]
        for f in hushed:  # silenced: the webhook hears nothing more of it, not "resolved"
            g = groups.get(group_key(f.alert, route.group_by))
            if g is not None:
                g.alerts.pop(f.alert.fingerprint, None)
                g.sent_state = frozenset(x for x in g.sent_state if x[0] != f.alert.fingerprint)
        for fp, f in self.firing.items():
            key = group_key(f.alert, route.group_by)
            groups.setdefault(key, _Group(created=now)).alerts[fp] = f
        for f in resolved:
            g = groups.get(group_key(f.alert, route.group_by))
            if g is not None and f.alert.fingerprint in g.alerts:
                g.alerts[f.alert.fingerprint] = f
        for key, g in list(groups.items()):
            state = frozenset(
                (fp, "resolved" if f.ends_at else "firing") for fp, f in g.alerts.items()
            )
            if g.sent_at is None:
                due = (now - g.created).total_seconds() >= route.group_wait_s
                if all(f.ends_at for f in g.alerts.values()):
                    del groups[key]  # resolved before anyone was told: nothing to say
                    continue
            elif state != g.sent_state:
                due = (now - g.sent_at).total_seconds() >= route.group_interval_s
            else:
                due = (now - g.sent_at).total_seconds() >= route.repeat_interval_s
            if not due:
                continue
            told = {fp for fp, f in g.alerts.items() if f.ends_at}
            g.sent_at, g.sent_state = now, state
            body = self._body(sender.receiver, key, g, now, hold)
            sender.put("", body, done=self._acknowledge(groups, key, g, told))

    def _acknowledge(self, groups: dict[Any, _Group], key: Any, g: _Group, told: set[str]) -> Done:
        """What happens once a group's notification was delivered or not: resolved alerts it
        carried are forgotten only once the receiver has them; a notification not delivered
        leaves the group changed, so it goes again after the group interval."""

        def done(delivered: bool) -> None:
            with self._lock:
                if not delivered:
                    g.sent_state = frozenset()
                    return
                for fp in told:
                    f = g.alerts.get(fp)
                    if f is not None and f.ends_at is not None:  # not firing again since
                        del g.alerts[fp]
                g.sent_state = frozenset(x for x in g.sent_state if x[0] not in told)
                if not g.alerts and groups.get(key) is g:
                    del groups[key]

        return done

    def _body(
        self, receiver: Receiver, key: Any, g: _Group, now: datetime, hold: timedelta
    ) -> bytes:
        docs = [f.doc(self.config.external_url, now, hold) for f in g.alerts.values()]
        labels = [d["labels"] for d in docs]
        common = {k: v for k, v in labels[0].items() if all(lb.get(k) == v for lb in labels)}
        return json.dumps(
            {
                "version": "4",
                "receiver": receiver.name,
                "status": "firing" if any(d["status"] == "firing" for d in docs) else "resolved",
                "groupKey": json.dumps(dict(key)),
                "groupLabels": dict(key),
                "commonLabels": common,
                "externalURL": self.config.external_url,
                "alerts": docs,
            }
        ).encode()

    def status(self) -> list[ReceiverStatus]:
        return [s.snapshot() for s in self.senders]


class AlertLoop(threading.Thread):
    """Evaluates the store's alerts every ``config.evaluate_every_s`` in the owning process,
    and at once (within ``WAKE_S``) when an interruption or a hang was derived: a culprit named
    while the job is still tearing down waits for no timer (#58). Hands them to the
    dispatcher; an evaluation that fails is logged and tried again at the next one (delivery
    keeps its own threads)."""

    WAKE_S = 0.5  # how often the derivations' version is looked at (a dict lookup)
    WATCHED = ("interruptions", "hangs")
    PRUNE_EVERY_S = 3600.0  # old resolved alerts leave the history at most this late

    def __init__(self, store: Any, dispatcher: Dispatcher, stop: threading.Event) -> None:
        super().__init__(name="alerts", daemon=True)
        # not ``_stop``: that is Thread's own method, which ``join`` calls (shadowed, the
        # serving process's shutdown died in join and never closed its store)
        self.store, self.dispatcher, self._halt = store, dispatcher, stop
        self.error: str | None = None
        self._prune_due = 0.0  # monotonic: the first evaluation prunes, then hourly

    def _resume(self) -> None:
        """The alerts the store says fired when the last process stopped (``alert_history``)."""
        from telemetry.alert_history import open_episodes

        try:
            episodes = open_episodes(self.store)
        except Exception:  # noqa: BLE001 (no history to take up: delivery starts afresh)
            log.exception("reading the alert history failed")
            return
        self.dispatcher.resume([Firing(e.alert, e.first_seen) for e in episodes])

    def _evaluate(self) -> None:
        from telemetry.alert_history import prune, record
        from telemetry.alerting import active_silences, store_alerts

        try:
            found = store_alerts(self.store, rules=self.dispatcher.config.rules)
            now = utcnow()
            self.dispatcher.evaluate(found, active_silences(self.store), now)
            if not self.store.read_only:  # a read-only store keeps the history it has
                record(self.store, found, now)
                if time.monotonic() >= self._prune_due:
                    prune(self.store, self.dispatcher.config.history_days, now)
                    self._prune_due = time.monotonic() + self.PRUNE_EVERY_S
            self.error = None
        except Exception as exc:  # noqa: BLE001 (a bad evaluation must not end delivery)
            if self.error is None:
                log.exception("alert evaluation failed")
            self.error = f"{type(exc).__name__}: {exc}"[:300]

    def run(self) -> None:
        self._resume()
        self.dispatcher.start()
        every = self.dispatcher.config.evaluate_every_s
        while True:
            seen, due = self.store.tables_version(*self.WATCHED), time.monotonic() + every
            self._evaluate()
            while time.monotonic() < due:
                if self._halt.wait(self.WAKE_S):
                    return
                if self.store.tables_version(*self.WATCHED) != seen:
                    break
            if self._halt.is_set():
                return
