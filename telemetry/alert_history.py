"""Alerts with a history (issue 58, 5): each delivered alert's first-seen and resolved time and
who acknowledged it when, kept in the store (``alert_history``) so that a restart of ``serve``
neither forgets what fired nor starts it again.

One row per firing episode of an alert (its labels' fingerprint): opened when the serving
process's evaluation first finds it (silenced or not: a silence hides an alert from receivers,
it does not end it), closed (``resolved_at``) at the first evaluation that no longer does. An
operator acknowledges an open episode with the operator token: who and when, once. Resolved
episodes are kept ``history_days`` (the alerts file; 90 by default), then pruned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.alerting import Alert
from telemetry.store import Store

TABLE = "alert_history"
_COLUMNS = "fingerprint, labels, summary, description, first_seen, resolved_at, acked_by, acked_at"


@dataclass(frozen=True)
class Episode:
    fingerprint: str
    labels: dict[str, str]
    summary: str
    description: str
    first_seen: datetime
    resolved_at: datetime | None = None
    acked_by: str | None = None
    acked_at: datetime | None = None

    @property
    def alert(self) -> Alert:
        return Alert(self.labels, self.summary, self.description)


def _episode(row: tuple[Any, ...]) -> Episode:
    fp, labels, summary, desc, first, resolved, by, at = row
    return Episode(fp, json.loads(labels), summary or "", desc or "", _dt(first), _dt(resolved),
                   by, _dt(at))  # fmt: skip


def _dt(value: Any) -> Any:
    return None if value is None or pd.isna(value) else pd.Timestamp(value).to_pydatetime()


def kept(store: Store) -> bool:
    """Whether the store keeps alert history (a store no ``serve --alerts`` wrote may not have
    the table; it is served read-only as it is)."""
    return store.has_table(TABLE)


def open_episodes(store: Store) -> list[Episode]:
    """The alerts firing at the last evaluation, oldest first."""
    if not kept(store):
        return []
    rows = store.rows(
        f"SELECT {_COLUMNS} FROM {TABLE} WHERE resolved_at IS NULL ORDER BY first_seen", []
    )
    return [_episode(r) for r in rows]


def record(store: Store, alerts: list[Alert], now: datetime) -> tuple[int, int]:
    """Open an episode for each alert not firing at the last evaluation and close each open
    one not in ``alerts``, at ``now``; (opened, closed). Nothing is written when nothing
    changed (every evaluation writing would recompute every cached page read)."""
    current = {a.fingerprint: a for a in alerts}
    was = {e.fingerprint for e in open_episodes(store)}
    new = [a for fp, a in current.items() if fp not in was]
    gone = sorted(was - set(current))
    if not new and not gone:
        return 0, 0
    with store.transaction([TABLE]) as con:
        if gone:
            con.execute(
                f"UPDATE {TABLE} SET resolved_at = ? WHERE resolved_at IS NULL "
                "AND list_contains(?, fingerprint)",
                [now, gone],
            )
        if new:
            con.executemany(
                f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL, NULL, NULL)",
                [[a.fingerprint, json.dumps(a.labels), a.summary, a.description, now] for a in new],
            )
    return len(new), len(gone)


def prune(store: Store, keep_days: float, now: datetime) -> int:
    """Delete the episodes that resolved more than ``keep_days`` before ``now`` (a firing
    one is never pruned, however old); how many. Nothing is written when none is due, so
    the cached page reads are not recomputed for nothing."""
    if not kept(store):
        return 0
    cutoff = now - timedelta(days=keep_days)
    where = f"FROM {TABLE} WHERE resolved_at IS NOT NULL AND resolved_at < ?"
    (due,) = store.rows(f"SELECT count(*) {where}", [cutoff])[0]
    if due:
        with store.transaction([TABLE]) as con:
            con.execute(f"DELETE {where}", [cutoff])
    return int(due)


class AckError(ValueError):
    """Why an acknowledgement was refused, with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def acknowledge(store: Store, fingerprint: str, by: str, now: datetime | None = None) -> Episode:
    """Record that ``by`` acknowledged the firing alert ``fingerprint`` (now); AckError 404
    when no alert with that fingerprint fires, 409 when someone already did (the first
    acknowledgement stands: who took it is not overwritten)."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    with store.transaction([TABLE]) as con:
        row = con.execute(
            f"SELECT acked_by, acked_at FROM {TABLE} WHERE fingerprint = ? AND resolved_at IS NULL",
            [fingerprint],
        ).fetchone()
        if row is None:
            raise AckError(404, "no firing alert has that fingerprint")
        if row[0] is not None:
            raise AckError(409, f"already acknowledged by {row[0]} at {row[1]:%Y-%m-%d %H:%M} UTC")
        con.execute(
            f"UPDATE {TABLE} SET acked_by = ?, acked_at = ? WHERE fingerprint = ? "
            "AND resolved_at IS NULL",
            [by, now, fingerprint],
        )
        got = con.execute(
            f"SELECT {_COLUMNS} FROM {TABLE} WHERE fingerprint = ? AND resolved_at IS NULL",
            [fingerprint],
        ).fetchone()
    return _episode(got)


def resolved(
    store: Store, run_id: str | None, start: datetime, end: datetime | None
) -> list[Episode]:
    """The alerts that resolved from ``start`` to ``end`` (None: until now), newest first: the
    fleet's and ``run_id``'s own (another run's are its view's)."""
    if not kept(store):
        return []
    rows = store.rows(
        f"""SELECT {_COLUMNS} FROM {TABLE}
            WHERE resolved_at >= ? AND (?::TIMESTAMP IS NULL OR resolved_at <= ?)
              AND (json_extract_string(labels, '$.run') IS NULL
                   OR json_extract_string(labels, '$.run') = ?)
            ORDER BY resolved_at DESC LIMIT 50""",
        [start, end, end, run_id],
    )
    return [_episode(r) for r in rows]


def for_view(episodes: list[Episode], run_id: str | None) -> list[Episode]:
    """The episodes a run's view shows: the fleet's and ``run_id``'s own."""
    return [e for e in episodes if e.labels.get("run") in (None, run_id)]


def frame(episodes: list[Episode]) -> pd.DataFrame:
    """Episodes as the Overview lists alerts (``severity``, ``alert``, ``detail``, ``key``:
    the alert's name) with ``first_seen``, ``resolved_at``, ``acked_by`` and ``acked_at``."""
    cols = ["severity", "alert", "detail", "key", "first_seen", "resolved_at", "acked_by",
            "acked_at", "fingerprint"]  # fmt: skip
    rows = [[e.labels.get("severity", ""), e.summary, e.description, e.labels["alertname"],
             e.first_seen, e.resolved_at, e.acked_by, e.acked_at, e.fingerprint]
            for e in episodes]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)
