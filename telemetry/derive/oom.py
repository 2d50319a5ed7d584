"""Who sent a rank's SIGKILL, where the kernel says it: its OOM killer.

A worker torchrun saw die of SIGKILL (``exitcode  : -9 (pid: 8179)  (SIGKILL)``) is of unknown
cause (``evidence.KILLED_BY_SIGKILL``): the kernel's OOM killer, a cgroup's limit, a person or
a health agent may have sent it. The OOM killer says which process it killed, in the host's
kernel log (``signals.HOST_OOM``: ``Out of memory: Killed process 8179 (python3) ...`` or
``Memory cgroup out of memory: Killed process ...``, mm/oom_kill.c). When that pid on that
host is the worker's, within ``NEAR_S`` of its death, the rank died because its host's memory
ran out: that is the cause, and the rank is still the culprit. A kill whose host is not known
(a kernel log that names no node), of another pid or on another host says nothing of it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from telemetry.derive.evidence import CAUSES, KILLED_BY_SIGKILL, Evidence
from telemetry.signals import HOST_OOM, WORKER_KILLED

NEAR_S = 300  # a pid is reused in time: the kill and the death must be this close
KILLED_BY_OOM = replace(CAUSES[WORKER_KILLED], confidence=0.8,
                        label="killed by the kernel's OOM killer (host out of memory)")  # fmt: skip
_KILLED = re.compile(r"Killed process (\d+) ")
_PID = re.compile(r"\(pid (\d+)\)$")


def oom_killed(evs: list[Evidence]) -> None:
    """Give each SIGKILLed worker of ``evs`` the OOM killer's cause where its kill is there
    (module doc), in place; the kernel's line is added to its detail."""
    kills: dict[tuple[str, int], list[Evidence]] = {}
    for e in evs:
        if e.kind == HOST_OOM and e.host and (m := _KILLED.search(e.detail or "")):
            kills.setdefault((e.host, int(m.group(1))), []).append(e)
    if not kills:
        return
    for e in evs:
        if e.kind != WORKER_KILLED or e.rule is not KILLED_BY_SIGKILL or not e.host:
            continue
        if (m := _PID.search(e.detail or "")) is None:
            continue
        near = [k for k in kills.get((e.host, int(m.group(1))), [])
                if abs(k.ts - e.ts) <= NEAR_S * 1e9]  # fmt: skip
        if near:
            e.rule = KILLED_BY_OOM
            e.detail = f"{e.detail}; the kernel: {near[0].detail}"
