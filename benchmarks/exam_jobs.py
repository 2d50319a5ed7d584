"""The culprit exam's generator (``benchmarks/exam.py``, ``tests/test_exam.py``): real
multi-node ``torchrun`` jobs on the CPU with one failure injected, and their truth.

Each "node" is one torchrun agent started as root in its own UTS and mount namespace, with its
own hostname and a private ``/etc/hosts`` naming every node on its own loopback address
(/work/shared/STACK.md, "A real multi-node torchrun job on one machine"); the agents meet by
c10d rendezvous. Each agent's output goes into one job log with an ``N: `` label, as
``srun --label`` writes it. A case is one or more launches (attempts): the first fails as its
``Case`` says, the next ones resume from the checkpoint the job saved, as a requeued job does.
``exam_train.py`` writes the progress and checkpoint lines and the truth (JSON lines by its own
clock); all else in the log, the dumps and the checkpoint trees come from the real software.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "exam_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
# TorchTitan's run_train.sh tees every rank's output with a ``[rankN]:`` prefix
TEE = {"titan": "--role rank --tee 3 "}
ATTEMPT_TIMEOUT_S = 420.0  # a launch on a loaded 2-core machine; killed past it
TRIES = 2  # a case whose job did not do what it meant is run once more


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # exception, sigkill, oom, segfault, abort, hang, slow, exit0, node_lost, save_crash
    fmt: str = "megatron"
    nnodes: int = 2
    nproc: int = 2
    culprit: int = 1  # global rank (node_lost: any rank of the node lost)
    at: int = 7  # the step the fault comes at (save_crash: the save's step)
    steps: int = 12
    save_every: int = 5
    failing_attempts: int = 1  # a restart loop: 4 (the first and three restarts) and no finish
    finish: bool = True  # a last attempt that runs to the end
    step_s: float = 0.3  # the time a step takes besides its all-reduce
    slurm: str = ""  # under the real Slurm (exam_slurm.py): srun, nodes, time_limit, preempt
    straggler_every: int = 0  # NVRx's straggler report every N steps (exam_train.py); 0: none
    label: str = "srun"  # each agent's lines labelled as srun --label's "N: " or pdsh's "host: "

    @property
    def ranks(self) -> int:
        return self.nnodes * self.nproc


@dataclass
class Generated:
    case: Case
    dir: Path
    log: Path
    ckpt: Path
    fr: Path
    truth: dict = field(default_factory=dict)
    seconds: float = 0.0


def hosts(case: Case) -> list[str]:
    """Neutral node names (nothing in them tells the case), sorted as the ranks are placed."""
    base = zlib.crc32(case.name.encode()) % 80 + 10
    return [f"gpu-b{base + i:02d}" for i in range(case.nnodes)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pump(proc: subprocess.Popen, label: int | str, out, lock: threading.Lock) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:  # bytes: a tqdm bar's \r stays in its line, as srun keeps it
        with lock:
            out.write(f"{label}: ".encode() + line)
            out.flush()


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (ours: the agents we started)."""
    kids: list[str] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids += (task / "children").read_text().split()
        os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass
    for kid in kids:
        kill_tree(int(kid))


def job_env(case: Case, g: Generated, attempt: int, kind: str) -> dict[str, str]:
    """The environment of one launch: what exam_train.py injects, where it writes."""
    env = dict(os.environ)
    env.update(
        PYTHONUNBUFFERED="1", TORCH_FR_BUFFER_SIZE="2000", EXAM_KIND=kind,
        EXAM_CULPRIT=str(case.culprit), EXAM_AT=str(case.at), EXAM_STEPS=str(case.steps),
        EXAM_SAVE_EVERY=str(case.save_every), EXAM_FORMAT=case.fmt, EXAM_CKPT=str(g.ckpt),
        EXAM_TRUTH=str(g.dir / "truth"), EXAM_FR=str(g.fr), EXAM_ATTEMPT=str(attempt),
        EXAM_STEP_S=str(case.step_s), OMP_NUM_THREADS="1",
        EXAM_STRAGGLER_EVERY=str(case.straggler_every),
    )  # fmt: skip
    return env


def agent_command(case: Case, g: Generated, attempt: int, port: int, hostname: str) -> str:
    """One node: a torchrun agent under ``hostname`` in its own UTS and mount namespace,
    seeing every node by name through a private /etc/hosts (a shell command for unshare)."""
    names = hosts(case)
    hostfile = g.dir / "hosts"
    hostfile.write_text(
        "127.0.0.1 localhost\n" + "".join(f"127.0.2.{i + 1} {n}\n" for i, n in enumerate(names))
    )
    run = (
        f"{TORCHRUN} --nnodes {case.nnodes} --nproc-per-node {case.nproc} "
        f"--rdzv-backend c10d --rdzv-endpoint {names[0]}:{port} "
        f"--rdzv-id exam-{case.name}-{attempt} --max-restarts 0 {TEE.get(case.fmt, '')}{TRAIN}"
    )
    return f"hostname {hostname}; mount --bind {hostfile} /etc/hosts; exec {run}"


def _attempt(case: Case, g: Generated, attempt: int, kind: str, port: int) -> None:
    names = hosts(case)
    env = job_env(case, g, attempt, kind)
    procs, lock, pumps = [], threading.Lock(), []
    with open(g.log, "ab") as out:
        for i, name in enumerate(names):
            sh = agent_command(case, g, attempt, port, name)
            p = subprocess.Popen(
                ["unshare", "--uts", "--mount", "sh", "-c", sh], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            procs.append(p)
            label = name if case.label == "pdsh" else i  # pdsh -w: each line after its host
            t = threading.Thread(target=_pump, args=(p, label, out, lock), daemon=True)
            t.start()
            pumps.append(t)
        deadline = time.monotonic() + ATTEMPT_TIMEOUT_S
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired as late:
                for q in procs:  # this launch's whole tree: torchrun's workers have sessions
                    kill_tree(q.pid)  # of their own, so a process group would miss them
                raise RuntimeError(
                    f"{case.name}: attempt {attempt} ran past {ATTEMPT_TIMEOUT_S} s"
                ) from late
        for t in pumps:
            t.join(timeout=10)
    for cg in Path("/sys/fs/cgroup/memory").glob("exam-oom-*"):  # an OOM case's (exam_train)
        cg.rmdir()  # empty once its rank was killed


def prepare(case: Case, root: Path) -> Generated:
    """A fresh ``root/<name>/`` with the case's checkpoint, dump and truth folders."""
    d = root / case.name
    if d.exists():
        shutil.rmtree(d)
    for sub in ("ckpt", "fr", "truth"):
        (d / sub).mkdir(parents=True)
    return Generated(case, d, d / "job.log", d / "ckpt", d / "fr")


def finish(g: Generated, t0: float) -> Generated:
    g.seconds = time.monotonic() - t0
    g.truth = truth(g.case, g.dir / "truth")
    (g.dir / "truth.json").write_text(json.dumps(g.truth, indent=1))
    kernel_log(g)
    return g


def kernel_log(g: Generated) -> None:
    """The OOM-killed rank's node's kernel log, as gathered per node (``<host>-kern.log``): the
    lines ``dmesg -T`` holds about the killed pid, verbatim (one kernel serves every "node"
    here, so only the kill's own lines are that node's)."""
    evs = [json.loads(x) for f in (g.dir / "truth").glob("*.jsonl")
           for x in f.read_text().splitlines()]  # fmt: skip
    killed = [e for e in evs if e["ev"] == "fault" and e["kind"] == "oom"]
    if not killed:
        return
    out = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, check=True).stdout
    for e in killed:
        mine = [ln for ln in out.splitlines()
                if f"pid={e['pid']}," in ln or f"process {e['pid']} (" in ln]  # fmt: skip
        with open(g.dir / f"{e['host']}-kern.log", "a") as fh:
            fh.write("".join(ln + "\n" for ln in mine))


def generate(case: Case, root: Path) -> Generated:
    """Run ``case``'s launches under ``root/<name>/`` and gather its truth."""
    for _ in range(TRIES):
        g = prepare(case, root)
        t0 = time.monotonic()
        for n, kind in enumerate(attempts(case), start=1):
            _attempt(case, g, n, kind, free_port())
        g = finish(g, t0)
        if not (why := unintended(case, g.truth)):
            return g
        print(f"    {case.name}: {why}; once more", flush=True)
    g.truth["unintended"] = why
    return g


def attempts(case: Case) -> list[str]:
    """What each launch injects: the failing ones, then one that runs to the end."""
    if case.kind == "slow":  # one launch, slow all through: no stop at all
        return ["slow"]
    return [case.kind] * case.failing_attempts + (["none"] if case.finish else [])


def unintended(case: Case, t: dict) -> str:
    """Why the job did not do what the case says (a launch that failed on its own, as a
    loaded machine can make one), or "" when it did: the exam scores only what it meant."""
    want = 0 if case.kind == "slow" else case.failing_attempts
    if len(t["stops"]) != want:
        return f"{len(t['stops'])} launches stopped, {want} meant to"
    if (t["state"] == "finished") != (case.finish or case.kind == "slow"):
        return f"the job ended {t['state']}"
    if not case.slurm and any(s["fault_t"] is None for s in t["stops"]):
        return "a launch stopped before its fault"
    return ""


def truth(case: Case, tdir: Path) -> dict:
    """What happened, from the script's own records: per launch that did not finish the fault
    (time, rank, host), the last progress before it, the step restored after it and the steps
    lost."""
    evs = [json.loads(x) for f in sorted(tdir.glob("*.jsonl")) for x in f.read_text().splitlines()]
    log = tdir.parent / "job.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    evs.sort(key=lambda e: e["t"])
    rank_host = {e["rank"]: e["host"] for e in evs}
    stops = []
    for a in sorted({e["attempt"] for e in evs}):
        mine = [e for e in evs if e["attempt"] == a]
        if any(e["ev"] == "finished" for e in mine):
            continue
        faults = [e for e in mine if e["ev"] == "fault" and e["kind"] != "none"]
        prog = [e for e in mine if e["ev"] == "progress"]
        after = [e for e in evs if e["attempt"] == a + 1 and e["ev"] == "loaded"]
        saved = [e["step"] for e in mine if e["ev"] == "saved"]
        loaded = [e["step"] for e in mine if e["ev"] == "loaded"]
        newest = max(saved + loaded, default=0)
        last = prog[-1] if prog else None
        stop = {
            "attempt": a,
            "kind": case.kind,
            "fault_t": faults[0]["t"] if faults else None,
            "last_progress_t": last["t"] if last else None,
            "last_step": last["step"] if last else None,
            "restored_step": after[0]["step"] if after else None,
            "newest_checkpoint": newest,
        }
        if case.kind != "slow":
            f = faults[0] if faults else None
            node = hosts(case).index(f["host"]) if f else None
            stop |= {"rank": f["rank"] if f else None, "host": f["host"] if f else None,
                     "node": node}  # fmt: skip
            if case.kind == "node_lost":  # the lost node is the culprit, not one of its ranks
                stop["rank"] = None
        if last is not None:
            # lost steps as a log can tell them: up to the last progress line that reached the
            # log. A step printed as the launcher was stopped (torchrun's --tee tailer ended by
            # Slurm's SIGTERM before it relayed the line) was done, but no reader of the log can
            # know it; the job's own count is kept beside it (job_lost_steps).
            shown = [e["step"] for e in mine if e["ev"] == "printed" and e["line"] in text]
            stop["logged_step"] = max(shown) if shown else None
            base = stop["restored_step"] or newest
            stop["job_lost_steps"] = last["step"] - base
            stop["lost_steps"] = (stop["logged_step"] or last["step"]) - base
        stops.append(stop)
    finished = any(e["ev"] == "finished" for e in evs)
    return {
        "case": asdict(case),
        "hosts": hosts(case),
        "rank_host": {str(k): v for k, v in sorted(rank_host.items())},
        "stops": stops,
        "restarts": sum(1 for e in evs if e["ev"] == "loaded" and e["rank"] == 0),
        "state": "finished" if finished else "stopped",
    }
