"""Which rank wrote a line and where each rank runs, and the launcher's own lines: pure
recognisers for ``textlogs`` beside ``logline`` (which reads what a line says happened).

Formats as their writers print them: ``srun --label``'s task number, torchrun's ``--tee``
prefix (``[default3]:``), PyTorch's C++ log prefix (``[rank3]:[E218 ...``, ``c10::SetGlobalRank``)
and its excepthook's (``[rank3]: ``, ``distributed_c10d.py``), ProcessGroupNCCL's ``[PG ID 0 PG
GUID 0(default_pg) Rank 3]``, NCCL's ``host:pid:tid [dev] NCCL INFO comm 0x... rank R nranks
N``, and torch.distributed.elastic's worker exits, signals and ``ChildFailedError`` summary.
"""

from __future__ import annotations

import re
import signal
from datetime import datetime

from telemetry import signals as sig

# (kind, detail, xid, pci, host, gpu, time text): logline.Failure
Failure = tuple[str, str, int | None, str | None, str | None, int | None, str | None]

_LABEL = re.compile(r"\[(rank|default)?(\d+)\]: ?| *(\d+): (?=\S)")
# The labels a line starts with, whatever follows (a tqdm line: ``0: \r 50%|...``)
LEAD_LABELS = re.compile(r"(?:\[(?:rank|default)?\d+\]: ?| *\d+: )+")
# pdsh -w (and ClusterShell's clush) print each remote line after its host: ``gpu-b07: text``
# (``"%s: %s"``). A host has a letter first and a digit in it, so a word (``Error: ``) or an
# srun task number (``3: ``) is none; an IPv4 address is one too (pdsh -w 10.0.0.7, a Talos
# node's ``talosctl dmesg``: ``192.168.11.119: kern: warning: [...]: NVRM: Xid ...``). The
# reader takes one only once it labels several lines.
_HOST_LABEL = re.compile(r"([A-Za-z][A-Za-z0-9-]*[0-9][A-Za-z0-9.-]*|\d{1,3}(?:\.\d{1,3}){3}): ")
_GLOG_AFTER = re.compile(r"\[?[IWEF]\d{4} ")
_PG_RANK = re.compile(r"\[(?:PG ID 0 PG GUID [^\]]*? |PG 0 )?Rank (\d+)\]")


def split_prefix(text: str) -> tuple[str, str, int | None]:
    """(label, rest, rank): up to three launcher prefixes and the rank they name.

    - ``[rankN]:`` right before a C++ log header (``[rank3]:[E218 07:34:53.62 ...``, set by
      ``c10::SetGlobalRank``) or as ``[rankN]: `` with a space (the excepthook that
      ``init_process_group`` installs prefixes each traceback line so) is PyTorch's own: the
      global rank, always believed;
    - srun ``--label``'s ``N: `` is the task number: the rank when one task runs per rank, but
      a node's number when torchrun runs under it (a torchrun prefix follows): then no rank;
    - torchrun's ``--tee`` prefix ``[defaultN]:`` (``[rankN]:`` with ``--role rank``) is the
      local rank: the rank of a one-node job, and taken as such when nothing better is said.
    A line without a prefix may still say its rank (``rank_in``)."""
    end, rank, best, task, tee = 0, None, 0, None, None
    for _ in range(3):
        m = _LABEL.match(text, end)
        if m is None:
            break
        kind, n, label = m.groups()
        end = m.end()
        if label is not None:
            task = int(label)
        elif kind == "rank" and (m.group(0).endswith(" ") or _GLOG_AFTER.match(text, end)):
            rank, best = int(n), 3
        else:
            tee = int(n)
    if best < 3:
        rank = (task if tee is None else None) if task is not None else tee
    return text[:end], text[end:], rank


_TASK_ONLY = re.compile(r" *\d+: $")
_TASK_THEN_TEE = re.compile(r" *\d+: \[(?:rank|default)\d+\]:")


def torch_rank(text: str) -> int | None:
    """The global rank PyTorch's own prefix names among a line's labels (``[rank3]: `` of the
    excepthook, ``[rank3]:[E218 ...`` of c10's log), None when no such prefix is there."""
    end = 0
    for _ in range(3):
        m = _LABEL.match(text, end)
        if m is None:
            return None
        kind, n, _label = m.groups()
        end = m.end()
        if kind == "rank" and (m.group(0).endswith(" ") or _GLOG_AFTER.match(text, end)):
            return int(n)
    return None


def host_label(text: str) -> tuple[str, int] | None:
    """(host, where the rest starts) of a line pdsh labelled with its host, or of a line
    slurmstepd wrote with its node (``slurmstepd-gpu20-15: error: ...``); None otherwise."""
    m = _HOST_LABEL.match(text)
    if m is None:
        return None
    host = m.group(1)
    return (host.removeprefix("slurmstepd-") or host), m.end()


def task_is_node(label: str) -> bool:
    """A label of an ``srun --label`` task followed by torchrun's prefix: the job runs a
    torchrun agent per task, so a task number is a node's, never a rank."""
    return _TASK_THEN_TEE.match(label) is not None


def task_only(label: str) -> bool:
    """A label that is an ``srun --label`` task number alone."""
    return _TASK_ONLY.fullmatch(label) is not None


def rank_in(body: str) -> int | None:
    """The rank a line names itself: ProcessGroupNCCL's ``[PG ID 0 PG GUID 0(default_pg) Rank
    3]`` or ``[Rank 3]`` (a rank of the default group, the global one)."""
    if "Rank " not in body:
        return None
    m = _PG_RANK.search(body)
    return int(m.group(1)) if m else None


# torch.distributed.elastic (torchrun), multiprocessing/api.py and agent/server/api.py
_WORKER_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# torchrun's ``Sending process P closing signal SIGTERM``; torch.multiprocessing.spawn's
# ``Terminating process P via signal SIGTERM`` (mp.spawn stopping the others after one failed)
_CLOSING = re.compile(r"(?:Sending process (\d+) closing|Terminating process (\d+) via) signal "
                      r"(\w+)")
_DEATH = re.compile(r"Received (\S+) death signal|SignalException: Process (\d+) got signal: (\d+)")


def closing_pid(body: str) -> int | None:
    """The pid torchrun's ``Sending process P closing signal SIGTERM`` line names (or
    mp.spawn's ``Terminating process P via signal SIGTERM``)."""
    m = _CLOSING.search(body) if "closing signal" in body or "via signal" in body else None
    return int(m.group(1) or m.group(2)) if m else None


_EXITED = re.compile(r"\(pid (\d+)\) exited with code -(\d+)$")
# Signals the launcher or the scheduler send to stop workers (teardown, whoever sent them)
TEARDOWN_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})


def killed_by(detail: str | None) -> tuple[int, str] | None:
    """(pid, signal name) of a ``launcher`` worker exit whose code is a signal other than the
    ones a launcher or scheduler stop workers with (``failed (exitcode: -9) local_rank: 3
    (pid: P)``: SIGKILL, as the OOM killer kills; -11, -6: a native crash); None otherwise.
    The caller checks the launcher had not signalled that pid itself."""
    m = _EXITED.search(detail or "")
    if m is None:
        return None
    name = signal_name(int(m.group(2)))
    return None if name in TEARDOWN_SIGNALS else (int(m.group(1)), name)


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9 (this machine's numbering, Linux's, as the logs' own), else
    ``signal N``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def launcher(body: str) -> Failure | None:
    """A launcher's line (torchrun): a worker it saw exit, a signal it sent or received."""
    if "exitcode" in body and (m := _WORKER_FAILED.search(body)):
        code, local, pid = m.groups()
        detail = f"local rank {local} (pid {pid}) exited with code {code}"
        return sig.WORKER_EXIT, detail, None, None, None, None, None
    if ("closing signal" in body or "via signal" in body) and (m := _CLOSING.search(body)):
        detail = f"launcher sent {m.group(3)} to pid {m.group(1) or m.group(2)}"
        return sig.LAUNCHER_SIGNAL, detail, None, None, None, None, None
    if m := _DEATH.search(body):
        what = m.group(1) or f"signal {m.group(3)}"
        return sig.LAUNCHER_SIGNAL, f"launcher received {what}", None, None, None, None, None
    return None


_NCCL_INIT = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*):(\d+):\d+ \[(\d+)\] NCCL INFO comm "
                        r"0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks (\d+)")
# NCCL >= 2.19 after a communicator's init: "comm 0x55a7be569d00 rank 1 nRanks 8 nNodes 1
# localRanks 8 localRank 1 MNNVL 0": its nodes and ranks (GPUs) per node
_NCCL_SHAPE = re.compile(r" n[Rr]anks (\d+) nNodes (\d+) localRanks (\d+) ")


def nccl_init(body: str) -> tuple[str, int, int, int, int] | None:
    """(host, pid, cuda device, rank, nranks) of NCCL's communicator line (``node-3:12345:12399
    [1] NCCL INFO comm 0x55d5c8e0 rank 5 nranks 16 cudaDev 1 ... - Init COMPLETE``): where a
    rank of that communicator runs. The rank is the global one in the communicator of every
    rank (the largest ``nranks``)."""
    m = _NCCL_INIT.search(body)
    if m is None:
        return None
    host, pid, dev, rank, nranks = m.groups()
    return host, int(pid), int(dev), int(rank), int(nranks)


def nccl_shape(body: str) -> tuple[int, int, int] | None:
    """(nranks, nodes, ranks per node) of NCCL's ``nRanks N nNodes M localRanks L`` line."""
    m = _NCCL_SHAPE.search(body)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def nccl_pid(body: str) -> tuple[str, int] | None:
    """(host, pid) of an NCCL line's ``host:pid:tid [dev]`` header."""
    m = _NCCL_PID.search(body)
    return (m.group(1), int(m.group(2))) if m else None


_NCCL_PID = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*):(\d+):\d+ \[\d+\] NCCL ")
# torchrun's ChildFailedError summary (elastic/multiprocessing/errors/__init__.py), one entry:
#   time      : 2025-02-18_13:35:12      (the launcher's local time; isoformat(sep="_"))
#   host      : node-3.cluster
#   rank      : 5 (local_rank: 1)
#   exitcode  : -6 (pid: 12345)
#   exitcode  : -15 (pid: 24724)  (SIGTERM)   (torch 2.x: a signalled worker's signal named)
_SUMMARY = re.compile(r"(?:^|\s)(time|host|rank|exitcode|error_file|traceback)\s*: (.*?)\s*$")
_SUMMARY_TIME = re.compile(r"\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d(?:\.\d+)?$")
_SUMMARY_RANK = re.compile(r"(\d+) \(local_rank: (\d+)\)$")
_SUMMARY_EXIT = re.compile(r"(-?\d+) \(pid: (\d+)\)(?:\s+\((SIG[A-Z0-9]+)\))?$")


_FIELD_START = re.compile(r"(?:^|\s)(?:time|host|rank|exitcode|error_file|traceback)\s*: ")


def summary_fields(body: str) -> list[tuple[str, object]]:
    """The fields of a torchrun summary entry written on one line (a log shipper that joined
    its lines: ``[2]: time : 2024-08-23_22:22:58 host : algo-2 rank : 2 (local_rank: 2)
    exitcode : -6 (pid: 189) error_file: <N/A> traceback : Signal 6 ...``), in order; [] for a
    line holding fewer than two."""
    starts = [m.start() for m in _FIELD_START.finditer(body)]
    if len(starts) < 2:
        return []
    segs = [body[a:b] for a, b in zip(starts, [*starts[1:], len(body)], strict=True)]
    return [f for seg in segs if (f := summary_field(seg)) is not None]


def summary_field(body: str) -> tuple[str, object] | None:
    """One field of a torchrun failure summary entry as (name, value): ``time`` a naive
    datetime, ``host`` text, ``rank`` (rank, local rank), ``exitcode`` (code, pid, the signal's
    name or None); None for
    any other line (a line merely shaped like one is told apart by its value)."""
    m = _SUMMARY.search(body)
    if m is None:
        return None
    name, value = m.groups()
    if name == "time":
        if not _SUMMARY_TIME.match(value):
            return None
        try:
            return name, datetime.fromisoformat(value.replace("_", "T", 1))
        except ValueError:
            return None
    if name == "rank":
        r = _SUMMARY_RANK.match(value)
        return (name, (int(r.group(1)), int(r.group(2)))) if r else None
    if name == "exitcode":
        e = _SUMMARY_EXIT.match(value)
        return (name, (int(e.group(1)), int(e.group(2)), e.group(3))) if e else None
    if name == "host":
        return (name, value) if value and " " not in value else None
    return name, value
