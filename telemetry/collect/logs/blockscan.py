"""A block of a text log's lines cut and sieved before the parser reads it: where each line
starts, which lines are over-long, which hold a keyword (``logline.PREFILTER``), and the plain
Megatron-LM iteration lines read column-wise (``logfast``).

Why apart from the parser: this is a pure function of the bytes (and of the parser's fixed
zone and window), done by numpy and Arrow, which release the GIL; so a reader can sieve the
next block in a thread while the parser walks this one in Python (``cluster_source``: the
1 GiB import's Arrow passes overlap its Python work on a second core).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry.collect.logs import logfast
from telemetry.collect.logs import logline as ll
from telemetry.collect.logs.logclock import Window

MAX_LINE_BYTES = 64 << 10
TIMERS = b"(min, max) time across ranks"  # a Megatron timers header (``rankperf``)
SMALL_BLOCK = 16  # lines; below this the Python prefilter is cheaper than an Arrow pass


@dataclass
class Scan:
    """One block sieved: ``offs[i]`` is where line i starts (``offs[n]`` one past the end),
    ``too_long`` the lines over ``MAX_LINE_BYTES``, ``cand`` the lines with a keyword, and
    ``fast`` the column-wise iteration lines among them (``logfast.megatron_columns``),
    ``timers`` the runs of (min, max) lines after timers headers (``logfast.timer_runs``)."""

    offs: np.ndarray
    n: int
    too_long: np.ndarray
    cand: np.ndarray
    fast: tuple[np.ndarray, dict[str, list]] | None
    timers: logfast.TimerRuns | None = None


def scan_block(block: bytes, columnwise: bool, window: Window | None) -> Scan:
    """Sieve ``block`` (valid UTF-8, whole lines). ``columnwise``: the parser reads plain
    Megatron iteration lines column-wise (their zone is the line's own: naive UTC)."""
    nl = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
    n = len(nl) + (not block.endswith(b"\n"))
    offs = np.empty(n + 1, np.int64)
    offs[0] = 0
    offs[1 : len(nl) + 1] = nl + 1
    if n > len(nl):
        offs[n] = len(block) + 1
    fast = timers = None
    too_long = np.flatnonzero(np.diff(offs) - 1 > MAX_LINE_BYTES)
    if n < SMALL_BLOCK:
        cand = [i for i in range(n) if ll.PREFILTER_RE.search(
            block[offs[i] : offs[i + 1] - 1].decode())]
        cand_arr = np.array(cand, np.int64)
    else:
        arr = pa.LargeStringArray.from_buffers(
            n, pa.py_buffer(np.minimum(offs, len(block))), pa.py_buffer(block))
        cand_arr = pc.indices_nonzero(pc.match_substring_regex(arr, ll.PREFILTER)).to_numpy()
        if len(cand_arr) and not len(too_long):
            if columnwise:
                fast = logfast.megatron_columns(arr.take(pa.array(cand_arr)), window, block)
            if (at := block.find(TIMERS)) >= 0:
                timers = logfast.timer_runs(arr, _heads(block, at, offs), offs)
    return Scan(offs, n, too_long, cand_arr, fast, timers)


def _heads(block: bytes, at: int, offs: np.ndarray) -> np.ndarray:
    """The lines of ``block`` holding ``TIMERS``, the first at byte ``at`` (bytes.find is a
    tenth of an Arrow pass over the candidate lines)."""
    found = []
    while at >= 0:
        found.append(at)
        at = block.find(TIMERS, at + len(TIMERS))
    lines = np.searchsorted(offs, np.array(found, np.int64), side="right") - 1
    return np.unique(lines)
