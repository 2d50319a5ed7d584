"""The time a log line was written, as naive UTC.

Lines show time in many ways: ISO with or without a zone, syslog's year-less ``Mar  5 10:20:30``,
``dmesg -T``, PyTorch's glog ``E0501 12:00:00.123456``, or not at all. A ``LogClock`` per file
turns them into naive UTC: a time without a zone is in ``tz`` (default UTC); a year-less time
takes the year of the file's own dated lines, else ``year_hint``, else the latest year that does
not put it after ``year_ref`` (an imported file's modification time; now for a followed one),
and rolls over from December to January within the file. For a
line without a time of its own, ``before`` finds the most recent time on an earlier line,
reading backwards from it only as far as the last time it looked.

Any user can print any stamp into a job's output (``[Fri Dec 31 23:59:59 9999] NVRM: Xid``),
so a time is data only inside a ``Window`` (``clock_window``): not before ``EARLIEST``, not
more than ``--log-max-future`` (default a day) past the server's clock, and not more than
``--log-span`` (default 366 days) from the median time of the file's first and last lines
(``file_window``). A stamp outside it, or one that names no real instant (``Feb 30
25:61:61``), makes its line "not recognised" with the reason (``LogClock.refusal``), and it is
no line's context time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from statistics import median_low
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from telemetry.collect.logs import logline as ll

_HAS_CLOCK = re.compile(rb"\d:\d\d:\d\d")
EARLIEST = datetime(2000, 1, 1)  # as the records' (``ingest.records.EARLIEST``)
MAX_FUTURE_S = 86400.0  # --log-max-future: past the server's clock
SPAN_S = 366 * 86400.0  # --log-span: from the middle of the file's own times
SAMPLE_BYTES = 256 << 10  # of the file's start and of its end, for its middle time


@dataclass(frozen=True)
class Window:
    """The times a log line may carry and be data (naive UTC, both ends included)."""

    lo: datetime
    hi: datetime

    def __contains__(self, t: object) -> bool:
        return isinstance(t, datetime) and self.lo <= t <= self.hi

    def why(self, t: datetime) -> str:
        return (f"time {t:%Y-%m-%d %H:%M:%S} is outside {self.lo:%Y-%m-%d} .. "
                f"{self.hi:%Y-%m-%d %H:%M} (the server's clock and the file's other times): "
                "not data")


def clock_window(now: datetime | None = None, max_future_s: float = MAX_FUTURE_S,
                 centre: datetime | None = None, span_s: float = SPAN_S) -> Window:
    """``EARLIEST`` to ``now`` (the server's clock) + ``max_future_s``, narrowed to
    ``centre`` +- ``span_s`` when the file's middle time is known."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    lo, hi = EARLIEST, now + timedelta(seconds=max_future_s)
    if centre is not None:
        lo = max(lo, centre - timedelta(seconds=span_s))
        hi = min(hi, centre + timedelta(seconds=span_s))
    return Window(lo, hi)


def file_window(path: str, tz: tzinfo | str | None = UTC, now: datetime | None = None,
                max_future_s: float = MAX_FUTURE_S, span_s: float = SPAN_S) -> Window:
    """The ``clock_window`` of the log at ``path``: its middle time is the median of the dated
    lines in its first and last ``SAMPLE_BYTES`` that lie in the clock's window (a stray
    hostile line is outvoted by its neighbours); the clock's window alone when it has none."""
    outer = clock_window(now, max_future_s)
    try:
        with open(path, "rb") as fh:
            head = fh.read(SAMPLE_BYTES)
            size = fh.seek(0, 2)
            fh.seek(max(len(head), size - SAMPLE_BYTES))
            tail = fh.read(SAMPLE_BYTES)
    except OSError:
        return outer
    clock = LogClock(tz, window=outer)
    times = []
    for line in (head + b"\n" + tail).decode("utf-8", "replace").splitlines():
        st = ll.stamp(ll.PREFIX.sub("", line, count=1))
        if st[0] == "full" and (t := clock.utc(st[1])) in outer:  # type: ignore[arg-type]
            times.append(t)
    if not times:
        return outer
    return clock_window(now, max_future_s, median_low(times), span_s)


def zone(tz: tzinfo | str | None) -> tzinfo | None:
    """None for UTC (the fast path), else the zone; a name like ``Europe/Berlin`` is looked up."""
    if tz is None or tz == UTC:
        return None
    if isinstance(tz, str):
        if tz.upper() in ("UTC", "Z"):
            return None
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {tz!r} (use a name like Europe/Berlin)") from None
    return tz


def guess_year(month: int, day: int, now: datetime | None = None) -> int:
    """Without a hint: the year of ``now`` (default: this moment; an imported file's
    modification time, as syslog readers do), or the year before when that date would lie
    after it."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    try:
        return now.year - (datetime(now.year, month, day) > now + timedelta(days=1))
    except ValueError:
        return now.year


class LogClock:
    def __init__(
        self, tz: tzinfo | str | None = UTC, year_hint: int | None = None,
        window: Window | None = None, year_ref: datetime | None = None,
    ) -> None:  # fmt: skip
        self.tz = zone(tz)
        self.year_hint = year_hint
        self.window = window or clock_window()
        self.refusal = ""  # why the last stamp refused was not data
        self.year_ref = year_ref  # no year hint: a year-less time is not after this (mtime)
        self.assumed_year: int | None = None  # the year given to year-less times, not read
        self.full_year: int | None = None  # year of the last dated line read
        self.last: datetime | None = None  # the most recent time seen
        self._year: int | None = None
        self._month = 0

    def utc(self, t: datetime) -> datetime:
        if t.tzinfo is not None:
            return t.astimezone(UTC).replace(tzinfo=None)
        if self.tz is not None:
            return t.replace(tzinfo=self.tz).astimezone(UTC).replace(tzinfo=None)
        return t

    def yearless(self, fields: tuple[int, ...], update: bool = True) -> datetime | None:
        mon, day, hh, mm, ss, us = fields
        if self._year is None:
            self._year = self.full_year or self.year_hint or guess_year(mon, day, self.year_ref)
            if not self.full_year:
                self.assumed_year = self._year
            self._month = mon
        elif update and self._month - mon >= 6:  # Dec -> Jan within the file
            self._year += 1
        if update:
            self._month = mon
        try:
            return self.utc(datetime(self._year, mon, day, hh, mm, ss, us))
        except ValueError:
            return None

    def stamp(self, body: str, update: bool = True) -> tuple[datetime | None, str, ll.Stamp]:
        """(time, how, stamp) of a line's own time; how is line, boot, none, or refused (a
        stamp outside the window or naming no real instant: ``refusal`` says which). With
        ``update`` the line is the newest read (its time becomes ``last``, its year the
        file's)."""
        st = ll.stamp(body)
        kind = st[0]
        if kind == "full":
            t = self.utc(st[1])  # type: ignore[arg-type]
        elif kind == "yearless":
            t = self.yearless(st[1], update)  # type: ignore[arg-type]
        elif kind == "bad":
            return self._refuse(f"{st[1]!r} is no real time: not data", st)
        else:
            return None, kind or "none", st
        if t is None:
            return self._refuse(f"{_fields(st[1])} is no real time: not data", st)
        if t not in self.window:
            return self._refuse(self.window.why(t), st)
        if update and kind == "full":
            self.full_year = t.year
        if update:
            self.last = t
        return t, "line", st

    def _refuse(self, why: str, st: ll.Stamp) -> tuple[None, str, ll.Stamp]:
        self.refusal = why
        return None, "refused", st

    def accept(self, t: datetime) -> bool:
        """Whether ``t`` (naive UTC, from a line's text) is data; ``refusal`` says why not."""
        if t in self.window:
            return True
        self.refusal = self.window.why(t)
        return False

    def after(self, block: bytes, pos: int, lines: int = 64) -> datetime | None:
        """The time of the first timed line of ``block`` from ``pos`` (a line start), looking
        at most ``lines`` lines ahead; None when there is none. Nothing is updated."""
        end = len(block)
        while pos < end and lines > 0:
            e = block.find(b"\n", pos)
            e = end if e < 0 else e
            if _HAS_CLOCK.search(block, pos, min(e, pos + 100)):
                body = ll.strip_prefix(block[pos:e].decode("utf-8", "replace"))[1]
                t = self.stamp(body, update=False)[0]
                if t is not None:
                    return t
            pos, lines = e + 1, lines - 1
        return None

    def before(self, block: bytes, lo: int, pos: int) -> datetime | None:
        """The most recent time on the lines of ``block[lo:pos]`` (``pos`` a line start, or
        past the end), else the one known before them."""
        t = self.latest(block, lo, pos)
        return self.last if t is None else t

    def latest(self, block: bytes, lo: int, pos: int) -> datetime | None:
        """The most recent time on the lines of ``block[lo:pos]`` (it becomes ``last``); None
        when none of them has one."""
        while pos > lo:
            e = pos - 1
            start = max(block.rfind(b"\n", lo, e) + 1, lo)
            if _HAS_CLOCK.search(block, start, min(e, start + 100)):
                body = ll.strip_prefix(block[start:e].decode("utf-8", "replace"))[1]
                t = self.stamp(body, update=False)[0]
                if t is not None:
                    self.last = t
                    return t
            pos = start
        return None


def _fields(fields: object) -> str:
    """A year-less stamp's fields as the line wrote them: ``02-30 25:61:61``."""
    mon, day, hh, mm, ss, _us = fields  # type: ignore[misc]
    return f"{mon:02d}-{day:02d} {hh:02d}:{mm:02d}:{ss:02d}"
