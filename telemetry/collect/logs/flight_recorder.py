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

Pickles are read by an unpickler that builds no object (its ``find_class`` refuses every
class): a dump holds only dicts, lists, tuples, strings and numbers, and a file that asks for
anything else is refused, never run.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

HEAD_BYTES = 1 << 16  # the first read of a dump: its head fits unless a group lists 10 K ranks
MAX_DUMP_BYTES = 1 << 30
MAX_SUSPECTS = 64  # missing ranks whose entries are read (the rest are listed, not read)
_RANK = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
_PICKLE_START = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


class DumpError(ValueError):
    """A file that is not a flight-recorder dump, with the reason."""


class _NoObjects(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight-recorder dump holds no {module}.{name}")


def rank_of(path: str) -> int | None:
    """The rank a dump's file name ends in (``nccl_trace_rank_12`` -> 12), or None."""
    m = _RANK.search(os.path.basename(path))
    return int(m[1]) if m else None


def _sniff(head: bytes) -> str | None:
    """``pickle``, ``json`` or None from a file's first bytes."""
    if head.startswith(_PICKLE_START) and any(
        k in head[:HEAD_BYTES] for k in (b"pg_config", b"pg_status", b"entries")
    ):
        return "pickle"
    text = head.lstrip()
    if text.startswith(b"{") and (b'"pg_status"' in head or b'"entries"' in head) and (
        b'"version"' in head or b'"pg_config"' in head or b'"profiling_name"' in head
    ):
        return "json"
    return None


def is_dump(path: str) -> bool:
    """Whether ``path`` is a flight-recorder dump (by content, whatever its name)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            return _sniff(fh.read(HEAD_BYTES)) is not None
    except OSError:
        return False


def dump_files(path: str) -> list[str]:
    """The dumps at ``path``: the file itself, or those in a directory (not its subfolders)."""
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        return [p for p in (os.path.join(path, n) for n in names) if is_dump(p)]
    return [path] if is_dump(path) else []


def recognises(path: str) -> bool:
    """A dump, or a directory holding at least one (``import`` reads them as a job's)."""
    if os.path.isdir(path):
        return any(True for _ in _first_dump(path))
    return is_dump(path)


def _first_dump(path: str) -> Iterator[str]:
    with os.scandir(path) as it:
        for e in it:
            if e.is_file() and is_dump(e.path):
                yield e.path
                return


# -- reading -------------------------------------------------------------------------------
def read_dump(path: str) -> dict[str, Any]:
    """A whole dump (entries included); ``DumpError`` saying why it is not one."""
    try:
        size = os.path.getsize(path)
        if size > MAX_DUMP_BYTES:
            raise DumpError(f"{path}: {size:,} bytes, over the {MAX_DUMP_BYTES:,} a dump may be")
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise DumpError(f"{path}: {exc.strerror or exc}") from None
    kind = _sniff(data[:HEAD_BYTES])
    try:
        doc = _NoObjects(io.BytesIO(data)).load() if kind == "pickle" else json.loads(data)
    except (pickle.UnpicklingError, ValueError, EOFError, IndexError, KeyError) as exc:
        raise DumpError(f"{path}: not a flight-recorder dump ({exc})") from None
    except RecursionError:
        raise DumpError(f"{path}: not a flight-recorder dump (nested too deeply)") from None
    return _checked(path, doc)


def read_head(path: str) -> dict[str, Any]:
    """A dump's ``pg_config`` and ``pg_status`` without its entries (see the module's
    docstring); falls back to reading the whole dump when the head is not where PyTorch puts
    it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
            if _sniff(head) == "pickle":
                doc = _pickle_head(head, fh)
                if doc is not None:
                    return _checked(path, doc, entries=False)
    except OSError as exc:
        raise DumpError(f"{path}: {exc.strerror or exc}") from None
    doc = read_dump(path)
    doc.pop("entries", None)
    return doc


def _pickle_head(head: bytes, fh: Any) -> dict[str, Any] | None:
    """The top-level dict of a protocol 2-5 pickle up to its ``entries`` key, closed and
    unpickled (no frame opcode: PyTorch writes protocol 2); None when it is not laid out so."""
    data = head
    while True:
        pos = _entries_key(data)
        if pos is not None:
            break
        more = fh.read(len(data))  # a head longer than the first read: read on, doubling
        if not more or len(data) > 64 * HEAD_BYTES:
            return None
        data += more
    try:  # SETITEMS closes the mark the top-level items were pushed after, STOP ends
        doc = _NoObjects(io.BytesIO(data[:pos] + b"u.")).load()
    except (pickle.UnpicklingError, ValueError, EOFError, IndexError, KeyError):
        return None
    return doc if isinstance(doc, dict) else None


def _entries_key(data: bytes) -> int | None:
    """Where the top-level ``entries`` key is pushed (None: not within ``data``)."""
    depth = 0
    try:
        for op, arg, pos in pickletools.genops(io.BytesIO(data)):
            if op.name in ("FRAME",):
                return None
            if op.name in ("MARK",):
                depth += 1
            elif op.name in ("SETITEMS", "APPENDS", "TUPLE", "LIST", "DICT"):
                depth -= 1
            elif op.name.endswith("UNICODE") and arg == "entries" and depth == 1:
                return pos
            if op.name == "STOP":
                return None
    except ValueError:  # the read ended inside an opcode: not there yet
        return None
    return None


def _checked(path: str, doc: Any, entries: bool = True) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("pg_status"), dict):
        raise DumpError(f"{path}: not a flight-recorder dump (no pg_status)")
    if entries and not isinstance(doc.get("entries", []), list):
        raise DumpError(f"{path}: not a flight-recorder dump (entries is not a list)")
    return doc


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


def _seq(v: Any) -> int:
    """A sequence number as the pickle (int) or the JSON (text) holds it; -1 if neither."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,18}", v.strip()):
        return int(v)
    return -1


def _status(doc: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    keys = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")
    return {
        str(pg): (_seq(st.get(keys[0])), _seq(st.get(keys[1])), _seq(st.get(keys[2])))
        for pg, st in doc.get("pg_status", {}).items()
        if isinstance(st, dict)
    }


def states(paths: Iterable[str]) -> tuple[list[RankState], dict[str, dict[str, Any]], list[str]]:
    """Each dump's rank and group status (first pass), the groups' configs, and the files
    that could not be read (with why). Two files of one rank: the later one read counts."""
    ranks: dict[int, RankState] = {}
    configs: dict[str, dict[str, Any]] = {}
    errors = []
    for path in paths:
        rank = rank_of(path)
        if rank is None:
            errors.append(f"{path}: no rank at the end of its name (nccl_trace_rank_N)")
            continue
        try:
            head = read_head(path)
        except DumpError as exc:
            errors.append(str(exc))
            continue
        for name, cfg in (head.get("pg_config") or {}).items():
            if isinstance(cfg, dict) and str(name) not in configs:
                configs[str(name)] = cfg
        ranks[rank] = RankState(rank, path, _status(head))
    return sorted(ranks.values(), key=lambda r: r.rank), configs, errors


def find_hang(
    paths: Iterable[str], hosts: dict[int, str] | None = None
) -> tuple[Hang | None, list[str]]:
    """The first divergent collective of the dumps at ``paths`` (None: every group's ranks
    agree, nothing hung), and the files that could not be read."""
    rs, configs, errors = states(paths)
    best: Hang | None = None
    for pg in sorted({pg for r in rs for pg in r.status}, key=_pg_order):
        members = [r for r in rs if pg in r.status]
        hang = _group_hang(pg, members, configs)
        if hang is not None and (best is None or _earlier(hang, best)):
            best = hang
    if best is not None:
        best.hosts = {r: h for r, h in (hosts or {}).items()}
        _details(best, {r.rank: r for r in rs})
    return best, errors


def _pg_order(pg: str) -> tuple[int, str]:
    return (int(pg), pg) if pg.isdigit() else (1 << 30, pg)


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
        pg_name=str(cfg.get("name", "")) if cfg else "",
        pg_desc=str(cfg.get("desc", "")) if cfg else "",
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
        return [int(x) for x in re.findall(r"\d+", ranks)][:1 << 20]
    if isinstance(ranks, list):
        return [int(x) for x in ranks if isinstance(x, int)]
    return []


def _details(hang: Hang, by_rank: dict[int, RankState]) -> None:
    """Second pass: the collective itself and the frames, from a waiting rank's entries and
    the first missing ranks'."""
    waiting = [r for r in sorted(by_rank) if r not in hang.missing_ranks]
    if waiting:
        ref = _entry(by_rank[waiting[0]].path, hang.process_group, hang.seq_id)
        if ref is not None:
            hang.op = str(ref.get("profiling_name") or "") or None
            hang.input_sizes = _short(ref.get("input_sizes"))
            hang.dtypes = _short(ref.get("input_dtypes"))
            hang.ts = _ns_time(ref.get("time_created_ns"))
            hang.waiting_frames = _frames(ref)
    for r in hang.missing_ranks[:1]:
        last = _entry(by_rank[r].path, hang.process_group, hang.last_completed.get(r, -1), True)
        if last is not None:
            hang.culprit_frames = _frames(last)
    if not hang.missing_ranks and hang.op is not None:
        for r in hang.stuck_ranks[: MAX_SUSPECTS]:
            e = _entry(by_rank[r].path, hang.process_group, hang.seq_id)
            if e is None:
                continue
            sizes = _short(e.get("input_sizes"))
            op = str(e.get("profiling_name") or "")
            if op != hang.op or sizes != hang.input_sizes:
                hang.mismatched.append(f"rank {r}: {op} {sizes}")


def _entry(path: str, pg: str, seq: int, last: bool = False) -> dict[str, Any] | None:
    """Rank's entry of collective ``seq`` in group ``pg`` (with ``last``: its newest entry of
    the group at or before ``seq``)."""
    try:
        entries = read_dump(path).get("entries") or []
    except DumpError:
        return None
    found = None
    for e in entries:
        if not isinstance(e, dict) or _entry_pg(e) != pg or e.get("is_p2p"):
            continue
        s = _seq(e.get("collective_seq_id"))
        if s < 0:
            continue
        if s == seq:
            return e
        if last and s <= seq and (found is None or s > _seq(found.get("collective_seq_id"))):
            found = e
    return found


def _entry_pg(e: dict[str, Any]) -> str:
    pg = e.get("process_group")
    if isinstance(pg, list | tuple) and pg:
        return str(pg[0])
    return str(e.get("pg_id", ""))


def _frames(e: dict[str, Any], keep: int = 12) -> list[str]:
    out = []
    for f in e.get("frames") or []:
        if isinstance(f, dict):
            out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} in {f.get('name', '?')}")
    return out[:keep]


def _short(v: Any, limit: int = 120) -> str | None:
    if v is None:
        return None
    text = json.dumps(v, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ns_time(ns: Any) -> datetime | None:
    ns = _seq(ns) if isinstance(ns, str) else ns
    if not isinstance(ns, int) or ns <= 0:
        return None
    try:
        return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None
