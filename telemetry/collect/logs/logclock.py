"""The time a log line was written, as naive UTC.

Lines show time in many ways: ISO with or without a zone, syslog's year-less ``Mar  5 10:20:30``,
``dmesg -T``, PyTorch's glog ``E0501 12:00:00.123456``, or not at all. A ``LogClock`` per file
turns them into naive UTC: a time without a zone is in ``tz`` (default UTC); a year-less time
takes the year of the file's own dated lines, else ``year_hint``, else the latest year that does
not put it after ``year_ref`` (an imported file's modification time; now for a followed one),
and rolls over from December to January within the file. For a
line without a time of its own, ``before`` finds the most recent time on an earlier line,
reading backwards from it only as far as the last time it looked.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from telemetry.collect.logs import logline as ll

_HAS_CLOCK = re.compile(rb"\d:\d\d:\d\d")


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
        year_ref: datetime | None = None,
    ) -> None:  # fmt: skip
        self.tz = zone(tz)
        self.year_hint = year_hint
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
        """(time, how, stamp) of a line's own time; how is line, boot or none. With ``update``
        the line is the newest read (its time becomes ``last``, its year the file's)."""
        st = ll.stamp(body)
        kind = st[0]
        if kind == "full":
            t = self.utc(st[1])  # type: ignore[arg-type]
            if update:
                self.full_year = t.year
        elif kind == "yearless":
            t = self.yearless(st[1], update)  # type: ignore[arg-type]
        else:
            return None, kind or "none", st
        if t is None:
            return None, "none", st
        if update:
            self.last = t
        return t, "line", st

    def before(self, block: bytes, lo: int, pos: int) -> datetime | None:
        """The most recent time on the lines of ``block[lo:pos]`` (``pos`` a line start, or
        past the end), else the one known before them."""
        while pos > lo:
            e = pos - 1
            start = max(block.rfind(b"\n", lo, e) + 1, lo)
            if _HAS_CLOCK.search(block, start, min(e, start + 100)):
                body = ll.strip_prefix(block[start:e].decode("utf-8", "replace"))[1]
                t = self.stamp(body, update=False)[0]
                if t is not None:
                    self.last = t
                    break
            pos = start
        return self.last
