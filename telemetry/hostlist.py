"""Slurm host lists (``gpu[001-003,7],login1``), as ``scontrol show hostnames`` reads them:
shared by the Slurm source (job node lists) and the log parser (``SLURM_JOB_NODELIST=`` lines
a batch script prints)."""

from __future__ import annotations

import re
from functools import lru_cache
from math import prod

_NULL_TEXT = frozenset({"", "None", "Unknown", "N/A", "None assigned", "(null)", "n/a"})
MAX_HOSTS = 1 << 20  # a list naming more hosts than this is not a cluster's (a crafted line)
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@lru_cache(maxsize=4096)
def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """``gpu[001-003,7],login1`` -> ('gpu001', 'gpu002', 'gpu003', 'gpu7', 'login1'), as
    ``scontrol show hostnames`` does (zero padding kept); one level of brackets per name part."""
    if not text or text in _NULL_TEXT:
        return ()
    if count_hosts(text) > MAX_HOSTS:
        raise ValueError(f"host list names more than {MAX_HOSTS:,} hosts")
    out: list[str] = []
    for name in _split_top(text):
        parts = [[""]]
        for m in re.finditer(r"\[([^\]]*)\]|([^\[]+)", name):
            if m.group(2) is not None:
                parts.append([m.group(2)])
                continue
            choices: list[str] = []
            for piece in m.group(1).split(","):
                r = _RANGE.match(piece.strip())
                if not r:
                    choices.append(piece)
                    continue
                lo, hi = r.group(1), r.group(2) or r.group(1)
                width = len(lo) if lo.startswith("0") else 0
                choices += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
            parts.append(choices)
        names = [""]
        for choices in parts:
            names = [a + b for a in names for b in choices]
        out += names
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur.append(ch)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


def count_hosts(text: str | None) -> int:
    """How many hosts a host list names, without listing them (a hostile ``n[0-99999999999]``
    costs nothing); duplicates counted as written."""
    if not text or text in _NULL_TEXT:
        return 0
    total = 0
    for name in _split_top(text):
        sizes = []
        for m in re.finditer(r"\[([^\]]*)\]|([^\[]+)", name):
            if m.group(2) is not None:
                continue
            n = 0
            for piece in m.group(1).split(","):
                r = _RANGE.match(piece.strip())
                n += int(r.group(2) or r.group(1)) - int(r.group(1)) + 1 if r else 1
            sizes.append(max(n, 0))
        total += prod(sizes)
    return total


_TRAILING = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(hosts: list[str] | tuple[str, ...]) -> str:
    """('gpu001', 'gpu002', 'gpu003', 'gpu7', 'login1') -> ``gpu[001-003,7],login1``: the form
    ``sbatch --exclude=`` and ``scontrol show hostlist`` take; ``expand_hostlist`` gives the
    hosts back. Numbers zero-padded alike share brackets (``gpu007`` and ``gpu7`` are two
    hosts); a name without a trailing number, or alone in its group, is written as it is."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for h in hosts:
        m = _TRAILING.match(h)
        if m is None:
            plain.add(h)
            continue
        digits = m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((m.group(1), width), set()).add(int(digits))
    out = []
    for (prefix, width), nums in sorted(groups.items()):
        spans = _spans(sorted(nums), width)
        single = len(nums) == 1
        out.append(prefix + (spans if single else f"[{spans}]"))
    return ",".join(sorted(out) + sorted(plain))


def _spans(nums: list[int], width: int) -> str:
    """1,2,3,7 -> ``1-3,7`` (zero-padded to ``width``)."""
    parts: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        parts.append(lo if start == prev else f"{lo}-{hi}")
        if n is not None:
            start = prev = n
    return ",".join(parts)
