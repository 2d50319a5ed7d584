"""Import one generated exam case blind (the real CLI, as a user would: the job's log, its
checkpoint directory, its flight-recorder dumps, nothing else) and score what ``summary
--json`` says against the truth the job's script recorded (``exam_jobs.truth``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.exam_jobs import Generated

ROOT = Path(__file__).resolve().parent.parent
STOP_TOLERANCE_S = 60.0
# The cause classes that are right for each failure (components of the taxonomy,
# /work/shared/reference/llama3_interruptions.csv). A SIGKILL (the exam sends it as the OOM
# killer would) is of unknown cause when no line of its sender is there (the kernel's OOM
# killer, a cgroup, a person, a scheduler): "Unknown", as the corpus labels its SIGKILLs
# (tests/corpus/labels.toml), never the program's bug; the killed rank is still the culprit.
# A native crash is the software's or a dependency's. A lost node is the host's (its ranks
# and agent vanished at once), never the network the survivors complain about.
HOST = {"Host Maintenance", "NIC", "SSD", "Power Supply", "Server Chassis", "CPU",
        "System Memory", "IO Expansion Board"}  # fmt: skip
CAUSES = {
    "exception": {"Software Bug"},
    "sigkill": {"Unknown"},
    # ... and where the kernel's OOM killer names the pid it killed, the job's own memory use
    "oom": {"Software Bug"},
    "segfault": {"Software Bug", "Dependency"},
    "abort": {"Software Bug", "Dependency"},
    "hang": {"NCCL Watchdog Timeouts"},
    "exit0": {"Software Bug"},
    "node_lost": HOST,
    "save_crash": {"Software Bug"},
    # Slurm's own stops are planned: the cause is Slurm's line, no rank is a culprit
    "time_limit": {"Planned maintenance"},
    "preempt": {"Planned maintenance"},
}
LOOP = re.compile(r"Restart loop: (\d+) restarts")


def host_unknowable(case) -> bool:  # noqa: ANN001 (exam_jobs.Case)
    """A node lost with ``srun --label``-style ``N: `` labels but no Slurm (exam_jobs pipes
    each agent through a label): its ranks and agent die before writing a line, the labels are
    task numbers, gloo's peers are loopback addresses and no Slurm line or record exists, so
    nothing the product is given names the lost host. The right answer is "unknown"; a host
    named is a guess, scored as a wrong name. (A real job with srun's labels runs under Slurm,
    whose own line names the node: ``node_lost_slurm`` scores the host as usual.)"""
    return case.kind == "node_lost" and case.label == "srun" and not case.slurm


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT, capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def import_case(g: Generated, store: Path) -> dict:
    """The run's summary after a blind import; ``import_rc``, ``import_s`` (import and
    summary, seconds) and the import's output beside it."""
    files = [str(g.log)] + ([str(g.fr)] if any(g.fr.iterdir()) else [])
    files += [str(k) for k in sorted(g.dir.glob("*-kern.log"))]  # a node's kernel log
    t0 = time.perf_counter()
    imp = cli("import", "--store", str(store), "--run", g.case.name,
              "--checkpoints", f"pfs={g.ckpt}", *files)  # fmt: skip
    summ = cli("summary", "--store", str(store), "--json")
    took = time.perf_counter() - t0
    run = {}
    if summ.returncode == 0:
        runs = [r for r in json.loads(summ.stdout)["runs"] if r["run_id"] == g.case.name]
        run = runs[0] if runs else {}
    return {"run": run, "import_rc": imp.returncode, "import_s": took,
            "import_out": imp.stdout + imp.stderr}  # fmt: skip


def _near(ts: str | None, t: float | None) -> bool:
    from datetime import UTC, datetime

    if ts is None or t is None:
        return False
    got = datetime.fromisoformat(ts).replace(tzinfo=UTC).timestamp()
    return abs(got - t) <= STOP_TOLERANCE_S


def score(g: Generated, got: dict) -> dict:
    """Per check True (right), False (wrong) or None (not applicable); plus the culprit named
    with its confidence (for the reliability table) and each miss in words."""
    case, t, run = g.case, g.truth, got["run"]
    ints = (run.get("interruptions") or {}).get("list") or []
    stops = t["stops"]
    loop = case.failing_attempts >= 3
    # a restart loop is one interruption; one that was never restarted again, a stop after it
    want = 0 if case.kind == "slow" else 1 + (loop and not case.finish)
    checks: dict = {"import": got["import_rc"] == 0}
    miss: list[str] = []
    checks["extra"] = len(ints) == want
    if len(ints) != want:
        miss.append(f"{len(ints)} interruptions, expected {want}: "
                    + "; ".join(i["description"] for i in ints))  # fmt: skip
    out = {"checks": checks, "miss": miss, "named": None}
    if want == 0:
        checks["state"] = run.get("state") == t["state"]
        return out
    if t.get("unintended") or not stops:  # nothing to score: the job did not fail as meant
        miss.append(f"the job did not do what the case meant: {t.get('unintended')}")
        return out
    s0 = stops[0]
    when = s0["fault_t"] or s0["last_progress_t"]
    i = min(ints, key=lambda x: abs(_ts(x["ts"]) - when)) if ints else None
    checks["found"] = i is not None and _near(i["ts"], when)
    checks["cause"] = i is not None and i["component"] in CAUSES[case.kind]
    checks["stop"] = i is not None and _near(i["ts"], when)
    unknowable = host_unknowable(case)
    if i is None:  # not found: nothing it needed is right
        checks["restore"] = checks["lost"] = False
        if s0.get("host") is not None and not unknowable:
            checks["culprit_recall"] = False
        return out
    if not checks["cause"]:
        miss.append(f"cause {i['component']}, expected one of {sorted(CAUSES[case.kind])}")
    named = i["rank"] is not None or i["host"] is not None
    right = (named and not unknowable and s0.get("host") is not None
             and _right(i, s0, t["rank_host"]))  # fmt: skip
    if named:
        out["named"] = (i["confidence"], bool(right))
        if not right:
            want = (
                "unknown (no evidence names the host)"
                if unknowable
                else f"rank {s0.get('rank')} host {s0.get('host')}"
            )
            miss.append(f"culprit rank {i['rank']} host {i['host']}, expected {want}")
    checks["culprit_named_right"] = bool(right) if named else None
    if s0.get("host") is not None and not unknowable:  # recall where the truth has a culprit
        checks["culprit_recall"] = bool(right)
    if s0.get("rank") is not None:
        checks["rank"] = i["rank"] == s0["rank"]
    checks["host"] = i["host"] is None if unknowable else i["host"] == s0.get("host")
    if i["host"] is None and s0.get("host") is not None and not unknowable:
        # a host no imported file names cannot be known: said, still counted as missed
        unseen = s0["host"] not in g.log.read_text(errors="replace")
        miss.append(f"no host named (rank {i['rank']}), expected {s0['host']}"
                    + (" (no line of the log names it)" if unseen else ""))  # fmt: skip
    want_restore = s0["restored_step"]
    # a loop's lost steps are those of the launches it restarted
    restarted = [s for s in stops if s["restored_step"] is not None]
    want_lost = sum(s.get("lost_steps") or 0 for s in restarted) if loop else s0.get("lost_steps")
    checks["restore"] = i["restored_step"] == want_restore
    checks["lost"] = i["lost_steps"] == want_lost
    if not checks["restore"] or not checks["lost"]:
        miss.append(f"restore {i['restored_step']} lost {i['lost_steps']}, expected "
                    f"{want_restore} and {want_lost}")  # fmt: skip
    m = LOOP.search(i["description"] or "")
    restarts = int(m.group(1)) if m else sum(1 for x in ints if x["restored_step"] is not None)
    checks["restarts"] = restarts == t["restarts"]
    checks["state"] = run.get("state") == t["state"]
    if not checks["restarts"] or not checks["state"]:
        miss.append(f"restarts {restarts} state {run.get('state')}, expected {t['restarts']} "
                    f"and {t['state']}")  # fmt: skip
    if case.kind == "hang":
        h = (run.get("hangs") or [{}])[0]
        checks["hang"] = (h.get("culprit_rank") == s0["rank"]
                          and h.get("culprit_host") == s0["host"]
                          and list(h.get("missing_ranks") or []) == [s0["rank"]]
                          and "all_reduce" in str(h.get("op")))  # fmt: skip
        if not checks["hang"]:
            keys = ("culprit_rank", "culprit_host", "missing_ranks", "op")
            miss.append(f"hang {({k: h.get(k) for k in keys})}, expected rank {s0['rank']} "
                        f"on {s0['host']}")  # fmt: skip
    return out


def _right(i: dict, s0: dict, rank_host: dict) -> bool:
    """What is named is the truth: the rank (when the truth has one; a lost node's rank must
    be on that node) and the host, each where named."""
    if i["host"] not in (None, s0["host"]):
        return False
    if i["rank"] is None:
        return True
    if s0.get("rank") is None:
        return rank_host.get(str(i["rank"])) == s0["host"]
    return i["rank"] == s0["rank"]


def _ts(ts: str) -> float:
    from datetime import UTC, datetime

    return datetime.fromisoformat(ts).replace(tzinfo=UTC).timestamp()
