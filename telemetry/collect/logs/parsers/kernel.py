"""Kernel logs (syslog, journald ``short-iso`` and ``-o json``, ``dmesg`` and ``dmesg -T``): the
NVIDIA driver's ``NVRM: Xid`` and its other failures (GPU off the bus, GSP timeouts, failed
init), libnvidia-container's driver timeout, which file is a kernel log and whose node it is."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import PurePath

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import Failure, Keyed, LineFormat, Signature
from telemetry.collect.logs.parsers.stamps import PREFIX, stamp

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:, ?(.*))?")


def _xid(body: str) -> Failure | None:
    if m := _XID.search(body):
        rest = (m.group(3) or "").strip()
        detail = f"Xid {m.group(2)}: {rest}" if rest else f"Xid {m.group(2)}"
        return sig.XID, detail[:sig.MAX_DETAIL_CHARS], int(m.group(2)), m.group(1), None, None, \
            None
    return None


# -- journald's JSON export ---------------------------------------------------------------------
_EPOCH = datetime(1970, 1, 1)


def journal_json(raw: str) -> str | None:
    """A ``journalctl -o json`` entry as the line ``journalctl -o short-iso`` would print for it
    (``2026-03-01T09:53:20.123456+00:00 node-7 kernel: NVRM: Xid ...``), so the recognisers read
    it like any journal line; None for any other line. Fields as systemd's JSON export writes
    them (journalctl(1), "Journal Export Formats"): ``__REALTIME_TIMESTAMP`` in microseconds
    since the epoch (a string), ``_HOSTNAME``, ``_TRANSPORT`` ``kernel`` for the kernel ring
    buffer, ``SYSLOG_IDENTIFIER``, and ``MESSAGE``, an array of bytes when it is not UTF-8."""
    if not raw.startswith("{") or '"__REALTIME_TIMESTAMP"' not in raw:
        return None
    try:
        e = json.loads(raw)
        t = _EPOCH + timedelta(microseconds=int(e["__REALTIME_TIMESTAMP"]))
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    msg = e.get("MESSAGE")
    if isinstance(msg, list):
        data = bytes(b for b in msg if isinstance(b, int) and 0 <= b < 256)
        msg = data.decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    kernel = e.get("_TRANSPORT") == "kernel" or e.get("SYSLOG_IDENTIFIER") == "kernel"
    ident = "kernel" if kernel else str(e.get("SYSLOG_IDENTIFIER") or "journal")
    host = e.get("_HOSTNAME")
    head = f"{t.isoformat()}+00:00"
    return f"{head} {host} {ident}: {msg}" if isinstance(host, str) and host else f"{head} {msg}"


def is_kernel_log(path: str, sample_bytes: int = 16384) -> bool:
    """Whether the file at ``path`` reads as a kernel log (syslog, journal or ``dmesg`` lines
    from the kernel) by its first lines: most of them carry a kernel header or a boot time.
    False for a file that cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(sample_bytes).decode("utf-8", "replace")
    except OSError:
        return False
    lines = [ln for ln in head.splitlines()[:50] if ln.strip()]
    if not lines:
        return False
    kernel = 0
    for ln in lines:
        kind, _, _, is_kernel = stamp(journal_json(ln) or PREFIX.sub("", ln, count=1))
        kernel += bool(is_kernel or kind == "boot")
    return kernel * 2 > len(lines)


# -- file names --------------------------------------------------------------------------------
_KERNEL_WORD = r"(?:kern|kernel|syslog|dmesg|messages|journal)"
_HOST_NAMED = re.compile(
    r"(?P<a>[A-Za-z0-9][A-Za-z0-9.-]*?)[-_.]" + _KERNEL_WORD + r"(?:[-_.].*)?"
    r"|" + _KERNEL_WORD + r"[-_.](?P<b>[A-Za-z0-9][A-Za-z0-9.-]*)"
)
_EXTENSION = re.compile(r"\.(?:gz|xz|zst|bz2|log|txt|out|err|\d+)$")


# a folder named for a node: letters and digits (node-7, gpu012), not "log" or "2026-03-01",
# nor a job's, a run's or a temporary folder (job-81234, slurm-81234, run2, pytest-3, tmp1)
_HOST_DIR = re.compile(r"(?!(?i:job|slurm|run|pytest|tmp|temp|logs?|out|output|results?|data"
                       r"|step|iter|epoch|checkpoint|ckpt|attempt|day|backup)[-_.]?[0-9])"
                       r"(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9][A-Za-z0-9.-]*")


def host_from_filename(name: str) -> str | None:
    """The node a kernel log belongs to, from names like ``node-7-kern.log``,
    ``node-7.dmesg.txt`` or ``dmesg-node-7.log``, or from the folder of a log named only for
    what it is (``node-7/kern.log``, ``gpu012/dmesg.txt``: logs gathered one folder per node;
    a folder name with letters and digits, so ``/var/log/kern.log`` names none); None for
    names that name no node (``kern.log.1``, ``syslog``, ``slurm-81234.out``)."""
    path = PurePath(name)
    base = path.name
    while (m := _EXTENSION.search(base)) and m.start() > 0:
        base = base[: m.start()]
    m = _HOST_NAMED.fullmatch(base)
    if m:
        return m.group("a") or m.group("b")
    if re.fullmatch(_KERNEL_WORD, base) and _HOST_DIR.fullmatch(folder := path.parent.name):
        return folder
    return None


def pci_key(pci: str) -> str:
    """``00000000:3B:00.0`` (nvidia-smi) and ``0000:3b:00`` (NVRM) as one key: ``0000:3b:00``."""
    parts = pci.lower().split(".")[0].split(":")
    try:
        dom, bus, dev = (int(p, 16) for p in (["0", *parts] if len(parts) == 2 else parts[-3:]))
    except ValueError:
        return pci.lower()
    return f"{dom:04x}:{bus:02x}:{dev:02x}"


# mm/oom_kill.c __oom_kill_process: "%s: Killed process %d (%s) total-vm:%lukB, ..." with
# "Out of memory" or "Memory cgroup out of memory" (and the oom_kill_allocating_task form);
# kernels before 4.19 print "Out of memory: Kill process N (python) score S or sacrifice
# child", then "Killed process N (python) total-vm:..." alone (NervanaSystems/deepspeech#48)
_OOM_KILL = re.compile(r"(?:Memory cgroup out of memory|Out of memory(?: \([a-z_]+\))?): "
                       r"Killed process (\d+) \(([^)]{1,64})\)"
                       r"|^(?:\[[\d. ]+\] )?Killed process (\d+) \(([^)]{1,64})\) total-vm:")


def _oom_kill(body: str) -> Failure | None:
    """The kernel's OOM killer killed a process (HOST_OOM: never a cause alone, derive.oom)."""
    if m := _OOM_KILL.search(body):
        detail = m.group(0) if m.group(1) else f"Out of memory: Killed process {m[3]} ({m[4]})"
        return sig.HOST_OOM, detail, None, None, None, None, None
    return None


# arch/x86/mm/fault.c show_signal_msg and traps.c, then print_vma_addr's `` in FILE[base+size]``
_DRIVER_CRASH = re.compile(
    r"[\w.:/ -]{1,64}\[\d+\]:? (?:segfault at [0-9a-f]+ ip [0-9a-f]+ sp [0-9a-f]+ error "
    r"[0-9a-f]+|general protection fault ip:[0-9a-f]+ sp:[0-9a-f]+ error:[0-9a-f]+) in "
    r"lib(?:cuda|nvidia-[\w-]+)\.so[\w.]*\[")


FORMAT = LineFormat(
    name="kernel",
    prefilter=(
        r"Xid",
        r"Killed process [0-9]",  # the kernel's OOM killer (HOST_OOM)
        r"fallen off the bus|GSP RM heartbeat timed out|GSP Timeout|RmInitAdapter failed",
        r"GPU is lost|device handle for GPU|nvidia [0-9a-f:.]+: AER: can't recover",  # GPU lost
        r"nvidia-container-cli(?:\.real)?: [a-z]+ error: driver (?:rpc )?error: timed out",
        r"(?:segfault at|general protection fault) .* in lib(?:cuda|nvidia-)",
    ),
    # the OOM killer after the launchers' and schedulers' teardown lines, before srun's errors
    failures=(Keyed(30, "Xid", _xid), Keyed(57, "Killed process", _oom_kill)),
    signatures=(
        Signature(110, sig.GPU_OFF_BUS, ("off the bus",), re.compile(r"fallen off the bus")),
        # the GPU out of reach as NVML and the PCIe layer say it (signals.GPU_UNREACHABLE)
        Signature(115, sig.GPU_UNREACHABLE, ("GPU is lost", "device handle", "AER"),
                  re.compile(r"GPU is lost|Unable to determine the device handle for GPU ?"
                             r"[0-9A-Fa-f:.]+: Unknown Error|(?<![\w-])nvidia [0-9a-f]{4}:"
                             r"[0-9a-f]{2}:[0-9a-f]{2}\.\d: AER: can't recover")),
        Signature(120, sig.GSP_TIMEOUT, ("GSP",), re.compile(r"GSP RM heartbeat timed out|GSP "
                                                            r"Timeout")),
        Signature(130, sig.GPU_INIT_FAILED, ("RmInitAdapter",), re.compile(r"RmInitAdapter "
                                                                          r"failed")),
        # libnvidia-container's helper asked NVML and the driver never answered (signals.py)
        Signature(140, sig.GPU_DRIVER_TIMEOUT, ("nvidia-container-cli",),
                  re.compile(r"nvidia-container-cli(?:\.real)?: \w+ error: driver (?:rpc )?error:"
                             r" timed out")),
        # a process's crash inside the driver's library (signals.GPU_DRIVER_CRASH)
        Signature(145, sig.GPU_DRIVER_CRASH, (" in libcuda", " in libnvidia-"), _DRIVER_CRASH),
    ),
)
