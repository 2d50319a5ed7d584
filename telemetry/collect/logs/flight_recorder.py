"""PyTorch's flight recorder: which rank a hung collective waited on, from the ranks' dumps.

On a watchdog timeout (or when asked: ``torch._C._distributed_c10d._dump_fr_trace``) every rank
writes what its process groups did last: a dict of ``version``, ``pg_config`` (per group:
``name``, ``desc``, ``ranks`` as text), ``pg_status`` (per group id: the sequence numbers of the
last collective enqueued, started and completed) and ``entries`` (the last collectives: group,
``collective_seq_id``, ``profiling_name`` such as ``nccl:all_reduce``, sizes, dtypes,
``state``, ``time_created_ns``, the Python ``frames`` that called it). PyTorch writes it as a
pickle (``nccl_trace_rank_<N>`` by default) or, asked for JSON, as JSON text. A file's rank is
the number its name ends in.

A hang is the first collective where the ranks of a group diverge: ranks that never enqueued
it (missing: the culprit, stuck elsewhere), or, if every rank enqueued it, ranks that did not
complete it, or ranks whose op, sizes or dtypes differ. NCCL cannot say which rank did not
arrive; these dumps can.

Reading is in two passes, so 16,384 dumps of 2,000 entries are analysed in seconds and in flat
memory: the first reads each dump's head only (``pg_config`` and ``pg_status`` come before
``entries`` in PyTorch's pickle, and are read without unpickling the entries); the second reads
the entries of the few ranks the first pass points at (the missing ones and a rank that waited).

Dumps are read by ``collect.logs.fr_read`` (an unpickler that builds no object), held to the
bounds of ``collect.logs.fr_bounds`` (size, entries, depth, values reached through the pickle's
memo); ``collect.logs.fr_worker`` adds the time and memory bounds, reading in a child process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from telemetry.collect.logs.fr_bounds import MAX_RANK, MAX_SEQ, over_bound, short, text
from telemetry.collect.logs.fr_read import (  # noqa: F401 (the readers, as they were named here)
    HEAD_BYTES,
    DumpError,
    _NoObjects,
    _seq,
    dump_files,
    is_dump,
    rank_of,
    read_dump,
    read_head,
    recognises,
)

MAX_SUSPECTS = 64  # missing ranks whose entries are read (the rest are listed, not read)
MAX_REFUSED_WHOLE = 8  # rounds of the second pass that may each refuse dumps read whole


# -- analysis ------------------------------------------------------------------------------
@dataclass
class RankState:
    rank: int
    path: str
    status: dict[str, tuple[int, int, int]]  # group id -> (enqueued, started, completed)


@dataclass
class Hang:
    """The first collective where a group's ranks diverge."""

    process_group: str  # its id, as the dumps key it
    pg_name: str
    pg_desc: str
    seq_id: int
    op: str | None
    input_sizes: str | None
    dtypes: str | None
    ts: datetime | None  # when the waiting ranks enqueued it
    ranks: int  # ranks of the group that dumped
    missing_ranks: list[int]  # never enqueued it
    stuck_ranks: list[int]  # enqueued it and did not complete it
    mismatched: list[str] = field(default_factory=list)  # "rank 7: all_gather [[2048]]"
    no_dump: list[int] = field(default_factory=list)  # the group's ranks with no dump read
    last_completed: dict[int, int] = field(default_factory=dict)  # of the missing ranks
    culprit_frames: list[str] = field(default_factory=list)  # a missing rank's last call
    waiting_frames: list[str] = field(default_factory=list)  # where the others wait
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, where known

    @property
    def culprit(self) -> int | None:
        """The rank the others waited on: the first missing one, else the first that did not
        complete what the rest completed (None: every rank is stuck alike)."""
        if self.missing_ranks:
            return self.missing_ranks[0]
        if self.stuck_ranks and len(self.stuck_ranks) < self.ranks:
            return self.stuck_ranks[0]
        return None

    def story(self) -> str:
        """The hang in one line, as the import prints it and the Failures page shows it."""
        op = f"{self.op or 'collective'} #{self.seq_id}"
        if self.input_sizes:
            op += f" {self.input_sizes}"
        where = f"process group {self.pg_desc or self.pg_name or self.process_group}"
        if self.missing_ranks:
            who = _ranks_text(self.missing_ranks, self.hosts)
            return (
                f"{op} in {where}: {len(self.missing_ranks):,} of {self.ranks:,} rank(s) never "
                f"called it: {who}; the other ranks waited for it"
            )
        if self.mismatched:
            return f"{op} in {where}: ranks disagree: {'; '.join(self.mismatched[:5])}"
        stuck = _ranks_text(self.stuck_ranks, self.hosts)
        return f"{op} in {where}: not completed by {len(self.stuck_ranks)} rank(s): {stuck}"


def _ranks_text(ranks: list[int], hosts: dict[int, str], shown: int = 8) -> str:
    parts = [f"rank {r}" + (f" ({hosts[r]})" if r in hosts else "") for r in ranks[:shown]]
    more = f" and {len(ranks) - shown} more" if len(ranks) > shown else ""
    return ", ".join(parts) + more


def _status(path: str, doc: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    keys = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")
    out = {}
    for pg, st in doc.get("pg_status", {}).items():
        if not isinstance(st, dict):
            continue
        seqs = tuple(_seq(st.get(k)) for k in keys)
        bad = [st[k] for k, n in zip(keys, seqs, strict=True) if n < 0 and _numeric(st.get(k))]
        if bad:  # a number no sequence reaches would hang every other rank on it
            raise DumpError(f"{path}: refused: pg_status says {text(bad[0], 40)}, not a "
                            f"sequence number from -1 to {MAX_SEQ:,}")  # fmt: skip
        out[text(pg)] = seqs
    return out  # type: ignore[return-value]


def _numeric(v: Any) -> bool:
    """A number other than -1 (PyTorch's "none yet"), as an int or as text."""
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        v = int(v) if len(v.strip()) <= 40 else 1 << 200  # no int() of 5,000 digits
    return isinstance(v, int) and not isinstance(v, bool) and v != -1


Progress = Callable[[str], None]


def states(
    paths: Iterable[str], on_read: Progress | None = None
) -> tuple[list[RankState], dict[str, dict[str, Any]], list[str]]:
    """Each dump's rank and group status (first pass), the groups' configs, and the files
    that could not be read (with why). Two files of one rank: the later one read counts.
    ``on_read`` is told each path before it is read."""
    ranks: dict[int, RankState] = {}
    configs: dict[str, dict[str, Any]] = {}
    errors = []
    for path in paths:
        rank = rank_of(path)
        if rank is None:
            errors.append(f"{path}: no rank (0 to {MAX_RANK:,}) at the end of its name "
                          "(nccl_trace_rank_N)")  # fmt: skip
            continue
        if on_read is not None:
            on_read(path)
        try:
            head = read_head(path)
            status = _status(path, head)
        except DumpError as exc:
            errors.append(str(exc))
            continue
        for name, cfg in (head.get("pg_config") or {}).items():
            if isinstance(cfg, dict) and text(name) not in configs:
                configs[text(name)] = cfg
        ranks[rank] = RankState(rank, path, status)
    return sorted(ranks.values(), key=lambda r: r.rank), configs, errors


def find_hang(
    paths: Iterable[str], hosts: dict[int, str] | None = None, on_read: Progress | None = None
) -> tuple[Hang | None, list[str]]:
    """The first divergent collective of the dumps at ``paths`` (None: every group's ranks
    agree, nothing hung), and the files that could not be read or were refused (one line
    each, with why). In this process: ``fr_worker.analyse`` bounds its time and memory."""
    rs, configs, errors = states(paths, on_read)
    for _ in range(MAX_REFUSED_WHOLE):
        best = _first_hang(rs, configs)
        if best is None:
            break
        best.hosts = {r: h for r, h in (hosts or {}).items()}
        refused = _details(best, {r.rank: r for r in rs}, on_read)
        if not refused:
            break
        # a dump refused counts for nothing, its status neither: the hang is told again
        errors += [line for _, line in refused]
        rs = [r for r in rs if r.rank not in {rank for rank, _ in refused}]
    else:
        best = None
        errors.append(f"{len(rs):,} dumps: no hang told: {MAX_REFUSED_WHOLE} rounds of its "
                      "ranks' dumps were refused when read whole")  # fmt: skip
    return best, errors


def _first_hang(rs: list[RankState], configs: dict[str, dict[str, Any]]) -> Hang | None:
    best: Hang | None = None
    for pg in sorted({pg for r in rs for pg in r.status}, key=_pg_order):
        members = [r for r in rs if pg in r.status]
        hang = _group_hang(pg, members, configs)
        if hang is not None and (best is None or _earlier(hang, best)):
            best = hang
    return best


def _pg_order(pg: str) -> tuple[int, int, str]:
    """Group ids in numeric order (by length first: no int() of a 5,000-digit id)."""
    return (0, len(pg), pg) if pg.isascii() and pg.isdigit() else (1, 0, pg)


def _earlier(a: Hang, b: Hang) -> bool:
    if a.ts is not None and b.ts is not None:
        return a.ts < b.ts
    return bool(a.missing_ranks) and not b.missing_ranks


def _group_hang(pg: str, members: list[RankState], configs: dict[str, Any]) -> Hang | None:
    enq = {r.rank: r.status[pg][0] for r in members}
    done = {r.rank: r.status[pg][2] for r in members}
    if not members:
        return None
    lo, hi = min(enq.values()), max(enq.values())
    if lo < hi:
        seq = lo + 1
        missing = sorted(r for r, e in enq.items() if e < seq)
        stuck = sorted(r for r, e in enq.items() if e >= seq and done[r] < seq)
    else:
        first_open = min(done.values()) + 1
        if first_open > hi:  # every rank completed what it enqueued: no hang here
            return None
        seq, missing = first_open, []
        stuck = sorted(r for r, c in done.items() if c < seq)
    cfg = _config_of(pg, configs)
    group_ranks = _ranks_of(cfg)
    no_dump = sorted(set(group_ranks) - set(enq)) if group_ranks else []
    return Hang(
        process_group=pg,
        pg_name=text(cfg.get("name", "")) if cfg else "",
        pg_desc=text(cfg.get("desc", "")) if cfg else "",
        seq_id=seq,
        op=None,
        input_sizes=None,
        dtypes=None,
        ts=None,
        ranks=len(members),
        missing_ranks=missing,
        stuck_ranks=stuck,
        no_dump=no_dump,
        last_completed={r: done[r] for r in missing[:MAX_SUSPECTS]},
    )


def _config_of(pg: str, configs: dict[str, Any]) -> dict[str, Any] | None:
    if pg in configs:
        return configs[pg]
    if len(configs) == 1:  # gloo's default group is keyed "" in pg_config, "0" in pg_status
        return next(iter(configs.values()))
    return None


def _ranks_of(cfg: dict[str, Any] | None) -> list[int]:
    if not cfg:
        return []
    ranks = cfg.get("ranks")
    if isinstance(ranks, str):
        found = (int(m[0]) for m in re.finditer(r"\d{1,10}", ranks))
        return [r for r in islice(found, 1 << 20) if r <= MAX_RANK]
    if isinstance(ranks, list):
        return [x for x in ranks[: 1 << 20] if isinstance(x, int) and 0 <= x <= MAX_RANK]
    return []


def _details(
    hang: Hang, by_rank: dict[int, RankState], on_read: Progress | None
) -> list[tuple[int, str]]:
    """Second pass: the collective itself and the frames, from a waiting rank's entries and
    the first missing ranks'. The ranks whose dumps were refused, with why."""
    refused: dict[int, str] = {}

    def entry(r: int, seq: int, last: bool = False) -> dict[str, Any] | None:
        if on_read is not None:
            on_read(by_rank[r].path)
        try:
            return _entry(by_rank[r].path, hang.process_group, seq, last)
        except DumpError as exc:
            refused[r] = str(exc)
            return None

    waiting = [r for r in sorted(by_rank) if r not in hang.missing_ranks]
    if waiting and (ref := entry(waiting[0], hang.seq_id)) is not None:
        hang.op = text(ref.get("profiling_name") or "") or None
        hang.input_sizes = short(ref.get("input_sizes"))
        hang.dtypes = short(ref.get("input_dtypes"))
        hang.ts = _ns_time(ref.get("time_created_ns"))
        hang.waiting_frames = _frames(ref)
    for r in hang.missing_ranks[:1]:
        last = entry(r, hang.last_completed.get(r, -1), True)
        if last is not None:
            hang.culprit_frames = _frames(last)
    if not hang.missing_ranks and hang.op is not None:
        for r in hang.stuck_ranks[: MAX_SUSPECTS]:
            e = entry(r, hang.seq_id)
            if e is None:
                continue
            sizes = short(e.get("input_sizes"))
            op = text(e.get("profiling_name") or "")
            if op != hang.op or sizes != hang.input_sizes:
                hang.mismatched.append(f"rank {r}: {op} {sizes}")
    return list(refused.items())


def _entry(path: str, pg: str, seq: int, last: bool = False) -> dict[str, Any] | None:
    """Rank's entry of collective ``seq`` in group ``pg`` (with ``last``: its newest entry of
    the group at or before ``seq``); ``DumpError`` when the dump is refused."""
    entries = read_dump(path).get("entries") or []
    found = None
    for e in entries:
        if not isinstance(e, dict) or _entry_pg(e) != pg or e.get("is_p2p"):
            continue
        s = _seq(e.get("collective_seq_id"))
        if s < 0:
            continue
        if s == seq:
            return _measured(path, e)
        if last and s <= seq and (found is None or s > _seq(found.get("collective_seq_id"))):
            found = e
    return None if found is None else _measured(path, found)


def _measured(path: str, e: dict[str, Any]) -> dict[str, Any]:
    """Entry ``e`` of the dump at ``path`` if it is within the bounds; else ``DumpError``."""
    if why := over_bound(e, below=2):  # the dump, its entries list
        raise DumpError(f"{path}: refused: {why}")
    return e


def _entry_pg(e: dict[str, Any]) -> str:
    pg = e.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return text(pg[0])
    return text(e.get("pg_id", ""))


def _frames(e: dict[str, Any], keep: int = 12) -> list[str]:
    out = []
    frames = e.get("frames")
    for f in frames if isinstance(frames, list) else []:
        if isinstance(f, dict):
            where = f"{text(f.get('filename', '?'))}:{text(f.get('line', '?'), 20)}"
            out.append(f"{where} in {text(f.get('name', '?'))}")
        if len(out) >= keep:
            break
    return out


def _ns_time(ns: Any) -> datetime | None:
    ns = _seq(ns) if isinstance(ns, str) else ns
    if not isinstance(ns, int) or ns <= 0:
        return None
    try:
        return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None
