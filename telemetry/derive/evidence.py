"""Why a run stopped: the ranking of failure evidence and its gathering near each stop.

Every cluster already says why a job died, in several voices at once: the kernel log of one
node (``NVRM: Xid 79``), dcgm-exporter's XID gauge, Slurm (``DUE TO NODE FAILURE``), NCCL on
every rank (watchdog timeouts, IB errors), the Python traceback of each rank and the launcher
tearing the rest down. On a multi-node job one rank's failure makes every other rank log
"remote process exited" and IB completion errors: a thousand lines of *cascade* for one line
that *initiated* it. So each item is first given its role (``roles``):

- *initiating*: a failure of its own (an XID, ECC, CUDA error or OOM, a segfault or Python
  exception on one rank, a NaN loss, a node failure, a rank missing from a collective);
- *cascade*: what other ranks log because of it (NCCL "remote process exited", peer and
  socket errors, IB errors after another rank failed, watchdog timeouts of the ranks that
  waited, tracebacks whose exception is one of those);
- *teardown*: the launcher and scheduler ending the job (torchrun's SIGTERMs and its
  ``ChildFailedError`` summary, srun killing tasks, a job ending FAILED);
- *context*: anything else in the window (a cancellation, a checkpoint line).

The cause is the **earliest initiating item**, with its rank and host; network errors are
initiating only when they come before every other initiating item (by more than
``CLOCK_SKEW_S``): a link that went down first. Hardware on the same host explains a software
error there (``SAME_FAULT_S``): an XID 79 explains the CUDA error its rank then raised. A Slurm
preemption or time limit says outright that the stop was planned, and wins. Only when nothing
initiates does the old ranking decide among the rest (``CAUSES``: IB over the NCCL error it
causes over a bare watchdog timeout). ``CAUSES`` and ``XID_COMPONENTS`` are the one table that
maps each voice onto the Llama 3 taxonomy the store uses.

Confidence is the rule's own (about 0.9 for hardware on the run's hosts, 0.5-0.6 for a bare
watchdog), less ``UNKNOWN_HOSTS_PENALTY`` for host-specific evidence when the run's hosts are
unknown (an XID anywhere in the fleet could be a neighbour's); nothing at all is ``Unknown``
at ``NO_CAUSE_CONFIDENCE``. Pure: frames in, plain objects out.

Long module: the ranking table (``CAUSES``, the XID mapping) and the choice it drives are read
together; split, each half would need the other open to be understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from telemetry.reference import llama3_interruptions, xids
from telemetry.signals import (  # the signal vocabulary, defined once
    COLLECTIVE_HANG,
    CUDA_DEVICE_UNAVAILABLE,
    CUDA_ECC,
    CUDA_ERROR,
    CUDA_ILLEGAL_ADDRESS,
    CUDA_LAUNCH_FAILURE,
    CUDA_OOM,
    GPU_DRIVER_CRASH,
    GPU_DRIVER_TIMEOUT,
    GPU_INIT_FAILED,
    GPU_OFF_BUS,
    GPU_UNREACHABLE,
    GSP_TIMEOUT,
    IB_ERROR,
    LAUNCHER_SIGNAL,
    NAN_LOSS,
    NCCL_ERROR,
    NCCL_TIMEOUT,
    NCCL_USAGE,
    NODE_LOST,
    PLANNED_EXIT,
    SLURM_CANCELLED,
    SLURM_JOB_FAILED,
    SLURM_JOB_REQUEUE,
    SLURM_MAINTENANCE,
    SLURM_NODE_DOWN,
    SLURM_NODE_FAILURE,
    SLURM_NODE_GPU,
    SLURM_OOM,
    SLURM_PREEMPTED,
    SLURM_REQUEUED,
    SLURM_TASK_KILLED,
    SLURM_TIME_LIMIT,
    STORE_LOST,
    TRACEBACK,
    TRACEBACK_CUT,
    WORKER_EXIT,
    WORKER_KILLED,
    WORKER_LEFT,
    XID,
)
from telemetry.vocabulary import PLANNED_CATEGORY, PLANNED_COMPONENT

UNKNOWN = "Unknown"
NO_CAUSE_CONFIDENCE = 0.2
UNKNOWN_HOSTS_PENALTY = 0.15
XID_DUPLICATE_S = 120.0  # a dcgm XID this close to the same kernel-log XID is that XID
CLOCK_SKEW_S = 5.0  # a network error this much before the first initiating item started it
SAME_FAULT_S = 120.0  # hardware on a host this close to a software error there explains it

INITIATING, CASCADE, TEARDOWN, CONTEXT = "initiating", "cascade", "teardown", "context"
NETWORK_KINDS = frozenset({IB_ERROR, NCCL_ERROR})  # cascade unless they came first
WAITING_KINDS = frozenset({NCCL_TIMEOUT})  # ranks that waited: cascade whenever a cause exists
TEARDOWN_KINDS = frozenset(
    {WORKER_EXIT, LAUNCHER_SIGNAL, SLURM_TASK_KILLED, SLURM_REQUEUED, SLURM_JOB_FAILED, STORE_LOST}
)
# The exception a rank's traceback ends in: the launcher stopping it, or the collective it was
# in failing because another rank went away (torch.distributed's DistBackendError et al.).
_TEARDOWN_EXC = ("ChildFailedError", "SignalException", "KeyboardInterrupt", "SystemExit")
_CASCADE_EXC = (
    "DistBackendError", "DistNetworkError", "DistStoreError", "Connection reset by peer",
    "Connection closed by peer", "Broken pipe", "was aborted", "is aborted", "Socket Timeout",
    "recvBytes", "sendBytes", "Watchdog caught", "NCCL communicator", "remote process exited",
    "Timed out waiting",  # gloo's wait for a peer that never came (its watchdog timeout)
)  # fmt: skip


@dataclass(frozen=True)
class Rule:
    rank: int  # 0 is the strongest explanation of a stop
    component: str
    category: str
    confidence: float
    label: str  # words for the description
    host_specific: bool = True  # about one machine (penalised when the run's hosts are unknown)


def _rule(rank: int, component: str, confidence: float, label: str, host: bool = True) -> Rule:
    category = {c.component: c.category for c in llama3_interruptions()}[component]
    return Rule(rank, component, category, confidence, label, host)


def _planned(label: str) -> Rule:
    return Rule(0, PLANNED_COMPONENT, PLANNED_CATEGORY, 0.95, label, False)


# The whole ranking and mapping (module doc). XIDs are resolved per code by XID_COMPONENTS.
CAUSES: dict[str, Rule] = {
    SLURM_PREEMPTED: _planned("Slurm preemption"),
    SLURM_JOB_REQUEUE: _planned("Slurm requeue (scontrol requeue: the job's own handler or an "
                                "operator)"),
    PLANNED_EXIT: _planned("planned exit of the trainer"),
    SLURM_TIME_LIMIT: _planned("Slurm time limit"),
    SLURM_MAINTENANCE: _planned("Slurm maintenance reservation"),
    # A drain/down reason naming a GPU (no XID code: those are XID signals, ranked per code).
    SLURM_NODE_GPU: _rule(1, "Faulty GPU", 0.75, "node drained for a GPU fault (Slurm)"),
    CUDA_ECC: _rule(1, "GPU HBM3 Memory", 0.9, "uncorrectable ECC error"),
    # A GPU the CUDA runtime could not use: gone bad, or held by another process in exclusive
    # mode (a previous job's leftover, or ranks sharing a GPU by misconfiguration, as in most
    # public threads). Its cause is unknown; where one rank alone reports it, the place is not.
    CUDA_DEVICE_UNAVAILABLE: Rule(1, UNKNOWN, UNKNOWN, 0.4,
                                  "GPU busy or unavailable to CUDA (failed, or held by another "
                                  "process)", True),
    # The driver's lines without an XID code (signals.GPU_OFF_BUS): the XID each stands for
    GPU_OFF_BUS: _rule(1, "Faulty GPU", 0.9, "GPU fallen off the bus (NVIDIA driver)"),
    GSP_TIMEOUT: _rule(1, "GPU System Processor", 0.85, "GSP timeout (NVIDIA driver)"),
    GPU_INIT_FAILED: _rule(1, "Faulty GPU", 0.7, "GPU failed to initialise (NVIDIA driver)"),
    # NVML did not answer: a GPU in a bad state most often, a hung driver alone sometimes
    GPU_DRIVER_TIMEOUT: _rule(1, "Faulty GPU", 0.5, "NVIDIA driver timed out (NVML)"),
    # a process crashed inside libcuda: the GPU under it most often, a driver bug sometimes
    GPU_DRIVER_CRASH: _rule(1, "Faulty GPU", 0.4, "crash in the NVIDIA driver's library"),
    # NVML or PCIe lost the GPU: itself or its slot most often, the host's in any case
    GPU_UNREACHABLE: _rule(1, "Faulty GPU", 0.6, "GPU out of reach (NVML or PCIe AER)"),
    SLURM_NODE_FAILURE: _rule(2, "Host Maintenance", 0.85, "Slurm node failure"),
    NODE_LOST: _rule(2, "Host Maintenance", 0.6, "node lost (its ranks and agent gone at once)"),
    SLURM_NODE_DOWN: _rule(2, "Host Maintenance", 0.6, "node drained or down (Slurm)"),
    IB_ERROR: _rule(3, "Network Switch/Cable", 0.7, "InfiniBand error"),
    NCCL_ERROR: _rule(3, "Network Switch/Cable", 0.65, "NCCL error"),
    CUDA_ILLEGAL_ADDRESS: _rule(4, "Software Bug", 0.7, "CUDA illegal memory access", False),
    CUDA_LAUNCH_FAILURE: _rule(4, "Software Bug", 0.65, "CUDA launch failure", False),
    CUDA_OOM: _rule(4, "Software Bug", 0.75, "CUDA out of memory", False),
    NCCL_USAGE: _rule(4, "Software Bug", 0.65, "NCCL invalid usage or configuration", False),
    # A CUDA call failed and nothing says whether the GPU or the program: the cause is unknown
    # (Llama 3 has no row for it), the failing rank is still the one whose call failed.
    CUDA_ERROR: Rule(4, UNKNOWN, UNKNOWN, 0.3, "CUDA error of unknown kind", False),
    SLURM_OOM: _rule(4, "Software Bug", 0.6, "Slurm job out of memory", False),
    # SIGSEGV/SIGABRT of a native crash (torchrun's summary); SIGKILL: KILLED_BY_SIGKILL
    WORKER_KILLED: _rule(4, "Software Bug", 0.6, "killed by a signal", False),
    # A rank that exited 0 while the others were in a collective (a loop that ended early)
    WORKER_LEFT: _rule(4, "Software Bug", 0.6, "a rank left the job early", False),
    # Numerics or a bug most often; silent data corruption cannot be told apart from logs.
    NAN_LOSS: _rule(5, "Software Bug", 0.4, "NaN/Inf loss", False),
    # The rank the others waited for (flight recorder): what the timeouts of the waiting ranks
    # say, with the culprit's host; anything that explains the culprit's stall ranks above.
    COLLECTIVE_HANG: _rule(6, "NCCL Watchdog Timeouts", 0.65, "collective hang, flight recorder"),
    NCCL_TIMEOUT: _rule(6, "NCCL Watchdog Timeouts", 0.55, "NCCL watchdog timeout", False),
    TRACEBACK: _rule(7, "Software Bug", 0.4, "Python traceback", False),
    # The log ends inside a traceback: a failure, of a kind its missing last line would say
    TRACEBACK_CUT: Rule(8, UNKNOWN, UNKNOWN, 0.2, "traceback cut before its exception", False),
}
# A SIGKILL says only that something killed the rank: the kernel's OOM killer, a cgroup's
# memory limit, a person, a scheduler or a health agent. With no line of the sender's, its
# cause is unknown (as the corpus's threads label it: cppo-6, colossalai-3514, robomamba-10,
# deepspeed-3160), not the program's bug; the killed rank is still the one that died first.
KILLED_BY_SIGKILL = Rule(4, UNKNOWN, UNKNOWN, 0.6, "killed by SIGKILL, sender unknown", False)
_SIGKILL = re.compile(r"exited with code -9\b")


# NCCL's word that a peer's socket went away (``Call to recv from PEER failed : Broken pipe``,
# ``Connection closed by remote peer``, ``Connection reset by peer``) or that a system call,
# an allocation or the device failed (``unhandled system error``, ``ncclSystemError: System
# call (e.g. socket, malloc) or external library call failed or device error``), or says both
# in one (``remote process exited or there was a network error``, ``ncclRemoteError``, a proxy's
# ``retcode 6``; retcode 2 is ncclSystemError): what every
# survivor prints when a peer process dies (a segfault, an OOM kill leave no line of their
# own), as when a link fails. The network is one possibility, not the finding (NVIDIA/nccl#795:
# a remote rank's segfault; Megatron-LM#792: a distributed optimizer bug).
PEER_OR_NETWORK = Rule(3, UNKNOWN, UNKNOWN, 0.3,
                       "NCCL lost a peer (the peer exited, or the network failed)", False)
_PEER_GONE = re.compile(r"Broken pipe|[Cc]onnection (?:closed|reset) by (?:remote )?peer"
                        r"|unhandled system error|ncclSystemError|remote process exit"
                        r"|ncclRemoteError|retcode [26]\b")


# An InfiniBand work completion's status (ibv_wc_status) says the fabric failed to deliver only
# when the transport's retries ran out: 12 (IBV_WC_RETRY_EXC_ERR: no ack from the peer's port)
# or 13 (RNR_RETRY_EXC_ERR). Any other is the host's or a program's: 4, a local protection
# error, is GPUDirect RDMA blocked by PCIe ACS most often (NVIDIA/nccl#928's maintainer); 10, a
# remote access error; 5, flushed after an earlier error on the queue pair. Its cause is unknown.
IB_NOT_FABRIC = Rule(3, UNKNOWN, UNKNOWN, 0.3, "InfiniBand completion error that is not the "
                     "fabric's retry failure (the host's RDMA setup, or a program's)", False)
_IB_STATUS = re.compile(r"(?:with error |status=)(\d+)\b")
_IB_FABRIC_STATUS = frozenset({12, 13})


def signal_rule(kind: str, detail: str | None) -> Rule | None:
    """The cause rule of a (non-XID) signal: its kind's, but a worker's death by SIGKILL is of
    unknown cause (``KILLED_BY_SIGKILL``), and so is an NCCL error that says only that a peer
    went away (``PEER_OR_NETWORK``) and an InfiniBand completion status that is not the
    fabric's (``IB_NOT_FABRIC``)."""
    if kind == WORKER_KILLED and _SIGKILL.search(detail or ""):
        return KILLED_BY_SIGKILL
    if kind == NCCL_ERROR and _PEER_GONE.search(detail or ""):
        return PEER_OR_NETWORK
    if kind == IB_ERROR and (m := _IB_STATUS.search(detail or "")) and (
            int(m.group(1)) not in _IB_FABRIC_STATUS):  # fmt: skip
        return IB_NOT_FABRIC
    return CAUSES.get(kind)


# Voices that are not the job's own: the kernel and driver of a host, the flight recorder's
# dumps (dated by the collective the ranks began waiting in, not by anyone noticing), Slurm's
# controller and a node found lost. They date a failure; the job's noticing it is its own line.
NOT_THE_JOB = frozenset({XID, GPU_OFF_BUS, GSP_TIMEOUT, GPU_INIT_FAILED, GPU_DRIVER_TIMEOUT,
                         GPU_DRIVER_CRASH, GPU_UNREACHABLE,
                         COLLECTIVE_HANG, SLURM_NODE_FAILURE, SLURM_NODE_DOWN, SLURM_NODE_GPU,
                         SLURM_MAINTENANCE, NODE_LOST})  # fmt: skip
# Failure signs that never explain a stop alone (a job that ended FAILED says that, not why).
SYMPTOM_KINDS = frozenset({SLURM_TASK_KILLED, SLURM_REQUEUED, SLURM_JOB_FAILED})
# Any other kind (slurm_cancelled, unknown kinds) is context: shown, never a cause.

# XID code -> component (xid_reference.csv; agrees with the simulator's _BEHAVIOUR). Hardware
# codes rank with hardware; application and driver codes rank with CUDA software errors.
XID_COMPONENTS: dict[str, tuple[int, ...]] = {
    "Faulty GPU": (46, 54, 61, 62, 74, 79, 136, 143, *range(144, 151), 155, 158, 160),
    "GPU HBM3 Memory": (48, 63, 64, 94, 95, 156),
    "GPU SRAM Memory": (140,),
    "GPU System Processor": (110, 119, 120),
    "Software Bug": (13, 31, 43, 68, 69, 109),  # application faults (user code)
    "Dependency": (8, 32, 44),  # driver faults
}
XID_CONTEXT = frozenset({45, 92, 121, 137, 154})  # secondary, warnings, meta: never a cause
NODE_LOSS_XIDS = frozenset({79})  # the node is rebooted and drained: its NVMe copy is gone


def _xid(component: str) -> Rule:
    hardware = _rule(1, component, 0.9, "XID")
    return hardware if hardware.category == "GPU" else _rule(4, component, 0.6, "XID", False)


_XID_RULES = {code: _xid(comp) for comp, codes in XID_COMPONENTS.items() for code in codes}
_UNLISTED_XID = _rule(1, "Faulty GPU", 0.7, "XID")  # an XID the reference does not know


def xid_rule(code: int, detail: str | None = None) -> Rule | None:
    """The cause rule of an XID code; None for codes that never explain a stop, unless the
    line names the XID it follows: the driver's ``Xid ...: 45, ... caused by previous Xid
    149`` is the channel teardown of XID 149, whose rule it takes."""
    if code in XID_CONTEXT:
        m = _PREVIOUS_XID.search(detail or "") if detail and "previous Xid" in detail else None
        return xid_rule(int(m.group(1))) if m and int(m.group(1)) != code else None
    return _XID_RULES.get(code, _UNLISTED_XID)


_PREVIOUS_XID = re.compile(r"caused by previous Xid (\d+)")


# -- frame helpers shared with telemetry.derive.inference ----------------------------------


def to_ns(col: pd.Series) -> np.ndarray:
    """Naive-UTC nanoseconds of a time column (aware times are converted to UTC first)."""
    s = pd.to_datetime(col)
    if getattr(s.dt, "tz", None) is not None:
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
    return s.to_numpy("datetime64[ns]").view(np.int64)


def column(df: pd.DataFrame, name: str) -> pd.Series:
    """``df[name]``, or all None when the frame lacks the (optional) column."""
    return df[name] if name in df.columns else pd.Series([None] * len(df), index=df.index)


def opt_int(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def opt_str(v: Any) -> str | None:
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def is_empty(df: pd.DataFrame | None) -> bool:
    return df is None or len(df) == 0


def item(ts: int, kind: str, role: str = "context", **kw: Any) -> dict[str, Any]:
    """One evidence object as stored (JSON): ts, kind, host, gpu, xid, origin, line, role,
    and the rank that wrote it where known."""
    out = {
        "ts": pd.Timestamp(int(ts)).isoformat(),
        "kind": kind,
        "host": kw.get("host"),
        "gpu": opt_int(kw.get("gpu")),
        "xid": opt_int(kw.get("xid")),
        "origin": kw.get("origin"),
        "line": kw.get("line"),
        "role": role,
    }
    if kw.get("rank") is not None:
        out["rank"] = opt_int(kw["rank"])
    if kw.get("uuid"):
        out["uuid"] = kw["uuid"]  # the GPU's UUID, for an RMA
    return out


_TOLD = (TRACEBACK, COLLECTIVE_HANG, WORKER_KILLED, NODE_LOST, WORKER_LEFT)  # detail in words


@dataclass
class Evidence:
    """A signal or an XID event inside a stop's window."""

    ts: int  # ns
    kind: str
    host: str | None
    gpu: int | None
    xid: int | None
    origin: str | None
    line: str | None
    detail: str | None
    rule: Rule | None
    rank: int | None = None
    seq: int = 0  # the order it was gathered in (file order among equal times)
    uuid: str | None = None  # the GPU's, where the store knows it (xid_gpus)

    @property
    def failing(self) -> bool:
        return self.rule is not None or self.kind in SYMPTOM_KINDS or self.kind in TEARDOWN_KINDS

    def key(self) -> tuple[Any, ...]:
        g, x = (-1 if v is None else v for v in (self.gpu, self.xid))
        rank = self.rule.rank if self.rule else 99
        return (self.ts, rank, self.host or "", g, x, self.kind, self.origin or "", self.line or "")

    def item(self, role: str) -> dict[str, Any]:
        kw = {"host": self.host, "gpu": self.gpu, "xid": self.xid, "origin": self.origin,
              "rank": self.rank, "uuid": self.uuid}  # fmt: skip
        return item(self.ts, self.kind, role, line=self.line, **kw)

    def text(self) -> str:
        """The cause in words, e.g. ``XID 79 on node-7 GPU 3 (GPU has fallen off the bus)`` or
        ``CUDA out of memory on rank 5 on node-3``."""
        where = f" on rank {self.rank}" if self.rank is not None and self.kind != XID else ""
        where += f" on {self.host}" if self.host else ""
        where += f" GPU {self.gpu}" if self.gpu is not None else ""
        where += f" ({self.uuid})" if self.uuid and self.gpu is not None else ""
        if self.kind == XID:
            ref = xids().get(self.xid if self.xid is not None else -1)
            return f"XID {self.xid}{where}" + (f" ({ref.message})" if ref else "")
        told = self.kind in _TOLD and self.detail
        detail = f" ({self.detail})" if told else ""
        return f"{self.rule.label if self.rule else self.kind}{where}{detail}"


def _windowed(df: pd.DataFrame, w0: np.ndarray, w1: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows of ``df`` inside one of the (disjoint, sorted) windows, and each row's window:
    the vectorised prefilter that keeps per-row work to the few rows near a stop."""
    df = df[df["ts"].notna()]
    ts = to_ns(df["ts"])
    j = np.searchsorted(w0, ts, "right") - 1
    inside = (j >= 0) & (ts <= w1[np.maximum(j, 0)])
    return df[inside].assign(_ts=ts[inside]), j[inside]


def gather(
    signals: pd.DataFrame | None,
    xid_events: pd.DataFrame | None,
    run_hosts: set[str] | None,
    w0: np.ndarray,
    w1: np.ndarray,
    rank_hosts: dict[int, str] | None = None,
) -> list[list[Evidence]]:
    """Per window [w0, w1] (ns), its signals and XID events on the run's hosts (a host-less
    line is the job's own), in a deterministic order. An XID event repeating a kernel-log XID
    (same host and code within ``XID_DUPLICATE_S``) is dropped; its GPU fills the line's. A
    line that names its rank but not its host gets the rank's host from ``rank_hosts``."""
    hosts_of = rank_hosts or {}
    per: list[list[Evidence]] = [[] for _ in w0]
    kernel: dict[tuple[int, str | None, int], list[Evidence]] = {}

    def ours(host: str | None) -> bool:
        return run_hosts is None or host is None or host in run_hosts

    if not is_empty(signals):
        s, js = _windowed(signals, w0, w1)  # type: ignore[arg-type]
        names = ("kind", "host", "gpu", "xid", "origin", "line", "detail", "rank", "uuid")
        cols = [column(s, c) for c in names]
        for j, t, kind, host, gpu, xid, origin, line, detail, rank, uuid in zip(
            js, s["_ts"], *cols, strict=True
        ):
            host, xid, kind, rank = opt_str(host), opt_int(xid), str(kind), opt_int(rank)
            if not ours(host):
                continue
            if host is None and rank is not None:
                host = hosts_of.get(rank)
            rule = (xid_rule(xid, opt_str(detail)) if xid is not None else None) if kind == XID \
                else signal_rule(kind, opt_str(detail))
            e = Evidence(
                int(t),
                kind,
                host,
                opt_int(gpu),
                xid,
                opt_str(origin),
                opt_str(line),
                opt_str(detail),
                rule,
                rank,
                len(per[j]),
                opt_str(uuid),
            )
            per[j].append(e)
            if kind == XID and xid is not None:
                kernel.setdefault((int(j), host, xid), []).append(e)
    if not is_empty(xid_events):
        x, js = _windowed(xid_events[xid_events["xid"].notna()], w0, w1)  # type: ignore[index]
        cols = [column(x, c) for c in ("host", "gpu", "xid", "source", "uuid")]
        for j, t, host, gpu, xid, source, uuid in zip(js, x["_ts"], *cols, strict=True):
            host, gpu, xid = opt_str(host), opt_int(gpu), int(xid)
            if not ours(host):
                continue
            near = XID_DUPLICATE_S * 1e9
            dup = [e for e in kernel.get((int(j), host, xid), []) if abs(e.ts - t) <= near]
            if dup:
                if dup[0].gpu is None:
                    dup[0].gpu, dup[0].uuid = gpu, opt_str(uuid)
                continue
            ref = xids().get(xid)
            msg = ref.message if ref else "XID not in the reference"
            where = (f" on {host}" if host else "") + (f" GPU {gpu}" if gpu is not None else "")
            per[j].append(
                Evidence(
                    int(t),
                    XID,
                    host,
                    gpu,
                    xid,
                    opt_str(source) or "dcgm",
                    f"XID {xid}{where}: {msg}",
                    msg,
                    xid_rule(xid),
                    None,
                    len(per[j]),
                    opt_str(uuid),
                )
            )
    for evs in per:
        _escalations(evs)
        evs.sort(key=Evidence.key)
    return per


def _escalations(evs: list[Evidence]) -> None:
    """A worker's SIGKILL the launcher reports at least a second after another worker's exit
    is the launcher's own: torchrun stops every other worker once it sees the first failure
    (SIGTERM) and SIGKILLs those still alive after its grace period (30 s by default), so a
    summary lists them ``exitcode : -9`` after its Root Cause (a speculators#1115 paste: rank
    1 exited 1 at 13:02:58, rank 0 -9 at 13:03:29). Teardown, not a death of its own."""
    deaths = [e for e in evs if e.kind in (WORKER_EXIT, WORKER_KILLED)]
    if len(deaths) < 2:
        return
    first = min(e.ts for e in deaths)
    for e in deaths:
        if e.rule is KILLED_BY_SIGKILL and e.ts - first >= 1e9:
            e.kind, e.rule = WORKER_EXIT, None
            e.detail = f"{e.detail}; after the first exit the launcher saw: its stop of the rest"


@dataclass(frozen=True)
class Explanation:
    cause: Evidence | None
    # (evidence, role): the cause, its symptoms (other initiating items), the cascade, the
    # teardown, then context
    ordered: list[tuple[Evidence, str]]
    confidence: float
    node_lost: bool  # a node failure or an XID that drains the node
    cancelled: bool  # a person or script cancelled the job
    # when the failure began (ns): the cause's line (an XID, the culprit's own error, the
    # collective a hang's ranks began waiting in) or an initiating line before it; None when
    # the cause is only what the ranks that waited or the teardown printed
    began: int | None = None

    @property
    def symptoms(self) -> int:
        """Failure items other than the cause: its symptoms, cascade and teardown."""
        return sum(role not in ("cause", CONTEXT) for _, role in self.ordered)

    @property
    def cascade_ranks(self) -> int:
        """Other ranks whose lines were set aside as the cascade of the cause."""
        own = self.cause.rank if self.cause is not None else None
        return len({e.rank for e, role in self.ordered
                    if role == CASCADE and e.rank is not None and e.rank != own})

    @property
    def first_failure_ns(self) -> int | None:
        return min((e.ts for e, role in self.ordered if role != "context"), default=None)

    @property
    def noticed_ns(self) -> int | None:
        """When the job noticed (issue 57, 4): its first own failure line (a watchdog
        timeout, its own error, a teardown line; never the kernel's, the dumps' or the
        controller's) from the failure's start on; None when no line of the job dates it."""
        lo = self.began if self.began is not None else np.iinfo(np.int64).min
        return min((e.ts for e, role in self.ordered if role != CONTEXT
                    and e.kind not in NOT_THE_JOB and e.ts >= lo), default=None)  # fmt: skip


def roles(evs: list[Evidence]) -> list[str]:
    """Each item's role before a cause is chosen (module doc): initiating, cascade, teardown
    or context. A traceback takes the role of the failure its exception line carries; one cut
    before that line initiates only when no other line says what failed (it may be a victim's)."""
    # (an item derived from the lines, seq -1, only borrows its first line's origin to show)
    by_origin = {e.origin: e for e in evs
                 if e.kind != TRACEBACK and e.origin and e.failing and e.seq >= 0}
    told = any(e.failing and e.kind != TRACEBACK_CUT for e in evs)
    out = []
    for e in evs:
        if not e.failing:
            out.append(CONTEXT)
        elif e.kind == TRACEBACK_CUT:
            out.append(CASCADE if told else INITIATING)
        elif e.kind in TEARDOWN_KINDS or e.kind in SYMPTOM_KINDS:
            out.append(TEARDOWN)
        elif e.kind in WAITING_KINDS or e.kind in NETWORK_KINDS:
            out.append(CASCADE)
        elif e.kind == TRACEBACK:
            text = f"{e.detail or ''} {e.line or ''}"
            other = by_origin.get(e.origin)
            if other is not None:
                out.append(CASCADE if other.kind in NETWORK_KINDS | WAITING_KINDS else INITIATING)
            elif any(x in text for x in _TEARDOWN_EXC):
                out.append(TEARDOWN)
            elif any(x in text for x in _CASCADE_EXC):
                out.append(CASCADE)
            else:
                out.append(INITIATING)
        else:
            out.append(INITIATING)
    return out


def _first(evs: list[Evidence]) -> Evidence:
    return min(evs, key=lambda e: (e.ts, e.rule.rank if e.rule else 99, e.seq))


def _placed_twin(first: Evidence, init: list[Evidence]) -> Evidence:
    """``first``, or when its line names no rank or host (a traceback's bare ``RuntimeError:
    CUDA error: uncorrectable ECC error``), the same failure as a line at the same time says
    it with its writer (``[Rank 1] NCCL watchdog thread terminated with exception: CUDA error:
    uncorrectable ECC error``), when those lines name one writer only."""
    if first.rank is not None or first.host is not None:
        return first
    twins = [e for e in init if e.kind == first.kind and e.ts - first.ts <= CLOCK_SKEW_S * 1e9
             and (e.rank is not None or e.host is not None)]  # fmt: skip
    return twins[0] if len({(e.rank, e.host) for e in twins}) == 1 else first


def _choose(evs: list[Evidence], role: list[str]) -> Evidence | None:
    """The cause (module doc): planned first; else the earliest initiating item (network
    errors counting as initiating only when they came first), explained by hardware on its
    host; else the strongest of the rest by ``CAUSES``."""
    ruled = [(e, r) for e, r in zip(evs, role, strict=True) if e.rule is not None]
    planned = [e for e, _ in ruled if e.rule.category == PLANNED_CATEGORY]  # type: ignore[union-attr]
    if planned:
        return _first(planned)
    init = [e for e, r in ruled if r == INITIATING]
    net = [e for e, _ in ruled if e.kind in NETWORK_KINDS]
    if net and init:
        early = _first(init).ts - CLOCK_SKEW_S * 1e9
        net = [e for e in net if e.ts < early]
    if init or net:
        first = _first(init + net)
        if first.kind in NETWORK_KINDS:  # the most specific network voice at that time
            near = [e for e in net if e.ts <= first.ts + CLOCK_SKEW_S * 1e9]
            return min(near, key=lambda e: (-e.rule.confidence, e.ts, e.seq))  # type: ignore[union-attr]
        span = np.inf if first.kind == COLLECTIVE_HANG else SAME_FAULT_S * 1e9
        stronger = [
            e for e in init
            if e.rule.rank < first.rule.rank  # type: ignore[union-attr]
            and e.host is not None and first.host in (None, e.host)
            and abs(e.ts - first.ts) <= span
        ]  # fmt: skip
        return _first(stronger) if stronger else _placed_twin(first, init)
    return min(  # a traceback of the cascade or teardown is a victim's: never the cause
        (e for e, r in ruled if e.kind != TRACEBACK or r == INITIATING),
        key=lambda e: (e.rule.rank, -e.rule.confidence, e.ts, e.seq),  # type: ignore[union-attr]
        default=None,
    )


def explain(
    evs: list[Evidence], hosts_known: bool, role: list[str] | None = None
) -> Explanation:
    """The cause of a window's evidence (module doc) and every item's role beside it: the
    cause, ``symptom`` (other initiating items), ``cascade``, ``teardown``, ``context``.
    ``role``: the items' ``roles`` when the caller has them."""
    role = roles(evs) if role is None else role
    cause = _choose(evs, role)
    ordered = [(cause, "cause")] if cause else []
    for want, name in ((INITIATING, "symptom"), (CASCADE, CASCADE), (TEARDOWN, TEARDOWN),
                       (CONTEXT, CONTEXT)):  # fmt: skip
        ordered += [
            (e, name) for e, r in zip(evs, role, strict=True) if r == want and e is not cause
        ]
    conf = NO_CAUSE_CONFIDENCE
    if cause is not None and cause.rule is not None:
        vague = not hosts_known and cause.rule.host_specific and cause.host is not None
        conf = cause.rule.confidence - (UNKNOWN_HOSTS_PENALTY if vague else 0.0)
    lost = any(
        e.kind in (SLURM_NODE_FAILURE, NODE_LOST) or (e.kind == XID and e.xid in NODE_LOSS_XIDS)
        for e in evs
    )
    cancelled = any(e.kind == SLURM_CANCELLED for e in evs)
    return Explanation(cause, ordered, round(conf, 3), lost, cancelled, _began(cause, evs, role))


def _began(cause: Evidence | None, evs: list[Evidence], role: list[str]) -> int | None:
    """When the failure began: the cause's time, or an earlier initiating line's (hardware
    chosen over the software error it explains), when the cause is a failure of its own, a
    network error that came first or a planned stop; None when it is only a waiting rank's
    timeout or the teardown (the failure began before them, by how much no line says)."""
    if cause is None or cause.rule is None:
        return None
    if cause.rule.category == PLANNED_CATEGORY or cause.kind in NETWORK_KINDS:
        return cause.ts
    mine = next(r for e, r in zip(evs, role, strict=True) if e is cause)
    if mine != INITIATING:
        return None
    return min([cause.ts, *(e.ts for e, r in zip(evs, role, strict=True) if r == INITIATING)])
