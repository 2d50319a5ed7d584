"""Reading PyTorch flight-recorder dumps (``collect.logs.flight_recorder`` finds the hang in
them): which files are dumps, a dump's head without its entries, a whole dump, each held to the
bounds of ``collect.logs.fr_bounds``.

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
from collections.abc import Iterator
from typing import Any

from telemetry.collect.logs.fr_bounds import (
    MAX_DUMP_BYTES,
    MAX_ENTRIES,
    MAX_RANK,
    MAX_SEQ,
    over_bound,
    text,
)

HEAD_BYTES = 1 << 16  # the first read of a dump: its head fits unless a group lists 10 K ranks
_RANK = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
_PICKLE_START = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
class DumpError(ValueError):
    """A file that is not a flight-recorder dump, with the reason."""


class _NoObjects(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight-recorder dump holds no {module}.{name}")


def rank_of(path: str) -> int | None:
    """The rank a dump's file name ends in (``nccl_trace_rank_12`` -> 12), or None (none, or
    over ``MAX_RANK``)."""
    m = _RANK.search(os.path.basename(path))
    return int(m[1]) if m and len(m[1]) <= 10 and int(m[1]) <= MAX_RANK else None


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
    try:
        with os.scandir(path) as it:
            for e in it:
                if _is_file(e) and is_dump(e.path):
                    yield e.path
                    return
    except OSError:  # unreadable: it holds no dump this command can read
        return


def _is_file(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_file()
    except OSError:  # a symlink loop
        return False


# -- reading -------------------------------------------------------------------------------
def read_dump(path: str) -> dict[str, Any]:
    """A whole dump (entries included); ``DumpError`` saying why it is not one."""
    try:
        with open(path, "rb") as fh:
            size = _check_size(path, fh)
            data = fh.read(size + 1)  # not read(MAX + 1): that allocates the bound, each time
            if len(data) > size:  # it grew since: read on, to the bound
                data += fh.read(MAX_DUMP_BYTES + 1 - len(data))
    except OSError as exc:
        raise DumpError(f"{path}: {exc.strerror or exc}") from None
    _check_size(path, None, len(data))
    kind = _sniff(data[:HEAD_BYTES])
    try:
        doc = _NoObjects(io.BytesIO(data)).load() if kind == "pickle" else json.loads(data)
    except (pickle.UnpicklingError, ValueError, EOFError, IndexError, KeyError) as exc:
        raise DumpError(f"{path}: not a flight-recorder dump ({text(str(exc))})") from None
    except RecursionError:
        raise DumpError(f"{path}: refused: nested too deeply") from None
    except MemoryError:
        raise DumpError(f"{path}: refused: it needs more memory than a dump may") from None
    del data
    return _checked(path, doc)


def _check_size(path: str, fh: Any, size: int | None = None) -> int:
    """The size of the dump open as ``fh`` (or ``size``); ``DumpError`` over the bound."""
    size = os.fstat(fh.fileno()).st_size if size is None else size
    if size > MAX_DUMP_BYTES:
        raise DumpError(f"{path}: refused: {size:,} bytes, over the {MAX_DUMP_BYTES:,} a dump "
                        "may be")  # fmt: skip
    return size


def read_head(path: str) -> dict[str, Any]:
    """A dump's ``pg_config`` and ``pg_status`` without its entries (see the module's
    docstring); falls back to reading the whole dump when the head is not where PyTorch puts
    it."""
    try:
        with open(path, "rb") as fh:
            _check_size(path, fh)
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
    except (pickle.UnpicklingError, ValueError, EOFError, IndexError, KeyError, MemoryError):
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
    """``doc`` if it is a dump within the bounds (``fr_bounds``); else ``DumpError``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("pg_status"), dict):
        raise DumpError(f"{path}: not a flight-recorder dump (no pg_status)")
    for key in ("pg_config", "pg_status"):
        if doc.get(key) and not isinstance(doc[key], dict):  # None or empty: none given
            raise DumpError(f"{path}: not a flight-recorder dump ({key} is a "
                            f"{type(doc[key]).__name__}, not a dict)")  # fmt: skip
    # The head is measured here, an entry when the analysis takes it (``_entry``): the others
    # are never written out (their group and sequence number are read as plain values), and
    # measuring 2,000 entries would cost the 16,384-dump benchmark 3 %.
    if why := over_bound({k: v for k, v in doc.items() if k != "entries"}):
        raise DumpError(f"{path}: refused: {why}")
    if entries:
        es = doc.get("entries", [])
        if not isinstance(es, list):
            raise DumpError(f"{path}: not a flight-recorder dump (entries is not a list)")
        if len(es) > MAX_ENTRIES:
            raise DumpError(f"{path}: refused: {len(es):,} entries, over the {MAX_ENTRIES:,} a "
                            "dump may hold")  # fmt: skip
        if es and not any(isinstance(e, dict) and _seq(e.get("collective_seq_id")) >= 0
                          for e in es):  # fmt: skip
            raise DumpError(f"{path}: refused: none of its {len(es):,} entries is a collective "
                            f"(a dict with a collective_seq_id from 0 to {MAX_SEQ:,})")  # fmt: skip
    return doc


def _seq(v: Any) -> int:
    """A sequence number as the pickle (int) or the JSON (text) holds it; -1 if neither (or
    over ``MAX_SEQ``)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if -1 <= v <= MAX_SEQ else -1
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,16}", v.strip()):
        return _seq(int(v))
    return -1
