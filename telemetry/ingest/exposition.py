"""Prometheus text exposition (format 0.0.4) parser, fast on dcgm-exporter scrapes.

``parse(text)`` returns a columnar ``Scrape``: per sample a metric name, a label-set id, a value
and an optional timestamp; the families' types; and the lines it rejected. A bad line is reported
as ``(line number, reason)`` and the rest of the scrape is kept (``strict=True`` raises
``ValueError`` naming the first bad line instead). Nothing here knows dcgm-exporter's labels:
reshaping a round of scrapes into the store's rows is ``telemetry.ingest.dcgm_rows``.

``prometheus_client``'s parser is the reference: on well-formed text both give the same samples
(``tests/test_exposition.py`` checks every fixture and generated text). Differences on purpose:
counters keep the name the exporter wrote (the reference appends ``_total``; key a counter on its
family), and this parser is stricter where the reference is laxer than the format: a value is a
number, ``[+-]Inf`` or ``NaN`` in ASCII; a timestamp is an integer (ms); tokens after the
timestamp, quoted (UTF-8) metric or label names and label sets without a metric name before the
braces make a line bad.

Speed: a dcgm-exporter line is ``NAME{LABELS} VALUE`` and a GPU's label block repeats on every
family. So lines are split with C-level string methods, each distinct label block is parsed once
(and cached across scrapes: a target shows the same blocks every round), and values are converted
in one NumPy call. Whatever the fast path cannot vouch for goes through a strict per-line parser,
so speed never changes what is accepted.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import pyarrow as pa

BLANK_MIN = 9.2e18  # finite values at or above this are old exporters' blank sentinels

LabelSet = tuple[tuple[str, str], ...]  # (name, value) pairs in exposition order

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_NUM = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_VALUE = rf"[+-]?(?:{_NUM}|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])"
_TS = r"[+-]?[0-9]+"

_NAME_RE = re.compile(rf"[ \t]*({_NAME})[ \t]*")
_TAIL_RE = re.compile(rf"[ \t]*({_VALUE})(?:[ \t]+({_TS}))?[ \t\r]*")
_BARE_RE = re.compile(rf"[ \t]*({_NAME})[ \t]+({_VALUE})(?:[ \t]+({_TS}))?[ \t\r]*")
_PAIR_RE = re.compile(
    rf'[ \t]*({_LABEL})[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"[ \t]*(?:,[ \t]*|\Z)|(.+)'
)
_PLAIN_PAIR = rf'({_LABEL})="([^"\\\n]*)"'
_PLAIN_PAIR_RE = re.compile(_PLAIN_PAIR)
_PLAIN_BLOCK_RE = re.compile(rf'(?:{_LABEL}="[^"\\\n]*",)*{_LABEL}="[^"\\\n]*",?')
# HELP/TYPE tokens are split on ASCII whitespace, as the reference does.
_COMMENT_RE = re.compile(
    r"#[^ \t\r\v\f]*[ \t\r\v\f]+(HELP|TYPE)(?:[ \t\r\v\f]+([^ \t\r\v\f]+)(?:[ \t\r\v\f]+(.*))?)?",
    re.S,
)
_ESCAPE_RE = re.compile(r'\\[\\n"]')
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
# On ASCII text without these characters, float() accepts exactly [ \t]*_VALUE[ \t]*. (NumPy
# drops trailing NULs before converting, so NUL is excluded too.)
_FLOAT_EXTRAS = "_\r\v\f\x1c\x1d\x1e\x1f\x00"

# prometheus_client's types; format 0.0.4's ``untyped`` is reported as ``unknown``, as it does.
TYPES = frozenset(
    {"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info", "stateset"}
)
# Sample names a family owns besides its own name (the reference's rule; a histogram has no
# sample under its bare name).
_SUFFIXES = {"summary": ("_count", "_sum"), "histogram": ("_bucket", "_count", "_sum")}


class ParseError(NamedTuple):
    line: int  # 1-based line number in the scrape
    reason: str


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: float | None


@dataclass(frozen=True)
class Scrape:
    """One parsed exposition, columnar: sample ``i`` is ``names[i]``,
    ``label_sets[label_ids[i]]``, ``values[i]`` and, when present, ``timestamps_ms[i]``."""

    names: tuple[str, ...]  # metric name as written (a counter keeps its name)
    label_ids: np.ndarray  # int32 index into label_sets
    label_sets: tuple[LabelSet, ...]  # one per distinct label block
    values: np.ndarray  # float64; NaN for a blank sentinel
    timestamps_ms: np.ndarray | None  # float64 ms since the epoch, NaN: none (None: none at all)
    families: Mapping[str, str]  # family -> type (``unknown`` without a TYPE line)
    family_of: Mapping[str, str]  # sample name -> family (``x_bucket`` -> ``x`` for a histogram)
    helps: Mapping[str, str]  # family -> HELP text
    errors: tuple[ParseError, ...]  # rejected lines in line order
    blanks: int  # values turned into NaN as blank sentinels

    def __len__(self) -> int:
        return len(self.names)

    def labels(self, i: int) -> dict[str, str]:
        return dict(self.label_sets[self.label_ids[i]])

    def samples(self) -> Iterator[Sample]:
        """Row view, for tests and small scrapes; use the columns for anything large."""
        ts = self.timestamps_ms
        for i, name in enumerate(self.names):
            t = None if ts is None or np.isnan(ts[i]) else float(ts[i])
            yield Sample(name, self.labels(i), float(self.values[i]), t)

    def to_arrow(self) -> pa.Table:
        """One row per sample: name, family, type, labels (map), value, timestamp_ms (null: none).

        NaN values (blank sentinels included) stay NaN here; ``dcgm_rows`` makes them null."""
        names = list(dict.fromkeys(self.names))
        ids = pa.array(_codes(self.names, names))
        fams = [self.family_of[n] for n in names]
        ts = self.timestamps_ms
        if ts is None:
            ts_col = pa.nulls(len(self), pa.float64())
        else:
            ts_col = pa.array(ts, mask=np.isnan(ts))
        return pa.table(
            {
                "name": pa.DictionaryArray.from_arrays(ids, names),
                "family": pa.DictionaryArray.from_arrays(ids, fams),
                "type": pa.DictionaryArray.from_arrays(ids, [self.families[f] for f in fams]),
                "labels": label_maps(self.label_sets).take(pa.array(self.label_ids)),
                "value": pa.array(self.values),
                "timestamp_ms": ts_col,
            }
        )


def parse(text: str, *, strict: bool = False, blank_min: float = BLANK_MIN) -> Scrape:
    """Parse one Prometheus text exposition (a dcgm-exporter ``/metrics`` body).

    Lines that are not valid samples, ``# HELP``/``# TYPE`` lines, comments or blank lines are
    reported in ``errors`` as (line number, reason) and skipped; with ``strict=True`` the first
    one raises ``ValueError`` naming its line. Finite values >= ``blank_min`` (dcgm blank
    sentinels, ~9.22e18) become NaN and are counted in ``blanks``; ``+Inf`` stays ``+Inf``.
    Never raises otherwise, whatever the text.
    """
    lines = text.split("\n")
    body = [ln for ln in lines if ln and ln[0] != "#"]
    comments = [ln for ln in lines if ln[:1] == "#"]
    fast = _fast(body)
    cols = fast if fast is not None else _slow(lines, body)
    declared, helps, bad = _read_comments("\n".join(comments + [c for _, c in cols.comments]))
    errors = cols.errors + _comment_errors(lines, cols.comments, bad)
    if strict and errors:
        first = min(errors)
        raise ValueError(f"line {first.line}: {first.reason}")
    values = cols.values
    blank = (values >= blank_min) & np.isfinite(values)
    blanks = int(np.count_nonzero(blank))
    if blanks:
        values[blank] = np.nan
    family_of, families = _families(cols.names, declared)
    return Scrape(
        names=tuple(cols.names),
        label_ids=cols.label_ids,
        label_sets=cols.label_sets,
        values=values,
        timestamps_ms=cols.timestamps_ms,
        families=families,
        family_of=family_of,
        helps=MappingProxyType(helps),
        errors=tuple(sorted(errors)),
        blanks=blanks,
    )


def clear_caches() -> None:
    """Forget the parsed label blocks, names and comment lines (for benchmarks and tests)."""
    for cached in (_block, _is_clean_name, _comment, _read_comments):
        cached.cache_clear()


class _Columns(NamedTuple):
    names: Sequence[str]
    values: np.ndarray  # float64
    label_ids: np.ndarray
    label_sets: tuple[LabelSet, ...]
    timestamps_ms: np.ndarray | None
    comments: list[tuple[int, str]]  # comment lines found indented in the body, with line numbers
    errors: list[ParseError]


def _fast(body: list[str]) -> _Columns | None:
    """Columns of a body whose every line is ``NAME{LABELS} VALUE``; None when any line is not."""
    if not body:
        return _Columns((), np.empty(0), np.empty(0, np.int32), (), None, [], [])
    # A line without "{" has an empty tail, which float() refuses, so one check is enough.
    names, _, rests = zip(*map(str.partition, body, repeat("{")), strict=True)
    blocks, closed, tails = zip(*map(str.rpartition, rests, repeat("}")), strict=True)
    if "" in closed or not all(map(_is_clean_name, set(names))):
        return None
    values = _floats(tails)
    labels = _label_ids(blocks)
    if values is None or labels is None:
        return None
    return _Columns(names, values, *labels, None, [], [])


def _floats(tails: Sequence[str]) -> np.ndarray | None:
    """The values of ``[ \t]*VALUE[ \t]*`` tails in one NumPy call; None if any tail is not."""
    text = "".join(tails)
    if not text.isascii() or any(c in text for c in _FLOAT_EXTRAS):
        return None
    try:
        return np.array(tails, dtype=np.float64)
    except ValueError:
        return None


def _slow(lines: list[str], body: list[str]) -> _Columns:
    """Line-by-line columns of a body the fast path refused, with each bad line's reason."""
    line_nos = [i + 1 for i, ln in enumerate(lines) if ln and ln[0] != "#"]
    names, blocks, values, stamps = [], [], [], []
    comments, errors = [], []
    for no, line in zip(line_nos, body, strict=True):
        got = _sample(line)
        if isinstance(got, tuple):
            names.append(got[0])
            blocks.append(got[1])
            values.append(got[2])
            stamps.append(got[3] or "nan")
        elif got == "comment":
            comments.append((no, line.strip()))
        elif got:
            errors.append(ParseError(no, got))
    ids, sets = _label_ids(blocks) or (np.empty(0, np.int32), ())
    ts = np.array(stamps, np.float64) if any(s != "nan" for s in stamps) else None
    return _Columns(names, np.array(values, np.float64), ids, sets, ts, comments, errors)


def _sample(line: str) -> tuple[str, str, str, str | None] | str:
    """(name, label block, value, timestamp) of one line, or why not: ``"comment"``, ``""`` for
    a blank line, else the reason it is bad."""
    head, brace, rest = line.partition("{")
    if not brace:
        m = _BARE_RE.fullmatch(line)
        return (m[1], "", m[2], m[3]) if m else _why_not(line)
    block, brace, tail = rest.rpartition("}")
    name = _NAME_RE.fullmatch(head)
    if name is None:
        text = head.strip()
        return _why_not(line) if text[:1] in ("", "#") else f"invalid metric name {text[:60]!r}"
    if not brace:
        return "label set not closed with '}'"
    labels = _labels(block)
    if isinstance(labels, str):
        return labels
    m = _TAIL_RE.fullmatch(tail)
    if m is None:
        return f"invalid value or timestamp {tail.strip()[:60]!r}" if tail.strip() else "no value"
    return name[1], block, m[1], m[2]


def _why_not(line: str) -> str:
    """Why a line is not a sample: ``""`` (blank), ``"comment"`` or the reason it is bad."""
    text = line.strip()
    if not text or text[0] == "#":
        return "comment" if text else ""
    name = re.match(rf"{_NAME}(?=[ \t{{]|$)", text)
    if name is None:
        return f"invalid metric name in {text[:60]!r}"
    rest = text[name.end() :].strip()
    return f"invalid value or timestamp {rest[:60]!r}" if rest else "no value"


@lru_cache(maxsize=4096)
def _is_clean_name(raw: str) -> bool:
    m = _NAME_RE.fullmatch(raw)
    return m is not None and m[1] == raw


def _label_ids(blocks: Sequence[str]) -> tuple[np.ndarray, tuple[LabelSet, ...]] | None:
    """Label-set id per line and the label sets, parsing each distinct block once; None when a
    block is malformed."""
    index: dict[str, int] = dict.fromkeys(blocks)  # type: ignore[arg-type]
    sets = []
    for i, block in enumerate(index):
        if len(block) > MAX_LABEL_BLOCK:  # the slow path says why, line by line
            return None
        labels = _block(block)
        if isinstance(labels, str):
            return None
        index[block] = i
        sets.append(labels)
    return np.fromiter(map(index.__getitem__, blocks), np.int32, len(blocks)), tuple(sets)


# A dcgm-exporter GPU shows ~3 label blocks (its base labels, the XID counter's window label,
# job attribution while a pod runs): 16,384 GPUs need ~49K. ``parse`` of one text at a time
# keeps this many (~1 KB each); a scrape loop's rounds (``roundparse``) remember theirs in
# ``Generations``, sized by the fleet itself.
BLOCK_CACHE = 1 << 16


class Generations:
    """What a scrape loop computes per label block (or label set), kept as long as the fleet
    shows it: entries used since the last turn are ``new``, the rest ``old``. ``turn`` (after
    a round) drops ``old`` once ``new`` is as large, so the memory follows the fleet (at most
    twice its largest round) where a fixed-size LRU smaller than the fleet would miss on every
    lookup. A round split in parts (a daemon per target group) turns only when its parts
    together are as large as the last whole round."""

    def __init__(self) -> None:
        self.old: dict = {}
        self.new: dict = {}

    def get(self, key: object, default: object = None) -> object:
        got = self.new.get(key, _MISSING)
        if got is _MISSING:
            got = self.old.get(key, _MISSING)
            if got is _MISSING:
                return default
            self.new[key] = got
        return got

    def put(self, key: object, value: object) -> None:
        self.new[key] = value

    def turn(self) -> None:
        if len(self.new) >= len(self.old):
            self.old, self.new = self.new, {}

    def clear(self) -> None:
        self.old, self.new = {}, {}

    def __len__(self) -> int:
        return len(self.old.keys() | self.new.keys())


_MISSING = object()


MAX_LABEL_BLOCK = 4096  # a dcgm-exporter GPU's labels take ~250 characters


def _labels(block: str) -> LabelSet | str:
    """A label block's labels or why it is refused. A block longer than ``MAX_LABEL_BLOCK``
    (a 100 KB pod name) rejects its line, before it can reach the cache or the store."""
    if len(block) > MAX_LABEL_BLOCK:
        return f"labels longer than {MAX_LABEL_BLOCK:,} characters ({len(block):,})"
    return _block(block)


@lru_cache(maxsize=BLOCK_CACHE)
def _block(block: str) -> LabelSet | str:
    """The labels between ``{`` and ``}``, or why they are malformed."""
    if _PLAIN_BLOCK_RE.fullmatch(block):  # what exporters write: a="b",c="d" without escapes
        names, values = zip(*_PLAIN_PAIR_RE.findall(block), strict=True)
        if len(set(names)) < len(names) or ("__" in block and any(n[:2] == "__" for n in names)):
            return _block_slowly(block)  # for the reason
        return tuple(zip(map(sys.intern, names), values, strict=True))
    return _block_slowly(block)


def _block_slowly(block: str) -> LabelSet | str:
    if not block.strip(" \t"):
        return ()
    pairs = []
    for name, value, bad in _PAIR_RE.findall(block):
        if bad:
            return f"malformed labels near {bad[:60]!r}"
        if name.startswith("__"):
            return f"reserved label name {name!r}"
        if "\\" in value:
            value = _ESCAPE_RE.sub(_unescape, value)
        pairs.append((sys.intern(name), value))
    if len({n for n, _ in pairs}) != len(pairs):
        seen = [n for n, _ in pairs]
        return f"duplicate label name {next(n for n in seen if seen.count(n) > 1)!r}"
    return tuple(pairs)


def _unescape(m: re.Match[str]) -> str:
    return _UNESCAPE[m[0]]


@lru_cache(maxsize=4096)
def _comment(line: str) -> tuple[str, str, str] | str | None:
    """("HELP", name, text) or ("TYPE", name, type) for a comment line, None for any other
    comment, or the reason a HELP/TYPE line is malformed."""
    m = _COMMENT_RE.fullmatch(line.strip())
    if m is None:
        return None
    kind, name, rest = m.groups()
    if name is None:
        return "TYPE line without a metric name" if kind == "TYPE" else None
    if re.fullmatch(_NAME, name) is None:
        return f"invalid metric name {name[:60]!r} in # {kind}"
    if kind == "HELP":
        return kind, name, _HELP_ESCAPE_RE.sub(_unescape, rest or "")
    typ = (rest or "").strip()
    typ = "unknown" if typ == "untyped" else typ
    if typ not in TYPES:
        return f"invalid type {typ[:40]!r} for {name}"
    return kind, name, typ


@lru_cache(maxsize=256)  # an exporter version writes the same HELP/TYPE lines on every host
def _read_comments(comments: str) -> tuple[dict[str, str], dict[str, str], tuple[int, ...]]:
    """Declared types, HELP texts and the indices of malformed HELP/TYPE lines, of the comment
    lines joined by newlines. The dicts are shared between calls: copy before changing them."""
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    bad = []
    for i, got in enumerate(map(_comment, comments.split("\n") if comments else ())):
        if isinstance(got, tuple):
            (types if got[0] == "TYPE" else helps)[got[1]] = got[2]
        elif got:
            bad.append(i)
    return types, helps, tuple(bad)


def _comment_errors(
    lines: list[str], indented: list[tuple[int, str]], bad: tuple[int, ...]
) -> list[ParseError]:
    if not bad:
        return []
    line_nos = [i + 1 for i, ln in enumerate(lines) if ln[:1] == "#"] + [n for n, _ in indented]
    texts = [ln for ln in lines if ln[:1] == "#"] + [c for _, c in indented]
    return [ParseError(line_nos[i], str(_comment(texts[i]))) for i in bad]


def _families(
    names: Sequence[str], declared: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(sample name -> family, family -> type), with undeclared families ``unknown``."""
    uniq = dict.fromkeys(names)
    family_of = dict(zip(uniq, uniq, strict=True))
    families = dict(declared)
    for name in uniq:
        if declared.get(name, "histogram") != "histogram":
            continue  # a declared family's own samples: the common case
        for suffix in ("_bucket", "_count", "_sum"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and suffix in _SUFFIXES.get(declared.get(base, ""), ()):
                family_of[name] = base
        families.setdefault(family_of[name], "unknown")
    return family_of, families


def _codes(values: Sequence[str], uniq: list[str]) -> np.ndarray:
    code = {v: i for i, v in enumerate(uniq)}
    return np.fromiter(map(code.__getitem__, values), np.int32, len(values))


def label_maps(sets: Sequence[LabelSet]) -> pa.Array:
    """Label sets as an Arrow ``map<string, string>`` array, one entry per set."""
    return pa.array([list(s) for s in sets], type=pa.map_(pa.string(), pa.string()))

