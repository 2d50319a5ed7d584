"""The live benchmark's rig (``benchmarks/live_culprit.py``): ``factoryfloor serve`` following a
job's log directory, a kernel log, the flight-recorder dump directory and (when the tests'
Slurm runs) Slurm, with ``--alerts`` to a real local webhook and to Debian's real Alertmanager;
and the clock: from the moment the initiating line is written (watched in the file every 20 ms)
until the first alert naming the culprit arrives at the webhook, and until Alertmanager holds it
(``GET /api/v2/alerts``, polled every 0.2 s). The first alert that answers who must be right:
one that names a victim first is a miss, even if a later one is right."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.alert_fixture import Alertmanager, Hook
from tests.callback_fuzz import post_callback
from tests.conftest import start_server

EVALUATE_EVERY_S = 5
CULPRIT_ALERTS = ("RunStopped", "RunHung", "RunStalled", "RestartLoop", "RankSlow")
SLURM_INTERVAL_S = 2
AFTER_JOB_S = 60.0


@dataclass
class Watch:
    """Lines of a growing file, each with the wall time it was first seen."""

    path: Path
    seen: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        pos, rest = 0, b""
        while not self.stop.is_set():
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
            except FileNotFoundError:
                chunk = b""
            now = time.monotonic()
            if chunk:
                pos += len(chunk)
                *whole, rest = (rest + chunk).split(b"\n")
                self.seen += [(now, ln.decode("utf-8", "replace")) for ln in whole]
            time.sleep(0.02)

    def first(self, match: Callable[[str], bool], after: float = 0.0) -> float | None:
        return next((t for t, ln in list(self.seen) if t >= after and match(ln)), None)


@dataclass(frozen=True)
class Want:
    """The right answer: the culprit's rank (None: a node, no rank) and host, or (``cause``)
    a cause with no culprit at all (Slurm's time limit, a preemption) or none that can be
    known (a node lost that no line names): then an alert naming any rank or host names a
    victim. ``alerts``: the alert names that answer."""

    rank: int | None
    host: str | None
    cause: str | None = None
    alerts: tuple[str, ...] = CULPRIT_ALERTS


@dataclass
class Result:
    case: str
    ranks: int
    culprit_s: float | None  # None: no alert named a culprit in time
    right: bool
    named: str
    baseline_s: float | None
    am_s: float | None = None  # until Alertmanager held the same answer
    kind: str = ""  # the exam's failure kind (the report's group)


@dataclass
class Job:
    """One case as the rig runs it: what to start, when its clock starts, its baseline line."""

    name: str
    kind: str
    ranks: int
    run: str
    want: Want
    start: Callable[[Path], threading.Thread]  # writes or runs the job into this log
    clock: Callable[[Watch, float], float | None]  # t0 for an answer that came at the float
    progress: Callable[[Watch], tuple[float, int] | None]  # a progress line: (seen, step)
    wait_s: float
    fr: Path | None = None


def _alerts_toml(tmp: Path, hook: Hook, am: Alertmanager) -> Path:
    secret = tmp / "hook-secret"
    secret.write_text("live-culprit-bench-secret\n")
    conf = tmp / "alerts.toml"
    conf.write_text(
        f'evaluate_every = "{EVALUATE_EVERY_S}s"\n[route]\ngroup_wait = "0s"\n'
        'group_interval = "1s"\nrepeat_interval = "4h"\n[[receiver]]\nname = "hook"\n'
        f'type = "webhook"\nurl = "{hook.url}/hook"\nsecret_file = "{secret}"\n'
        f'[[receiver]]\nname = "oncall"\ntype = "alertmanager"\nurl = "{am.url}"\n'
    )
    return conf


def judge(alerts: list[dict[str, Any]], run: str, want: Want) -> tuple[bool, str] | None:
    """The first alert of ``run`` that answers who: (right?, what it named). An alert that
    names nobody (a stall; "culprit unknown") is not an answer yet, nor is one that names the
    right rank before the logs placed its host; one that names another rank or host is the
    answer, wrong, whatever comes after it."""
    for a in alerts:
        labels = a.get("labels", {})
        if a.get("status", "firing") not in ("firing", "active") or labels.get("run") != run:
            continue
        if (name := labels.get("alertname")) not in CULPRIT_ALERTS:
            continue
        rank, host = _names(a)
        text = str(a.get("annotations", {}).get("description", ""))
        named = (f"rank {rank} on {host}" if rank is not None else f"host {host}" if host
                 else f"{name}: {text[:70]}")  # fmt: skip
        if want.cause is not None:
            if rank is not None or host is not None:
                return False, named  # a time limit or preemption blamed on a rank
            if name in want.alerts and want.cause.lower() in text.lower():
                return True, named
            continue
        if (rank is not None and want.rank is not None and rank != want.rank) or (
            host is not None and host != want.host
        ):
            return False, named
        if name in want.alerts and host == want.host and (want.rank is None or rank == want.rank):
            return True, named
    return None


def _names(alert: dict) -> tuple[int | None, str | None]:
    """The rank and host an alert's description names as the culprit; none when it says the
    culprit is unknown (its candidates are not an answer)."""
    text = str(alert.get("annotations", {}).get("description", ""))
    if "culprit unknown" in text:
        return None, None
    rank = re.search(r"\brank (\d+)", text)
    host = re.search(r"\b(gpu-[a-z]?\d+|gpu-node-\d+)\b", text)
    return (int(rank.group(1)) if rank else None), (host.group(1) if host else None)


def _step_shown(url: str, run: str, step: int) -> bool:
    body = {
        "output": "ov-run-cards.children",
        "outputs": {"id": "ov-run-cards", "property": "children"},
        "inputs": [
            {"id": "view", "property": "data", "value": {"run": run, "range": "all"}},
            {"id": "refresh", "property": "n_intervals", "value": int(time.time())},
            {"id": "theme-store", "property": "data", "value": "light"},
        ],
        "changedPropIds": ["refresh.n_intervals"],
        "state": [],
    }
    status, text = post_callback(url, body, timeout=10)
    shown = re.search(r'"children":"([\d,]+)","id":"ov-step"', text) if status == 200 else None
    return shown is not None and int(shown.group(1).replace(",", "")) >= step


def _kernel_log(logs: Path) -> Path:
    """The kernel log ``serve`` follows beside the job's: this machine's own (``dmesg``),
    when it may be read; the jobs here inject nothing into it."""
    kern = logs / "kern.log"
    text = ""
    if shutil.which("dmesg"):
        p = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, check=False)
        text = p.stdout if p.returncode == 0 else ""
    kern.write_text(text)
    return kern


def _serve_args(job: Job, tmp: Path, logs: Path, conf: Path, slurm: bool) -> list[str]:
    args = ["serve", "--store", str(tmp / "s.duckdb"), "--run", job.run,
            "--logs", str(logs / "*.out"), "--logs", str(_kernel_log(logs)),
            "--alerts", str(conf)]  # fmt: skip
    if job.fr is not None:
        args += ["--flight-recorder", str(job.fr)]
    if slurm:  # the job's own record: its end, its state, the node's
        args += ["--slurm", "--slurm-interval", str(SLURM_INTERVAL_S),
                 "--run-from-job", r"^(exam-(?!urgent)[\w-]+)"]  # fmt: skip
    return args


def measure(job: Job, logs: Path, slurm: bool = False) -> Result:
    tmp = logs.parent
    hook = Hook()
    am = Alertmanager(tmp, hook.url).start()
    log = logs / "slurm-4242.out"
    log.write_bytes(b"")
    server = start_server(_serve_args(job, tmp, logs, _alerts_toml(tmp, hook, am), slurm),
                          tmp / "serve.log")  # fmt: skip
    watch = Watch(log)
    threading.Thread(target=watch.run, daemon=True).start()
    base = got = held = None
    try:
        t = job.start(log)
        deadline = time.monotonic() + job.wait_s
        while time.monotonic() < deadline and (got is None or base is None or held is None):
            if not t.is_alive():  # the job is over: its answer has a minute more to come
                deadline = min(deadline, time.monotonic() + AFTER_JOB_S)
            if (
                base is None
                and (p := job.progress(watch)) is not None
                and _step_shown(server.url, job.run, p[1])
            ):
                base = time.monotonic() - p[0]
            if got is None and (ans := judge(_hooked(hook), job.run, job.want)) is not None:
                got = (_arrival(hook, job), *ans)
            if held is None:
                held = _held(am, job)
            time.sleep(0.2)
        t.join(timeout=600)
    finally:
        watch.stop.set()
        server.stop()
        am.stop()
        hook.close()
    return _result(job, watch, hook, got, held, base)


def _hooked(hook: Hook) -> list[dict[str, Any]]:
    return [a for b in hook.bodies("/hook") for a in b.get("alerts", [])]


def _arrival(hook: Hook, job: Job) -> float:
    """When the webhook received the first body that answers."""
    bodies = hook.bodies()
    with hook.lock:
        paths = [p for p, _, _ in hook.received]
    for i, body in enumerate(bodies):
        if paths[i] == "/hook" and judge(body.get("alerts", []), job.run, job.want) is not None:
            return hook.arrived[i]
    return time.monotonic()


def _held(am: Alertmanager, job: Job) -> float | None:
    """Now, when Alertmanager holds an alert with the answer (its own API, not its webhook)."""
    try:
        alerts = am.alerts()
    except OSError:
        return None
    for a in alerts:
        a["status"] = a.get("status", {}).get("state", "active")
    got = judge(alerts, job.run, job.want)
    return time.monotonic() if got is not None and got[0] else None


def _result(job: Job, watch: Watch, hook: Hook, got: Any, held: float | None,
            base: float | None) -> Result:  # fmt: skip
    t0 = job.clock(watch, got[0] if got else time.monotonic())
    if got is None or t0 is None:
        heard = [f"{a['labels'].get('alertname')}: {a['annotations'].get('description', '')[:90]}"
                 for a in _hooked(hook)]  # fmt: skip
        why = ("no culprit alert" if t0 is not None else "the clock never started") + (
            f"; received: {' | '.join(heard[:4])}" if heard else "; no alert received"
        )
        return Result(job.name, job.ranks, None, False, why, base, kind=job.kind)
    at, right, named = got
    return Result(
        job.name,
        job.ranks,
        at - t0,
        right,
        named,
        base,
        am_s=(held - t0) if held is not None and right else None,
        kind=job.kind,
    )
