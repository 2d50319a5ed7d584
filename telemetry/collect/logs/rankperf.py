"""Per-rank timing reports in a training log: which rank is slow, read from what the trainer
printed (``textlogs.LogParser`` feeds each report's lines here; the rows go to ``rank_perf``).

The reports as their writers print them (format strings quoted from their sources):

- Megatron-LM, ``megatron/core/timers.py``, ``Timers._get_all_ranks_time_string``
  (``--timing-log-option all``): ``'times across ranks (ms):'``, then per timer
  ``'\\n  {}:'.format(name)`` and per rank ``'\\n     rank {:2d}: {:.2f}'.format(rank, ms)``::

      times across ranks (ms):
        forward-backward:
           rank  0: 1234.56
           rank  1: 1301.20

  Each rank's row: ``value_ms`` as printed, ``score`` = the timer's median over the ranks /
  the rank's time (1.0: the median rank; lower: slower).
- ``_get_global_min_max_time_string`` (``minmax``, Megatron's default):
  ``'(min, max) time across ranks (ms):'`` then
  ``'\\n    {}: ({:.2f}, {:.2f})'.format((name + ' ').ljust(48, '.'), min, max)``::

      (min, max) time across ranks (ms):
          forward-backward ...............................: (1234.56, 1240.12)

  No rank is named: one run-level row per timer, ``rank`` NULL, ``score`` = min / max (the
  spread max / min is its inverse), ``value_ms`` = max. ``'max time across ranks (ms):'``
  (option ``max``) names neither rank nor spread: its lines are recognised, not stored.
- NVIDIA Resiliency Extension, ``ptl_resiliency/straggler_det_callback.py`` (Megatron-Bridge
  prints the same): ``self.logger.info(f"\\nGPU relative performance:\\n{rel_perf_str}")`` (and
  ``GPU individual performance:``), where the scores are
  ``f" Worst performing {num_worst}/{num_ranks} ranks:\\n"``,
  ``f"  Rank={r} Node={rank_to_node[r]} Score={s:.2f}\\n"``, ``f" Best performing ..."`` (or
  every rank when there are few). ``score`` as printed (relative: vs the best rank; individual:
  vs the rank's own best), ``host`` its ``Node``; ``Score=nan`` (a rank without kernels) is
  skipped. Its warnings ``"STRAGGLER DETECTION WARNING: Some GPUs have worse relative
  performance. Affected ranks: {rel_stragglers}"`` (and ``"Some GPUs performance dropped."``)
  print a set of ``StragglerId(rank=3, node='h100-0004')``; Megatron-Bridge's documentation
  shows a plain list ``[76, 13, 45]``: both are read, one row per rank, ``score`` NULL. With
  ``enable_ptl_logging=True`` the callback also logs the scores' min/median/max as Lightning
  metrics (no rank): ``ptlperf`` reads those from imported TensorBoard/CSV/JSON-lines files.

A report's lines carry its writer's prefix (``srun --label``'s ``63: ``, torchrun's
``[default3]:``, pdsh's ``gpu-b07: ``); the report ends at the first line of the same prefix
that is not one of its lines (another writer's lines in between are read as usual). A line of
the report that cannot be read (a rank or a time that is no number, a negative or absurd time
or score) is refused by ``ValueError`` naming it; the report's other lines are kept.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from math import isfinite
from operator import le
from typing import NamedTuple

MEGATRON, NVRX = "megatron", "nvrx"
GPU_RELATIVE, GPU_INDIVIDUAL = "gpu_relative_perf", "gpu_individual_perf"
WARNED = {"relative": "straggler_relative", "individual": "straggler_individual"}
MAX_RANK = 1 << 20  # ranks of a job, at most (a larger "rank" is garbage)
MAX_MS = 1e8  # a timer's milliseconds per iteration, at most (about 28 h)
MAX_SCORE = 1.5  # NVRx scores are 0..1 (vs the best); a little above for rounding
MAX_NAME = 80  # characters of a timer's name
TIMERS_HEADER = "(min, max) time across ranks (ms):"  # Megatron's timers, as printed
MAX_GAP = 64  # other writers' lines a report waits through before it is taken as ended

_HEADER = re.compile(
    r"(\(min, max\) time across ranks|max time across ranks|times across ranks) \(ms\):\s*$"
    r"|GPU (relative|individual) performance:\s*$"
)
# the writer's prefix of a line: srun's task label (even before spaces, which
# ``logranks.split_prefix`` leaves alone) and torchrun's tee labels, up to three
# pdsh's host label first (``logranks.host_label``)
_KEY = re.compile(r"(?:[A-Za-z][A-Za-z0-9-]*[0-9][A-Za-z0-9.-]*: )?"
                  r"(?:\[(?:rank|default)?\d+\]: ?| *\d+: ){0,3}")
_RANK_MS = re.compile(r"rank +(\d+): +(\S+)\s*$")
_MINMAX = re.compile(r"(\S.*?) \.*: \(([^,()]+), ([^,()]+)\)\s*$")
# A (min, max) line in bytes, as Megatron prints it with plain decimal times: ``minmax_lines``
# reads it as ``_minmax`` reads the text (any other shape or time is left to ``_minmax``)
MINMAX_LINE = re.compile(
    rb" *([A-Za-z][^\n\r\x1b]*?) \.*: \(([0-9]+\.[0-9]+), ([0-9]+\.[0-9]+)\)[ \t]*\n"
)
_NAMES: dict[bytes, str] = {}  # a timer's name as printed -> as kept (a job has a dozen)


def kept_name(printed: str) -> str:
    """A (min, max) line's timer name as kept: its dot leader's last dots and spaces gone."""
    return printed.rstrip(" .")[:MAX_NAME]


def _name(printed: bytes) -> str:
    name = kept_name(printed.decode("utf-8"))
    if len(_NAMES) < 4096:  # a hostile log's endless names are not all kept
        _NAMES[printed] = name
    return name


MINMAX_RUN = re.compile(rb"(?:" + MINMAX_LINE.pattern + rb")+")  # consecutive such lines
_MAX_ONLY = re.compile(r"(\S.*?) \.*: (\S+)\s*$")
_TIMER = re.compile(r"([A-Za-z][\w./ -]*):\s*$")
_NVRX_RANK = re.compile(r"Rank=(\d+) Node=(\S+) Score=(\S+)\s*$")
_NVRX_LIST = re.compile(r"(?:Worst|Best) performing \d+/\d+ ranks:\s*$")
_WARNING = re.compile(
    r"STRAGGLER DETECTION WARNING: Some GPUs (have worse relative performance|performance "
    r"dropped)\. Affected ranks: (.*)$"
)
_STRAGGLER_ID = re.compile(r"StragglerId\(rank=(\d+), node='([^']*)'\)")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")


class RankPerf(NamedTuple):
    """One row of ``rank_perf``: a rank's (or, ``rank`` None, the run's) showing in one report
    window (``ts``: when the report was printed). A named tuple, not a frozen dataclass: a 1 GiB
    Megatron log makes a million of them, and a tuple is built 4x faster."""

    ts: datetime | None
    rank: int | None
    host: str | None
    source: str  # MEGATRON or NVRX
    metric: str  # a Megatron timer's name, GPU_RELATIVE/GPU_INDIVIDUAL, a WARNED value
    score: float | None  # relative performance: 1.0 the reference rank, lower slower
    value_ms: float | None  # the time printed (ms per iteration), where one was
    origin: str  # file:line of the report's first line


def split_key(text: str) -> tuple[str, str]:
    """(the writer's prefix without spaces, the rest) of a line."""
    m = _KEY.match(text)
    end = m.end() if m else 0
    return text[:end].replace(" ", ""), text[end:]


def header(body: str) -> str | None:
    """The kind of report a line starts: ``all``, ``minmax``, ``max``, ``relative`` or
    ``individual``; None for any other line."""
    m = _HEADER.search(body)
    if m is None:
        return None
    if m.group(2):
        return m.group(2)
    return {"(": "minmax", "m": "max", "t": "all"}[m.group(1)[0]]


def warning(body: str) -> tuple[str, list[tuple[int, str | None]]] | None:
    """(``WARNED`` metric, [(rank, node)]) of an NVRx straggler warning; None for another line.
    ValueError when it names no rank that can be read."""
    m = _WARNING.search(body)
    if m is None:
        return None
    which = "relative" if m.group(1).startswith("have") else "individual"
    named = [(int(r), n) for r, n in _STRAGGLER_ID.findall(m.group(2))]
    if not named:
        named = [(int(r), None) for r in re.findall(r"\d+", m.group(2))]
    ok = [(r, host(n)) for r, n in named if r < MAX_RANK]
    if not ok:
        raise ValueError(f"straggler warning names no rank: {m.group(2)[:80]!r}")
    return WARNED[which], ok


def host(node: str | None) -> str | None:
    """A node name as a host, None for NVRx's placeholders (``<unk>``, ``<notset>``)."""
    return node if node and _HOST.match(node) else None


def _number(text: str, what: str, upto: float) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{what} {text[:40]!r} is not a number") from None
    if not isfinite(v) or v < 0 or v > upto:
        raise ValueError(f"{what} {text[:40]!r} is out of range (0 to {upto:g})")
    return v


def _rank(text: str) -> int:
    r = int(text)
    if r >= MAX_RANK:
        raise ValueError(f"rank {text[:40]} is out of range (below {MAX_RANK:,})")
    return r


class TimerRun(NamedTuple):
    """A run of Megatron's (min, max) lines of one report, read in one pass and kept as
    columns (#56: a 1 GiB log has a million such rows; a tuple each was a fifth of its parse,
    on the thread that holds the GIL). ``rows()`` are the ``RankPerf`` rows it stands for."""

    ts: datetime | None
    origin: str
    names: list[str]
    lo: list[float]
    hi: list[float]

    def rows(self) -> list[RankPerf]:
        ts, origin = self.ts, self.origin
        return [RankPerf(ts, None, None, MEGATRON, n, lo / hi, hi, origin)
                for n, lo, hi in zip(self.names, self.lo, self.hi, strict=True)]


@dataclass
class Report:
    """One report being read: its kind, writer prefix, time and what its lines said."""

    kind: str
    key: str
    ts: datetime | None
    origin: str
    timer: str | None = None  # the ``all`` form's current timer
    times: dict[str, dict[int, float]] = field(default_factory=dict)
    rows: list[RankPerf] = field(default_factory=list)
    runs: list[tuple[int, TimerRun]] = field(default_factory=list)  # (where in rows, run)
    gap: int = 0  # other writers' lines since its last line

    def line(self, body: str) -> bool:
        """Whether ``body`` (a line of this report's writer, prefix removed) belongs to it;
        ValueError (it does, but cannot be read) names what is wrong."""
        text = body.strip()
        if not text:
            return False
        if self.kind == "all":
            return self._all(text)
        if self.kind in ("minmax", "max"):
            return self._minmax(text)
        return self._nvrx(text)

    def _all(self, text: str) -> bool:
        if text.startswith("rank"):
            m = _RANK_MS.match(text)
            if m is None or self.timer is None:
                raise ValueError(f"rank line not read: {text[:80]!r}")
            rank, ms = _rank(m.group(1)), _number(m.group(2), "time (ms)", MAX_MS)
            self.times[self.timer].setdefault(rank, ms)
            return True
        if m := _TIMER.match(text):
            self.timer = m.group(1)[:MAX_NAME]
            self.times.setdefault(self.timer, {})
            return True
        return False

    def _minmax(self, text: str) -> bool:
        if self.kind == "max":
            return _MAX_ONLY.match(text) is not None
        m = _MINMAX.match(text)
        if m is None:
            return False
        lo = _number(m.group(2), "min time (ms)", MAX_MS)
        hi = _number(m.group(3), "max time (ms)", MAX_MS)
        if hi <= 0 or lo > hi:
            raise ValueError(f"(min, max) = ({lo:g}, {hi:g}) ms is no range")
        name = m.group(1).rstrip(" .")[:MAX_NAME]
        self.rows.append(RankPerf(self.ts, None, None, MEGATRON, name, lo / hi, hi, self.origin))
        return True

    def minmax_lines(self, block: bytes, s: int, limit: int) -> tuple[int, int]:
        """The (min, max) lines of ``block`` from offset ``s`` on, each no longer than
        ``limit`` bytes, read as ``_minmax`` reads them while they have ``MINMAX_LINE``'s shape
        and a time it takes (a parse's hot path: a timers block every 10 iterations); (where
        the first line not read starts, how many were read). The common case, every line of
        the run within ``limit`` and its times a range, is read in one regex pass."""
        run = MINMAX_RUN.match(block, s)
        if run is None:
            return s, 0
        if run.end() - s <= limit:
            names, los, his = zip(*MINMAX_LINE.findall(block, s, run.end()), strict=True)
            lo, hi = list(map(float, los)), list(map(float, his))  # plain decimals: no NaN
            if min(hi) > 0 and max(hi) <= MAX_MS and all(map(le, lo, hi)):
                named = _NAMES.get
                self.take_run([named(n) or _name(n) for n in names], lo, hi)
                return run.end(), len(hi)
        n, match, rows = 0, MINMAX_LINE.match, self.rows
        while (m := match(block, s)) is not None and m.end() - 1 - s <= limit:
            lo, hi = float(m.group(2)), float(m.group(3))
            if not 0 < hi <= MAX_MS or lo > hi:  # refused by _minmax, which says why
                break
            name = m.group(1).decode("utf-8").rstrip(" .")[:MAX_NAME]
            rows.append(RankPerf(self.ts, None, None, MEGATRON, name, lo / hi, hi, self.origin))
            s, n = m.end(), n + 1
        return s, n

    def take_run(self, names: list[str], lo: list[float], hi: list[float]) -> None:
        """A run of (min, max) lines read already (``logfast.timer_runs``: the same lines
        ``minmax_lines`` reads in one regex pass, and the same names and times)."""
        self.runs.append((len(self.rows), TimerRun(self.ts, self.origin, names, lo, hi)))

    def _nvrx(self, text: str) -> bool:
        if _NVRX_LIST.match(text):
            return True
        if not text.startswith("Rank="):
            return False
        m = _NVRX_RANK.match(text)
        if m is None:
            raise ValueError(f"rank score line not read: {text[:80]!r}")
        rank = _rank(m.group(1))
        if m.group(3).lower() == "nan":  # a rank without common kernels has no score
            return True
        score = _number(m.group(3), "score", MAX_SCORE)
        metric = GPU_RELATIVE if self.kind == "relative" else GPU_INDIVIDUAL
        if all(r.rank != rank for r in self.rows):
            self.rows.append(
                RankPerf(self.ts, rank, host(m.group(2)), NVRX, metric, score, None, self.origin)
            )
        return True

    def finish(self) -> list[RankPerf]:
        """The report's rows (the ``all`` form's scores computed now that every rank is in)."""
        out = list(self.rows)
        for at, run in reversed(self.runs):
            out[at:at] = run.rows()
        return out + self._all_rows()

    def finish_columns(self) -> tuple[list[RankPerf], list[TimerRun]]:
        """``finish`` with the runs of (min, max) lines kept as columns: (the other rows, the
        runs)."""
        return self.rows + self._all_rows(), [run for _, run in self.runs]

    def _all_rows(self) -> list[RankPerf]:
        if not self.times:  # any other form
            return []
        out: list[RankPerf] = []
        for name, by_rank in self.times.items():
            ranks = {r: ms for r, ms in by_rank.items() if ms > 0}
            if not ranks:
                continue
            median = statistics.median(ranks.values())
            out += [RankPerf(self.ts, r, None, MEGATRON, name, median / ms, ms, self.origin)
                    for r, ms in sorted(ranks.items())]  # fmt: skip
        return out

    def named_hosts(self) -> list[tuple[int, str]]:
        """(rank, host) the report said (NVRx names each rank's node)."""
        return [(r.rank, r.host) for r in self.rows if r.rank is not None and r.host]
