"""Alerts that reach people (issue 17, part 1), against Debian's real Alertmanager and a local
webhook. What a user would notice: an alert that never arrives or never resolves, sixteen
pages for one bad node, an unsigned or wrongly signed webhook, a silenced alert that still
pages, a dead receiver that stalls the server or goes unmentioned, a wrong alerts file that
starts silently."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.alerting import (
    Alert,
    AlertConfig,
    Receiver,
    Route,
    Silence,
    active_silences,
    add_silence,
    load_config,
    store_alerts,
)
from telemetry.errors import FactoryFloorError
from telemetry.notify import Dispatcher, utcnow, verify_signature
from telemetry.store import Store
from tests.alert_fixture import Alertmanager, Hook, wait_idle
from tests.conftest import cli, free_port, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

SECRET = b"a-secret-of-32-characters-000000"



def _hot(host: str) -> Alert:
    return Alert({"alertname": "GpuHot", "severity": "warning", "host": host},
                 f"{host} ≥ 85 °C", "GPU 3 at 88 °C")  # fmt: skip


def _config(*receivers: Receiver, **route: float) -> AlertConfig:
    r = Route(group_by=("alertname",), group_wait_s=route.get("wait", 0.0),
              group_interval_s=route.get("interval", 60.0),
              repeat_interval_s=route.get("repeat", 3600.0))  # fmt: skip
    return AlertConfig(receivers, r, external_url="http://ff.example:8050", evaluate_every_s=1)


def test_an_alert_goes_through_alertmanager_and_resolves(
    alertmanager: Alertmanager, hook: Hook
) -> None:
    d = Dispatcher(_config(Receiver("oncall", "alertmanager", alertmanager.url)))
    d.start()
    alert = Alert({"alertname": "XidSeen", "severity": "warning", "xid": "79"},
                  "XID 79 seen", "1× in the last 24 h on h100-0004")  # fmt: skip
    d.evaluate([alert], [])
    assert wait_idle(d)
    (held,) = alertmanager.alerts()  # back out of Alertmanager's API
    assert held["labels"] == alert.labels
    assert held["annotations"] == {"summary": "XID 79 seen",
                                   "description": "1× in the last 24 h on h100-0004"}  # fmt: skip
    assert held["generatorURL"] == "http://ff.example:8050/failures#range=6h"
    assert held["status"]["state"] == "active"
    (note,) = hook.wait_for(1, "/am")  # and on to Alertmanager's own receiver
    assert note["status"] == "firing" and note["alerts"][0]["labels"]["xid"] == "79"
    d.evaluate([], [])  # it stopped firing
    assert wait_idle(d)
    notes = hook.wait_for(2, "/am")
    assert notes[-1]["status"] == "resolved"
    assert alertmanager.alerts() == []
    assert d.status()[0].sent == 2 and d.status()[0].last_error is None


def test_a_webhook_gets_one_signed_notification_per_group(hook: Hook) -> None:
    rx = Receiver("chatops", "webhook", hook.url + "/hook", secret=SECRET)
    d = Dispatcher(_config(rx, wait=0, interval=60, repeat=3600))
    d.start()
    t0 = utcnow()
    sixteen = [_hot(f"h100-{i:04d}") for i in range(16)]
    d.evaluate(sixteen, [], t0)
    assert wait_idle(d)
    (note,) = hook.wait_for(1)
    assert note["status"] == "firing" and len(note["alerts"]) == 16  # one page, not sixteen
    assert note["groupLabels"] == {"alertname": "GpuHot"}
    assert note["commonLabels"] == {"alertname": "GpuHot", "severity": "warning"}
    _, headers, body = hook.received[0]
    stamp = headers["x-factoryfloor-timestamp"]
    assert abs(int(stamp) - time.time()) < 60
    want = "sha256=" + hmac.new(SECRET, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers["x-factoryfloor-signature"] == want
    assert verify_signature(SECRET, stamp, body, want)
    # the same notification replayed ten minutes later, or with another body, is refused
    assert not verify_signature(SECRET, stamp, body, want, now_s=int(stamp) + 600)
    assert not verify_signature(SECRET, stamp, body.replace(b"firing", b"resolved"), want)
    assert not verify_signature(SECRET, str(int(stamp) + 1), body, want)
    # unchanged: quiet until the repeat interval, then once more
    d.evaluate(sixteen, [], t0 + timedelta(minutes=30))
    assert wait_idle(d) and len(hook.bodies()) == 1
    d.evaluate(sixteen, [], t0 + timedelta(hours=1, minutes=1))
    assert wait_idle(d) and len(hook.wait_for(2)) == 2
    # one resolves: told at the next group interval, as resolved, then forgotten
    d.evaluate(sixteen[1:], [], t0 + timedelta(hours=1, minutes=1, seconds=30))
    assert wait_idle(d) and len(hook.bodies()) == 2  # within the group interval
    d.evaluate(sixteen[1:], [], t0 + timedelta(hours=1, minutes=2, seconds=10))
    assert wait_idle(d)
    third = hook.wait_for(3)[-1]
    states = {a["labels"]["host"]: a["status"] for a in third["alerts"]}
    assert states["h100-0000"] == "resolved" and list(states.values()).count("firing") == 15
    d.evaluate(sixteen[1:], [], t0 + timedelta(hours=1, minutes=4))
    assert wait_idle(d) and len(hook.bodies()) == 3


def test_a_dead_receiver_is_retried_and_shown_and_blocks_nothing(hook: Hook) -> None:
    dead = Receiver("dead", "webhook", f"http://127.0.0.1:{free_port()}", timeout_s=1)
    flaky = Receiver("flaky", "webhook", hook.url + "/flaky")
    hook.fail = 2  # two 500s, then it takes the notification
    d = Dispatcher(_config(dead, flaky))
    d.start()
    t = time.perf_counter()
    d.evaluate([_hot("h100-0001")], [])
    # the evaluation hands over and returns: delivering in line would wait out at least the
    # first 1-s backoff (the flaky receiver refuses twice), so 1 s is not a speed bound
    assert time.perf_counter() - t < 1.0
    (note,) = hook.wait_for(1, "/flaky", timeout=15)
    assert note["alerts"][0]["labels"]["host"] == "h100-0001" and hook.refused == 2
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and d.status()[0].attempt < 3:
        time.sleep(0.1)
    dead_status, flaky_status = d.status()
    assert dead_status.attempt >= 3 and dead_status.sent == 0
    assert dead_status.last_error is not None and "unreachable" in dead_status.last_error
    assert flaky_status.sent == 1 and flaky_status.last_error == "HTTP 500 Internal Server Error"


def test_a_silence_keeps_an_alert_from_every_receiver(
    dev_store: Path, tmp_path: Path, hook: Hook, alertmanager: Alertmanager
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    with Store(str(path)) as s:
        found = store_alerts(s)  # the dev store's end has alerts (XIDs in its last day)
        assert found and any(a.labels["alertname"] == "XidSeen" for a in found)
        add_silence(s, {"alertname": "XidSeen"}, timedelta(hours=2), "oncall", "known bad node")
        silences = active_silences(s)
        with pytest.raises(ValueError, match="30 days"):
            add_silence(s, {"alertname": "GpuHot"}, timedelta(days=31), "x", "")
    assert [x.created_by for x in silences] == ["oncall"]
    rx = (Receiver("am", "alertmanager", alertmanager.url), Receiver("hook", "webhook", hook.url))
    d = Dispatcher(_config(*rx))
    d.start()
    d.evaluate(found, silences)
    assert wait_idle(d)
    held = {a["labels"]["alertname"] for a in alertmanager.alerts()}
    assert "XidSeen" not in held and held == {a.labels["alertname"] for a in found} - {"XidSeen"}
    sent = {a["labels"]["alertname"] for b in hook.wait_for(1, "/") for a in b["alerts"]}
    assert "XidSeen" not in sent
    assert len(d.silenced) == sum(a.labels["alertname"] == "XidSeen" for a in found)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("receiver = 3", "receiver must be a list of [[receiver]] tables"),
        ('[[receiver]]\ntype = "pager"\nurl = "http://x"', "type must be one of"),
        ('[[receiver]]\ntype = "webhook"\nurl = "ftp://x"', "is not an http(s) URL"),
        ('[[receiver]]\ntype = "webhook"\nurl = "http://x"\nsecret_file = "/nonexistent"',
         "cannot read secret_file"),
        ('[route]\ngroup_wait = "soon"\n[[receiver]]\ntype = "webhook"\nurl = "http://x"',
         "'soon' is not a duration"),
        ("evaluate_every = [", "not TOML"),
        ("", "no [[receiver]] configured"),
        ('colour = "red"', "unknown key(s) colour"),
        ('[[receiver]]\ntype = "webhook"\nurl = "http://x"\nsecret = "s3cr3t"',
         "unknown key(s) secret"),
        ('[route]\nwait = "1s"\n[[receiver]]\ntype = "webhook"\nurl = "http://x"',
         "[route]: unknown key(s) wait"),
        ('evaluate_every = "infs"\n[[receiver]]\ntype = "webhook"\nurl = "http://x"',
         "is not a duration of at most a year"),
        ('[[receiver]]\ntype = "webhook"\nurl = "http://x:abc/hook"', "is not an http(s) URL"),
        ('[rules]\ngoodput_below = 85\n[[receiver]]\ntype = "webhook"\nurl = "http://x"',
         "goodput_below must be a fraction between 0 and 1"),
        ('[rules]\ngoodput_window = "5m"\n[[receiver]]\ntype = "webhook"\nurl = "http://x"',
         "goodput_window must be at least 1h"),
        ('[rules]\ngoodput = 0.9\n[[receiver]]\ntype = "webhook"\nurl = "http://x"',
         "[rules]: unknown key(s) goodput"),
    ],
)  # fmt: skip
def test_a_wrong_alerts_file_is_one_clear_line(tmp_path: Path, text: str, says: str) -> None:
    f = tmp_path / "alerts.toml"
    f.write_text(text)
    with pytest.raises(FactoryFloorError, match=".*".join(map(_esc, says.split("*")))):
        load_config(str(f))
    r = cli("serve", "--store", str(tmp_path / "none.duckdb"), "--accept-ingest",
            "--port", str(free_port()), "--alerts", str(f))  # fmt: skip
    assert r.returncode != 0 and says.split("*")[0] in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _esc(s: str) -> str:
    import re

    return re.escape(s)


def test_serve_delivers_the_overview_alerts_and_takes_silences(
    dev_store: Path, tmp_path: Path, alertmanager: Alertmanager
) -> None:
    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    token = tmp_path / "op"
    token.write_text("operator-token-0123456789\n")
    conf = tmp_path / "alerts.toml"
    conf.write_text(f'evaluate_every = "1s"\n[[receiver]]\nname = "oncall"\n'
                    f'type = "alertmanager"\nurl = "{alertmanager.url}"\n')  # fmt: skip
    args = [
        "serve",
        "--store",
        str(path),
        "--alerts",
        str(conf),
        "--operator-token-file",
        str(token),
    ]
    server = start_server(args, tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not alertmanager.alerts():
            time.sleep(0.2)
        held = alertmanager.alerts()
        names = {a["labels"]["alertname"] for a in held}
        assert "XidSeen" in names, names
        xid = next(a for a in held if a["labels"]["alertname"] == "XidSeen")
        assert xid["generatorURL"].startswith(server.url + "/failures")
        body = json.dumps({"matchers": {"alertname": "XidSeen"}, "duration": "1h",
                           "by": "oncall", "comment": "known"}).encode()  # fmt: skip
        refused = urllib.request.Request(server.url + "/api/v1/alerts/silences", body,
                                         {"Content-Type": "application/json"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(refused, timeout=10)
        assert err.value.code == 403
        ok = urllib.request.Request(
            server.url + "/api/v1/alerts/silences", body,
            {"Content-Type": "application/json", "X-Operator-Token": "operator-token-0123456789"},
        )  # fmt: skip
        with urllib.request.urlopen(ok, timeout=10) as r:
            assert json.loads(r.read())["silence"]["matchers"] == {"alertname": "XidSeen"}
        # Factory Floor tells Alertmanager the silenced alerts ended
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "XidSeen" in {
            a["labels"]["alertname"] for a in alertmanager.alerts()
        }:
            time.sleep(0.2)
        assert "XidSeen" not in {a["labels"]["alertname"] for a in alertmanager.alerts()}
    finally:
        server.stop()
    said = (tmp_path / "serve.log").read_text()
    assert "alerts: evaluated every 1 s, delivered to oncall (alertmanager)" in said
    assert "Traceback" not in said, said  # the shutdown joins the alert loop and closes the store
    assert server.proc.returncode == 0, said


def test_an_alert_links_back_to_the_view_that_shows_it() -> None:
    from telemetry.alerting import generator_url

    stalled = Alert({"alertname": "RunStalled", "severity": "critical", "run": "llama-7b"}, "", "")
    ckpt = Alert({"alertname": "CheckpointOverdue", "severity": "warning", "tier": "pfs"}, "", "")
    base = "http://ff.example:8050"
    assert generator_url(base, stalled) == f"{base}/training#run=llama-7b&range=6h"
    assert generator_url(base, ckpt) == f"{base}/checkpoints#range=6h"
    assert generator_url(base, _hot("h100-0001")) == f"{base}/gpus#range=6h"


def test_a_receiver_that_does_not_speak_http_does_not_stop_its_sender(tmp_path: Path) -> None:
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def babble() -> None:  # an SSH daemon where the webhook was expected
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:  # take the request first: closing on an unread POST resets the connection
                conn.recv(1 << 16)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
                time.sleep(0.2)
            except OSError:
                pass
            conn.close()

    threading.Thread(target=babble, daemon=True).start()
    d = Dispatcher(_config(Receiver("ssh", "webhook", f"http://127.0.0.1:{port}", timeout_s=1)))
    d.start()
    try:
        d.evaluate([_hot("h100-0001")], [])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and d.status()[0].attempt < 2:
            time.sleep(0.1)
        st = d.status()[0]
        assert st.last_error is not None and st.last_error.startswith("bad reply"), st
        assert d.senders[0].thread.is_alive() and st.attempt >= 2  # retrying, not dead
    finally:
        srv.close()


def _one_hot_delivered(hook: Hook, interval: float) -> tuple[Dispatcher, datetime, Alert]:
    """A webhook dispatcher that has delivered one hot-GPU alert (at t0)."""
    d = Dispatcher(_config(Receiver("chatops", "webhook", hook.url), wait=0, interval=interval))
    d.start()
    t0 = utcnow()
    hot = _hot("h100-0001")
    d.evaluate([hot], [], t0)
    assert wait_idle(d) and len(hook.wait_for(1)) == 1
    return d, t0, hot


def test_a_silenced_alert_is_not_reported_resolved_to_a_webhook(hook: Hook) -> None:
    d, t0, hot = _one_hot_delivered(hook, interval=0)
    hush = Silence({"alertname": "GpuHot"}, t0 + timedelta(hours=1), "oncall", "")
    for minute in (1, 2, 3):
        d.evaluate([hot], [hush], t0 + timedelta(minutes=minute))
    assert wait_idle(d)
    assert len(hook.bodies()) == 1 and len(d.silenced) == 1  # no "resolved", no repeat


def test_a_silence_longer_than_a_year_is_refused(dev_store: Path, tmp_path: Path) -> None:
    from telemetry.label_api import apply_silence

    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    with Store(str(path)) as s:
        for duration in ("1e20d", "infs", "40d", "-1h"):
            status, reply = apply_silence(s, {"matchers": {"alertname": "X"}, "duration": duration})
            assert status == 400, (duration, reply)
        assert s.scalar("SELECT count(*) FROM alert_silences") == 0


def test_a_resolution_the_webhook_did_not_take_is_sent_again(
    hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    from telemetry import notify

    monkeypatch.setattr(notify, "MAX_ATTEMPTS", 2)  # give up after 1 s of backoff
    d, t0, hot = _one_hot_delivered(hook, interval=60)
    hook.fail = 2  # the receiver is down while the alert resolves: both tries fail
    d.evaluate([], [], t0 + timedelta(minutes=2))
    assert wait_idle(d) and hook.refused == 2 and len(hook.bodies()) == 1
    d.evaluate([], [], t0 + timedelta(minutes=2, seconds=30))  # within the group interval
    assert wait_idle(d) and len(hook.bodies()) == 1
    d.evaluate([], [], t0 + timedelta(minutes=3, seconds=5))  # a group interval on: again
    assert wait_idle(d)
    (last,) = hook.wait_for(2)[1:]
    assert last["status"] == "resolved" and last["alerts"][0]["labels"]["host"] == "h100-0001"
    d.evaluate([], [], t0 + timedelta(minutes=10))  # delivered: forgotten, nothing more
    assert wait_idle(d) and len(hook.bodies()) == 2


def test_a_pipeline_that_stopped_is_an_alert_of_its_own(store: Store) -> None:
    from telemetry.queries import data_extent

    extent = data_extent(store)
    assert extent is not None
    fresh = store_alerts(store, now=extent.end + timedelta(minutes=1))
    assert "DataStale" not in {a.labels["alertname"] for a in fresh}
    stale = store_alerts(store, now=extent.end + timedelta(hours=3))
    first = stale[0]
    assert first.labels == {"alertname": "DataStale", "severity": "critical"}
    assert first.summary == "No new data for 3.0 h" and "is the ingest running" in first.description
    assert [a.labels for a in stale[1:]] == [a.labels for a in fresh]  # the rest unchanged


def test_a_silence_can_be_ended_early(dev_store: Path, tmp_path: Path) -> None:
    from telemetry.label_api import apply_end_silence, apply_silence

    path = tmp_path / "s.duckdb"
    shutil.copy(dev_store, path)
    with Store(str(path)) as s:
        status, reply = apply_silence(s, {"matchers": {"alertname": "XidSeen"}, "duration": "4h"})
        assert status == 200
        sid = reply["silence"]["id"]
        assert [x.id for x in active_silences(s)] == [sid]
        assert apply_end_silence(s, {"id": sid}) == (200, {"ended": sid})
        assert active_silences(s) == []
        assert apply_end_silence(s, {"id": sid})[0] == 404  # already over
        assert apply_end_silence(s, {"id": 7})[0] == 400
        assert apply_end_silence(s, ["x"])[0] == 400


def test_every_live_run_is_judged_not_only_the_newest(day: Path) -> None:
    # Two jobs train on one cluster: the older one stopped logging steps 40 minutes before
    # the newest data and has not ended. Its "not training" is news, with its own run label;
    # before, only the newest run was judged and this went unsaid.
    from telemetry.queries import data_extent

    with Store(str(day)) as s:
        extent = data_extent(s)
        assert extent is not None
        end = extent.end
        with s.transaction() as con:
            for run, start, last in (
                ("older-job", end - timedelta(hours=5), end - timedelta(minutes=40)),
                ("newer-job", end - timedelta(hours=4), end),
            ):
                con.execute("INSERT INTO runs (run_id, name, start_ts) VALUES (?, ?, ?)",
                            [run, run, start])  # fmt: skip
                con.executemany(
                    "INSERT INTO train_metrics (run_id, ts, step, loss, attempt) "
                    "VALUES (?, ?, ?, 2.0, 1)",
                    [[run, last - timedelta(minutes=2 * k), 1000 - k] for k in range(60)],
                )
        alerts = store_alerts(s, now=end)
    found = {(a.labels["alertname"], a.labels.get("run")) for a in alerts}
    assert ("JobNotTraining", "older-job") in found
    assert ("JobNotTraining", "newer-job") not in found
    assert all("job" not in a.labels for a in alerts)  # no Slurm job runs either
    # the fleet's alerts are listed once, without a run: the day's four XIDs
    xids = [a.labels for a in alerts if a.labels["alertname"] == "XidSeen"]
    assert sorted(x["xid"] for x in xids) == ["140", "143", "46", "95"]
    assert all("run" not in x for x in xids)


def test_a_run_silent_past_the_view_is_judged_while_its_slurm_job_runs(day: Path) -> None:
    # A job hung 8 hours ago: its last step is before the live view's 6 hours, but Slurm's
    # last poll still finds it RUNNING on its GPUs. It is judged, and its alert names the run
    # and the job; a run whose job completed as long ago is not news.
    from telemetry.queries import data_extent

    with Store(str(day)) as s:
        extent = data_extent(s)
        assert extent is not None
        end = extent.end
        with s.transaction() as con:
            for k, (run, state) in enumerate((("hung-run", "RUNNING"), ("done-run", "COMPLETED"))):
                last = end - timedelta(hours=8)
                con.execute("INSERT INTO runs (run_id, name, start_ts) VALUES (?, ?, ?)",
                            [run, run, last - timedelta(hours=2)])  # fmt: skip
                con.executemany(
                    "INSERT INTO train_metrics (run_id, ts, step, loss, attempt) "
                    "VALUES (?, ?, ?, 2.0, 1)",
                    [[run, last - timedelta(minutes=2 * i), 500 - i] for i in range(30)],
                )
                con.execute(
                    "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, name, state, "
                    "start_ts, end_ts, run_id, polled_ts) VALUES ('c', ?, 0, ?, ?, ?, ?, ?, ?, ?)",
                    [4200 + k, str(4200 + k), run, state, last - timedelta(hours=2),
                     None if state == "RUNNING" else last, run, end - timedelta(minutes=1)],
                )
        alerts = store_alerts(s, now=end)
    judged = {a.labels.get("run"): a.labels for a in alerts if "run" in a.labels}
    assert "done-run" not in judged
    hung = [a.labels for a in alerts if a.labels.get("run") == "hung-run"]
    assert {x["alertname"] for x in hung} >= {"JobNotTraining"}
    assert all(x["job"] == "4200" for x in hung)
