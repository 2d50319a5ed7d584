"""Alerts with a history (issue 58, 5), against a real ``serve`` subprocess, Debian's real
Alertmanager and a local webhook: each alert's first-seen and resolved time kept in the store
(across a restart of ``serve``), an acknowledgement with the operator token (who and when), and
Alertmanager told ``endsAt`` when an alert resolves, also one that resolved while ``serve`` was
down. What a user would notice: an alert that Alertmanager keeps paging after it ended, a
restart that forgets when an alert began, an acknowledgement anyone can make or overwrite."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from telemetry.alerting import Alert, AlertConfig, Receiver
from telemetry.notify import Dispatcher
from tests.alert_fixture import Alertmanager, Gate, Hook, wait_idle
from tests.conftest import Server, start_server

pytestmark = pytest.mark.live  # real serve, Alertmanager and webhook: run one at a time

TOKEN = "operator-token-0123456789"


def _serve(path: Path, tmp: Path, am: Alertmanager, hook: Hook, n: int = 0) -> Server:
    """``serve`` evaluating every second, to Alertmanager and to the webhook at ``/hook``."""
    (tmp / "op").write_text(TOKEN + "\n")
    conf = tmp / "alerts.toml"
    conf.write_text(
        'evaluate_every = "1s"\n[route]\ngroup_by = ["alertname"]\ngroup_wait = "0s"\n'
        'group_interval = "1s"\n'
        f'[[receiver]]\nname = "oncall"\ntype = "alertmanager"\nurl = "{am.url}"\n'
        f'[[receiver]]\nname = "chatops"\ntype = "webhook"\nurl = "{hook.url}/hook"\n'
    )
    args = ["serve", "--store", str(path), "--alerts", str(conf), "--accept-ingest",
            "--operator-token-file", str(tmp / "op")]  # fmt: skip
    return start_server(args, tmp / f"serve-{n}.log")


def _until(what: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what.__doc__ or what}")


def _held(am: Alertmanager) -> dict[tuple[str, str], dict[str, Any]]:
    """Alertmanager's active alerts by (alertname, xid)."""
    return {(a["labels"]["alertname"], a["labels"].get("xid", "")): a for a in am.alerts()}


def _post(url: str, path: str, body: Any, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"} | ({"X-Operator-Token": token} if token else {})
    req = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _fingerprint(hook: Hook, xid: str) -> str:
    """Our fingerprint of ``XidSeen`` ``xid``, as the webhook's notifications carry it."""
    for note in hook.bodies("/hook"):
        for a in note["alerts"]:
            if a["labels"].get("xid") == xid:
                return str(a["fingerprint"])
    return ""


def _history(path: Path) -> list[tuple[Any, ...]]:
    """(alertname, xid, first_seen, resolved_at, acked_by, acked_at) of every kept episode."""
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(
            "SELECT json_extract_string(labels, '$.alertname'), "
            "coalesce(json_extract_string(labels, '$.xid'), ''), first_seen, resolved_at, "
            "acked_by, acked_at FROM alert_history ORDER BY 1, 2, 3"
        ).fetchall()


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def test_an_alert_is_acknowledged_resolves_and_alertmanager_gets_its_end(
    dev_store: Path, tmp_path: Path, alertmanager: Alertmanager, hook: Hook
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    began = _utcnow()
    server = _serve(path, tmp_path, alertmanager, hook)
    try:
        _until(lambda: ("XidSeen", "46") in _held(alertmanager) and _fingerprint(hook, "46"))
        assert ("DataStale", "") in _held(alertmanager)  # the dev store's data is old
        fp = _fingerprint(hook, "46")
        ack = {"fingerprint": fp, "by": "night shift"}
        assert _post(server.url, "/api/v1/alerts/ack", ack, token=None)[0] == 403
        assert _post(server.url, "/api/v1/alerts/ack", ack, token="wrong-token-000000")[0] == 403
        status, reply = _post(server.url, "/api/v1/alerts/ack", ack)
        assert status == 200, reply
        assert reply["ack"]["by"] == "night shift" and reply["ack"]["labels"]["xid"] == "46"
        status, reply = _post(server.url, "/api/v1/alerts/ack", {**ack, "by": "day shift"})
        assert status == 409 and "already acknowledged by night shift" in reply["error"]
        assert _post(server.url, "/api/v1/alerts/ack", {"fingerprint": "0" * 16})[0] == 404
        assert _post(server.url, "/api/v1/alerts/ack", {"fingerprint": 7})[0] == 400
        # fresh training data: the XIDs are no longer of the last 24 h and the data is new,
        # so both alerts resolve; Alertmanager is told their end, not left to time them out
        now = _utcnow()
        run = {"run": "fresh", "name": "fresh", "start_ts": (now - timedelta(minutes=2))
               .isoformat()}  # fmt: skip
        assert _post(server.url, "/api/v1/runs", run, token=None)[0] == 200
        steps = [{"run": "fresh", "ts": (now - timedelta(seconds=60 - 10 * k)).isoformat(),
                  "step": k, "loss": 2.0} for k in range(6)]  # fmt: skip
        assert _post(server.url, "/api/v1/metrics", steps, token=None)[0] == 200
        resolved_by = time.monotonic()
        _until(lambda: not {("XidSeen", "46"), ("DataStale", "")} & set(_held(alertmanager)))
        assert time.monotonic() - resolved_by < 15  # far sooner than the 5-minute hold
        _until(
            lambda: [
                a
                for n in hook.bodies("/am")
                for a in n["alerts"]  # Alertmanager's
                if a["status"] == "resolved" and a["labels"].get("xid") == "46"
            ]
        )
        # our webhook has the resolution too, with its end (not the hold ahead)
        told = _until(
            lambda: [
                a
                for n in hook.bodies("/hook")
                for a in n["alerts"]
                if a["fingerprint"] == fp and a["status"] == "resolved"
            ]
        )
        ends = datetime.fromisoformat(told[0]["endsAt"].rstrip("Z"))
        assert began < ends <= _utcnow()
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log.read_text()
    rows = {(n, x): (f, r, by, at) for n, x, f, r, by, at in _history(path)}
    first, resolved, by, at = rows[("XidSeen", "46")]
    assert began <= first < resolved <= _utcnow()
    assert by == "night shift" and first <= at <= resolved
    assert rows[("DataStale", "")][1] is not None  # resolved, with its time
    assert rows[("XidSeen", "95")][2] is None  # not acknowledged: none claimed


def test_a_restart_keeps_when_alerts_began_and_ends_what_resolved_meanwhile(
    dev_store: Path, tmp_path: Path, alertmanager: Alertmanager, hook: Hook
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    server = _serve(path, tmp_path, alertmanager, hook)
    try:
        held = _until(lambda: (h := _held(alertmanager)) and ("XidSeen", "46") in h and h)
        started = {k: a["startsAt"] for k, a in held.items()}
        _until(lambda: _fingerprint(hook, "46"))
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log.read_text()
    before = {(n, x): f for n, x, f, r, _, _ in _history(path) if r is None}
    assert ("XidSeen", "46") in before and ("DataStale", "") in before
    # while serve is down, XID 46's events go (an operator's cleanup): it is no longer firing
    with duckdb.connect(str(path)) as con:
        con.execute("DELETE FROM xid_events WHERE xid = 46")
    n_hook = len(hook.bodies("/hook"))
    server = _serve(path, tmp_path, alertmanager, hook, n=1)
    try:
        # Alertmanager hears at once that XID 46 ended (before, it kept paging it until the
        # endsAt of the last snapshot, 5 minutes on, since the new process knew nothing of it)
        _until(lambda: ("XidSeen", "46") not in _held(alertmanager), timeout=20)
        now_held = _held(alertmanager)
        assert ("XidSeen", "95") in now_held and ("DataStale", "") in now_held
        assert now_held[("XidSeen", "95")]["startsAt"] == started[("XidSeen", "95")]
        # the webhook, told of XID 46 before the restart, hears that it resolved
        fp = _fingerprint(hook, "46")
        _until(lambda: [a for n in hook.bodies("/hook")[n_hook:] for a in n["alerts"]
                        if a["fingerprint"] == fp and a["status"] == "resolved"])  # fmt: skip
        time.sleep(2)  # two more evaluations: nothing fires twice
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log.read_text()
    rows = _history(path)
    xid46 = [r for r in rows if r[:2] == ("XidSeen", "46")]
    assert len(xid46) == 1 and xid46[0][3] is not None  # one episode, resolved after restart
    for key, first in before.items():
        if key == ("XidSeen", "46"):
            continue
        episodes = [r for r in rows if r[:2] == key]
        assert len(episodes) == 1, episodes  # the same episode, not begun again
        assert episodes[0][2] == first and episodes[0][3] is None


def _xid(n: str) -> Alert:
    return Alert({"alertname": "XidSeen", "severity": "warning", "xid": n}, f"XID {n} seen", "")


def test_an_end_alertmanager_missed_is_sent_until_it_is_taken(
    alertmanager: Alertmanager, hook: Hook
) -> None:
    # Alertmanager cut off while XID 46 ends and XID 95 goes on firing: each evaluation's
    # snapshot supersedes the one still queued, so the end, carried once, was lost and
    # Alertmanager paged XID 46 until its endsAt hold (5 minutes) ran out
    gate = Gate(alertmanager.port)
    try:
        receiver = Receiver("oncall", "alertmanager", gate.url)
        d = Dispatcher(AlertConfig((receiver,), external_url="http://ff.example:8050",
                                   evaluate_every_s=1))  # fmt: skip
        d.start()
        d.evaluate([_xid("46"), _xid("95")], [])
        assert wait_idle(d)
        assert {("XidSeen", "46"), ("XidSeen", "95")} <= set(_held(alertmanager))
        gate.shut = True
        d.evaluate([_xid("46"), _xid("95")], [])  # in flight, retried with backoff
        _until(lambda: d.status()[0].last_error)
        d.evaluate([_xid("95")], [])  # XID 46 ends: queued behind it
        d.evaluate([_xid("95")], [])  # and superseded by the next snapshot
        gate.shut = False
        assert wait_idle(d, 60)
        _until(lambda: ("XidSeen", "46") not in _held(alertmanager), timeout=10)
        assert ("XidSeen", "95") in _held(alertmanager)
        d.evaluate([_xid("95")], [])  # taken: not carried any more
        assert wait_idle(d) and ("XidSeen", "46") not in _held(alertmanager)
    finally:
        gate.close()


def test_resolved_alerts_older_than_history_days_are_pruned_and_firing_ones_kept(
    dev_store: Path, tmp_path: Path, hook: Hook
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    now = _utcnow()
    labels = json.dumps({"alertname": "XidSeen", "severity": "warning", "xid": "79"})
    with duckdb.connect(str(path)) as con:  # two episodes of last month, resolved
        con.executemany(
            "INSERT INTO alert_history VALUES (?, ?, 'XID 79 seen', '', ?, ?, NULL, NULL)",
            [["old", labels, now - timedelta(days=45), now - timedelta(days=40)],
             ["recent", labels, now - timedelta(days=12), now - timedelta(days=10)]],
        )  # fmt: skip
    conf = tmp_path / "alerts.toml"
    conf.write_text(
        'evaluate_every = "1s"\nhistory_days = 30\n[route]\ngroup_wait = "0s"\n'
        f'[[receiver]]\nname = "chatops"\ntype = "webhook"\nurl = "{hook.url}/hook"\n'
    )
    server = start_server(["serve", "--store", str(path), "--alerts", str(conf)],
                          tmp_path / "serve.log")  # fmt: skip
    try:
        hook.wait_for(1, "/hook")  # an evaluation ran: the store's alerts fire
        time.sleep(2)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log.read_text()
    with duckdb.connect(str(path), read_only=True) as con:
        kept = dict(con.execute("SELECT fingerprint, resolved_at FROM alert_history").fetchall())
    assert "old" not in kept  # resolved 40 days ago, past the 30 kept
    assert "recent" in kept  # resolved 10 days ago
    firing = [fp for fp, resolved in kept.items() if resolved is None]
    assert firing  # what fires now is kept, however long it has fired


def test_history_days_out_of_range_is_one_clear_error(dev_store: Path, tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    conf = tmp_path / "alerts.toml"
    conf.write_text(
        'history_days = 0\n[[receiver]]\ntype = "webhook"\nurl = "http://127.0.0.1:9/h"\n'
    )
    p = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--store", str(path), "--alerts",
         str(conf)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "history_days must be a number of days from 1 to 36500" in err[0]
    assert path.read_bytes() == dev_store.read_bytes()  # refused before the store was touched
