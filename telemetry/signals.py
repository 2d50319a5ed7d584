"""The evidence a cluster leaves about a failure, in one vocabulary.

A *signal* is one timestamped line that says something went wrong (an XID in a node's kernel
log, an NCCL watchdog timeout, a Slurm cancellation, a NaN loss ...). Log readers produce them,
the interruption inference weighs them, the store keeps them in table ``signals`` and the
Failures page shows them as evidence. Keeping the kinds here, apart from any reader, lets every
producer and consumer agree on the words without importing each other.

A ``CheckpointEvent`` is a checkpoint save or load as a training log tells it; together with
the checkpoint directories it says which step a restart restored.

Times are naive ``datetime`` in UTC (readers convert at the edge) or ``None`` when the line has
no wall time (plain ``dmesg`` counts seconds since boot).

Here, below the sources, the store and ``telemetry.derive``, so each imports the words and none
imports another for them (``tests/test_layering.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

XID = "xid"
NCCL_TIMEOUT = "nccl_timeout"
NCCL_ERROR = "nccl_error"
IB_ERROR = "ib_error"
CUDA_ECC = "cuda_ecc"
CUDA_ILLEGAL_ADDRESS = "cuda_illegal_address"
CUDA_LAUNCH_FAILURE = "cuda_launch_failure"
CUDA_OOM = "cuda_oom"
# Any other failed CUDA call (``Cuda failure 999 'unknown error'``, NCCL's ``unhandled cuda
# error``): a CUDA call failed, and the line does not say whether the GPU or the program.
CUDA_ERROR = "cuda_error"
# The CUDA runtime's cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or
# unavailable": the GPU the rank was given cannot be used, held by another process in exclusive
# mode (a previous job's leftover) or gone bad under the driver. The node's fault either way,
# never the program's (E3SM-Project/E3SM#8699: nid004069's GPU, on every job that used it).
CUDA_DEVICE_UNAVAILABLE = "cuda_device_unavailable"
# NCCL refusing how it was called or configured (its ``ncclInvalidUsage``/``ncclInvalidArgument``
# results, ``no algorithm/protocol available`` for an NCCL_ALGO the fabric lacks): the
# program's or its configuration's fault, not the network's.
NCCL_USAGE = "nccl_usage"
# The NVIDIA driver's own word that a GPU failed, in lines that carry no XID code (kernel log):
# "... has fallen off the bus and is not responding to commands" (what XID 79 reports), "GPU0
# _kgspRpcRecvPoll: GSP RM heartbeat timed out" / "GSP Timeout" (the GSP, XID 119's class) and
# "RmInitAdapter failed!" (a GPU the driver could not bring up). Hardware on the line's host.
GPU_OFF_BUS = "gpu_off_bus"
GSP_TIMEOUT = "gsp_timeout"
GPU_INIT_FAILED = "gpu_init_failed"
DRIVER_GPU_KINDS = frozenset({GPU_OFF_BUS, GSP_TIMEOUT, GPU_INIT_FAILED})
# libnvidia-container's ``nvidia-container-cli: detection error: driver error: timed out``
# (``initialization error: driver rpc error: timed out`` in later versions): its helper process
# called NVML and the NVIDIA driver did not answer within the RPC timeout (error.c's
# error_set_rpc). A host whose GPU driver hangs, not a line of the driver: the GPU is the usual
# cause, never certain (NVIDIA gpu-operator#523: "might be due to the faulty GPU on the node").
GPU_DRIVER_TIMEOUT = "gpu_driver_timeout"
# The kernel's word that a process crashed inside the NVIDIA driver's user-space library:
# ``python[3551]: segfault at 1378 ip ... error 4 in libcuda.so.418.67[...]`` (arch/x86/mm/
# fault.c) or ``traps: python[1234] general protection fault ip:... in libcuda.so.1[...]``
# (traps.c). The crash is on the line's host; a GPU going bad under the driver is the usual
# reason, a driver bug another (ai4d-iasc/trixie#55: cn110's GPU, replaced).
GPU_DRIVER_CRASH = "gpu_driver_crash"
# A GPU out of reach, as NVML and the PCIe layer say it: nvidia-smi's ``Unable to determine the
# device handle for GPU0000:03:00.0: Unknown Error`` or ``GPU is lost`` (rwth-i6/returnn#1486),
# and AER's fatal error on the GPU's own link, ``nvidia 0000:03:00.0: AER: can't recover``
# (returnn#1500). The GPU or its slot most often; its host's. Corrected AER errors, the link
# retrying, are not read.
GPU_UNREACHABLE = "gpu_unreachable"
# Host lines that place a failure on their host's GPU or its driver without an XID code
HOST_GPU_KINDS = frozenset({*DRIVER_GPU_KINDS, GPU_DRIVER_TIMEOUT, GPU_DRIVER_CRASH,
                            GPU_UNREACHABLE})
# A Python traceback the log ends inside, before its ``Type: message`` line (a paste or a log
# cut short): a failure was under way, and what it was is not in the lines.
TRACEBACK_CUT = "traceback_cut"
NAN_LOSS = "nan_loss"
TRACEBACK = "traceback"
SLURM_TASK_KILLED = "slurm_task_killed"
SLURM_NODE_FAILURE = "slurm_node_failure"
SLURM_TIME_LIMIT = "slurm_time_limit"
SLURM_PREEMPTED = "slurm_preempted"
SLURM_CANCELLED = "slurm_cancelled"
# From the Slurm source (``collect.slurm.slurm_source``): job ends and node events of the scheduler.
SLURM_REQUEUED = "slurm_requeued"
# slurmstepd's ``*** JOB N ON HOST CANCELLED AT T DUE TO JOB REQUEUE ***``: ``scontrol requeue``
# stopped the job to queue it again, as a job's own handler does on the signal before its time
# limit or preemption (submitit, Lightning's auto-requeue on SIGUSR1), or an operator. Planned.
SLURM_JOB_REQUEUE = "slurm_job_requeue"
SLURM_JOB_FAILED = "slurm_job_failed"
SLURM_OOM = "slurm_oom"
SLURM_NODE_DOWN = "slurm_node_down"  # drained or down with a reason naming no XID or GPU
SLURM_NODE_GPU = "slurm_node_gpu"  # drained or down with a reason naming a GPU
SLURM_MAINTENANCE = "slurm_maintenance"  # a node in a maintenance reservation
# From PyTorch's flight recorder (``collect.logs.flight_recorder``): a collective one rank never
# called while the others waited in it; the signal's host is that rank's.
COLLECTIVE_HANG = "collective_hang"
# From the launcher (torchrun/torch.distributed.elastic): a worker it saw exit (``failed
# (exitcode: 1) local_rank: 3``, the ``ChildFailedError`` summary) and the signals it sent the
# rest (``Sending process N closing signal SIGTERM``). The teardown of a failure, never its cause.
WORKER_EXIT = "worker_exit"
LAUNCHER_SIGNAL = "launcher_signal"
# c10d's TCPStore connection failing (``[c10d] recvValue failed on SocketImpl(...): Connection
# reset by peer``, ``[c10d] While waitForInput, poolFD failed``, ``waitForInput: socket ...
# timed out after 900000ms``): a rank lost the job's store, which rank 0's agent or the
# rendezvous host serves, because that process or host went away or the network failed. What
# the ranks see as a job comes down (torch prints it at an ordinary exit too): teardown, never
# a cause.
STORE_LOST = "store_lost"
# A worker torchrun saw die of a signal nobody in the job sent it (its summary's ``exitcode  : -9
# (pid: P)  (SIGKILL)``, as the OOM killer kills; ``(SIGSEGV)``, ``(SIGABRT)``: a native crash):
# that rank's own death, not teardown. A pid the launcher had sent a closing signal is teardown.
WORKER_KILLED = "worker_killed"
# What a worker's entry says when torchrun's summary lists no other failure (``Failures:
# <NO_OTHER_FAILURES>``): the launcher saw every other worker of its node end only because it
# stopped them, so this worker's death is the only one there.
NO_OTHER_FAILURES = "torchrun saw no other failure"
# The same of srun: its ``task N: Killed`` on one node is the only failure line of the job
# (``derive.waits.killed_alone``); the task's node is where it died, its rank unknown.
SRUN_SAW_NO_OTHER_FAILURE = "srun saw no other failure"
# From a host's kernel log (kern.log, journald, ``dmesg -T``): the kernel's OOM killer killed a
# process (mm/oom_kill.c: ``Out of memory: Killed process 8179 (python3) total-vm:...``, or
# ``Memory cgroup out of memory: Killed process ...`` at a cgroup's limit). Never a cause alone
# (any process of the host): it says who sent a rank's SIGKILL where the pid is the rank's
# (``derive.oom``).
HOST_OOM = "host_oom"
# Derived (``derive.waits.lost_node``): every rank of one host and its agent gone at once, the
# host Slurm's ``srun: error: NODE: task N: Killed`` names while the other hosts' ranks log
# their peers gone.
NODE_LOST = "node_lost"
# Derived (``derive.agents.agent_gap``): a rank its launcher saw exit 0 while the others were
# still in a collective (it lists every worker that did not), which then lost their peer.
WORKER_LEFT = "worker_left"
# The trainer stopping on purpose: Megatron-LM's --exit-duration-in-mins, --exit-interval and
# --exit-signal-handler ("exiting program ..."), "Training completed" (Hugging Face, TorchTitan).
PLANNED_EXIT = "planned_exit"

SIGNAL_KINDS = (
    XID,
    NCCL_TIMEOUT,
    NCCL_ERROR,
    IB_ERROR,
    CUDA_ECC,
    CUDA_ILLEGAL_ADDRESS,
    CUDA_LAUNCH_FAILURE,
    CUDA_OOM,
    CUDA_ERROR,
    CUDA_DEVICE_UNAVAILABLE,
    NCCL_USAGE,
    GPU_OFF_BUS,
    GSP_TIMEOUT,
    GPU_INIT_FAILED,
    GPU_DRIVER_TIMEOUT,
    GPU_DRIVER_CRASH,
    GPU_UNREACHABLE,
    NAN_LOSS,
    TRACEBACK,
    TRACEBACK_CUT,
    SLURM_TASK_KILLED,
    SLURM_NODE_FAILURE,
    SLURM_TIME_LIMIT,
    SLURM_PREEMPTED,
    SLURM_CANCELLED,
    SLURM_REQUEUED,
    SLURM_JOB_REQUEUE,
    SLURM_JOB_FAILED,
    SLURM_OOM,
    SLURM_NODE_DOWN,
    SLURM_NODE_GPU,
    SLURM_MAINTENANCE,
    COLLECTIVE_HANG,
    WORKER_EXIT,
    LAUNCHER_SIGNAL,
    STORE_LOST,
    PLANNED_EXIT,
    WORKER_KILLED,
    HOST_OOM,
    NODE_LOST,
    WORKER_LEFT,
)
# training/job logs, kernel logs, the scheduler, exporters, flight-recorder dumps
SOURCES = ("log", "kernel", "slurm", "dcgm", "flight_recorder")
SIGNAL_COLUMNS = (
    "ts", "run_id", "host", "gpu", "kind", "xid", "detail", "origin", "line", "source", "rank"
)

# "load" is a load's start (or a load known from one line); "load_end" its finish when the log
# says both, so the restore's seconds are measured (goodput's checkpoint_restore)
CHECKPOINT_EVENT_KINDS = ("save_start", "save_end", "load", "load_end")

MAX_LINE_CHARS = 1000  # a signal keeps at most this much of its line
MAX_DETAIL_CHARS = 240
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def clean_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` without ANSI colour codes or control characters (tabs stay), at most ``limit``
    characters: what a page or a CSV cell can show safely."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CONTROL.sub("", text)[:limit].strip()


@dataclass(frozen=True, slots=True)
class Signal:
    ts: datetime | None
    kind: str  # one of SIGNAL_KINDS
    host: str | None
    gpu: int | None
    xid: int | None
    detail: str  # short: the exception line, the XID message, the Slurm reason
    origin: str  # file:line
    line: str  # the raw line, cleaned (clean_line)
    source: str = "log"  # one of SOURCES
    rank: int | None = None  # the training process (global rank) that wrote the line


@dataclass(frozen=True, slots=True)
class CheckpointEvent:
    ts: datetime | None
    kind: str  # one of CHECKPOINT_EVENT_KINDS; a load's finish after its start is "load_end"
    step: int | None  # None when the line does not say it
    path: str | None
    origin: str  # file:line
    line: str


def signals_frame(signals: Iterable[Signal], run_id: str | None) -> pd.DataFrame:
    """Signals as the store's ``signals`` table: columns ``SIGNAL_COLUMNS`` in that order."""
    rows = [
        (s.ts, run_id, s.host, s.gpu, s.kind, s.xid, s.detail, s.origin, s.line, s.source, s.rank)
        for s in signals
    ]
    df = pd.DataFrame(rows, columns=list(SIGNAL_COLUMNS))
    df["ts"] = pd.to_datetime(df["ts"])
    for col in ("gpu", "xid", "rank"):
        df[col] = df[col].astype("Int64")
    return df


# A GPU's PCI bus id, as an XID line names it. NVRM's "(PCI:0000:3b:00)" and nvidia-smi's or
# dcgm-exporter's "00000000:3B:00.0": here, with the words of the signals, because the
# derivation (naming an XID's GPU) and the queries (a failed GPU's identity) both read it.
_PCI = re.compile(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?")
_NVRM = re.compile(r"Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\)")


def pci_bus(text: str | None) -> tuple[int, int, int] | None:
    """A PCI bus id in either notation as (domain, bus, device); None when it is not one."""
    m = _PCI.fullmatch(text.strip()) if isinstance(text, str) else None
    return None if m is None else (int(m[1] or "0", 16), int(m[2], 16), int(m[3], 16))


def line_bus(line: str | None) -> str | None:
    """The PCI bus id an ``NVRM: Xid (PCI:0000:3b:00): ...`` line names, as written."""
    m = _NVRM.search(line) if isinstance(line, str) else None
    return m[1] if m and pci_bus(m[1]) is not None else None


def same_bus(a: str | None, b: str | None) -> bool:
    """Whether two PCI bus ids in either notation (NVRM's, nvidia-smi's) are one device."""
    return pci_bus(a) is not None and pci_bus(a) == pci_bus(b)
