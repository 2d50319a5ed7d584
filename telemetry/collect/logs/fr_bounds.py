"""The bounds a flight-recorder dump must keep (``collect.logs.flight_recorder``), and the
measure of what a value expands to.

A pickle's memo lets a 1 KB file refer to one list from two places at every one of 64 levels:
a "billion laughs" of 2^64 values that ``json.dumps`` or ``str`` would write out, in one C call
that holds the GIL (the server stops answering, and signals wait). Nothing about the classes in
it is wrong (plain lists), so the unpickler cannot refuse it; ``over_bound`` measures every
value a dump reaches, each reference counted, while visiting each distinct container once: the
64 lists are measured in 64 steps, and the dump is refused. A reference back to a container
being measured (a list that holds itself) is refused too.

The time a dump may take to read, and the memory, are bounded by the process that reads it
(``collect.logs.fr_worker``); the values here are also in docs/security-and-serving.md.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DUMP_BYTES = 256 << 20  # 50x a 2,000-entry dump with 30-frame stacks (about 5 MB)
MAX_ENTRIES = 100_000  # PyTorch keeps TORCH_FR_BUFFER_SIZE entries: 2,000 by default
MAX_VALUES = 50_000_000  # values reached, every reference counted (100 K entries x 500)
MAX_DEPTH = 32  # a real dump nests 6 deep (dump, entries, entry, frames, frame, value)
MAX_RANK = (1 << 31) - 1  # ranks are stored as INTEGER
MAX_SEQ = 1 << 53  # collective sequence numbers (PyTorch counts from 0, one per collective)
_NESTED = frozenset({dict, list, tuple, set, frozenset})  # exact: no subclass is unpickled


def _frame(v: Any) -> list[Any]:
    """[container, its nested items, the values it holds, 0 (its height, as measured)]: plain
    values are counted, not visited (one C-speed pass picks the containers out)."""
    if type(v) is dict:
        nested = [x for x in v.values() if type(x) in _NESTED]
        nested += [k for k in v if type(k) in _NESTED]  # tuple keys
        return [v, iter(nested), 2 * len(v), 0]
    return [v, iter([x for x in v if type(x) in _NESTED]), len(v), 0]


def over_bound(
    doc: Any, max_values: int = MAX_VALUES, max_depth: int = MAX_DEPTH, below: int = 0
) -> str | None:
    """Why ``doc`` is over a bound (None: within): more than ``max_values`` values reached from
    it (a dict's keys and values; a value the pickle's memo shares counts at each reference),
    nested deeper than ``max_depth`` (``doc`` itself ``below`` containers down), or holding
    itself. Iterative: any depth is safe to give."""
    if type(doc) not in _NESTED:
        return None
    measured: dict[int, tuple[int, int]] = {}  # id -> (values reached below it, its height)
    open_ids = {id(doc)}
    stack = [_frame(doc)]
    while stack:
        top = stack[-1]
        for v in top[1]:
            got = measured.get(id(v))
            if got is None:
                if id(v) in open_ids:
                    return "it holds itself (a value that refers back to a container of it)"
                if below + len(stack) >= max_depth:
                    return f"nested more than {max_depth} deep"
                open_ids.add(id(v))
                stack.append(_frame(v))
                break
            if why := _add(top, got, below + len(stack), max_values, max_depth):
                return why
        else:
            if top[2] > max_values:
                return _too_many(max_values)
            stack.pop()
            open_ids.discard(id(top[0]))
            got = measured[id(top[0])] = (top[2], top[3] + 1)
            if not stack:  # the dump itself: its items were checked as they were counted
                return None
            if why := _add(stack[-1], got, below + len(stack), max_values, max_depth):
                return why
    return None


def _add(top: list[Any], got: tuple[int, int], at: int, max_values: int, max_depth: int) -> str:
    """Count a measured container (``got``) into ``top`` at depth ``at`` (it was counted as one
    of ``top``'s values already); why that is over."""
    top[2] += got[0]
    top[3] = max(top[3], got[1])
    if top[2] > max_values:
        return _too_many(max_values)
    if at + got[1] > max_depth:
        return f"nested more than {max_depth} deep"
    return ""


def _too_many(max_values: int) -> str:
    return (f"over {max_values:,} values reached (a value shared by the pickle's memo counts "
            "each time it is referred to)")  # fmt: skip


def short(v: Any, limit: int = 120) -> str | None:
    """``v`` as compact JSON, cut to ``limit`` characters ("..." at the end), built no further
    than that (a shared value is not written out 2^64 times to keep 120 characters)."""
    if v is None:
        return None
    out, n = [], 0
    encoder = json.JSONEncoder(separators=(",", ":"), default=str, check_circular=False)
    for chunk in encoder.iterencode(v):  # the pure-Python encoder: a generator, stopped early
        out.append(chunk)
        n += len(chunk)
        if n > limit:
            break
    text = "".join(out)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def text(v: Any, limit: int = 200) -> str:
    """A name, description or frame field as text of at most ``limit`` characters."""
    if isinstance(v, str):
        return v if len(v) <= limit else v[: limit - 3] + "..."
    return short(v, limit) or ""
