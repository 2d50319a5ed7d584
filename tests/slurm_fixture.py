"""A real single-node Slurm cluster for the tests, from Debian's packages, under one tmp dir.

munge (its own key and socket), MariaDB (its own data dir, socket and port), slurmdbd on it
(``sacct`` needs accounting), slurmctld and slurmd (this host is the one node), every port free
and chosen here, every file under ``base``: nothing in /etc is touched, so the host's own Slurm
(if any) is never disturbed. ``SLURM_CONF`` in ``env`` names this cluster's ``slurm.conf``;
``slurmdbd.conf`` sits beside it, where slurmdbd looks for it.

``make_history`` then makes the failures the Slurm source must read, each by the real means:
a job that exits 1 (FAILED), one cancelled (CANCELLED), one past its one-minute limit
(TIMEOUT), one past its memory limit (OUT_OF_MEMORY: task/cgroup on this host's cgroup v1
memory controller), a requeue (REQUEUED), a low-priority job preempted by a high-priority one
(PREEMPTED), slurmd killed while a job runs (the node "Not responding", the job NODE_FAIL and
requeued), a DRAIN with an XID reason, and a DOWN node; and GPU jobs of two users in two
accounts at once (``GPU_JOBS``: the node has ``GPUS`` GPUs as gres, character devices made with
mknod, so AllocTRES says ``gres/gpu=N``). ``maintenance`` books a maintenance reservation on
the node (recorded booked two hours ahead, in ``reservations.txt``). ``stop`` cancels every
job first (slurmstepd children outlive a killed slurmd), then stops each daemon by the pid in
its pid file.

Run as a script (``python -m tests.slurm_fixture record DIR``) it starts a cluster, makes the
history and records what the client commands print (``--json`` and the parsable text forms)
into ``tests/fixtures/slurm/``; the parser tests read those recordings.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server")
BINARIES = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sacct")
CLUSTER = "ffci"
DB_USER, DB_PASS = "slurm", "ff-test-only"
XID_REASON = "XID 79 GPU fell off the bus"
DOWN_REASON = "PSU replaced, cabling check"
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
OOM_JOB = "python3 -c 'x = bytearray(700 * 2**20); import time; time.sleep(60)'"
MAINT_RESERVATION = "ff-maint"
NODES_PARTITION = "nodes"  # SlurmCluster.nodes: the partition of the extra nodes
GPUS = 8  # gres/gpu on the one node: character devices made with mknod (no real GPU)
# Two users in two accounts besides root (in ml): made with useradd -M when missing
USERS = {"ffalice": "ml", "ffbob": "research"}
ACCOUNTS = ("ml", "research")
# Concurrent GPU jobs of both users: name -> (user, account, GPUs, script)
GPU_JOBS = {
    "alice-train": ("ffalice", "ml", 4, "sleep 20"),
    "bob-eval": ("ffbob", "research", 2, "sleep 20"),
    "bob-debug": ("ffbob", "research", 1, "sleep 3; exit 2"),
    "alice-prep": ("ffalice", "ml", 1, "sleep 10"),
}


def _ensure_user(name: str) -> None:
    """A local user (no home) that jobs can run as: ``sbatch --uid`` needs it to exist."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True,
                       capture_output=True, timeout=30)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing() -> list[str]:
    """The binaries of the packages (``PACKAGES``) that are not installed."""
    return [b for b in BINARIES if shutil.which(b, path="/usr/sbin:/usr/bin:/sbin:/bin") is None]


def wait_for(what: str, check: Callable[[], Any], timeout: float, step: float = 0.2) -> Any:
    """``check()``'s first truthy value within ``timeout`` s; RuntimeError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            if got := check():
                return got
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            last = exc
        time.sleep(step)
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what} ({last})")


@dataclass
class SlurmCluster:
    base: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    ports: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)  # what each job shows -> job id
    started_s: float = 0.0
    # more nodes, each a slurmd of its own on this host (``slurmd -N NAME``, its own port,
    # spool and pid file), in partition ``NODES_PARTITION`` only: a multi-node job really gets
    # one node per task there, and Slurm's own lines name that node (the exam's lost node)
    nodes: tuple[str, ...] = ()
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    # -- paths and environment --------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment every client command of this cluster runs with."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def pidfile(self, name: str) -> Path:
        """Where daemon ``name`` writes its pid (MariaDB's in a directory mysql can write;
        with more ``nodes``, each slurmd's its own: ``slurmd-NODE``)."""
        if name == "slurmd" and self.nodes:
            name = f"slurmd-{self.node}"
        return self.base / ("mysql-run" if name == "mariadb" else "run") / f"{name}.pid"

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """A Slurm client command against this cluster; its stdout."""
        p = subprocess.run(
            args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    # -- start ------------------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        t0 = time.monotonic()
        if gone := missing():
            raise RuntimeError(
                f"Slurm test cluster: {', '.join(gone)} not installed; run "
                f"`bash scripts/ensure-slurm.sh` (apt-get install -y {' '.join(PACKAGES)})"
            )
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)  # munge and mysql must reach their dirs below
        for d in ("etc", "run", "log", "state", "spool"):
            (self.base / d).mkdir(exist_ok=True)
        self.ports = {k: free_port() for k in ("db", "dbd", "ctld", "slurmd")}
        self._munge()
        self._mariadb()
        self._write_confs()
        self._daemon(["slurmdbd"], "slurmdbd")
        wait_for("slurmdbd", lambda: self._sacctmgr_ok(), 30)
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER, check=False)
        self.run("sacctmgr", "-i", "add", "account", ",".join(ACCOUNTS), "Cluster=" + CLUSTER,
                 check=False)  # fmt: skip
        for user, account in {"root": "ml", **USERS}.items():
            if user != "root":
                _ensure_user(user)
            self.run("sacctmgr", "-i", "add", "user", user, f"Account={account}", check=False)
        self._daemon(["slurmctld"], "slurmctld")
        self._daemon(["slurmd"], "slurmd")
        for n in self.nodes:
            self._daemon(["slurmd", "-N", n], f"slurmd-{n}")
        wait_for("the node to be idle", lambda: "idle" in self.node_state(), 30)
        if self.nodes:
            wait_for("the nodes to be idle", lambda: self.run(
                "sinfo", "-h", "-p", NODES_PARTITION, "-o", "%T", check=False).strip() == "idle",
                30)  # fmt: skip
        self.started_s = time.monotonic() - t0
        return self

    def _munge(self) -> None:
        """munged on its default socket (Slurm's client commands talking to slurmdbd take no
        other), with a key of our own; one already answering there is used as it is."""
        self.munge_socket = MUNGE_SOCKET
        if self._munge_ok():
            return
        mdir = self.base / "munge"
        (mdir / "key").mkdir(parents=True, exist_ok=True)
        key = mdir / "key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        pw = pwd.getpwnam("munge")
        MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        for p in (mdir, mdir / "key", key, MUNGE_SOCKET.parent):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(mdir, 0o755)
        os.chmod(MUNGE_SOCKET.parent, 0o755)
        os.chmod(mdir / "key", 0o700)
        os.chmod(key, 0o400)
        subprocess.run(
            [
                "munged", f"--socket={MUNGE_SOCKET}", f"--key-file={key}",
                f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
                f"--seed-file={mdir / 'munged.seed'}", "--num-threads=10",
            ],
            user="munge", group="munge", check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        wait_for("munged", lambda: self._munge_ok(), 10)

    def _munge_ok(self) -> bool:
        enc = subprocess.run(
            ["munge", "-n", "-S", str(self.munge_socket)], capture_output=True, timeout=5
        )
        dec = subprocess.run(
            ["unmunge", "-S", str(self.munge_socket)], input=enc.stdout, capture_output=True,
            timeout=5,
        )  # fmt: skip
        return enc.returncode == 0 and dec.returncode == 0

    def _mariadb(self) -> None:
        ddir, sock = self.base / "mysql", self.base / "mysql-run"
        ddir.mkdir()
        sock.mkdir()
        pw = pwd.getpwnam("mysql")
        for p in (ddir, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        subprocess.run(
            ["mariadb-install-db", "--user=mysql", f"--datadir={ddir}", "--skip-test-db"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self.db_socket = sock / "mysqld.sock"
        log = open(self.base / "log" / "mariadb.log", "ab")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(
            [
                "mariadbd", "--no-defaults", "--user=mysql", f"--datadir={ddir}",
                f"--socket={self.db_socket}", "--bind-address=127.0.0.1",
                f"--port={self.ports['db']}", f"--pid-file={self.pidfile('mariadb')}",
                "--skip-log-bin", "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=0",
            ],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self._procs.append(proc)
        wait_for("mariadbd", lambda: self.pidfile("mariadb").exists() and self._sql("SELECT 1"), 60)
        for host in ("localhost", "127.0.0.1"):
            self._sql(
                f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{host}' IDENTIFIED BY '{DB_PASS}';"
                f"GRANT ALL ON slurm_acct_db.* TO '{DB_USER}'@'{host}';"
            )

    def _sql(self, statement: str) -> bool:
        p = subprocess.run(
            ["mariadb", f"--socket={self.db_socket}", "-uroot", "-e", statement],
            capture_output=True, timeout=10,
        )  # fmt: skip
        if p.returncode != 0:
            raise ValueError(p.stderr.decode(errors="replace").strip())
        return True

    def _write_confs(self) -> None:
        b, p = self.base, self.ports
        auth = "AuthType=auth/munge\n"
        dbd = (
            f"{auth}DbdHost=localhost\nDbdPort={p['dbd']}\nSlurmUser=root\n"
            f"PidFile={self.pidfile('slurmdbd')}\nLogFile={b / 'log' / 'slurmdbd.log'}\n"
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={p['db']}\nStorageUser={DB_USER}\nStoragePass={DB_PASS}\n"
            "StorageLoc=slurm_acct_db\n"
        )
        dbd_conf = self.conf.parent / "slurmdbd.conf"
        # several slurmds on this host: each its own spool, pid file and log (%n, its node)
        slurmd = "-%n" if self.nodes else ""
        dbd_conf.write_text(dbd)
        os.chmod(dbd_conf, 0o600)
        self.conf.write_text(
            f"ClusterName={CLUSTER}\nSlurmctldHost={self.node}(127.0.0.1)\n{auth}"
            f"SlurmctldPort={p['ctld']}\nSlurmdPort={p['slurmd']}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            f"StateSaveLocation={b / 'state'}\nSlurmdSpoolDir={b / 'spool'}{slurmd}\n"
            f"SlurmctldPidFile={self.pidfile('slurmctld')}\n"
            f"SlurmdPidFile={b / 'run' / 'slurmd'}{slurmd}.pid\n"
            f"SlurmctldLogFile={b / 'log' / 'slurmctld.log'}\n"
            f"SlurmdLogFile={b / 'log' / 'slurmd'}{slurmd}.log\n"
            # cgroup v1 memory limits, so a job past its --mem ends OUT_OF_MEMORY, as on a
            # real cluster (jobacct_gather's OverMemoryKill ends it FAILED, signal 9, instead)
            "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n"
            "MpiDefault=none\nSwitchType=switch/none\nJobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/slurmdbd\n"
            "GresTypes=gpu\nAccountingStorageTRES=gres/gpu\n"
            f"AccountingStorageHost=localhost\nAccountingStoragePort={p['dbd']}\n"
            "JobCompType=jobcomp/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nDefMemPerCPU=64\n"
            "SlurmdParameters=config_overrides\n"
            "SlurmdTimeout=10\nSlurmctldTimeout=10\nInactiveLimit=0\nMinJobAge=2\n"
            "KillWait=2\nOverTimeLimit=0\nReturnToService=1\n"
            "SchedulerParameters=sched_interval=2\n"
            "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\n"
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs=16 RealMemory=4096 "
            f"Gres=gpu:{GPUS} State=UNKNOWN\n"
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP "
            "PriorityTier=1\n"
            f"PartitionName=urgent Nodes={self.node} MaxTime=INFINITE State=UP PriorityTier=10\n"
            + "".join(f"NodeName={n} NodeHostname={self.node} NodeAddr=127.0.0.1 "
                      f"Port={free_port()} CPUs=4 RealMemory=2048 State=UNKNOWN\n"
                      for n in self.nodes)
            + (f"PartitionName={NODES_PARTITION} Nodes={','.join(self.nodes)} "
               "MaxTime=INFINITE State=UP\n" if self.nodes else "")
        )  # fmt: skip

        # beside slurm.conf, where slurmd looks for it; this host's cgroup v1 hierarchy
        # GPUs on a GPU-less node: gres.conf naming character devices (a count-only line makes
        # slurmd report none and the controller drain the node INVAL)
        gdir = b / "dev"
        gdir.mkdir(exist_ok=True)
        for i in range(GPUS):
            if not (gdir / f"gpu{i}").exists():
                os.mknod(gdir / f"gpu{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (self.conf.parent / "gres.conf").write_text(
            f"AutoDetect=off\nName=gpu File={gdir}/gpu[0-{GPUS - 1}]\n"
        )
        (self.conf.parent / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
            "ConstrainRAMSpace=yes\nConstrainSwapSpace=no\n"
        )

    def _daemon(self, argv: Sequence[str], name: str) -> None:
        """A Slurm daemon that forks and writes its pid file; fails with its log's last lines."""
        p = subprocess.run(list(argv), env=self.env, capture_output=True, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"{name}: exit {p.returncode}: {p.stderr.decode().strip()}")
        try:
            wait_for(f"{name}'s pid file", lambda: self.pidfile(name).exists(), 15)
        except RuntimeError:
            raise RuntimeError(f"{name} did not start: {self._tail(name)}") from None

    def _tail(self, name: str, n: int = 5) -> str:
        path = self.base / "log" / f"{name}.log"
        try:
            return " | ".join(path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return f"no {path}"

    def _sacctmgr_ok(self) -> bool:
        p = subprocess.run(["sacctmgr", "-n", "list", "cluster"], env=self.env,
                           capture_output=True, timeout=10)  # fmt: skip
        return p.returncode == 0

    # -- state ------------------------------------------------------------------------------
    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-N", "-o", "%T", check=False).strip().lower()

    def job_state(self, job: str) -> str:
        out = self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip()
        if out:
            return out
        out = self.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "State", check=False)
        return (out.strip().splitlines() or [""])[-1].split(" ")[0]

    def wait_state(self, job: str, states: Sequence[str], timeout: float) -> str:
        return wait_for(
            f"job {job} to be {'/'.join(states)}",
            lambda: (s := self.job_state(job)) in states and s,
            timeout,
            0.5,
        )

    def sbatch(self, *args: str) -> str:
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", *args)
        return out.strip().split(";")[0]

    def alive(self, name: str) -> bool:
        try:
            os.kill(int(self.pidfile(name).read_text().split()[0]), 0)
            return True
        except (OSError, ValueError):
            return False

    # -- history ----------------------------------------------------------------------------
    def make_history(self) -> dict[str, str]:
        """Every job end and node event the source reads, made for real (module doc)."""
        j = self.jobs
        # Preemption first, while the node is empty: a low-priority job holding all of it,
        # then an urgent one needing it all.
        j["preempted"] = self.sbatch("-J", "ff-low", "--exclusive", "--wrap", "sleep 600")
        self.wait_state(j["preempted"], ("RUNNING",), 30)
        j["urgent"] = self.sbatch(
            "-J", "ff-urgent", "-p", "urgent", "--exclusive", "--wrap", "sleep 2"
        )
        self.wait_state(j["preempted"], ("PREEMPTED",), 60)
        self.wait_state(j["urgent"], ("COMPLETED",), 60)
        j["timeout"] = self.sbatch("-J", "ff-timeout", "-t", "1", "--wrap", "sleep 600")
        j["failed"] = self.sbatch("-J", "ff-failed", "--wrap", "echo bad; exit 1")
        j["completed"] = self.sbatch("-J", "llama-8b", "--wrap", "sleep 1")
        j["cancelled"] = self.sbatch("-J", "ff-cancel", "--wrap", "sleep 600")
        j["requeued"] = self.sbatch("-J", "ff-requeue", "--requeue", "--wrap", "sleep 600")
        j["array"] = self.sbatch("-J", "ff-array", "-a", "0-1", "--wrap", "exit 0")
        # past its memory: the cgroup's OOM killer ends it, Slurm says OUT_OF_MEMORY
        j["oom"] = self.sbatch("-J", "ff-oom", "--mem=64M", "--wrap", OOM_JOB)
        # GPU jobs of two users in two accounts, at once (one ends FAILED, exit 2)
        for name, (user, account, gpus, script) in GPU_JOBS.items():
            j[name] = self.sbatch("-J", name, f"--uid={user}", "-A", account,
                                  f"--gres=gpu:{gpus}", "--wrap", script)  # fmt: skip
        self.wait_state(j["cancelled"], ("RUNNING",), 30)
        self.run("scancel", j["cancelled"])
        self.wait_state(j["requeued"], ("RUNNING",), 30)
        self.run("scontrol", "requeue", j["requeued"])
        self.wait_state(j["oom"], ("OUT_OF_MEMORY",), 60)
        self.wait_state(j["timeout"], ("TIMEOUT",), 150)
        for name in GPU_JOBS:
            self.wait_state(j[name], ("COMPLETED", "FAILED"), 60)
        # requeued, it starts again once its begin time passes: a second record of one job id
        self.wait_state(j["requeued"], ("RUNNING",), 180)
        self.run("scancel", j["requeued"])
        # A node failure while a job runs: slurmd killed, the controller gives up on it.
        j["node_fail"] = self.sbatch("-J", "ff-nodefail", "--wrap", "sleep 600")
        self.wait_state(j["node_fail"], ("RUNNING",), 30)
        self._kill("slurmd", signal.SIGKILL)
        wait_for("the node to stop responding", lambda: "down" in self.node_state(), 120, 1)
        wait_for(
            "the NODE_FAIL in accounting",
            lambda: "NODE_FAIL" in self.run("sacct", "-n", "-P", "-D", "-j", j["node_fail"],
                                             "-o", "State", check=False),
            90, 1,
        )  # fmt: skip
        self._kill_steps()
        self._daemon(["slurmd"], "slurmd")
        wait_for("the node back", lambda: "down" not in self.node_state(), 60, 1)
        self.wait_state(j["node_fail"], ("RUNNING",), 180)  # requeued, then running again
        self.run("scancel", j["node_fail"])
        # Drain and down with reasons, by an operator (root here).
        self.run("scontrol", "update", f"nodename={self.node}", "state=drain",
                 f"reason={XID_REASON}")  # fmt: skip
        # Ended jobs leave squeue within seconds (MinJobAge): after that every reader of the
        # history sees the same jobs, from accounting alone.
        wait_for("ended jobs to leave the queue",
                 lambda: not self.run("squeue", "-h", check=False).strip(), 60, 1)  # fmt: skip
        # ...and slurmctld's memory (squeue --json lists ended jobs until it purges them, and
        # a requeued job's last record is in accounting only then): from here on every
        # reader sees one history, so importing it twice must store nothing new.
        wait_for("slurmctld to purge the ended jobs", self._purged, 150, 2)
        return j

    def _purged(self) -> bool:
        out = self.run("squeue", "--json", check=False)
        try:
            return not json.loads(out).get("jobs")
        except ValueError:
            return False

    def set_down(self) -> None:
        self.run("scontrol", "update", f"nodename={self.node}", "state=down",
                 f"reason={DOWN_REASON}")  # fmt: skip

    def maintenance(self, minutes: int = 30, start: str = "now") -> None:
        """A planned maintenance window on the node, as an operator books one (``start`` in
        scontrol's words: ``now``, ``now+2hours``; a later one does not flag the node yet)."""
        self.run("scontrol", "create", "reservation", f"reservationname={MAINT_RESERVATION}",
                 f"starttime={start}", f"duration={minutes}", f"nodes={self.node}",
                 "flags=maint,ignore_jobs", "users=root")  # fmt: skip
        if start != "now":
            return
        # slurmctld flags the node on its next reservation pass (seconds, more under load)
        wait_for("the node to show the maintenance",
                 lambda: "MAINT" in self.run("scontrol", "show", "node", self.node, check=False),
                 120, 1)  # fmt: skip

    def end_maintenance(self) -> None:
        self.run("scontrol", "delete", f"reservationname={MAINT_RESERVATION}")

    def resume(self) -> None:
        self.run("scontrol", "update", f"nodename={self.node}", "state=resume")

    def _kill(self, name: str, sig: int = signal.SIGTERM) -> int | None:
        try:
            pid = int(self.pidfile(name).read_text().split()[0])
            os.kill(pid, sig)
            return pid
        except (OSError, ValueError):
            return None

    def _kill_steps(self) -> None:
        """slurmstepd children of a killed slurmd: by the pids of this cluster's spool."""
        p = subprocess.run(["pgrep", "-f", f"slurmstepd.*{self.base}"], capture_output=True,
                           text=True)  # fmt: skip
        for pid in p.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

    # -- stop -------------------------------------------------------------------------------
    def stop(self) -> None:
        if self.alive("slurmctld"):
            self.run("scancel", "--full", "-u", "root", check=False, timeout=10)
            self.run("scancel", "-u", "root", check=False, timeout=10)
            try:
                wait_for("jobs to end", lambda: not self.run("squeue", "-h", check=False).strip(),
                         20, 0.5)  # fmt: skip
            except RuntimeError:
                pass
        for name in (*(f"slurmd-{n}" for n in self.nodes), "slurmd", "slurmctld", "slurmdbd",
                     "mariadb"):  # fmt: skip
            pid = self._kill(name)
            if pid is not None:
                self._reap(pid, 20)
        self._kill_steps()
        mpid = self.base / "munge" / "munged.pid"
        if mpid.exists():
            try:
                pid = int(mpid.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
                self._reap(pid, 10)
            except (OSError, ValueError):
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    @staticmethod
    def _reap(pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.1)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- recording ---------------------------------------------------------------------------------
RECORD = {
    "sacct.json": ["sacct", "--json", "-a", "-D", "-S", "2020-01-01"],
    "squeue.json": ["squeue", "--json"],
    "sinfo.json": ["sinfo", "--json"],
}


def record(cluster: SlurmCluster, out: Path) -> None:
    """What the client commands print now, as the source runs them, into ``out``."""
    from telemetry.collect.slurm import slurm_client

    out.mkdir(parents=True, exist_ok=True)
    env = {"SLURM_CONF": str(cluster.conf), "TZ": "UTC"}
    for name, argv in slurm_client.recorded_commands("2020-01-01T00:00:00").items():
        p = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, timeout=60)
        (out / name).write_bytes(p.stdout)
    meta = {"node": cluster.node, "cluster": CLUSTER, "jobs": cluster.jobs,
            "version": cluster.run("sinfo", "-V").strip()}  # fmt: skip
    (out / "cluster.json").write_text(json.dumps(meta, indent=1) + "\n")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] != "record":
        print("usage: python -m tests.slurm_fixture record DIR", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="ff-slurm-"))
    cluster = SlurmCluster(base)
    try:
        cluster.start()
        print(f"cluster up in {cluster.started_s:.1f} s at {base}", file=sys.stderr)
        t0 = time.monotonic()
        cluster.make_history()
        print(f"history made in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        cluster.maintenance(60, "now+2hours")  # booked, not started: in reservations.txt
        # a GPU job that cannot start on the drained node: pending in squeue
        cluster.jobs["pending"] = cluster.sbatch("-J", "bob-waiting", "--uid=ffbob", "-A",
                                                 "research", "--gres=gpu:2", "--wrap", "sleep 1")
        cluster.wait_state(cluster.jobs["pending"], ("PENDING",), 30)
        record(cluster, Path(argv[1]) / "drained")
        cluster.set_down()
        record(cluster, Path(argv[1]) / "down")
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# -- the pytest fixture ------------------------------------------------------------------------
def _fixture() -> Any:
    import pytest

    @pytest.fixture(scope="session")
    def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
        """A real cluster with its history made (``SlurmCluster.make_history``); the node
        ends drained with ``XID_REASON``. Stopped (jobs cancelled first) after the session."""
        base = Path(tempfile.mkdtemp(prefix="ff-slurm-"))
        cluster = SlurmCluster(base)
        try:
            cluster.start()
            t0 = time.monotonic()
            cluster.make_history()
            cluster.history_s = time.monotonic() - t0  # type: ignore[attr-defined]
            print(f"\nSlurm test cluster up in {cluster.started_s:.1f} s, history made in "
                  f"{cluster.history_s:.1f} s", file=sys.stderr)  # type: ignore[attr-defined]
            yield cluster
        finally:
            cluster.stop()
            shutil.rmtree(base, ignore_errors=True)

    return slurm_cluster


slurm_cluster = _fixture()
