"""Text logs (a job's ``slurm-N.out``, a node's ``kern.log``/journal/``dmesg -T``) as training
progress, checkpoint saves and loads, and failure signals.

Long module: the streaming parser and its block reader share state line by line.

Why it is built this way:

- **Speed.** A 54-day job writes gigabytes of log, nearly all of it lines that say nothing we
  need. A block of lines is read as bytes, split by one numpy pass, and one RE2 pass (pyarrow)
  over the whole block picks the lines containing any keyword of ``logline.PREFILTER``; only
  those reach Python. The time of an untimed line ("the most recent time seen") is found by
  walking back from it, lazily, so noise lines are never parsed.
- **Streaming.** ``LogParser`` keeps what spans lines (the most recent time, the year of a
  year-less syslog line and its Dec->Jan roll-over, an open traceback per rank, the last
  progress-bar step, an open checkpoint load) so a tailer can feed it block by block or line by
  line, across rotation and truncation, and ``drain()`` what is new. ``parse_file`` is the same
  parser fed a file in 8 MiB blocks.
- **Honesty.** Every line is counted; lines that say nothing we know are ``unrecognised``, never
  an error. Bytes that are not UTF-8 are replaced and their lines counted and listed as bad; a
  line longer than 64 KiB (a runaway progress bar, a binary blob) is read by its last 64 KiB
  and listed. Times without a zone are in ``tz`` (default UTC) and returned as naive UTC; a
  line without its own time takes the most recent time seen before it in the same file
  (counted as ``*_ts_from_context``); plain ``dmesg`` lines (seconds since boot) have no wall
  time: their signals have ``ts`` None (``untimed_signals``).
- TorchTitan's ``tps`` is tokens per second *per GPU*; it is stored as ``tokens_per_s`` as is.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from math import isfinite
from pathlib import Path
from typing import Any

import numpy as np

from telemetry import signals as sig
from telemetry.collect.logs import logfast
from telemetry.collect.logs import logline as ll
from telemetry.collect.logs import logranks as lr
from telemetry.collect.logs import rankperf as rp
from telemetry.collect.logs import settings as lset
from telemetry.collect.logs.blockscan import MAX_LINE_BYTES, Scan, scan_block
from telemetry.collect.logs.importers import BadLine, ImportFileError
from telemetry.collect.logs.logclock import LogClock, Window, file_window
from telemetry.signals import CheckpointEvent, Signal, clean_line

# (rank, host, how, origin): where a rank ran, as a line said it (``RANK_SOURCES``)
RankHost = tuple[int | None, str, str, str]  # rank None: a host of the job (pdsh label)
CHUNK_BYTES = 8 << 20
MAX_BAD = 20
MAX_UNREAD = 5  # unrecognised lines kept to show (the count covers them all)
MAX_SETTINGS = 1000  # settings lines kept per log (a real arguments block states ~10 of ours)
TRACEBACK_MAX_LINES = 2000  # a traceback not ended by then is given up (counted)
_LAUNCHER_KINDS = (sig.WORKER_EXIT, sig.LAUNCHER_SIGNAL)
# A network error is the cause only when it came first (derive.evidence); one without a time of
# its own is placed at the next time the log shows, the latest it can have been, so the other
# ranks' untimed "remote process exited" lines printed before a culprit's untimed traceback
# (srun interleaves the nodes' output) are not taken as having come first.
_NETWORK_KINDS = (sig.NCCL_ERROR, sig.IB_ERROR)
PDSH_LINES = 2  # lines a pdsh label must start before it is taken as a host
MAX_PDSH_HOSTS = 65536  # pdsh host labels counted (a job's nodes, at most)


@dataclass
class LogBatch:
    """What a parser found since the last ``drain()``."""

    metrics: list[dict[str, Any]]
    metric_origins: list[str]
    checkpoint_events: list[CheckpointEvent]
    signals: list[Signal]
    rank_hosts: list[RankHost] = field(default_factory=list)
    rank_perf: list[rp.RankPerf] = field(default_factory=list)
    # progress points as columns (``ts``, ``step``, ``loss``, ``lr``, ``grad_norm``, ``tokens``,
    # a list each, every point timed), from blocks whose every point was read column-wise
    metric_columns: list[dict[str, list[Any]]] = field(default_factory=list)
    # rank_perf rows of Megatron's (min, max) lines as columns (``keep=False`` readers)
    timer_runs: list[rp.TimerRun] = field(default_factory=list)


@dataclass
class LogScan:
    """One text log read in full."""

    path: str
    metrics: list[dict[str, Any]]  # train_metrics records
    metric_origins: list[str]  # file:line of each metric, same order
    checkpoint_events: list[CheckpointEvent]
    signals: list[Signal]
    lines: int
    unrecognised: int
    bad: list[BadLine] = field(default_factory=list)  # the first MAX_BAD
    counts: dict[str, int] = field(default_factory=dict)  # per kind; see LogParser.counts
    rank_hosts: list[RankHost] = field(default_factory=list)
    unread: list[tuple[int, str]] = field(default_factory=list)  # first unrecognised lines
    rank_perf: list[rp.RankPerf] = field(default_factory=list)  # per-rank timing reports


class LogParser:
    """Reads one log (``label`` names it in every ``file:line`` origin) fed in order.

    ``host_hint`` is the node the log belongs to when its lines do not say (default: the node
    in the file name, ``node-7-kern.log`` -> ``node-7``); ``gpu_by_pci`` maps PCI bus ids to GPU
    indices so an ``NVRM: Xid (PCI:...)`` line names its GPU; ``run`` is put in each metric.
    With ``keep=False`` drained results are released (a long-lived tailer). ``window``: the
    times that are data (``logclock.Window``; default: up to a day past the server's clock)."""

    def __init__(
        self,
        label: str | os.PathLike[str],
        *,
        tz: tzinfo | str | None = UTC,
        year_hint: int | None = None,
        host_hint: str | None = None,
        run: str | None = None,
        gpu_by_pci: Mapping[str, int] | None = None,
        keep: bool = True,
        window: Window | None = None,
        year_ref: datetime | None = None,
    ) -> None:
        self.label = str(label)
        self.clock = LogClock(tz, year_hint, window, year_ref)
        self.host = host_hint or ll.host_from_filename(self.label)
        self.run = run
        self.keep = keep
        self._gpus = {ll.pci_key(k): int(v) for k, v in (gpu_by_pci or {}).items()}
        self.metrics: list[dict[str, Any]] = []
        self.metric_origins: list[str] = []
        self.checkpoint_events: list[CheckpointEvent] = []
        self.signals: list[Signal] = []
        self.rank_hosts: list[RankHost] = []
        self.rank_perf: list[rp.RankPerf] = []
        self.metric_columns: list[dict[str, list[Any]]] = []  # see LogBatch; keep=False only
        self.timer_runs: list[rp.TimerRun] = []  # see LogBatch; keep=False only
        self._newest: tuple[int, datetime, int] | None = None  # (step, ts, line): _columnwise
        self._report: rp.Report | None = None  # a per-rank timing report being read
        self._timers: logfast.TimerRuns | None = None  # its (min, max) runs, sieved
        # (setting, value as written, file:line, line): the run's settings the log states,
        # kept whole (few) and written by the reader when they grow (logs.settings)
        self.settings: list[tuple[str, str, str, int]] = []
        self.settings_written = 0  # of those, how many the reader has written
        self.bad: list[BadLine] = []
        self.counts: Counter[str] = Counter()
        self.lines = 0
        self.next_lineno = 1
        self._drained = (0, 0, 0, 0, 0)
        self._ctx_lo = 0  # block offset up to which the clock knows the most recent time
        self._blk = b""  # the block being read, and where the current line starts/ends in it
        self._s = self._e = 0
        # the block's column-wise lines (sieved): where each starts, where the next line
        # starts, and its time; _context takes a time from them without reading it again
        self._fast_at: tuple[list[int], list[int], list[datetime]] | None = None
        self._tqdm: int | None = None
        self._bars: dict[int, datetime | None] = {}  # a tqdm bar's total -> when it started
        self._bar_elapsed: dict[int, float] = {}
        self._bar_ts: datetime | None = None  # the time the last bar showed
        self._pl_last: tuple[int, int] | None = None  # Lightning's last (epoch, batch) read
        self._progress: tuple[int, datetime] | None = None  # the last progress point's step, time
        self._starts: list[tuple[int, int | None, datetime | None]] = []  # see _train_start
        self._resume: int | None = None  # the step a checkpoint load named, until training starts
        self._ctx_items: list[tuple[list[Any], int]] = []  # block items timed by context (_lift)
        self._recent: dict[int, str] = {}  # step -> the prefix of the rank that printed it
        self._last_step = -1
        self._plan: dict[str, int] = {}  # tokens per step (TorchTitan), sequence length (Megatron)
        self._done_told = False  # the planned steps were reached (a planned_exit signal)
        self._paced: dict[int, tuple[float | None, datetime | None]] = {}  # see _pace
        self._label = ""  # the current line's launcher prefix
        self._tb: dict[str, int] = {}  # rank prefix -> lines into an open traceback
        self._tb_start: dict[str, Signal] = {}  # rank prefix -> its open traceback, if it is cut
        self._load_open: set[str] = set()  # labels (writers) with a checkpoint load open
        self._closing: set[tuple[str, int]] = set()  # (agent label, pid) torchrun signalled
        self._task_nodes = False  # srun --label tasks are torchrun agents (nodes), not ranks
        self._tasks: set[str] = set()  # the srun --label task numbers that wrote a line
        self._rank: int | None = None  # the rank the current line's prefix names
        self._pids: dict[tuple[str, int], tuple[int, int]] = {}  # NCCL (host, pid) -> rank, n
        self._mapped: set[tuple[int | None, str]] = set()
        self._pdsh: Counter[str] = Counter()  # lines each pdsh host label started
        self._line_host: str | None = None  # the current line's pdsh host
        self._entry: dict[str, Any] | None = None  # an open torchrun summary entry
        self._alone = False  # torchrun's summary said <NO_OTHER_FAILURES> before its entry
        self._xid_at: tuple[str | None, datetime | None] | None = None  # the last XID's host, time
        self._mlines: list[int] = []  # line of each metric of the block being read
        self._followed: set[int] = set()  # lines of the block read inside a traceback
        self.unread: list[tuple[int, str]] = []  # the first unrecognised lines (line, text)
        self._long: bytes | None = None  # tail of a line longer than MAX_LINE_BYTES so far
        self._long_len = 0

    # -- feeding -------------------------------------------------------------------------------
    def feed(self, line: str, lineno: int) -> None:
        """One line (with or without its newline) that is line ``lineno`` of the file."""
        data = line.encode("utf-8", "replace")
        self.feed_block(data if data.endswith(b"\n") else data + b"\n", lineno, final=True)

    def feed_block(
        self, data: bytes, first_lineno: int | None = None, *, final: bool = False,
        scan: Scan | None = None,
    ) -> int:  # fmt: skip
        """Complete lines of ``data`` (bytes as read from the file), the first being line
        ``first_lineno`` (default: after the previous call's). Returns how many bytes were
        used: up to the last newline, all with ``final`` (the file's last line has none). A
        newline-free ``data`` over 64 KiB is taken as the start of an over-long line.
        ``scan``: those lines already sieved (``sieve``), e.g. in another thread."""
        if first_lineno is not None:
            self.next_lineno = first_lineno
        if scan is not None and self._long is None:
            self._block(data[: scan.offs[-1]] if scan.offs[-1] < len(data) else data, scan)
            return int(scan.offs[-1])
        end = len(data) if final else data.rfind(b"\n") + 1
        if end == 0:
            if len(data) > MAX_LINE_BYTES:
                self._absorb(data)
                return len(data)
            return 0
        block = data[:end] if end < len(data) else data
        if self._long is not None:
            nl = block.find(b"\n")
            head = nl + 1 if nl >= 0 else len(block)
            self._absorb(block[:head])
            self._flush_long()
            block = block[head:]
        if block:
            self._block(block)
        return end

    def sieve(self, data: bytes) -> Scan | None:
        """``data``'s complete lines sieved for ``feed_block(data, scan=...)``; None when they
        need the parser's own path (no newline, bytes that are not UTF-8). Reads only what
        the parser never changes (its zone and window): safe in another thread."""
        end = data.rfind(b"\n") + 1
        if end == 0:
            return None
        block = data[:end] if end < len(data) else data
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return scan_block(block, self.clock.tz is None, self.clock.window)

    def finish(self) -> None:
        """The file ended: an over-long last line is read, open tracebacks are given up."""
        if self._long is not None:
            self._flush_long()
        self.counts["tracebacks_unfinished"] += len(self._tb)
        for prefix in self._tb:  # the log ends inside them: a failure whose kind is not there
            if (cut := self._tb_start.get(prefix)) is not None:
                self._add_signal(cut, "line")
        self._tb.clear()
        self._tb_start.clear()
        self._end_report()

    def drain(self) -> LogBatch:
        """Metrics, checkpoint events and signals found since the last call."""
        m, e, s, r, p = self._drained
        out = LogBatch(self.metrics[m:], self.metric_origins[m:], self.checkpoint_events[e:],
                       self.signals[s:], self.rank_hosts[r:], self.rank_perf[p:],
                       self.metric_columns, self.timer_runs)
        self.metric_columns, self.timer_runs = [], []
        if self.keep:
            self._drained = (len(self.metrics), len(self.checkpoint_events), len(self.signals),
                             len(self.rank_hosts), len(self.rank_perf))
        else:
            self.metrics, self.metric_origins = [], []
            self.checkpoint_events, self.signals, self.rank_hosts = [], [], []
            self.rank_perf = []
        return out

    @property
    def world_size(self) -> int | None:
        """How many ranks (GPUs) the job has, as its log states it: Megatron-LM's world size,
        else the largest ``nranks`` of NCCL's communicator lines; None when it says neither."""
        if "world_size" in self._plan:
            return self._plan["world_size"]
        return max((n for _rank, n in self._pids.values()), default=None)

    def job_facts(self) -> dict[str, int]:
        """What the log states of the job: ``gpus`` (its world size), ``nodes``, ``gpus_per_node``
        and ``model_params``, each only when a line says it (Slurm's environment, NCCL's
        communicator of every rank, the trainer's arguments and parameter count); GPUs from
        nodes x GPUs per node when no line states the world size, and the other way round."""
        out = {k: v for k, v in self._plan.items()
               if k in ("nodes", "gpus_per_node", "model_params")}  # fmt: skip
        world = self.world_size
        if world:
            out["gpus"] = world
        nodes, per = out.get("nodes"), out.get("gpus_per_node")
        if world is None and nodes and per:
            out["gpus"] = nodes * per
        elif world and nodes and per is None and world % nodes == 0:
            out["gpus_per_node"] = world // nodes
        elif world and per and nodes is None and world % per == 0:
            out["nodes"] = world // per
        hosts = [h for h, n in self._pdsh.items() if n >= PDSH_LINES]
        if "nodes" not in out and len(hosts) > 1:  # pdsh's hosts: as many nodes at least
            out["nodes"] = len(hosts)
        if "nodes" not in out and self._task_nodes:  # a torchrun agent per srun task: as
            tasks = {int(t) for t in self._tasks if t.strip().isdigit()}  # many nodes at least
            if len(tasks) > 1 and tasks == set(range(len(tasks))):
                out["nodes"] = len(tasks)
        return out

    def _note_settings(self, told: list[tuple[str, str]], lineno: int) -> None:
        if len(self.settings) < MAX_SETTINGS:  # a log printing its arguments in a loop
            self.settings += [(name, value, self._origin(lineno), lineno) for name, value in told]

    def _nccl_shape(self, nranks: int, nodes: int, per_node: int) -> None:
        """The communicator of every rank (the largest) says the job's nodes and GPUs per
        node (a sub-communicator's would say its own)."""
        if nranks >= self._plan.get("_nccl_ranks", 0):
            self._plan.update(_nccl_ranks=nranks, nodes=nodes, gpus_per_node=per_node)

    @property
    def unrecognised(self) -> int:
        return self.lines - self.counts["recognised"]

    def scan(self) -> LogScan:
        counts = dict(self.counts)
        counts["unrecognised"] = self.unrecognised
        return LogScan(self.label, self.metrics, self.metric_origins, self.checkpoint_events,
                       self.signals, self.lines, self.unrecognised, list(self.bad), counts,
                       self.rank_hosts, list(self.unread), self.rank_perf)

    # -- blocks --------------------------------------------------------------------------------
    def _absorb(self, data: bytes) -> None:
        self._long = ((self._long or b"") + data[-MAX_LINE_BYTES - 1:])[-MAX_LINE_BYTES - 1:]
        self._long_len += len(data)

    def _flush_long(self) -> None:
        tail = (self._long or b"").rstrip(b"\n")
        total = self._long_len - (self._long or b"").endswith(b"\n")
        self._long, self._long_len = None, 0
        self._bad(self.next_lineno, f"line of {total:,} bytes: only its last 64 KiB read")
        self.counts["long_lines"] += 1
        self._block(_utf8_start(tail[-MAX_LINE_BYTES:]) + b"\n")

    def _block(self, block: bytes, prep: Scan | None = None) -> None:
        base = self.next_lineno
        if prep is None:
            try:
                block.decode("utf-8")
            except UnicodeDecodeError:
                block = self._replace(block, base)
            prep = scan_block(block, self.clock.tz is None, self.clock.window)
        offs, n, too_long, cand_arr, fast = prep.offs, prep.n, prep.too_long, prep.cand, None
        self._timers = prep.timers
        if prep.fast is not None:
            cand_arr, fast = self._fast_megatron(cand_arr, prep.fast)
            if len(fast[0]):
                self._fast_at = (offs[fast[0]].tolist(), offs[fast[0] + 1].tolist(),
                                 fast[1]["ts"])
        if len(too_long):
            cand_arr = np.union1d(cand_arr, too_long)
        self._blk, self._ctx_lo = block, 0
        self._mlines, self._followed, first = [], set(), len(self.metrics)
        self._newest = None
        self._plain = np.ones(n, np.bool_)  # lines no recogniser needs (see _follow)
        self._plain[cand_arr] = False
        self._base = base
        self._walk(block, base, cand_arr.astype(np.int64), offs)
        looked = cand_arr if fast is None else np.union1d(cand_arr, fast[0])
        self._note_unread(block, base, looked, offs, n)
        if fast is not None:
            self._merge_fast(block, base, offs, first, *fast)
        self._pace(first)
        self._lift(first)
        self._planned_end(first, block, base, offs)
        self._s = len(block) + 1
        self._context()  # carry the most recent time into the next block
        if self._progress and (self.clock.last is None or self._progress[1] > self.clock.last):
            self.clock.last = self._progress[1]  # a paced progress point is a time shown too
        self._blk, self._ctx_lo, self._fast_at = b"", 0, None
        self.lines += n
        self.next_lineno = base + n

    def _walk(self, block: bytes, base: int, cand: np.ndarray, offs: np.ndarray) -> None:
        resume = self._follow(block, 0, base)  # a traceback left open by the previous block
        size = len(block)
        for i, s, e in zip(cand.tolist(), offs[cand].tolist(), (offs[cand + 1] - 1).tolist(),
                           strict=True):
            if s < resume:
                continue
            self._line(block, s, min(e, size), base + i)
            resume = self._follow(block, e + 1, base + i + 1)

    def _follow(self, block: bytes, s: int, lineno: int) -> int:
        """Inside an open traceback or per-rank report every line counts, keyword or not."""
        size = len(block)
        while (self._tb or self._report is not None) and s < size:
            if self._report is not None and self._report.kind == "minmax" and not self._report.key:
                s, lineno = self._timer_lines(block, s, lineno)
                if s >= size or self._report is None:
                    continue
                if not self._tb and (e := self._progress_line(block, s)) >= 0:
                    self._end_report()  # what _report_line makes of the line ending a timers
                    s, lineno = e + 1, lineno + 1  # block (it is not the report's, its writer
                    continue  # is the report's, it names no task), without reading it again
            e = block.find(b"\n", s)
            e = size if e < 0 else e
            if self._tb or not self._plain[lineno - self._base] or not self._report_line(
                    block, s, e, lineno):
                self._line(block, s, e, lineno)
                self._followed.add(lineno)
            s, lineno = e + 1, lineno + 1
        return s

    def _progress_line(self, block: bytes, s: int) -> int:
        """Where the line starting at ``s`` ends, if it is a column-wise iteration line (sieved:
        ``[time] iteration``, no writer prefix) ``_report_line`` would read as it is; else -1."""
        if self._fast_at is None:
            return -1
        starts = self._fast_at[0]
        j = bisect_left(starts, s)
        if j == len(starts) or starts[j] != s:
            return -1
        e = self._fast_at[1][j] - 1
        if e - s > MAX_LINE_BYTES or block.find(b"\r", s, e) >= 0 or block.find(b"\x1b", s, e) >= 0:
            return -1
        return e

    def _report_line(self, block: bytes, s: int, e: int, lineno: int) -> bool:
        """Line ``block[s:e]`` read inside an open report when no recogniser needs it (no
        keyword, or an iteration line the column-wise path takes) and no traceback is open:
        what the line path does with it, without the recognisers it would not match. The
        report takes it (True/False as ``_in_report``: read or refused), or it is not the
        report's (the report ends, or its writer's gap grows) and is left to the block's walk
        as if no report were open. Why: a timers block every 10 iterations ends at a line of
        the next kind, and reading that line on the whole line path was a tenth of the parse.
        False: a line that needs the line path's cleaning (CR, escapes, JSON, over-long)."""
        raw = block[s:e]
        if e - s > MAX_LINE_BYTES or b"\r" in raw or b"\x1b" in raw or raw.startswith(b"{"):
            return False
        text = raw.decode("utf-8")
        self._s, self._e = s, e
        got = self._in_report(text, lineno)
        if got is None:
            prefix = lr.split_prefix(text)[0]  # what the line path notes of any line's writer
            if prefix:
                self._tasks.add(prefix.split(":", 1)[0])
                if not self._task_nodes:
                    self._task_nodes = lr.task_is_node(prefix)
            return True
        if got:
            self.counts["recognised"] += 1
        else:
            self._unread(lineno, lambda: text)
        self._followed.add(lineno)
        return True

    def _timer_lines(self, block: bytes, s: int, lineno: int) -> tuple[int, int]:
        """Megatron's (min, max) timer lines from ``s`` on, read straight into the open report
        (``rankperf.Report.minmax_lines``): a line of that shape reaches nothing but the report
        in ``_text`` (no writer prefix, CR or escape), so this is the line path without its
        cost (a timers block every 10 iterations was half the parse). A line it does not take
        is left to the line path, which reads it or says why not."""
        rep = self._report
        assert rep is not None
        pre, r = self._timers, None
        if pre is not None and (r := pre.at.get(lineno - self._base)) is not None and pre.ok[r] \
                and pre.nbytes[r] <= MAX_LINE_BYTES:  # read in the sieve, off this thread
            a, n = pre.starts[r], pre.lines[r]
            rep.take_run(pre.names[a : a + n], pre.lo[a : a + n], pre.hi[a : a + n])
            end = s + pre.nbytes[r]
        else:
            end, n = rep.minmax_lines(block, s, MAX_LINE_BYTES)
        if n:
            rep.gap = 0
            self.counts["recognised"] += n
            self._followed.update(range(lineno, lineno + n))
        return end, lineno + n

    def _fast_megatron(self, cand: np.ndarray, got: tuple[np.ndarray, dict[str, list]]
                       ) -> tuple[np.ndarray, Any]:
        """Candidates minus the plain Megatron iteration lines read column-wise (``got``:
        ``logfast.megatron_columns`` of the candidates, see ``scan_block``)."""
        if self.clock.full_year is None and got[1]["ts"]:  # year-less lines read before them
            self.clock.full_year = got[1]["ts"][0].year  # in this block are in their year
        idx = cand[got[0]]
        return np.setdiff1d(cand, idx, assume_unique=True), (idx, got[1])

    def _merge_fast(self, block: bytes, base: int, offs: np.ndarray, first: int,
                    idx: np.ndarray, cols: dict[str, list]) -> None:
        """Records of the column-wise lines, merged in line order with those read one by one
        (a line already read inside a traceback is not taken twice)."""
        if not self.keep and self._columnwise(first, base, idx, cols):
            return
        fast, odd = logfast.records(idx, cols, base, self.run, self.label, self._followed)
        for i in odd:  # 1e999: the line path makes it an Inf-loss signal
            self._line(block, int(offs[i]), int(offs[i + 1]) - 1, base + i)
        if not fast:
            return
        self.clock.full_year = fast[-1][1]["ts"].year
        self.counts["metrics"] += len(fast)
        self.counts["recognised"] += len(fast)
        if len(self.metrics) > first:
            slow = zip(self._mlines, self.metrics[first:], self.metric_origins[first:], strict=True)
            fast = sorted([*slow, *fast], key=lambda r: r[0])
        self.metrics[first:] = [r[1] for r in fast]
        self.metric_origins[first:] = [r[2] for r in fast]

    def _columnwise(self, first: int, base: int, idx: np.ndarray, cols: dict[str, list]
                    ) -> bool:
        """A block whose every progress point is a column-wise line, none needing the line
        path (no Inf loss, none inside a traceback, no pace or start to apply), kept as
        columns (``metric_columns``): what ``records`` -> ``_pace`` -> the reader's columns
        would give, without a dict per point (a 1 GiB log has 1.6 M). False: nothing done."""
        if len(self.metrics) > first or self._starts or self._paced or not len(idx):
            return False
        if self._followed and not self._followed.isdisjoint((idx + base).tolist()):
            return False
        loss = cols["loss"]
        if not all(map(isfinite, loss)):
            return False
        seq, per_step = self._plan.get("seq_length"), self._plan.get("tokens_per_step")

        def told(t: Any, samples: Any, step: int) -> int | None:  # as records() and _pace
            if t is not None:
                return int(t)
            if samples is not None and seq is not None:
                return int(samples) * seq
            return step * per_step if per_step is not None else None

        tokens = list(map(told, cols["tokens"], cols["samples"], cols["step"]))
        self.metric_columns.append({
            "ts": cols["ts"], "step": cols["step"], "loss": loss, "tokens": tokens,
            "lr": [x if x is not None and isfinite(x) else None for x in cols["lr"]],
            "grad_norm": [x if x is not None and isfinite(x) else None for x in cols["grad_norm"]],
        })
        items, self._ctx_items = self._ctx_items, []  # as _lift, against the columns' points
        self._lift_to(items, (idx + base).tolist(), cols["ts"])
        n = len(idx)
        self.clock.full_year = cols["ts"][-1].year
        self._progress = (cols["step"][-1], cols["ts"][-1])  # as _pace leaves it
        self._newest = (cols["step"][-1], cols["ts"][-1], int(idx[-1]) + base)
        self.counts["metrics"] += n
        self.counts["recognised"] += n
        return True

    def _line(self, block: bytes, s: int, e: int, lineno: int) -> None:
        if e - s > MAX_LINE_BYTES:
            self._bad(lineno, f"line of {e - s:,} bytes: only its last 64 KiB read")
            self.counts["long_lines"] += 1
            s = e - len(_utf8_start(block[e - MAX_LINE_BYTES : e]))
        self._s, self._e = s, e
        raw = block[s:e].decode("utf-8")
        if raw.endswith("\r"):
            raw = raw[:-1]
        try:
            known = self._text(raw, lineno)
        except _Untimely as exc:  # a stamp that is no data: the line is not read as any
            self._bad(lineno, str(exc))
            self.counts["times_refused"] += 1
            known = False
        if known:
            self.counts["recognised"] += 1
        else:
            self._unread(lineno, lambda: raw)

    def _note_unread(
        self, block: bytes, base: int, cand: np.ndarray, offs: np.ndarray, n: int
    ) -> None:
        """Keep the block's first lines that no recogniser looked at (no keyword), beside the
        keyword lines that said nothing known (``_line``): the import lists the first few, so
        "N lines not recognised" can be checked at its file:line."""
        if len(self.unread) >= MAX_UNREAD and base > self.unread[-1][0]:
            return  # the first few are in earlier blocks
        seen = set(cand.tolist())
        for i in range(n):
            if i in seen or base + i in self._followed:
                continue
            text = block[offs[i] : max(offs[i], offs[i + 1] - 1)].decode("utf-8", "replace")
            if text.strip() and not self._unread(base + i, lambda t=text: t):
                break  # every line after it comes later still

    def _unread(self, lineno: int, text: Callable[[], str]) -> bool:
        """Keep line ``lineno`` among the first ``MAX_UNREAD`` unrecognised lines, if it is
        one of them (lines reach here out of order: keyword lines as they are read, the other
        lines of a block after); whether it was kept."""
        if len(self.unread) >= MAX_UNREAD and lineno > self.unread[-1][0]:
            return False
        self.unread.append((lineno, clean_line(text(), 200)))
        self.unread.sort()
        del self.unread[MAX_UNREAD:]
        return True

    def _replace(self, block: bytes, base: int) -> bytes:
        text = block.decode("utf-8", "replace")
        i, pos, line, seen = text.find("\ufffd"), 0, base, -1
        while i >= 0:
            line += text.count("\n", pos, i)
            pos = i
            if line != seen:
                self.counts["replaced_lines"] += 1
                self._bad(line, "not UTF-8: undecodable bytes replaced by U+FFFD")
                seen = line
            i = text.find("\ufffd", i + 1)
        return text.encode("utf-8")

    # -- one line ------------------------------------------------------------------------------
    def _text(self, raw: str, lineno: int) -> bool:
        if raw == rp.TIMERS_HEADER and not self._tb:  # no writer, nothing else to read in it:
            self._line_host, self._label, self._rank = None, "", None  # a timers block every
            return self._start_report("minmax", raw, raw, lineno)  # 10 iterations (#56)
        if "\r" in raw:  # tqdm redraws: bar updates, then maybe a log dict written over it
            parts = [p for p in raw.split("\r") if p.strip()]
            if "Epoch " in raw and (rest := self._lightning(parts, raw, lineno)) is not None:
                return self._text(self._labelled(raw, rest), lineno) if rest.strip() else True
            bars = [b for p in parts[:-1] if "%|" in p and (b := ll.tqdm_bar(p)) is not None]
            for b in bars[:1] + bars[-1:] if len(bars) > 1 else bars:
                self._bar(b)  # the first: when the bar started; the last: where it got to
            return self._text(self._labelled(raw, parts[-1]), lineno) or bool(bars) if parts \
                else False
        if "\x1b" in raw:
            raw = clean_line(raw, len(raw))
        if raw.startswith("{") and (j := ll.journal_json(raw)) is not None:
            raw = j  # journalctl -o json: read as the journal line it stands for
        lead, self._line_host = 0, None
        if (hl := lr.host_label(raw)) is not None:  # pdsh's host: the writer's label, then
            lead = hl[1]  # the line as its node printed it
            self._line_host = self._pdsh_host(hl[0], lineno)
        if self._report is not None and (got := self._in_report(raw, lineno)) is not None:
            return got
        prefix, body, self._rank = lr.split_prefix(raw[lead:])
        if self._line_host and (r := lr.torch_rank(raw[lead:])) is not None:
            self._map(r, self._line_host, "pdsh label", lineno)  # a rank and its node, at once
        prefix = raw[:lead] + prefix
        self._label = prefix
        if prefix:
            self._tasks.add(prefix.split(":", 1)[0])
        if prefix and not self._task_nodes:
            self._task_nodes = lr.task_is_node(prefix)
        if self._task_nodes and self._rank is not None and lr.task_only(prefix):
            self._rank = None  # a node's torchrun agent, not a rank
        if self._tb and prefix in self._tb:
            done = self._in_traceback(prefix, body, raw, lineno)
            if done is not None:
                return done
        if ll.TB_START in body:
            key, rank = self._traceback_writer(prefix, body)
            self._tb[key] = 0
            self._tb_start[key] = self._cut_traceback(body, raw, lineno, rank)
            return True
        if f := ll.progress(body):  # Megatron-LM, TorchTitan, DeepSpeed (logline)
            return self._metric(f, body, raw, lineno)
        if "{" in body and (d := ll.hf_dict(body)) is not None:
            if isinstance(d, str):
                self.counts[f"hf_{d}_dicts"] += 1
                return True
            if "step" not in d:
                if self._tqdm is None:
                    self._bad(lineno, "training log dict without a step (no 'step' key and no "
                                      "progress bar before it)")
                    return False
                d["step"] = self._tqdm
                self.counts["metrics_step_from_progress_bar"] += 1
            if d["step"] == self._tqdm and self._bar_ts is not None:
                d["bar_ts"] = self._bar_ts  # the bar's clock says when
            return self._metric(d, body, raw, lineno)
        if "%|" in body and (b := ll.tqdm_bar(body)) is not None:
            self._bar(b)
            if rest := ll.after_bar(body):  # a line printed onto the bar without a newline
                self._text(rest, lineno)
            return True
        if c := ll.checkpoint(body):
            return self._checkpoint(c, body, raw, lineno)
        if ll.TRAIN_START in body:
            return self._train_start(body, lineno)
        if told := lset.settings(body):
            self._note_settings(told, lineno)
        if p := ll.plan(body):
            self._plan.update(p)
            return True
        if told:
            return True
        if "NCCL INFO comm" in body and (n := lr.nccl_init(body)):
            if "nNodes" in body and (shape := lr.nccl_shape(body)):
                self._nccl_shape(*shape)
            return self._nccl_init(n, lineno)
        if ("across ranks" in body or " performance:" in body) and (kind := rp.header(body)):
            return self._start_report(kind, raw, body, lineno)
        if "STRAGGLER" in body:
            return self._straggler_warning(body, lineno)
        if "<NO_OTHER_FAILURES>" in body:
            self._alone = True  # the Root Cause entry that follows is the only failure
            return True
        if " exitcode" in body and " time" in body and (flds := lr.summary_fields(body)):
            return all([self._summary(f, raw, lineno) for f in flds])  # an entry on one line
        if ":" in body and (fld := lr.summary_field(body)):
            return self._summary(fld, raw, lineno)
        if f := ll.failure(body):
            self._signal(f, body, raw, lineno)
            return True
        return False

    # -- per-rank timing reports (``rankperf``) ------------------------------------------------
    def _start_report(self, kind: str, raw: str, body: str, lineno: int) -> bool:
        self._end_report()
        ts, how, _ = self._when(body)
        key, _rest = rp.split_key(raw)
        self._report = rp.Report(kind, key, ts, self._origin(lineno))
        self.counts[f"rank_reports_{kind}"] += 1
        if ts is None:
            self.counts["rank_reports_untimed"] += 1
        return True

    def _in_report(self, raw: str, lineno: int) -> bool | None:
        """A line while a report is open: True/False if it was one of the report's lines
        (False: refused), None when it is not (the report ends at its writer's next line)."""
        rep = self._report
        assert rep is not None
        key, body = rp.split_key(raw)
        if key != rep.key:
            rep.gap += 1
            if rep.gap > rp.MAX_GAP:
                self._end_report()
            return None
        if rep.kind == "minmax" and body.rstrip()[-1:] not in (")", ":"):
            self._end_report()  # neither a header (":" ends it) nor a (min, max) line (")"):
            return None  # what the two regexes below say of it, without their scans
        if rp.header(body) is not None:
            self._end_report()
            return None
        try:
            mine = rep.line(body)
        except ValueError as exc:
            self._bad(lineno, f"per-rank report line refused: {exc}")
            self.counts["rank_report_lines_refused"] += 1
            return False
        if not mine:
            self._end_report()
            return None
        rep.gap = 0
        return True

    def _end_report(self) -> None:
        rep, self._report = self._report, None
        if rep is None:
            return
        if self.keep:
            rows, runs = rep.finish(), []
        else:  # a long-lived reader: the (min, max) runs stay columns to the store
            rows, runs = rep.finish_columns()
            self.timer_runs += runs
        self.rank_perf.extend(rows)
        self.counts["rank_perf_rows"] += len(rows) + sum(len(r.hi) for r in runs)
        for rank, host in rep.named_hosts():
            self._map(rank, host, "nvrx straggler report", int(rep.origin.rsplit(":", 1)[1]))

    def _straggler_warning(self, body: str, lineno: int) -> bool:
        try:
            got = rp.warning(body)
        except ValueError as exc:
            self._bad(lineno, str(exc))
            return False
        if got is None:
            return False
        metric, named = got
        ts, _how, _ = self._when(body)
        origin = self._origin(lineno)
        for rank, host in named:
            self.rank_perf.append(rp.RankPerf(ts, rank, host, rp.NVRX, metric, None, None, origin))
            if host:
                self._map(rank, host, "nvrx straggler report", lineno)
        self.counts["straggler_warnings"] += 1
        return True

    # -- which rank runs where -----------------------------------------------------------------
    def _pdsh_host(self, host: str, lineno: int) -> str | None:
        """``host`` once it has labelled ``PDSH_LINES`` lines (a word before a colon once is no
        host): then a host of the job, kept as a ``rank_hosts`` row without a rank."""
        if len(self._pdsh) >= MAX_PDSH_HOSTS and host not in self._pdsh:
            return None
        self._pdsh[host] += 1
        if self._pdsh[host] < PDSH_LINES:
            return None
        self._map(None, host, "pdsh label", lineno)
        return host

    def _map(self, rank: int | None, host: str, how: str, lineno: int) -> None:
        if (rank, host) not in self._mapped:
            self._mapped.add((rank, host))
            self.rank_hosts.append((rank, host, how, self._origin(lineno)))

    def _nccl_init(self, n: tuple[str, int, int, int, int], lineno: int) -> bool:
        host, pid, _dev, rank, nranks = n
        have = self._pids.get((host, pid))
        if have is None or nranks > have[1]:  # the communicator of every rank says it best
            self._pids[(host, pid)] = (rank, nranks)
        self._map(rank, host, f"nccl nranks={nranks}", lineno)
        self.counts["nccl_ranks"] += 1
        return True

    def _summary(self, fld: tuple[str, Any], raw: str, lineno: int) -> bool:
        """A field of torchrun's failure summary: an entry (time, host, rank, exitcode) is a
        worker's exit, with the rank's host."""
        name, value = fld
        if name == "time":
            self._entry = {"time": value}
            return True
        if self._entry is None:
            return False
        self._entry[name] = value
        if name != "exitcode":
            return name in ("host", "rank", "error_file", "traceback")
        entry, self._entry = self._entry, None
        if "rank" not in entry:
            return True
        rank, local = entry["rank"]
        code, pid, signame = value
        host = entry.get("host")
        if host:
            self._map(rank, host, "torchrun summary", lineno)
        where = f" on {host}" if host else ""
        detail = f"torchrun: rank {rank} (local rank {local}){where} exited with code {code}"
        kind = sig.WORKER_EXIT
        named = signame or (lr.signal_name(-code) if code < 0 else None)  # older: no (SIGTERM)
        if code < 0 and self._own_death(pid, named):
            kind, detail = sig.WORKER_KILLED, f"{detail} ({signame or f'signal {-code}'})"
        if self._alone:
            detail, self._alone = f"{detail}; {sig.NO_OTHER_FAILURES}", False
        ts = self._accepted(self.clock.utc(entry["time"]))
        self._add_signal(Signal(ts, kind, host, None, None, f"{detail} (pid {pid})",
                                self._origin(lineno), clean_line(raw), "log", rank), "line")
        return True

    def _own_death(self, pid: int, signame: str | None) -> bool:
        """Whether a worker's death by ``signame`` was its own: a signal nobody in the job sent
        (not one a launcher or scheduler stops workers with, nor to a pid its launcher had
        signalled: ``Sending process P closing signal SIGTERM``)."""
        return signame not in lr.TEARDOWN_SIGNALS and (self._label, pid) not in self._closing

    @staticmethod
    def _labelled(raw: str, last: str) -> str:
        """The last redraw of a tqdm line (or the text after it) under the launcher's label the
        line starts with: ``srun --label`` labels the whole output line, its ``\r`` redraws
        included (``0: \r 50%|...| 6/12 [...][rank0]: Traceback``: node 0's, its next lines
        ``0: [rank0]: ...``)."""
        m = lr.LEAD_LABELS.match(raw)
        if m is None or last.startswith(m.group(0)):
            return last
        return f"{m.group(0).rstrip()} {last.lstrip()}"

    def _traceback_writer(self, prefix: str, body: str) -> tuple[str, int | None]:
        """(prefix, rank) of the traceback starting in ``body``: a rank's ``[rankN]: Traceback``
        printed onto a tqdm bar is that rank's, and its next lines carry that prefix after the
        line's own (``0: [rank0]: ``)."""
        at = body.rfind("[rank", 0, body.find(ll.TB_START))
        if at > 0 and (got := lr.split_prefix(body[at:]))[0]:
            return prefix + got[0], got[2] if got[2] is not None else self._rank
        return prefix, self._rank

    def _cut_traceback(self, body: str, raw: str, lineno: int, rank: int | None) -> Signal:
        """The signal a traceback starting on this line becomes if the log ends inside it
        (finish): at the traceback's time, of its rank, its kind unknown (evidence.py)."""
        try:
            ts, _how, st = self._when(body)
        except _Untimely:
            ts, st = None, None
        host = (st[2] if st else None) or self._line_host or self.host
        detail = "traceback cut off before its exception line"
        return Signal(ts, sig.TRACEBACK_CUT, host, None, None, detail, self._origin(lineno),
                      clean_line(raw), "log", rank)

    def _in_traceback(self, prefix: str, body: str, raw: str, lineno: int) -> bool | None:
        what = ll.traceback_step(body)
        if what == "exception":
            del self._tb[prefix]
            detail = body.strip()[: sig.MAX_DETAIL_CHARS]
            self._signal((sig.TRACEBACK, detail, None, None, None, None, None), body, raw, lineno)
            if f := ll.failure(body):  # RuntimeError: CUDA error: an illegal memory access ...
                self._signal(f, body, raw, lineno)
            return True
        self._tb[prefix] += 1
        if self._tb[prefix] > TRACEBACK_MAX_LINES:
            del self._tb[prefix]
            self.counts["tracebacks_unfinished"] += 1
        return True if what in ("frame", "chain") else None

    # -- time ----------------------------------------------------------------------------------
    def _when(self, body: str) -> tuple[datetime | None, str, ll.Stamp]:
        """(time, how, stamp) of the current line: how is line, context, boot or none."""
        t, how, st = self.clock.stamp(body)
        if how == "refused":
            raise _Untimely(self.clock.refusal)
        if t is not None:
            self._ctx_lo = self._e + 1
            return t, how, st
        if how == "boot":
            return None, how, st
        t = self._context()
        return t, ("context" if t else "none"), st

    def _context(self) -> datetime | None:
        """The most recent time before the current line (the lines since the last known one
        are read backwards, once)."""
        lo, pos = self._ctx_lo, self._s
        if self._fast_at is not None and (j := bisect_right(self._fast_at[0], pos - 1) - 1) >= 0 \
                and self._fast_at[0][j] >= lo:  # a column-wise line since: its time is known
            t = self.clock.latest(self._blk, self._fast_at[1][j], pos)
            if t is None:
                t = self.clock.last = self._fast_at[2][j]
        else:
            t = self.clock.before(self._blk, lo, pos)
        self._ctx_lo = max(pos, lo)
        return t

    # -- results -------------------------------------------------------------------------------
    def _accepted(self, t: datetime) -> datetime:
        """``t`` (a time a line's text gave) if it is data, else the line is not (_Untimely)."""
        if not self.clock.accept(t):
            raise _Untimely(self.clock.refusal)
        return t

    def _origin(self, lineno: int) -> str:
        return f"{self.label}:{lineno}"

    def _bad(self, lineno: int, reason: str) -> None:
        self.counts["bad"] += 1
        if len(self.bad) < MAX_BAD:
            self.bad.append(BadLine(self._origin(lineno), reason))

    def _metric(self, f: dict[str, Any], body: str, raw: str, lineno: int) -> bool:
        ts, how, _ = self._when(body)
        step = f.pop("step")
        iter_s, bar_ts = f.pop("iter_s", None), f.pop("bar_ts", None)
        if step < self._last_step:
            self._recent.clear()  # went back: a restart, whose steps are new points
        self._last_step = step
        printed = self._recent.get(step)
        if printed is not None and printed != self._label:
            self.counts["metrics_repeated_by_ranks"] += 1  # one step, several ranks: one point
            return True
        self._recent[step] = self._label
        if len(self._recent) > 4096:
            self._recent.pop(next(iter(self._recent)))
        rec: dict[str, Any] = {"run": self.run} if self.run else {}
        if how != "line" and (iter_s or bar_ts):  # timed once the block is read (_pace)
            self._paced[id(rec)] = (iter_s, bar_ts)
        if ts is not None:
            rec["ts"] = ts
        rec["step"] = step
        loss = f.pop("loss", None)
        nan_iters = f.pop("nan_iterations", None)
        if loss is not None:
            if isfinite(loss):
                rec["loss"] = loss
                if nan_iters and isfinite(nan_iters) and nan_iters > 0:
                    self._nan(f"{nan_iters:.0f} NaN iteration(s) up to iteration {step}", ts, how,
                              raw, lineno)
            else:
                self._nan(f"loss {loss} at step {step}", ts, how, raw, lineno)
        for name, v in f.items():
            if v is None or not isfinite(v):
                continue
            if name == "mfu" and not 0 <= v <= 1:
                self._bad(lineno, f"mfu {v:.0%} is not a fraction of peak: mfu left out")
                continue
            rec[name] = int(v) if name == "tokens" else v
        self.metrics.append(rec)
        self.metric_origins.append(f"{self.label}:{lineno}")
        self._mlines.append(lineno)
        self.counts["metrics"] += 1
        if how != "line":
            self.counts[f"metrics_ts_from_{how}"] += 1
        return True

    def _planned_end(self, first: int, block: bytes, base: int, offs: np.ndarray) -> None:
        """The block's newest progress point reached the planned steps (Megatron-LM's
        ``iteration N/ N``, its ``train_iters`` argument, TorchTitan's ``total steps``): a
        ``planned_exit`` signal on that line, once, so the run reads as finished."""
        if self._done_told:
            return
        if len(self.metrics) > first:
            rec, origin = self.metrics[-1], self.metric_origins[-1]
            step, ts, lineno = rec["step"], rec.get("ts"), int(origin.rsplit(":", 1)[1])
        elif self._newest is not None:  # the block's points were kept as columns
            step, ts, lineno = self._newest
            origin = f"{self.label}:{lineno}"
        else:
            return
        i = lineno - base
        if not 0 <= i < len(offs) - 1:
            return
        raw = block[offs[i] : offs[i + 1] - 1].decode("utf-8", "replace")
        told = ll.iteration_of(raw) if "iteration" in raw else None
        total = told[1] if told else self._plan.get("train_steps")
        if not total or step < total:
            return
        self._done_told = True
        detail = f"planned steps reached: step {step:,} of {total:,}"
        self._add_signal(Signal(ts, sig.PLANNED_EXIT, self.host, None, None, detail,
                                origin, clean_line(raw), "log", None), "line")

    def _lightning(self, parts: list[str], raw: str, lineno: int) -> str | None:
        """Lightning's training bar redrawn: each batch it shows is a progress point, timed by
        the bar's clock (``_bar``); the text glued after the last redraw (a log line printed
        over the bar) is returned to be read. None when no part is Lightning's bar."""
        rest = None
        for i, p in enumerate(parts):
            if (b := ll.lightning_bar(p)) is None:
                continue
            epoch, n, total, elapsed, loss, end = b
            self._bar((n, total, elapsed))
            if n == 0:  # the bar (re)started: an epoch, or a resumed launch redoing steps
                self._pl_last = None
                self._recent.clear()
            elif (epoch, n) != self._pl_last:  # a redraw of the same batch is one point
                self._pl_last = (epoch, n)
                f: dict[str, Any] = {"step": epoch * total + n, "bar_ts": self._bar_ts}
                if loss is not None:
                    f["loss"] = loss
                self._metric(f, p[:end], raw, lineno)
            rest = p[end:] if i == len(parts) - 1 else ""
        return rest

    def _bar(self, bar: tuple[int, int, float | None]) -> None:
        """A tqdm bar: its position is the step of the log dicts after it, and its elapsed
        time, counted from when it started (the most recent time before it first showed, less
        what it showed then), is their time."""
        step, total, elapsed = bar
        self._tqdm = step
        if elapsed is None:
            self._bar_ts = None
            return
        if total not in self._bars or elapsed < self._bar_elapsed.get(total, 0.0):
            t = self._context()  # a new bar (or the same total started again: a restart)
            self._bars[total] = _shift(t, -elapsed, self.clock.window)
        self._bar_elapsed[total] = elapsed
        origin = self._bars[total]
        self._bar_ts = _shift(origin, elapsed, self.clock.window)

    def _pace(self, first: int) -> None:
        """Time the progress lines of the block just read that have no time of their own by
        their pace, in line order: the bar's clock, else the previous progress point's time
        plus the steps since at the logged time per iteration (Megatron's ``elapsed time per
        iteration``, DeepSpeed's ``iter time``); never before the most recent time the log
        showed (which they carry until then), so the last progress before a crash is when it
        happened, not when the log last printed a time. Points without a token count get one
        from what the trainer said once: consumed samples x Megatron's ``seq_length``, or the
        step x TorchTitan's global batch x sequence length."""
        starts = self._starts
        for rec, origin in zip(self.metrics[first:], self.metric_origins[first:], strict=True):
            while starts and starts[0][0] < _lineno(origin):  # training (re)started before it
                _, step0, at = starts.pop(0)
                self._progress = (step0, at) if step0 is not None and at is not None else None
            pace = self._paced.pop(id(rec), None) if self._paced else None
            step, ts = rec["step"], rec.get("ts")
            samples = rec.pop("samples", None)
            if rec.get("tokens") is None and self._plan:  # the trainer said the sizes once
                if samples is not None and "seq_length" in self._plan:
                    rec["tokens"] = int(samples) * self._plan["seq_length"]
                elif "tokens_per_step" in self._plan:
                    rec["tokens"] = step * self._plan["tokens_per_step"]
            if pace is not None:
                iter_s, est = pace
                if est is None and iter_s and self._progress and step > self._progress[0]:
                    ahead = (step - self._progress[0]) * iter_s
                    est = _shift(self._progress[1], ahead, self.clock.window)
                if est is not None and (ts is None or est > ts):
                    had = "context" if ts is not None else "none"
                    self.counts[f"metrics_ts_from_{had}"] -= 1
                    self.counts["metrics_ts_from_pace"] += 1
                    rec["ts"] = ts = est
            if ts is not None:
                self._progress = (step, ts)
        if starts:  # a start after the block's last progress point
            _, step0, at = starts[-1]
            self._progress = (step0, at) if step0 is not None and at is not None else None
        starts.clear()
        self._paced.clear()

    def _train_start(self, body: str, lineno: int) -> bool:
        """Megatron's "[before the start of training step] datetime: ..." (training.py
        ``train``): its first progress line measures its time per iteration from here, from the
        step a checkpoint load just named (else step 0, when nothing was trained before), so it
        anchors that line's pace (``_pace``), not the previous attempt's last point."""
        ts, _how, _ = self._when(body)
        step0 = self._resume if self._resume is not None else (0 if self._last_step < 0 else None)
        self._resume = None
        self._starts.append((lineno, step0, ts))
        return True

    def _lift(self, first: int) -> None:
        """A line without a time of its own after a progress line paced later than the time it
        took (the most recent time shown) happened after that progress: it takes its time (an
        untimed traceback between paced iteration lines is when they say, not hours before)."""
        items, self._ctx_items = self._ctx_items, []
        if not items or len(self.metrics) <= first:
            return
        lines = [_lineno(o) for o in self.metric_origins[first:]]
        self._lift_to(items, lines, [r.get("ts") for r in self.metrics[first:]])

    def _lift_to(self, items: list[tuple[list[Any], int]], lines: list[int],
                 times: list[datetime | None]) -> None:
        """``_lift`` of ``items`` against the block's progress points at ``lines`` (ascending
        line numbers), timed ``times``."""
        for box, i in items:
            item = box[i]
            k = bisect_right(lines, _lineno(item.origin)) - 1
            while k >= 0 and times[k] is None:
                k -= 1
            if k >= 0 and item.ts is not None and times[k] > item.ts:
                box[i] = replace(item, ts=times[k])
                self.counts["ts_from_paced_progress"] += 1

    def _nan(self, detail: str, ts: datetime | None, how: str, raw: str, lineno: int) -> None:
        self._add_signal(Signal(ts, sig.NAN_LOSS, self.host, None, None, detail,
                                self._origin(lineno), clean_line(raw), "log", self._rank), how)

    def _checkpoint(self, c: tuple[str, str | None, int | None, str | None], body: str, raw: str,
                    lineno: int) -> bool:
        kind, phase, step, path = c
        if kind == "load":  # each writer (rank) its own load: every rank logs one
            finished_open = phase == "finish" and self._label in self._load_open
            if phase == "start":
                self._load_open.add(self._label)
            else:
                self._load_open.discard(self._label)
            if finished_open:  # the finish of the load started above: its end, timed
                self.counts["load_finished"] += 1
                kind = "load_end"
        ts, how, _ = self._when(body)
        if kind in ("load", "load_end") and step is not None:
            self._resume = step
        if how == "context":
            self._ctx_items.append((self.checkpoint_events, len(self.checkpoint_events)))
        self.checkpoint_events.append(
            CheckpointEvent(ts, kind, step, path, self._origin(lineno), clean_line(raw)))
        self.counts[kind] += 1
        if how != "line":
            self.counts[f"checkpoint_events_ts_from_{how}"] += 1
        return True

    def _signal(self, f: ll.Failure, body: str, raw: str, lineno: int) -> None:
        kind, detail, xid, pci, host, gpu, at = f
        ts, how, st = self._when(body)
        if at:
            try:
                at_ts = self.clock.utc(datetime.fromisoformat(at))
            except ValueError:
                at_ts = None
            if at_ts is not None:
                ts, how = self._accepted(at_ts), "line"
        if how == "context" and kind in _NETWORK_KINDS and (t := self.clock.after(
                self._blk, self._e + 1)) is not None and ts is not None and t > ts:
            ts = t  # untimed: at the latest it was when the log next shows a time
        kernel = st[3] or st[0] == "boot" or kind in (sig.XID, sig.HOST_OOM, sig.GPU_DRIVER_CRASH,
                                                      sig.GPU_UNREACHABLE) \
            or kind in sig.DRIVER_GPU_KINDS
        if pci is not None:
            gpu = self._gpus.get(ll.pci_key(pci))
        rank = None if kind in _LAUNCHER_KINDS else self._rank  # the launcher is no rank
        if kind == sig.LAUNCHER_SIGNAL and (pid := lr.closing_pid(body)) is not None:
            self._closing.add((self._label, pid))
        elif kind == sig.WORKER_EXIT and (died := lr.killed_by(detail)) and self._own_death(*died):
            kind, detail = sig.WORKER_KILLED, f"{detail} ({died[1]})"  # as in its summary
        if rank is None and not kernel:  # a rank the line names itself (Cray MPICH's abort
            rank = lr.rank_in(body)  # is a worker's exit, written by that rank: [Rank N])
            if rank is None and kind not in _LAUNCHER_KINDS and self._pids and (
                    hp := lr.nccl_pid(body)):
                rank = self._pids.get(hp, (None,))[0]
        if rank is not None and host is not None and not kernel:
            self._map(rank, host, "log line", lineno)
        host = host or st[2] or self._line_host or self.host
        if kind == sig.XID:
            self._xid_at = (host, ts)
        elif kind in sig.DRIVER_GPU_KINDS and self._xid_at == (host, ts):
            self.counts["driver_lines_of_an_xid"] += 1  # the XID just read says it, with its code
            return
        self._add_signal(Signal(ts, kind, host, gpu, xid, detail, self._origin(lineno),
                                clean_line(raw), "kernel" if kernel else "log", rank), how)

    def _add_signal(self, s: Signal, how: str) -> None:
        if how == "context":
            self._ctx_items.append((self.signals, len(self.signals)))
        self.signals.append(s)
        self.counts[s.kind] += 1
        self.counts["signals"] += 1
        if s.ts is None:
            self.counts["untimed_signals"] += 1
        elif how == "context":
            self.counts["signals_ts_from_context"] += 1


class _Untimely(ValueError):
    """A line's time is no data (outside the window, or no real instant): why, in words."""


def _shift(t: datetime | None, seconds: float, window: Window) -> datetime | None:
    """``t`` moved by ``seconds`` (a bar's elapsed time, steps x time per step), or None when
    that leaves the window (a line's absurd pace must not date a point in the year 9999)."""
    if t is None:
        return None
    try:
        out = t + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        return None
    return out if out in window else None


def _lineno(origin: str) -> int:
    return int(origin.rsplit(":", 1)[1])


def _utf8_start(data: bytes) -> bytes:
    """``data`` from its first byte that starts a UTF-8 character."""
    i = 0
    while i < min(4, len(data)) and 0x80 <= data[i] < 0xC0:
        i += 1
    return data[i:]


def parse_file(
    path: str | os.PathLike[str],
    *,
    tz: tzinfo | str | None = UTC,
    year_hint: int | None = None,
    host: str | None = None,
    start_line: int = 1,
    run: str | None = None,
    gpu_by_pci: Mapping[str, int] | None = None,
    on_batch: Callable[[LogBatch], None] | None = None,
    window: Window | None = None,
) -> LogScan:
    """Read a text log in full. Lines before ``start_line`` are skipped (already read); with
    ``on_batch`` the results of each 8 MiB block go there and are not kept in the scan (memory
    stays flat for any file size). ``window``: the times that are data (default: the file's,
    ``logclock.file_window``). Raises ``ImportFileError`` when the file cannot be read."""
    p = Path(path)
    parser = LogParser(p, tz=tz, year_hint=year_hint, host_hint=host, run=run,
                       gpu_by_pci=gpu_by_pci, keep=on_batch is None,
                       window=window or file_window(str(p), tz))
    try:
        with open(p, "rb") as fh:
            pending = _skip_lines(fh, start_line - 1)
            parser.next_lineno = start_line
            while data := fh.read(CHUNK_BYTES):
                buf = pending + data if pending else data
                pending = buf[parser.feed_block(buf):]
                if on_batch is not None:
                    on_batch(parser.drain())
            if pending:
                parser.feed_block(pending, final=True)
    except FileNotFoundError:
        raise ImportFileError(p, "no such file") from None
    except IsADirectoryError:
        raise ImportFileError(p, "is a directory, not a log file") from None
    except OSError as exc:
        raise ImportFileError(p, exc.strerror or str(exc)) from None
    parser.finish()
    if on_batch is not None:
        on_batch(parser.drain())
    return parser.scan()


def _skip_lines(fh: Any, n: int) -> bytes:
    """Skip ``n`` lines of ``fh``; returns the bytes read past them."""
    while n > 0:
        data = fh.read(CHUNK_BYTES)
        if not data:
            return b""
        k = data.count(b"\n")
        if k < n:
            n -= k
            continue
        pos = -1
        for _ in range(n):
            pos = data.find(b"\n", pos + 1)
        return data[pos + 1 :]
    return b""
