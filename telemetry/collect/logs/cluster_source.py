"""What a real cluster already writes, as a source: training and kernel logs (text). Read once
by ``factoryfloor import FILE...``; followed by ``ingest``/``serve --logs GLOB``. The checkpoint
directories given beside them are another source (``collect.checkpoints.ckpt_source``), which
this one never imports: ``import`` composes the two into one derivation.

Long module: one source, its file follower (rotation, truncation, positions) and its batches.

Each round (``poll``):

- every log is read from where the last round stopped, in blocks (``textlogs.LogParser``):
  progress lines become ``train_metrics`` records, failure lines ``signals`` (kernel-log XIDs
  also ``xid_events``, source ``kernel``, so the XID table counts them beside dcgm-exporter's),
  checkpoint lines ``checkpoint_events``. A followed file that is rotated (its path now names
  another inode) is read to its end first, then the new file from its start; one that shrank
  (truncated) is read again from its start. Positions are kept in a positions file (as promtail
  does) beside the store's name in the state directory, advanced only once the store took the
  block, so a restart goes on where it stopped and a failed write is read again.
- last, a ``Derive`` batch for the runs touched: the store
  writer re-derives their interruptions (``telemetry.after_write``).

Batch ids of a log block are its file's identity (content digest for an import; device, inode
and byte offset for a followed file) and offset, so importing the same files again writes
nothing. Each file has a health row (``cluster:PATH``; ``import:`` for an import).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from telemetry import env
from telemetry.collect.logs.import_source import log_digest
from telemetry.collect.logs.logclock import MAX_FUTURE_S, SPAN_S, file_window
from telemetry.collect.logs.rankperf import MEGATRON
from telemetry.errors import FactoryFloorError
from telemetry.ingest.seam import (
    RUN_OPTION,
    Batch,
    Derive,
    Health,
    HealthBook,
    Option,
    Records,
    SourceContext,
    SourceSpec,
    Tables,
    Written,
)

BLOCK_BYTES = 8 << 20  # what one batch of a log holds at most
SIEVES = 2  # blocks of an imported log sieved at once, in threads, while one is parsed
FOLLOW_INTERVAL_S = 5.0  # a followed log is read this often (a stall shows within a minute)
# New bytes of a followed log that may begin a failure: the round starts at once, not at the
# next tick (#58: the culprit alerted within seconds of the first line). Progress lines never
# match, so a healthy job's log keeps the 5 s cadence.
URGENT = re.compile(
    rb"Traceback|Error|error|SIG[A-Z]{3,}|[Ww]atchdog|[Tt]ime ?[Oo]ut|[Tt]imed out|CANCELLED|"
    rb"exitcode|Killed|Aborted|Segmentation|NCCL WARN|Xid|XID|[Ff]ailed|terminate called"
)
PEEK_BYTES = 1 << 20  # of a log's new bytes, the newest this much is looked at
TEXT_SOURCE = "logs"


@dataclass
class FileAccount:
    """What one log gave, for the command's report."""

    path: str
    lines: int = 0
    metrics: int = 0
    duplicate_blocks: int = 0
    signals: dict[str, int] = field(default_factory=dict)
    checkpoint_events: int = 0
    unrecognised: int = 0
    untimed: int = 0
    untimed_at: list[str] = field(default_factory=list)  # the first of those, file:line
    assumed_year: int | None = None  # the year given to its year-less times ...
    year_from: str = ""  # ... and where it came from
    untimed_metrics: int = 0  # progress lines with no time in or before them: not stored
    rank_perf: int = 0  # per-rank timing rows (``rankperf``) with a time, stored by this import
    untimed_rank_perf: int = 0  # ... without one: not stored
    needs_run: int = 0  # progress lines that name no run, read with no --run: the log not stored
    problems: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # the first unrecognised lines, file:line


def _digest(block: bytes) -> str:
    return hashlib.blake2b(block, digest_size=8).hexdigest()


@functools.cache
def _sieving() -> ThreadPoolExecutor:
    """The one thread that sieves a log's next block (numpy, Arrow and hashlib release the GIL:
    with two cores, an 8 MiB block's Arrow passes overlap the parse of the one before)."""
    return ThreadPoolExecutor(SIEVES, thread_name_prefix="log-sieve")


class _Log:
    """One log file read block by block from a position, across rotation and truncation."""

    def __init__(
        self, path: str, run: str | None, tz: str | None, follow: bool, year: int | None = None,
        bounds: tuple[float, float] = (MAX_FUTURE_S, SPAN_S),
    ) -> None:  # fmt: skip
        self.path, self.run, self.tz, self.follow = path, run, tz, follow
        self.bounds = bounds  # (max future, span), seconds: logclock.file_window
        self.account = FileAccount(path)
        self.fh: Any = None
        self.ident = ""  # batch id stem: content digest (import) or dev:inode (follow)
        self.offset = 0
        self._edge = 0  # the file offset the next read stops at (blocks)
        self.lineno = 1
        self.given_year = year  # --year: year-less times are in it, whatever else says
        self.year = year
        self.mtime = None if follow else _mtime(path)  # else: year-less times are not after it
        self.parser = self._new_parser()
        self.facts_told: dict[str, int] = {}  # the job facts already written to the run

    def _new_parser(self) -> Any:
        from telemetry.collect.logs.textlogs import LogParser

        window = file_window(self.path, self.tz, None, *self.bounds)
        return LogParser(self.path, tz=self.tz, year_hint=self.year, run=self.run, keep=False,
                         year_ref=self.mtime, window=window)

    def open(self, position: Mapping[str, Any] | None = None) -> None:
        self.fh = open(self.path, "rb")  # noqa: SIM115 (kept open: a rotated file is read out)
        st = os.fstat(self.fh.fileno())
        if self.follow:
            self.ident = f"{st.st_dev}:{st.st_ino}"
            if (
                position
                and position.get("ident") == self.ident
                and position["offset"] <= st.st_size
            ):
                self.offset, self.lineno = int(position["offset"]), int(position["lineno"])
        else:
            self.ident = log_digest(self.path, f"text log, zone {self.tz}", self.run)[:24]
        self.fh.seek(self.offset)

    def blocks(self) -> Iterator[tuple[Any, str, int, int]]:
        """(parsed batch, batch id, end offset, next line number) for each block of new lines;
        the caller advances ``offset``/``lineno`` once a block is stored (``commit``). The
        rest of a rotated file comes with end offset -1: nothing to commit (it is done)."""
        if self.fh is None:
            self.open()
        if self.follow:
            yield from self._rotated_or_truncated()
        offset, lineno, pending = self.offset, self.lineno, b""
        self.fh.seek(offset)
        self._edge = offset  # where the last read ended, a whole block after the one before
        ahead = None if self.follow else _sieving()  # a followed log's news is small
        nxt = self._read(pending, ahead)
        reads: deque[tuple[bytes, Any]] = deque()  # read after ``nxt``, sieving meanwhile
        while nxt is not None:
            buf, job = nxt
            newest = reads[-1][0] if reads else buf  # the next blocks are read and sieved
            while ahead is not None and len(reads) < SIEVES - 1 and (  # while this one is
                    cut := newest.rfind(b"\n") + 1):  # parsed: each starts at the cut
                if (more := self._read(newest[cut:], ahead)) is None:  # before it
                    break
                reads.append(more)
                newest = more[0]
            scan, digest = job.result() if job is not None else (None, "")
            if scan is not None:
                nxt = reads.popleft() if reads else self._read(buf[int(scan.offs[-1]) :], ahead)
            used = self.parser.feed_block(buf, lineno, scan=scan)
            if scan is None:
                pending = buf if not used and len(buf) <= BLOCK_BYTES else buf[used:]
                nxt = reads.popleft() if reads else self._read(pending, ahead)
                if not used and len(buf) <= BLOCK_BYTES:  # no complete line yet
                    continue
            start, pending = offset, buf[used:]
            offset += used
            lineno = self.parser.next_lineno
            bid = self._id(start, b"" if scan is not None else buf[:used], digest)  # no copy
            yield self.parser.drain(), bid, offset, lineno
        if pending and not self.follow:  # the last line of a finished file has no newline
            self.parser.feed_block(pending, lineno, final=True)
            self.parser.finish()
            start = offset
            offset += len(pending)
            yield self.parser.drain(), self._id(start, pending), offset, lineno + 1
        elif not self.follow:
            self.parser.finish()  # a per-rank report or a cut traceback that ends the file
            last = self.parser.drain()
            if last.rank_perf or last.timer_runs or last.rank_hosts or last.signals:
                yield last, self._id(offset, b""), offset, lineno

    def _id(self, start: int, block: bytes, digest: str = "") -> str:
        """A block's batch id: the file, where the block starts and what it holds (a file
        truncated and written again reuses its inode and offsets, not its bytes); ``digest``:
        the block's, already computed (``_sieve``)."""
        digest = digest or _digest(block)
        return f"{TEXT_SOURCE}:{self.ident}:{start}:{digest}"

    def _read(self, pending: bytes, ahead: Any) -> tuple[bytes, Any] | None:
        """The next read after ``pending`` (the previous read's unfinished line), and its
        sieve under way in ``ahead`` (a thread) if given; None at the end of the file."""
        self._edge += BLOCK_BYTES  # the blocks end where they always did (their batch ids)
        data = self.fh.read(self._edge - self.fh.tell())
        if not data:
            return None
        cut = data.rfind(b"\n") + 1
        if 0 < cut < len(data):  # the unfinished line is read again with the next block: a
            self.fh.seek(cut - len(data), os.SEEK_CUR)  # block of whole lines is sliced by
            data = memoryview(data)[:cut]  # nobody (each 8 MiB copy was ~5 ms of the GIL)
        buf = b"".join((pending, data)) if pending else bytes(data)
        return buf, (ahead.submit(self._sieve, buf) if ahead is not None else None)

    def _sieve(self, buf: bytes) -> tuple[Any, str]:
        """``buf``'s lines sieved (``LogParser.sieve``) and the digest of those lines."""
        scan = self.parser.sieve(buf)
        return scan, (_digest(buf[: int(scan.offs[-1])]) if scan is not None else "")

    def _rotated_or_truncated(self) -> Iterator[tuple[Any, str, int, int]]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return  # between a rotation's rename and the new file: read the old one on
        size = os.fstat(self.fh.fileno()).st_size
        if f"{st.st_dev}:{st.st_ino}" != self.ident:  # rotated: the old file to its end first
            self.fh.seek(self.offset)
            rest = self.fh.read()
            if rest:
                self.parser.feed_block(rest, self.lineno, final=True)
                yield self.parser.drain(), self._id(self.offset, rest), -1, 1
            self.fh.close()
            self.fh, self.offset, self.lineno = None, 0, 1
            self.parser = self._new_parser()
            self.open()
        elif size < self.offset:  # truncated in place (copytruncate): from the start again
            self.offset, self.lineno = 0, 1
            self.parser = self._new_parser()

    def commit(self, offset: int, lineno: int) -> None:
        self.offset, self.lineno = offset, lineno

    def position(self) -> dict[str, Any]:
        return {"ident": self.ident, "offset": self.offset, "lineno": self.lineno}

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


_FULL_DATE = re.compile(  # 2024-05-01, or dmesg -T's "Wed May  1 12:00:00 2024"
    rb"(?:19|20)\d\d-[01]\d-[0-3]\d|\b\w{3} \w{3} [ \d]\d [\d:]{8} (?:19|20)\d\d"
)


def _dated(path: str, sniff: int = 1 << 16) -> bool:
    """Whether a log's lines carry full dates (with the year), judged by its first 64 KiB."""
    try:
        with open(path, "rb") as fh:
            return _FULL_DATE.search(fh.read(sniff)) is not None
    except OSError:
        return True


def _mtime(path: str) -> datetime | None:
    """The file's modification time, naive UTC."""
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime, UTC).replace(tzinfo=None)
    except OSError:
        return None


_FIELDS = ("ts", "step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu")


def _columns(batch: Any, run: str | None) -> dict[str, list[Any]]:
    """The batch's timed progress points as ``train_metrics`` columns (``ingest.columnar``:
    checked by the records policy a column at a time): its records, then the points the parser
    kept as columns (``LogBatch.metric_columns``, all timed, none naming a run)."""
    timed = [m for m in batch.metrics if m.get("ts")]
    cols = {k: [m.get(k) for m in timed] for k in _FIELDS}
    cols["run"] = [m.get("run") or run for m in timed]
    for chunk in batch.metric_columns:
        n = len(chunk["step"])
        for k in _FIELDS:
            cols[k] += chunk[k] if k in chunk else [None] * n
        cols["run"] += [run] * n
    return cols


def _points(batch: Any) -> int:
    """How many progress points the batch holds, timed or not."""
    return len(batch.metrics) + sum(len(c["step"]) for c in batch.metric_columns)


def _tables(batch: Any, run: str | None) -> dict[str, pd.DataFrame | pa.Table]:
    from telemetry.signals import XID, signals_frame

    out: dict[str, pd.DataFrame | pa.Table] = {}
    timed = [s for s in batch.signals if s.ts is not None]
    if batch.signals:  # the untimed too, with no time: a log without any still shows a stop
        out["signals"] = signals_frame(batch.signals, run).astype({"gpu": "Int16", "xid": "Int16"})
    if timed:
        xids = [s for s in timed if s.kind == XID and s.host and s.xid is not None]
        if xids:
            out["xid_events"] = pd.DataFrame(
                {
                    "ts": pd.to_datetime([s.ts for s in xids]),
                    "host": [s.host for s in xids],
                    "gpu": pd.array([s.gpu for s in xids], dtype="Int16"),
                    "xid": pd.array([s.xid for s in xids], dtype="Int16"),
                    "run_id": [run] * len(xids),
                    "source": ["kernel"] * len(xids),
                }
            )
    if batch.rank_hosts and run:
        out["rank_hosts"] = pd.DataFrame(
            {
                "run_id": [run] * len(batch.rank_hosts),
                "rank": pd.array([r[0] for r in batch.rank_hosts], dtype="Int32"),
                "host": [r[1] for r in batch.rank_hosts],
                "how": [r[2] for r in batch.rank_hosts],
                "origin": [r[3] for r in batch.rank_hosts],
            }
        )
    if run and (table := _rank_perf(run, batch.rank_perf, batch.timer_runs)) is not None:
        out["rank_perf"] = table
    events = [e for e in batch.checkpoint_events if e.ts is not None]
    if events:
        out["checkpoint_events"] = pd.DataFrame(
            {
                "ts": pd.to_datetime([e.ts for e in events]),
                "run_id": [run] * len(events),
                "kind": [e.kind for e in events],
                "step": pd.array([e.step for e in events], dtype="Int64"),
                "path": [e.path for e in events],
                "origin": [e.origin for e in events],
                "line": [e.line for e in events],
            }
        )
    return out


def _log_file(log: _Log, run: str | None, now: datetime) -> pd.DataFrame:
    """The file behind ``log``'s ``file:line`` origins (``parser.label``), resolved now, so
    the incident view opens it from the store's word alone (``telemetry.logview``)."""
    path = os.path.realpath(log.path)
    try:
        size: int | None = os.stat(path).st_size
    except OSError:
        size = None
    return pd.DataFrame({"label": [log.parser.label], "path": [path], "run_id": [run],
                         "bytes": pd.array([size], dtype="Int64"),
                         "seen_ts": [_naive_utc(now)]})


def _rank_perf(run: str, rows: list[Any], runs: list[Any]) -> pa.Table | None:
    """``rank_perf`` in Arrow (built and stored 2x faster than pandas) of the timed ``RankPerf``
    rows and (min, max) ``TimerRun``s (an untimed report is counted, not stored); None when
    there is none. A 1 GiB Megatron log has a million rows (a timers block every 10
    iterations): the rows are transposed at once, the runs' columns joined, their times and
    origins repeated in Arrow."""
    parts = []
    if rows := [r for r in rows if r.ts is not None]:
        ts, rank, host, source, metric, score, value_ms, origin = zip(*rows, strict=True)
        parts.append(_perf_table(run, pa.array(ts, pa.timestamp("us")), pa.array(rank, pa.int32()),
                                 pa.array(host, pa.string()), pa.array(source, pa.string()),
                                 metric, pa.array(score, pa.float64()),
                                 pa.array(value_ms, pa.float64()), pa.array(origin, pa.string())))
    if runs := [r for r in runs if r.ts is not None]:
        each = pa.array(np.repeat(np.arange(len(runs)), [len(r.hi) for r in runs]))
        lo = pa.array(list(chain.from_iterable(r.lo for r in runs)), pa.float64())
        hi = pa.array(list(chain.from_iterable(r.hi for r in runs)), pa.float64())
        parts.append(_perf_table(run, pa.array([r.ts for r in runs], pa.timestamp("us")).take(each),
                                 pa.nulls(len(hi), pa.int32()), pa.nulls(len(hi), pa.string()),
                                 pa.array([MEGATRON] * len(hi), pa.string()),
                                 list(chain.from_iterable(r.names for r in runs)),
                                 pc.divide(lo, hi), hi,
                                 pa.array([r.origin for r in runs], pa.string()).take(each)))
    return pa.concat_tables(parts) if parts else None


def _perf_table(run: str, ts: pa.Array, rank: pa.Array, host: pa.Array, source: pa.Array,
                metric: Sequence[str], score: pa.Array, value_ms: pa.Array, origin: pa.Array
                ) -> pa.Table:  # fmt: skip
    return pa.table({"run_id": pa.array([run] * len(ts), pa.string()), "ts": ts, "rank": rank,
                     "host": host, "source": source, "metric": pa.array(metric, pa.string()),
                     "score": score, "value_ms": value_ms, "origin": origin})


def _settings(parser: Any, run: str) -> pd.DataFrame | None:
    """The settings the log stated since they were last written (``logs.settings``)."""
    new = parser.settings[parser.settings_written:]
    if not new:
        return None
    parser.settings_written = len(parser.settings)
    return pd.DataFrame({"run_id": [run] * len(new), "name": [t[0] for t in new],
                         "value": [t[1] for t in new], "origin": [t[2] for t in new],
                         "line_no": pd.array([t[3] for t in new], dtype="Int64")})


def _naive_utc(t: datetime) -> pd.Timestamp:
    ts = pd.Timestamp(t)
    return ts.tz_convert(None) if ts.tzinfo else ts


class ClusterSource:
    """Text logs of one run (module doc)."""

    name = "cluster"
    produces = (Records, Tables, Derive)
    health_rows = True
    # its batches may be written while it makes the next (daemon.collect_overlapped): it never
    # reads the store while making them, and a late settle only updates its accounts
    overlap_writes = True

    def __init__(
        self,
        *,
        files: Sequence[str] = (),
        globs: Sequence[str] = (),
        run: str | None = None,
        tz: str | None = None,
        follow: bool = False,
        interval_s: float = FOLLOW_INTERVAL_S,
        positions: str | None = None,
        ranks_per_node: int | None = None,
        data_year: int | None = None,
        max_future_s: float = MAX_FUTURE_S,
        span_s: float = SPAN_S,
        year: int | None = None,
    ) -> None:
        self.run, self.tz, self.follow = run, tz, follow
        self.bounds = (max_future_s, span_s)  # which log times are data (logclock)
        # health rows: a followed file reports every poll ("cluster:"); an import once, at
        # the time it was read, which says nothing of the job's time ("import:", as records)
        self.kind = "cluster" if follow else "import"
        self.ranks_per_node = ranks_per_node
        self.interval_s = interval_s if follow else 0.0
        self.globs = list(globs)
        self.produced = False  # a log gave rows, in some round
        self.logs: dict[str, _Log] = {}
        for f in files:
            if not os.path.isfile(f):
                why = "no such file" if not os.path.exists(f) else "not a regular file"
                raise FactoryFloorError(f"{f}: {why}")
            try:
                with open(f, "rb"):
                    pass
            except OSError as exc:
                raise FactoryFloorError(f"{f}: cannot read ({exc.strerror})") from None
            self.logs[f] = _Log(f, run, tz, follow=False, year=year, bounds=self.bounds)
        # Year-less logs (syslog's "Mar  1 09:40:30") take the year of the surrounding data:
        # they are read after the logs whose lines carry a full date.
        self.logs = dict(sorted(self.logs.items(), key=lambda kv: not _dated(kv[0])))
        self._data_year: int | None = data_year  # the run's, as stored; then the logs' own
        self.positions_path = positions
        self._positions: dict[str, Any] = self._load_positions()
        self.book = HealthBook()
        self._pending: dict[
            str, tuple[str, int, int, int]
        ] = {}  # batch id -> (path, off, ln, rows)
        self.runs_touched: set[str] = set()
        self._peeked: dict[str, int] = {}  # path -> the size urgent() looked up to

    # -- positions of followed logs --------------------------------------------------------
    def _load_positions(self) -> dict[str, Any]:
        if not self.follow or not self.positions_path:
            return {}
        try:
            with open(self.positions_path, encoding="utf-8") as fh:
                data = json.load(fh)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_positions(self) -> None:
        if not self.follow or not self.positions_path:
            return
        data = {p: log.position() for p, log in self.logs.items()}
        os.makedirs(os.path.dirname(self.positions_path) or ".", exist_ok=True)
        tmp = self.positions_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.positions_path)

    def _discover(self, now: datetime) -> None:
        for pattern in self.globs:
            for path in sorted(glob.glob(pattern)):
                if path in self.logs or not os.path.isfile(path):
                    continue
                log = _Log(path, self.run, self.tz, follow=True, bounds=self.bounds)
                try:
                    log.open(self._positions.get(path))
                except OSError as exc:
                    why = exc.strerror or str(exc)
                    self.book.record(now, f"{self.kind}:{path}", False, why, 0, 0)
                    continue
                self.logs[path] = log

    def urgent(self) -> bool:
        """Whether a followed log grew since it was last read or looked at, by bytes that may
        begin a failure (``URGENT``): the daemon then starts its round at once. Each byte is
        looked at once (a partial line that matched does not wake it again)."""
        hit = False
        for path, log in list(self.logs.items()):
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            start = max(log.offset, self._peeked.get(path, 0))
            if size < start:  # truncated or rotated: the round sorts it out
                self._peeked[path] = 0
                continue
            if size == start:
                continue
            try:
                with open(path, "rb") as fh:
                    fh.seek(max(start, size - PEEK_BYTES))
                    data = fh.read(size - max(start, size - PEEK_BYTES))
            except OSError:
                continue
            self._peeked[path] = size
            hit = hit or bool(URGENT.search(data))
        return hit

    # -- the round -------------------------------------------------------------------------
    def poll(self, now: datetime) -> Iterator[Batch]:
        if self.follow:
            self._discover(now)
        produced = False
        for path, log in self.logs.items():
            if (not self.follow and log.fh is None and self._data_year and not _dated(path)
                    and log.given_year is None):  # fmt: skip
                log.year = self._data_year
                log.parser = log._new_parser()
            try:
                for batch, bid, offset, lineno in log.blocks():
                    self._note_year(batch)
                    log.account.lines = log.parser.lines
                    log.account.unrecognised = log.parser.unrecognised
                    if offset >= 0:
                        self._pending[bid] = (path, offset, lineno)
                    recs = _columns(batch, self.run)
                    if not self.follow and None in recs["run"]:  # a loss curve of no run: the
                        log.account.needs_run = recs["run"].count(None)  # user names it first
                        break
                    log.account.untimed_metrics += _points(batch) - len(recs["step"])
                    tables = _tables(batch, self.run)
                    if self.run and (told := _settings(log.parser, self.run)) is not None:
                        tables["run_settings"] = told
                    if tables:  # its lines are evidence: where the file is, to open it later
                        tables["log_files"] = _log_file(log, self.run, now)
                    if recs["step"]:
                        produced = True
                        target = f"{self.kind}:{path}"
                        yield Records("train_metrics", recs, target, "logs", bid + ":m")
                    facts = log.parser.job_facts()  # the job's GPUs (GPU-hours, cost), nodes
                    if facts and facts != log.facts_told and self.run:
                        log.facts_told = facts
                        target = f"{self.kind}:{path}"
                        rec = {"run": self.run} | {  # GPUs per node: gpus / nodes
                            k: v for k, v in facts.items() if k != "gpus_per_node"}
                        tag = ",".join(f"{k}{v}" for k, v in sorted(facts.items()))
                        yield Records("runs", [rec], target, "logs", bid + f":w{tag}")
                    if tables:
                        produced = True
                        rows = sum(len(t) for t in tables.values())
                        yield Tables(
                            tables, now, 0, batch_id=bid + ":s", label=f"{rows} signal rows"
                        )
                    self._account(log, batch)
                    if not recs and not tables and offset >= 0:
                        log.commit(offset, lineno)
            except OSError as exc:
                self.book.record(now, f"{self.kind}:{path}", False, exc.strerror or str(exc), 0, 0)
                continue
            self.book.record(now, f"{self.kind}:{path}", True, None, log.account.metrics, 0)
        self._save_positions()
        self.produced = self.produced or produced
        if produced and self.run:
            self.runs_touched.add(self.run)
        if produced or (not self.follow and self.run):
            yield Derive(tuple(sorted(self.runs_touched)) or None, {}, self.run,
                         self.ranks_per_node)

    def _note_year(self, batch: Any) -> None:
        for m in batch.metrics[-1:]:
            if isinstance(m.get("ts"), datetime):
                self._data_year = m["ts"].year
        for chunk in batch.metric_columns[-1:]:
            self._data_year = chunk["ts"][-1].year
        for sg in batch.signals[-1:]:
            if sg.ts is not None and self._data_year is None:
                self._data_year = sg.ts.year

    def _account(self, log: _Log, batch: Any) -> None:
        acc = log.account
        for s in batch.signals:
            if s.ts is None:
                acc.untimed += 1
                if len(acc.untimed_at) < 3:
                    acc.untimed_at.append(s.origin)
            else:
                acc.signals[s.kind] = acc.signals.get(s.kind, 0) + 1
        acc.checkpoint_events += sum(1 for e in batch.checkpoint_events if e.ts is not None)
        timed = sum(1 for r in batch.rank_perf if r.ts is not None)
        timed += sum(len(t.hi) for t in batch.timer_runs if t.ts is not None)
        rows = len(batch.rank_perf) + sum(len(t.hi) for t in batch.timer_runs)
        acc.untimed_rank_perf += rows - timed  # the timed: counted when stored (``settle``)
        acc.assumed_year = log.parser.clock.assumed_year
        if acc.assumed_year is not None:
            acc.year_from = _year_from(log)
        acc.problems = [f"{b.origin}: {b.reason}" for b in log.parser.bad]
        acc.unread = [f"{log.parser.label}:{n}: {t}" for n, t in log.parser.unread]

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        bid = getattr(batch, "batch_id", None) or ""
        stem = bid.rsplit(":", 1)[0] if bid.endswith((":m", ":s")) else None
        if stem is None or stem not in self._pending:
            return
        path, offset, lineno = self._pending[stem]
        log = self.logs[path]
        if not written.ok:
            target = f"{self.kind}:{path}"
            self.book.record(now, target, False, written.error, log.account.metrics, 0)
            return
        if isinstance(batch, Records):
            log.account.metrics += written.rows
            target = f"{self.kind}:{path}"
            told = self.book.entries.get(target)
            if told is not None and told.up:  # settled after the log's round was booked
                self.book.entries[target] = replace(told, rows=log.account.metrics)
        if written.duplicate:
            log.account.duplicate_blocks += 1
        elif isinstance(batch, Tables) and "rank_perf" in batch.tables:
            # counted as stored, not as read: a block imported before writes nothing
            log.account.rank_perf += len(batch.tables["rank_perf"])
        log.commit(offset, lineno)

    def health(self) -> list[Health]:
        return self.book.all()

    def accounts(self) -> list[FileAccount]:
        return [log.account for log in self.logs.values()]

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


def _positions_file(store: str | None, key: str) -> str:
    name = hashlib.sha256(f"{os.path.abspath(store or '-')}\0{key}".encode()).hexdigest()[:16]
    return os.path.join(env.state_dir(), "positions", f"{name}.json")


def recognises(path: str) -> bool:
    """A text log given to ``import`` (a job's output, a kernel log): no record format's."""
    from telemetry.collect.logs.formats import is_text_log

    return is_text_log(path)


def build(values: Mapping[str, Any], ctx: SourceContext) -> ClusterSource | None:
    globs = list(values.get("logs") or [])
    files = list(values.get("files") or [])
    if not (globs or files):
        return None
    tz = values.get("log_tz")
    if tz:
        from telemetry.collect.logs.logclock import zone

        try:
            zone(tz)
        except ValueError as exc:
            raise FactoryFloorError(f"--log-tz: {exc}") from None
    year = values.get("year")
    if year is not None and not 1970 <= year <= 2999:
        raise FactoryFloorError(f"--year {year}: give a four-digit year, e.g. 2026")
    run = values.get("run")
    per_node = values.get("ranks_per_node")
    if per_node is not None and not 1 <= per_node <= 1024:
        raise FactoryFloorError(f"--ranks-per-node {per_node}: give a number from 1 to 1024")
    follow = ctx.command in ("ingest", "serve")
    if follow and globs and not run:
        raise FactoryFloorError("--logs needs --run: the run these logs belong to")
    key = json.dumps([run, globs], sort_keys=True)
    return ClusterSource(
        files=files,
        globs=globs,
        run=run,
        tz=tz,
        follow=follow,
        interval_s=min(FOLLOW_INTERVAL_S, ctx.interval_s),
        positions=_positions_file(ctx.store, key) if follow else None,
        ranks_per_node=per_node,
        data_year=None if follow or not run else _stored_year(ctx.store, run),
        max_future_s=values.get("log_max_future") or MAX_FUTURE_S,
        span_s=values.get("log_span") or SPAN_S,
        year=year,
    )


def _year_from(log: _Log) -> str:
    """Where the year of a log's year-less times came from, in words for the import."""
    if log.given_year is not None:
        return "--year"
    if log.year is not None:
        return "the year of the run's other data"
    if log.mtime is not None:
        return f"the latest year not after the file's modification time, {log.mtime:%Y-%m-%d}"
    return "the latest year not after today"


def _stored_year(store: str | None, run: str) -> int | None:
    """The year of the run's newest progress in the store (a year-less kernel log imported on
    its own is in that year, not the year its file was copied); None when the store or the
    run is not there or the store cannot be read now (another process writes it)."""
    if not store or not os.path.isfile(store):
        return None
    from telemetry.store import Store

    try:
        with Store(store, read_only=True) as st:
            year = st.scalar("SELECT year(max(ts)) FROM train_metrics WHERE run_id = ?", [run])
    except Exception:  # noqa: BLE001 - a hint only: the file's own time is used instead
        return None
    return None if year is None else int(year)


_TZ = Option(
    "--log-tz",
    {"metavar": "ZONE", "help": "time zone of log times without one (default UTC)"},
)
def _duration(text: str) -> float:
    from argparse import ArgumentTypeError

    from telemetry.ingest.since import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None


_FUTURE = Option(
    "--log-max-future",
    {"type": _duration, "metavar": "DURATION",
     "help": "a log line stamped more than this past the server's clock is not data, listed as "
             "not recognised (default 1d)"},
)
_SPAN = Option(
    "--log-span",
    {"type": _duration, "metavar": "DURATION",
     "help": "nor is one stamped more than this from the middle of its file's times (default "
             "366d)"},
)
_YEAR = Option(
    "--year",
    {"type": int, "metavar": "YYYY", "help": "the year of log times printed without one "
     "(default: the latest that is not after the file's modification time)"},
)
_LOGS = Option(
    "--logs",
    {
        "action": "append",
        "default": [],
        "metavar": "GLOB",
        "help": "training or kernel logs to follow (rotation and truncation too); repeatable",
    },
)
_PER_NODE = Option(
    "--ranks-per-node",
    {
        "type": int,
        "metavar": "N",
        "help": "ranks on each node of the run's Slurm node list, for ranks no log placed on a "
        "host (default: the run's GPUs per node, else 8)",
    },
)

SPEC = SourceSpec(
    name="cluster",
    summary="training and kernel logs (text)",
    options={
        "import": (_TZ, _FUTURE, _SPAN, _PER_NODE, _YEAR),
        "ingest": (_LOGS, _TZ, _FUTURE, _SPAN, RUN_OPTION, _PER_NODE),
        "serve": (_LOGS, _TZ, _FUTURE, _SPAN, RUN_OPTION, _PER_NODE),
    },
    build=build,
    ask="--logs GLOB",
    recognises=recognises,
)
