"""Time to culprit, live (#58 item 1): ``factoryfloor serve`` follows a job's log directory with
``--alerts`` to a real local webhook that evaluates every 5 s, while a job fails in it. Measured
from the moment the initiating line is written (watched in the file every 20 ms) until the first
alert that names a culprit arrives at the webhook. That first alert must name the right rank and
host: one that names a victim first counts as a miss, even if a later one is right.

Cases:
- the culprit exam's REAL multi-node ``torchrun`` jobs on the CPU (``benchmarks/exam_jobs.py``:
  each agent in its own UTS namespace with its own hostname, gloo ranks, c10d rendezvous,
  ``srun --label``-style prefixes), their first failing launch only (the job is tearing down
  when the alert must come): ``exception``, ``sigkill``, ``segfault``, ``abort``, ``exception8``
  (8 ranks), ``save_crash``, ``node_lost`` (host only), and ``hang``, whose clock starts at the
  first rank's timeout line or the first flight-recorder dump, whichever is first (``serve``
  follows the dump directory too);
- ``cascade``: a 16,384-rank Megatron job log (``tests/cascade_fixture.py``) written at a job's
  pace: progress, then the culprit's CUDA OOM traceback, then every other rank's cascade spread
  over ``--cascade-s`` seconds (a real job's takes up to 10 minutes), then torchrun's teardown.

Baseline, same run: the time for a progress line to reach the store and be read back without
any derivation (its step appears in the Overview's run card, asked for as the browser does, over
``/_dash-update-component``), measured on the same server during the same job.

Targets (#58): crashes p95 <= 15 s and median <= 5 s at 8 and 16,384 ranks; hangs <= 15 s after
the first rank's watchdog fires.

    .venv/bin/python benchmarks/live_culprit.py [--only exception,hang,cascade] [--cascade-s 120]
        [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import figures  # noqa: E402
from benchmarks.exam import CASES  # noqa: E402
from benchmarks.exam_jobs import Case, _attempt, free_port, hosts, prepare  # noqa: E402
from tests import cascade_fixture as cf  # noqa: E402
from tests.alert_fixture import Hook  # noqa: E402
from tests.callback_fuzz import post_callback  # noqa: E402
from tests.conftest import start_server  # noqa: E402

EVALUATE_EVERY_S = 5
EXAM_CASES = ("exception", "sigkill", "segfault", "abort", "exception8", "save_crash", "hang",
              "node_lost")  # fmt: skip
# the first line a failure writes: a traceback, torchrun's record of a dead worker, gloo's error
# on a survivor (a SIGKILLed or segfaulted rank writes nothing of its own)
INITIATING = re.compile(
    r"Traceback|exitcode|Signal \d+|SIG[A-Z]+|Connection (closed|reset)|ChildFailedError|"
    r"CUDA out of memory"
)
TIMEOUT = re.compile(r"[Tt]imed out|[Tt]imeout|watchdog")
CULPRIT_ALERTS = ("RunStopped", "RunHung", "RunStalled", "RestartLoop")


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

    def first(self, match: Callable[[str], bool]) -> float | None:
        return next((t for t, ln in list(self.seen) if match(ln)), None)


def _alerts_toml(tmp: Path, hook: Hook) -> Path:
    secret = tmp / "hook-secret"
    secret.write_text("live-culprit-bench-secret\n")
    conf = tmp / "alerts.toml"
    conf.write_text(
        f'evaluate_every = "{EVALUATE_EVERY_S}s"\n[route]\ngroup_wait = "0s"\n'
        'group_interval = "1s"\nrepeat_interval = "4h"\n[[receiver]]\nname = "hook"\n'
        f'type = "webhook"\nurl = "{hook.url}/hook"\nsecret_file = "{secret}"\n'
    )
    return conf


def _answer(hook: Hook, want: tuple[int | None, str]) -> tuple[float, bool, str] | None:
    """The first run alert that answers who: (when it arrived, right?, what it named). An alert
    that names nobody (a stall; "culprit unknown") is not an answer yet, nor is one that names
    the right rank before the logs placed its host; one that names another rank or host is the
    answer, wrong, whatever comes after it."""
    for i, body in enumerate(hook.bodies()):
        for a in body.get("alerts", []):
            if a.get("status") != "firing" or a["labels"].get("alertname") not in CULPRIT_ALERTS:
                continue
            rank, host = _names(a)
            named = f"rank {rank} on {host}" if rank is not None else f"host {host}"
            if (rank is not None and want[0] is not None and rank != want[0]) or (
                host is not None and host != want[1]
            ):
                return hook.arrived[i], False, named
            if host == want[1] and (want[0] is None or rank == want[0]):
                return hook.arrived[i], True, named
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


@dataclass
class Result:
    case: str
    ranks: int
    culprit_s: float | None  # None: no alert named a culprit in time
    right: bool
    named: str
    baseline_s: float | None


def _measure(
    case: str, ranks: int, want: tuple[int | None, str], logs: Path, run: str,
    start_job: Callable[[Path], threading.Thread], clock: Callable[[Watch], float | None],
    progress: Callable[[Watch], tuple[float, int] | None], wait_s: float,
    extra: list[str] | None = None,
) -> Result:  # fmt: skip
    tmp = logs.parent
    hook = Hook()
    log = logs / "slurm-4242.out"
    log.write_bytes(b"")
    server = start_server(
        ["serve", "--store", str(tmp / "s.duckdb"), "--run", run, "--logs", str(logs / "*.out"),
         "--alerts", str(_alerts_toml(tmp, hook)), *(extra or [])],
        tmp / "serve.log",
    )  # fmt: skip
    watch = Watch(log)
    threading.Thread(target=watch.run, daemon=True).start()
    base: float | None = None
    try:
        job = start_job(log)
        deadline = time.monotonic() + wait_s
        got = None
        while time.monotonic() < deadline and (got is None or base is None):
            if base is None and (p := progress(watch)) is not None and _step_shown(
                server.url, run, p[1]
            ):
                base = time.monotonic() - p[0]
            if got is None and clock(watch) is not None:
                got = _answer(hook, want)
            time.sleep(0.1)
        job.join(timeout=300)
    finally:
        watch.stop.set()
        server.stop()
        hook.close()
    t0 = clock(watch)
    if got is None or t0 is None:
        heard = [f"{a['labels'].get('alertname')}: {a['annotations'].get('description', '')[:90]}"
                 for b in hook.bodies() for a in b.get("alerts", [])]  # fmt: skip
        why = "no culprit alert" + (f"; received: {' | '.join(heard[:4])}" if heard else
                                    "; no alert received")  # fmt: skip
        return Result(case, ranks, None, False, why, base)
    at, right, named = got
    return Result(case, ranks, at - t0, right, named, base)


def _exam_case(case: Case, tmp: Path) -> Result:
    """The exam's case, live: its first failing launch writes into the followed directory."""
    g = prepare(case, tmp)
    logs = g.dir / "logs"
    logs.mkdir()
    g.log = logs / "slurm-4242.out"

    def start(log: Path) -> threading.Thread:
        t = threading.Thread(target=_attempt, args=(case, g, 1, case.kind, free_port()),
                             daemon=True)  # fmt: skip
        t.start()
        return t

    def clock(w: Watch) -> float | None:
        if case.kind == "hang":  # the first rank's timeout, or the first dump, whichever first
            line = w.first(lambda ln: bool(TIMEOUT.search(ln)))
            dumps = [p.stat().st_mtime for p in g.fr.iterdir()] if g.fr.exists() else []
            dump = (min(dumps) - time.time() + time.monotonic()) if dumps else None
            return min((t for t in (line, dump) if t is not None), default=None)
        return w.first(lambda ln: bool(INITIATING.search(ln)))

    def progress(w: Watch) -> tuple[float, int] | None:
        for t, ln in list(w.seen):
            if (step := _step_of(ln)) is not None and step >= 2:
                return t, step
        return None

    names = hosts(case)
    want = (None if case.kind == "node_lost" else case.culprit, names[case.culprit // case.nproc])
    return _measure(case.name, case.ranks, want, logs, "live-" + case.name, start, clock,
                    progress, wait_s=240, extra=["--flight-recorder", str(g.fr)])  # fmt: skip


def _step_of(line: str) -> int | None:
    """The step of a progress line in any of the exam's formats (the baseline's step)."""
    m = re.search(r"iteration\s+(\d+)/|\bstep:\s*(\d+)|global_step[= ](\d+)|'step': (\d+)", line)
    return int(next(x for x in m.groups() if x)) if m else None


def _cascade_case(tmp: Path, nodes: int, per_node: int, culprit: int, spread_s: float) -> Result:
    logs = tmp / "logs"
    logs.mkdir()
    steps = 200
    cf.T0 = datetime.utcnow().replace(microsecond=0) - timedelta(seconds=steps * cf.STEP_S)
    full = cf.build(tmp / "whole.log", nodes=nodes, per_node=per_node, culprit=culprit,
                    first_steps=steps, ckpt_step=100)  # fmt: skip
    lines = full.read_text().splitlines()
    first_fail = next(i for i, ln in enumerate(lines) if "Traceback" in ln)
    end = next(i for i, ln in enumerate(lines) if "loading checkpoint" in ln)
    head, cascade = lines[:first_fail], lines[first_fail:end]  # no restart: still tearing down
    last_step = max(int(m.group(1)) for ln in head if (m := re.search(r"iteration\s+(\d+)", ln)))

    def write(log: Path) -> None:
        with open(log, "a") as fh:
            fh.write("\n".join(head[:-1]) + "\n")
            fh.flush()
            time.sleep(3)  # the last progress line alone: the baseline's
            fh.write(head[-1] + "\n")
            fh.flush()
            time.sleep(5)
            per = max(len(cascade) // 200, 1)  # the cascade in 200 writes over spread_s
            for i in range(0, len(cascade), per):
                fh.write("\n".join(cascade[i : i + per]) + "\n")
                fh.flush()
                time.sleep(spread_s / 200)

    def start(log: Path) -> threading.Thread:
        t = threading.Thread(target=write, args=(log,), daemon=True)
        t.start()
        return t

    def clock(w: Watch) -> float | None:
        return w.first(lambda ln: "Traceback" in ln)

    def progress(w: Watch) -> tuple[float, int] | None:
        return next(((t, last_step) for t, ln in list(w.seen) if ln == head[-1]), None)

    want = (culprit, cf.host(culprit // per_node))
    return _measure("cascade", nodes * per_node, want, logs, cf.RUN, start, clock, progress,
                    wait_s=spread_s + 60)  # fmt: skip


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join((*EXAM_CASES, "cascade")))
    ap.add_argument("--cascade-s", type=float, default=120.0,
                    help="seconds the 16,384 ranks' cascade is spread over (default 120)")
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--keep", help="keep each case's logs, dumps, store and server log here")
    figures.add_argument(ap)
    args = ap.parse_args()
    results: list[Result] = []
    for case in args.only.split(","):
        kept = tempfile.mkdtemp(prefix=f"live-{case}-", dir=args.keep) if args.keep else None
        with nullcontext(kept) if kept else tempfile.TemporaryDirectory() as tmp:
            if case in EXAM_CASES:
                (exam,) = [c for c in CASES if c.name == case]
                results.append(_exam_case(exam, Path(tmp)))
            elif case == "cascade":
                results.append(_cascade_case(Path(tmp), args.nodes, args.per_node, 9137,
                                             args.cascade_s))  # fmt: skip
            else:
                ap.error(f"unknown case {case}")
        r = results[-1]
        took = f"{r.culprit_s:6.1f} s" if r.culprit_s is not None else "  none "
        base = f"{r.baseline_s:5.1f} s" if r.baseline_s is not None else "  -  "
        print(f"{r.case:9} {r.ranks:>7,} ranks  culprit alert {took}  "
              f"{'right' if r.right else 'MISS '}  ({r.named})  baseline {base}", flush=True)
    _report(results, args.json)


def _report(results: list[Result], path: str | None) -> None:
    out: dict[str, float] = {}
    print("\nkind                ranks   median     p95   misses (of them wrong)   baseline "
          "(line -> store -> page)")
    groups = {"crash, 4-8 ranks": [r for r in results if r.case in EXAM_CASES and r.case != "hang"],
              "hang, 4 ranks": [r for r in results if r.case == "hang"],
              "crash, cascade": [r for r in results if r.case == "cascade"]}  # fmt: skip
    ok = True
    for name, rs in groups.items():
        if not rs:
            continue
        hits = [r.culprit_s for r in rs if r.right and r.culprit_s is not None]
        misses = len(rs) - len(hits)
        wrong = sum(1 for r in rs if r.culprit_s is not None and not r.right)  # a victim named
        bases = [r.baseline_s for r in rs if r.baseline_s is not None]
        med = statistics.median(hits) if hits else float("nan")
        p95 = _pct(hits, 0.95) if hits else float("nan")
        base = statistics.median(bases) if bases else float("nan")
        print(f"{name:16} {max(r.ranks for r in rs):>9,} {med:7.1f} s {p95:6.1f} s "
              f"{misses:6}/{len(rs)} ({wrong} wrong)       {base:5.1f} s")  # fmt: skip
        key = name.replace(", ", "_").replace(" ", "_")
        if hits:
            out[f"culprit_{key}_median_s"], out[f"culprit_{key}_p95_s"] = med, p95
        out[f"culprit_{key}_misses"] = misses
        out[f"culprit_{key}_wrong"] = wrong
        if bases:
            out[f"baseline_{key}_line_to_page_s"] = base
        crash = not name.startswith("hang")
        ok &= misses == 0 and p95 <= 15 and (not crash or med <= 5)
    print(f"\ntargets (#58): crashes p95 <= 15 s, median <= 5 s; hangs <= 15 s; no miss: "
          f"{'met' if ok else 'NOT met'}")  # fmt: skip
    figures.write(path, out)


if __name__ == "__main__":
    main()
