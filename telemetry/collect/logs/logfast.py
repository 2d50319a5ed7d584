"""The common case of a Megatron-LM log, read column-wise: iteration lines with their own time,
and the runs of (min, max) timer lines after each timers header.

A long job's log is mostly iteration lines; reading each in Python costs ~10 µs. Here one RE2
extraction over a block's candidate lines pulls step, time, learning rate, loss and grad norm
into columns and Arrow/numpy convert them, so Python only builds the records. Only the plain
case is taken: the line starts with ``[YYYY-MM-DD HH:MM:SS(.ffffff)]`` (no rank prefix), has a
finite ``lm loss`` and ``number of nan iterations: 0``. Every other line (no time of its own, a
NaN, another loss name, a prefix) is left to ``parsers.megatron.megatron`` and the parser's
line path, which gives the same record for the lines taken here (tests compare both paths).
"""

from __future__ import annotations

from math import isfinite
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry.collect.logs import rankperf as rp
from telemetry.collect.logs.logclock import Window

_HEAD = (
    r"^ *\[(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?)\] "
    r"iteration +(?P<step>[0-9]+)/ *[0-9]+ "
)
# (field, text its group's match always holds, the group)
_FIELDS = (
    ("samples", b"| consumed samples: ", r"(?:.*?\| consumed samples: +(?P<samples>[0-9]+) )?"),
    ("tokens", b"| consumed tokens: ",  # Megatron-DeepSpeed
     r"(?:.*?\| consumed tokens: +(?P<tokens>[0-9]+) )?"),
    ("lr", b"| learning rate: ", r"(?:.*?\| learning rate: (?P<lr>[0-9][0-9.eE+-]*) )?"),
    ("loss", b"| lm loss: ", r"(?:.*?\| lm loss: (?P<loss>[0-9][0-9.eE+-]*) )?"),
    ("grad_norm", b"| grad norm: ", r"(?:.*?\| grad norm: (?P<grad_norm>[0-9][0-9.eE+-]*) )?"),
)
_TAIL = r".*?\| number of nan iterations: +(?P<nan>[0-9]+) \|"
MEGATRON_COLUMNS = _HEAD + "".join(group for *_, group in _FIELDS) + _TAIL


def _pattern(within: bytes | None) -> tuple[str, list[str]]:
    """``MEGATRON_COLUMNS`` without the optional groups that cannot match in ``within`` (the
    block the lines come from: their text is not in it), and the fields left out. The same
    matches, captures and their order: a group that cannot match is always skipped. Why: each
    lazy group costs the regex a scan of the line (Megatron-LM's lines have no tokens: 40 %
    of the extraction's time)."""
    if within is None:
        return MEGATRON_COLUMNS, []
    kept = [(name, group) for name, text, group in _FIELDS if text in within]
    gone = [name for name, *_ in _FIELDS if name not in dict(kept)]
    return _HEAD + "".join(group for _, group in kept) + _TAIL, gone


def _floats(col: pa.Array) -> list[float | None]:
    empty = pc.equal(col, "")
    return pc.cast(pc.if_else(empty, pa.scalar(None, pa.large_string()), col),
                   pa.float64()).to_pylist()


def megatron_columns(lines: pa.Array, window: Window | None = None, within: bytes | None = None
                     ) -> tuple[np.ndarray, dict[str, list]] | None:
    """(positions in ``lines`` taken, columns ts/step/loss/lr/grad_norm as Python lists);
    None when nothing is taken or a value does not convert (then every line goes the slow
    way). A line whose time is not in ``window`` is not taken: the line path refuses it.
    ``within``: the text the lines were cut from, if known (see ``_pattern``)."""
    pattern, gone = _pattern(within)
    if "loss" in gone:  # no line has a loss: none is taken
        return None
    ext = pc.extract_regex(lines, pattern)
    ok = pc.and_(ext.is_valid(), pc.and_(pc.equal(pc.struct_field(ext, "nan"), "0"),
                                          pc.not_equal(pc.struct_field(ext, "loss"), "")))
    ok = pc.fill_null(ok, False)
    pos = pc.indices_nonzero(ok).to_numpy()
    if not len(pos):
        return None
    rows = ext.filter(ok)
    try:
        ts = np.array(pc.struct_field(rows, "ts").to_numpy(zero_copy_only=False),
                      dtype="datetime64[us]")
        if window is not None:
            inside = (ts >= np.datetime64(window.lo, "us")) & (ts <= np.datetime64(window.hi, "us"))
            if not inside.all():
                pos, ts, rows = pos[inside], ts[inside], rows.filter(pa.array(inside))
                if not len(pos):
                    return None
        cols = {"ts": ts.astype(object).tolist(),
                "step": pc.cast(pc.struct_field(rows, "step"), pa.int64()).to_pylist()}
        for name in ("loss", "lr", "grad_norm", "tokens", "samples"):
            cols[name] = [None] * len(pos) if name in gone else _floats(
                pc.struct_field(rows, name))
    except (pa.ArrowInvalid, ValueError):
        return None
    return pos, cols


def records(idx: np.ndarray, cols: dict[str, list], base: int, run: str | None, label: str,
            skip: set[int]) -> tuple[list[tuple[int, dict[str, Any], str]], list[int]]:
    """(line, train_metrics record, origin) of each taken line ``base + idx[k]`` not in
    ``skip``, and the indices whose loss overflowed to Inf (for the line path)."""
    out, odd = [], []
    for i, ts, step, loss, lr, grad, tokens, samples in zip(
        idx.tolist(), cols["ts"], cols["step"], cols["loss"], cols["lr"], cols["grad_norm"],
        cols["tokens"], cols["samples"], strict=True,
    ):  # fmt: skip
        lineno = base + i
        if lineno in skip:
            continue
        if not isfinite(loss):
            odd.append(i)
            continue
        rec = {"run": run, "ts": ts, "step": step, "loss": loss} if run else {
            "ts": ts, "step": step, "loss": loss}
        if lr is not None and isfinite(lr):
            rec["lr"] = lr
        if grad is not None and isfinite(grad):
            rec["grad_norm"] = grad
        if tokens is not None:
            rec["tokens"] = int(tokens)
        if samples is not None:
            rec["samples"] = samples  # tokens once the sequence length is known (textlogs)
        out.append((lineno, rec, f"{label}:{lineno}"))
    return out, odd


# ``rankperf.MINMAX_LINE`` for RE2 with named groups, on one line with its newline (a test
# holds the two to the same matches and groups: RE2 gives a lazy group Python's match)
_MINMAX = (r"^ *(?P<name>[A-Za-z][^\n\r\x1b]*?) \.*: \((?P<lo>[0-9]+\.[0-9]+), "
           r"(?P<hi>[0-9]+\.[0-9]+)\)[ \t]*\n$")
MAX_RUN = 4096  # lines of one run read here; a longer one is left to the parser


class TimerRuns(NamedTuple):
    """The runs of (min, max) lines of a block, each starting on the line after a timers
    header: ``at`` maps a run's first line to its number; per run, how many lines (``lines``),
    where they start in ``names``/``lo``/``hi`` (``starts``), their bytes with newlines
    (``nbytes``) and whether every time is a range ``minmax_lines`` takes (``ok``)."""

    at: dict[int, int]
    lines: list[int]
    starts: list[int]
    nbytes: list[int]
    ok: list[bool]
    names: list[str]
    lo: list[float]
    hi: list[float]


def timer_runs(lines: pa.Array, heads: np.ndarray, offs: np.ndarray) -> TimerRuns | None:
    """The runs of (min, max) lines from the line after each of ``heads`` (lines of
    ``lines``, a block cut at ``offs``), read as ``rankperf.Report.minmax_lines`` reads them:
    consecutive lines of ``MINMAX_LINE``'s shape, the name kept as ``rankperf.kept_name``
    keeps it. Why here: RE2 releases the GIL, so a reader sieving the next block in a thread
    takes the timers' regex off the parser's thread (#56: a fifth of a 1 GiB log's parse).
    None when no run is found or a time does not convert (the parser then reads them)."""
    n = len(lines)
    heads = heads.astype(np.int64)
    first = heads[heads + 1 < n] + 1
    cur, run = first, np.arange(len(first))
    got: list[tuple[np.ndarray, np.ndarray, pa.StructArray]] = []
    for _ in range(MAX_RUN):
        if not len(cur):
            break
        ext = pc.extract_regex(lines.take(pa.array(cur)), _MINMAX)
        ok = ext.is_valid().to_numpy(zero_copy_only=False)
        cur, run = cur[ok], run[ok]
        got.append((cur, run, ext.filter(ok)))
        keep = cur + 1 < n
        cur, run = cur[keep] + 1, run[keep]
    too_long = set(run.tolist())  # runs still going after MAX_RUN lines
    got = [g for g in got if len(g[0])]
    if not got:
        return None
    line = np.concatenate([g[0] for g in got])
    order = np.argsort(line, kind="stable")
    line, which = line[order], np.concatenate([g[1] for g in got])[order]
    if (np.diff(line) == 0).any():  # a header inside another's run: left to the parser
        return None
    ext = pa.concat_arrays([g[2] for g in got]).take(pa.array(order))
    try:
        lo = pc.cast(pc.struct_field(ext, "lo"), pa.float64()).to_numpy()
        hi = pc.cast(pc.struct_field(ext, "hi"), pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        return None
    names = pc.dictionary_encode(pc.struct_field(ext, "name"))
    kept = np.array([rp.kept_name(x) for x in names.dictionary.to_pylist()] or [""], object)
    counts = np.bincount(which, minlength=len(first))
    has = np.flatnonzero(counts)
    starts = np.concatenate([[0], np.cumsum(counts[has])[:-1]]).astype(np.int64)
    good = (hi > 0) & (hi <= rp.MAX_MS) & (lo <= hi)
    ok = np.logical_and.reduceat(good, starts) & ~np.isin(has, list(too_long))
    firsts = first[has]
    return TimerRuns(
        at=dict(zip(firsts.tolist(), range(len(has)), strict=True)),
        lines=counts[has].tolist(),
        starts=starts.tolist(),
        nbytes=(offs[firsts + counts[has]] - offs[firsts]).tolist(),
        ok=ok.tolist(),
        names=kept[names.indices.to_numpy(zero_copy_only=False)].tolist(),
        lo=lo.tolist(),
        hi=hi.tolist(),
    )
