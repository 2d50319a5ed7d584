"""HPE Cray MPICH's error line, which a rank writes as it aborts the job: ``MPICH ERROR [Rank
R] [job id J] [Fri Aug 28 22:45:13 2026] [nid004069] - Abort(C) (rank R in comm X): Fatal error
in PMPI_Send: ...`` (Frontier, Perlmutter, LUMI, Aurora). Some builds leave out the job id,
the time or the host, or print ``[unknown]`` before the host; the message may follow on the
next line. The rank that aborts is no culprit by itself: every rank whose peer died aborts
alike (an MPI error stack after a peer's crash), so it is a worker's exit that gives the
rank's host. Its time (the node's clock, ``ctime`` form) is the line's: a failure line before
it without a time of its own (a CUDA error) takes it, at the latest (derive.stopped)."""

from __future__ import annotations

import re
from datetime import datetime

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import Failure, Keyed, LineFormat

_ABORT = re.compile(
    r"MPICH ERROR \[Rank (\d+)\](?: \[job id [^\]]*\])?"
    r"(?: \[((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})\])?"
    r"(?: \[unknown\])?(?: \[([A-Za-z0-9][\w.-]{0,63})\])?(?: - (.*))?")


def _abort(body: str) -> Failure | None:
    if (m := _ABORT.search(body)) is None:
        return None
    rank, when, host, what = m.groups()
    detail = f"Cray MPICH: rank {rank} aborted the job" + (f": {what.strip()}" if what else "")
    try:
        at = datetime.strptime(when, "%a %b %d %H:%M:%S %Y").isoformat() if when else None
    except ValueError:  # no real day (Feb 30): the line has no time
        at = None
    return sig.WORKER_EXIT, detail, None, None, host, None, at


FORMAT = LineFormat(
    name="mpich",
    prefilter=(r"MPICH ERROR \[Rank [0-9]",),
    failures=(Keyed(15, "MPICH ERROR", _abort),),
)
