"""When a line was written, read from its start, whichever writer's stamp it carries: ISO 8601
(Python logging, journald ``short-iso``), syslog (``Mar  5 10:20:30 node-7 kernel:``), ``dmesg``
(seconds since boot) and ``dmesg -T``, PyTorch's C++ (glog) prefix ``E0501 12:00:00.123456``,
and Megatron's ``[after ...] datetime: ``; with the host of a syslog/journal header."""

from __future__ import annotations

import re
from datetime import datetime

MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
_MON = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_SYSLOG = re.compile(_MON + r" {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")
_DMESG_T = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) " + _MON + r" +(\d{1,2}) "
                      r"(\d\d):(\d\d):(\d\d) (\d{4})\]")
_BOOT = re.compile(r"\[ *\d+\.\d+\]")  # plain dmesg: seconds since boot
# c10 prints the month unpadded (month * 100 + day): "E626 06:24:44" is June 26
_GLOG = re.compile(r"\[?[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")  # c10/glog
_HOST_TAG = re.compile(r" +([A-Za-z0-9][A-Za-z0-9_.-]*) +([A-Za-z0-9_./-]+)(?:\[\d+\])?: ")
PREFIX = re.compile(r"\[(?:rank|default)?\d+\]: ?|(?: *\d+: )(?=\S)")  # torchrun/srun labels

# Stamp: (kind, fields, host, kernel). kind "full": fields is a datetime (aware when the line
# gave an offset); "yearless": (month, day, h, m, s, us); "boot": no wall time; "bad": a stamp
# that names no real instant (``Feb 30``, ``25:61:61``; fields its text); None: no time.
Stamp = tuple[str | None, object, str | None, bool]
NO_STAMP: Stamp = (None, None, None, False)


def _us(frac: str | None) -> int:
    return int(frac[:6].ljust(6, "0")) if frac else 0


def stamp(body: str) -> Stamp:
    """The time a line was written, read from its start, and the host when the line carries a
    syslog/journal header (``Mar  5 10:20:30 node-7 kernel: ...``)."""
    c = body[:1]
    if c == "[":
        if m := _DMESG_T.match(body):
            mon, d, hh, mm, ss, yy = m.groups()
            try:
                t = datetime(int(yy), MONTHS[mon], int(d), int(hh), int(mm), int(ss))
            except ValueError:
                return "bad", m.group(0), None, True
            return "full", t, None, True
        if _BOOT.match(body):
            return "boot", None, None, True
        if m := _GLOG.match(body):
            return _yearless(m)
    elif c == " " and (b := body.lstrip())[:1] in "JFMASOND" and _SYSLOG.match(b):
        return stamp(b)  # a pasted journal, indented
    elif c in "JFMASOND" and (m := _SYSLOG.match(body)):
        kind, fields, _, _ = _yearless(m)
        host, kernel = _header_host(body, m.end())
        return kind, fields, host, kernel
    elif c in "IWEF" and (m := _GLOG.match(body)):
        return _yearless(m)
    m = _ISO.search(body, 0, 80)
    if m is None and (i := body.find("] datetime: ", 0, 200)) > 0:
        m = _ISO.match(body, i + 12)  # Megatron's print_datetime: "[after ...] datetime: ..."
    if m is None:
        return NO_STAMP
    try:
        t = datetime.fromisoformat(m.group(0))
    except ValueError:
        return "bad", m.group(0), None, False
    host, kernel = _header_host(body, m.end()) if m.start() == 0 and "T" in m.group(0) else (
        None, False)
    return "full", t, host, kernel


def _yearless(m: re.Match[str]) -> Stamp:
    g = m.groups()
    mon = MONTHS[g[0]] if g[0] in MONTHS else int(g[0])
    fields = (mon, int(g[1]), int(g[2]), int(g[3]), int(g[4]), _us(g[5]))
    return "yearless", fields, None, False


def _header_host(body: str, end: int) -> tuple[str | None, bool]:
    if body.startswith(" kernel: ", end):  # journalctl --no-hostname: the kernel, no host
        return None, True
    m = _HOST_TAG.match(body, end)
    if m is None:
        return None, False
    return m.group(1), m.group(2) == "kernel"
