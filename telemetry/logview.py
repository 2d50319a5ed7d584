"""The raw log around one stored line (an evidence line's ``file:line``), read at view time.

The path comes from the store only (``log_files``: the file the import or the follower read,
resolved when it was read), never from a request; a request names an evidence item, whose
origin's file must be one of those. Reading is bounded (``MAX_SCAN_BYTES`` scanned to reach
the line, ``MAX_LINE_CHARS`` shown of a line, ``CONTEXT`` lines either side), the file is
opened without following a symlink and without blocking, and must be a regular file. Whatever
goes wrong (the file gone, moved, unreadable, rotated or grown past the bound) is a ``note``
in words, never an exception: the incident view shows it where the lines would be.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from telemetry.signals import clean_line

CONTEXT = 20  # lines either side of the evidence line
MAX_SCAN_BYTES = 512 * 1024 * 1024  # read to reach a line: ~0.3 s of page cache here
MAX_LINE_CHARS = 4096  # of one line shown (a log line may be 64 KiB: textlogs.MAX_LINE_BYTES)
BLOCK_BYTES = 8 * 1024 * 1024


@dataclass
class Around:
    """The lines ``first..`` of ``path`` around ``line`` (1-based), or a ``note`` saying why
    there are none; ``changed``: the line no longer reads as the store has it."""

    path: str
    line: int
    lines: list[tuple[int, str]] = field(default_factory=list)
    note: str | None = None
    changed: bool = False


def split_origin(origin: object) -> tuple[str, int] | None:
    """``("/logs/slurm-1.out", 602)`` from ``/logs/slurm-1.out:602``; None when it names no
    line (``file: step N``, a record file's origin, or anything else)."""
    if not isinstance(origin, str) or ":" not in origin:
        return None
    label, _, tail = origin.rpartition(":")
    return (label, int(tail)) if label and tail.isdigit() and int(tail) > 0 else None


def _open(path: str) -> int:
    """A descriptor of ``path`` if it is a regular file: no symlink followed (the stored
    path was resolved when read), no blocking on a FIFO, checked on the descriptor."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(path)  # reported as "not a regular file"
    os.set_blocking(fd, True)
    return fd


def around(path: str, line: int, expect: str | None = None) -> Around:
    """The ``CONTEXT`` lines either side of ``line`` in ``path`` (module doc). ``expect``: the
    line as stored; when the file's line differs, ``changed`` is set (rotated or rewritten)."""
    out = Around(path, line)
    try:
        fd = _open(path)
    except FileNotFoundError:
        out.note = f"{path} is no longer there (moved, rotated away or deleted)"
        return out
    except IsADirectoryError:
        out.note = f"{path} is not a regular file now"
        return out
    except OSError as exc:
        out.note = f"{path} cannot be read: {exc.strerror or exc}"
        return out
    with os.fdopen(fd, "rb") as fh:
        raw = _lines(fh, max(1, line - CONTEXT), line + CONTEXT)
    if raw is None:
        out.note = (f"line {line:,} is past the first {MAX_SCAN_BYTES >> 20} MiB of {path}, "
                    f"which is as far as the dashboard reads: sed -n "
                    f"'{max(1, line - CONTEXT)},{line + CONTEXT}p' {path}")  # fmt: skip
        return out
    out.lines = [(n, _text(b)) for n, b in raw]
    here = dict(out.lines).get(line)
    if here is None:
        out.note = f"{path} has fewer than {line:,} lines now (truncated or rotated)"
    elif expect and expect.strip() and expect.strip()[:200] not in clean_line(here, len(here)):
        # stored lines are clean_line's (no colour codes): compared as such
        out.changed = True
        out.note = f"line {line:,} now reads otherwise than when it was read (rewritten or rotated)"
    return out


def _text(b: bytes) -> str:
    s = b.rstrip(b"\r\n").decode("utf-8", "replace")
    return s if len(s) <= MAX_LINE_CHARS else s[: MAX_LINE_CHARS - 1] + "…"


def _lines(fh: object, first: int, last: int) -> list[tuple[int, bytes]] | None:
    """Lines ``first..last`` (1-based) of ``fh``, each cut to ``MAX_LINE_CHARS`` bytes x 4;
    None when ``first`` lies past ``MAX_SCAN_BYTES``. Newlines are counted block by block,
    so a long file costs one pass over its first bytes, not a Python loop per line."""
    lineno, scanned, carry = 1, 0, b""
    got: list[tuple[int, bytes]] = []
    cap = MAX_LINE_CHARS * 4  # bytes: a UTF-8 character is at most 4
    while lineno <= last:
        block = fh.read(BLOCK_BYTES)  # type: ignore[attr-defined]
        if not block:
            if carry and lineno >= first:
                got.append((lineno, carry[:cap]))
            break
        scanned += len(block)
        nl = block.count(b"\n")
        if lineno + nl < first:  # the whole block is before the window
            lineno += nl
            carry = b""
            if scanned > MAX_SCAN_BYTES:
                return None
            continue
        parts = (carry + block).split(b"\n")
        carry = parts.pop()
        for p in parts:
            if first <= lineno <= last:
                got.append((lineno, p[:cap]))
            lineno += 1
        carry = carry[: cap + 1] if lineno >= first else b""
        if scanned > MAX_SCAN_BYTES:  # a line without end inside the window stops here too
            if lineno < first:
                return None
            if carry and lineno <= last:
                got.append((lineno, carry[:cap]))
            break
    return got
