"""``--since``: one option that several sources share (the Prometheus backfill, the Slurm job
history). A user says either how far back (``6h``, ``7d``) or from when (an ISO time); each
source reads the same value the way it needs it: seconds back from now, or a UTC instant.

Registered by every source that takes it (``SINCE``); ``telemetry.sources`` gives a flag that
more than one source registers one place on the command line, read by each."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from telemetry.errors import FactoryFloorError
from telemetry.ingest.seam import Option

SINCE = Option(
    "--since",
    {"metavar": "WHEN", "help": "history from this far back: a duration (6h, 7d) or an ISO "
     "time (2026-11-20T00:00:00Z); --prometheus backfills it, --slurm reads jobs since then"},
)  # fmt: skip

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, allow_zero: bool = False) -> float:
    """``90s``, ``15m``, ``6h``, ``7d``, ``2w`` in seconds (``0s`` too with ``allow_zero``);
    ValueError otherwise."""
    m = _DURATION.match(text or "")
    if not m or float(m[1]) < 0 or (float(m[1]) == 0 and not allow_zero):
        raise ValueError(f"{text!r} is not a duration like 30m, 6h or 7d")
    return float(m[1]) * _UNITS[m[2]]


def since_time(text: str | None, now: datetime | None = None) -> datetime | None:
    """``--since`` as a naive UTC instant (a duration counts back from ``now``, an ISO time's
    offset is converted); None when not given; FactoryFloorError, naming both forms, if bad."""
    if not text:
        return None
    now = now or datetime.now(UTC).replace(tzinfo=None)
    try:
        return now - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FactoryFloorError(
            f"--since {text!r}: expected a duration (6h, 7d) or an ISO time such as "
            "2026-11-20T00:00:00Z"
        ) from None
    return t if t.tzinfo is None else t.astimezone(UTC).replace(tzinfo=None)


def since_seconds(text: str | None, now: datetime | None = None) -> float | None:
    """``--since`` as seconds back from ``now`` (an ISO time in the future: an error)."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    t = since_time(text, now)
    if t is None:
        return None
    if t >= now:
        raise FactoryFloorError(f"--since {text!r} is not in the past")
    return (now - t).total_seconds()
