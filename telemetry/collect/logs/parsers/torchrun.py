"""torchrun (torch.distributed.elastic): a worker it saw exit, the signals it sent or received,
and its ``ChildFailedError`` summary. The recognisers live in ``logranks`` beside the rank
prefixes torchrun writes (``launcher``; the summary's fields, read with the parser's state)."""

from __future__ import annotations

from telemetry.collect.logs.logranks import launcher
from telemetry.collect.logs.parsers.common import Failure, Keyed, LineFormat


def _launcher(body: str) -> Failure | None:
    if "exitcode" in body or "signal" in body or "Signal" in body:  # "via signal" too
        return launcher(body)
    return None


FORMAT = LineFormat(
    name="torchrun",
    prefilter=(
        r"closing signal SIG|death signal|SignalException|failed \(exitcode: ",
        r"Terminating process [0-9]+ via signal",  # torch.multiprocessing.spawn's teardown
        r" (?:time|host|rank|exitcode) +: ",  # the ChildFailedError summary
        r"<NO_OTHER_FAILURES>",  # ... whose Failures list holds only its Root Cause
    ),
    failures=(Keyed(20, "", _launcher),),
)
