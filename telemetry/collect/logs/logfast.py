"""The common case of a Megatron-LM log, read column-wise: iteration lines with their own time.

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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
