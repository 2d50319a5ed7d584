"""A whole scrape round of Prometheus text parsed at once, in Arrow's compute kernels.

``parse_round(texts)`` returns what ``[exposition.parse(t) for t in texts]`` returns, faster:
a round of 2,048 dcgm-exporter scrapes is 400 K lines, and splitting them into Python strings
line by line is most of ``parse``'s time. Here the round's text is one Arrow array, and the
lines, their names, label blocks and values are split, checked and converted by vectorised
kernels over the whole round; Python sees only each distinct name and label block.

What this path takes is exactly what ``parse``'s own fast path takes, checked the same way:
every line that is not blank or a ``#`` comment is ``NAME{LABELS} VALUE`` with a clean name, a
label block ``parse`` accepts, and a value that is ``[ \\t]*VALUE[ \\t]*`` in ASCII (no
timestamp). A scrape with any other line (a timestamp, ``\\r\\n`` endings, a bad line, a bad
HELP/TYPE line) or text Arrow cannot hold is handed to ``parse`` whole, so the result never
depends on which path ran (``tests/test_roundparse.py`` compares both on generated and
mutated text).

Label blocks are remembered from one round to the next (a target shows the same blocks every
round) for as long as the fleet shows them (``exposition.Generations``): the memory follows the
fleet, and a fleet larger than a fixed cache does not parse every block again on every round.
The kernels run on batches of ``CHUNK`` texts, whose copies fit in memory already in use.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry.ingest import exposition
from telemetry.ingest.exposition import BLANK_MIN, Generations, LabelSet, Scrape, parse

# ``[ \t]*VALUE[ \t]*``: exactly what ``parse``'s fast path converts (``float`` on ASCII text
# without ``_``, ``\r``, ``\v``, ``\f`` or ``\x1c``-``\x1f``). RE2 matches it without captures.
_TAIL = rf"^[ \t]*{exposition._VALUE}[ \t]*$"

_blocks = Generations()  # label block -> its labels (None: refused), while the fleet shows it
_UNSEEN = object()
# What exporters write: name="value" pairs without escapes, as ``parse`` judges them.
_PLAIN_BLOCK = f"^{exposition._PLAIN_BLOCK_RE.pattern}$"
# Texts per batch of kernels: a whole 16,384-node round at once (770 MB of text) spends more
# on fresh memory for each step's copy than on the work; batches of this size reuse it.
CHUNK = 128


def clear_cache() -> None:
    """Forget the remembered label blocks (for benchmarks and tests)."""
    _blocks.clear()


def parse_round(texts: Sequence[str], blank_min: float = BLANK_MIN) -> list[Scrape]:
    """Every text parsed, as ``[parse(t, blank_min=blank_min) for t in texts]`` would."""
    out: list[Scrape] = []
    for i in range(0, len(texts), CHUNK):
        out += _parse_chunk(texts[i : i + CHUNK], blank_min)
    _blocks.turn()
    return out


def _parse_chunk(texts: Sequence[str], blank_min: float) -> list[Scrape]:
    if not texts:
        return []
    try:
        array = pa.array(texts, pa.large_string())
    except (pa.ArrowException, UnicodeEncodeError):  # e.g. a lone surrogate: parse says why
        return [parse(t, blank_min=blank_min) for t in texts]
    split = pc.split_pattern(array, "\n")
    lines = split.values
    per_text = np.diff(split.offsets.to_numpy())
    text_of = np.repeat(np.arange(len(texts), dtype=np.int64), per_text)
    hashed = pc.starts_with(lines, "#").to_numpy(zero_copy_only=False)
    body = ~hashed & (pc.binary_length(lines).to_numpy() > 0)
    bad, line_text, names, name_codes, sets, set_codes, values = _columns(
        lines.filter(pa.array(body)), text_of[body], len(texts)
    )
    comments = _comments(lines.filter(pa.array(hashed)), text_of[hashed], len(texts))
    blank = (values >= blank_min) & np.isfinite(values)
    values[blank] = np.nan
    bounds = np.searchsorted(line_text, np.arange(len(texts) + 1))
    blanks = np.bincount(line_text[blank], minlength=len(texts))
    local, set_bounds, set_order = _local_sets(line_text, set_codes, len(texts))
    out: list[Scrape] = []
    shared: dict[tuple[bytes, str], tuple] = {}
    for i, text in enumerate(texts):
        lo, hi = bounds[i], bounds[i + 1]
        declared, helps, bad_comments = exposition._read_comments(comments[i])
        if bad[i] or bad_comments or lo == hi:
            out.append(parse(text, blank_min=blank_min))
            continue
        codes = name_codes[lo:hi]
        key = (codes.tobytes(), comments[i])
        got = shared.get(key)
        if got is None:  # scrapes of one exporter version share their names and families
            these = tuple(names[codes].tolist())
            family_of, families = exposition._families(these, declared)
            got = shared[key] = (these, *map(MappingProxyType, (family_of, families)))
        s_lo, s_hi = set_bounds[i], set_bounds[i + 1]
        out.append(
            Scrape(
                names=got[0],
                label_ids=local[lo:hi],
                label_sets=tuple(sets[c] for c in set_order[s_lo:s_hi]),
                values=values[lo:hi],
                timestamps_ms=None,
                families=got[2],
                family_of=got[1],
                helps=MappingProxyType(helps),
                errors=(),
                blanks=int(blanks[i]),
            )
        )
    return out


def _columns(body: pa.Array, line_text: np.ndarray, n_texts: int) -> _Cols:
    """The body lines split and checked. A line that does not split into ``NAME{``, ``LABELS}``
    and a tail is left out, and its text marked to be parsed by ``parse``."""
    bad = np.zeros(n_texts, bool)
    head, keep = _split_keep(body, "{", False)
    line_text, head = _drop(keep, bad, line_text, head)
    names, rest = _halves(head)
    tail, keep = _split_keep(rest, "}", True)
    line_text, names, tail = _drop(keep, bad, line_text, names, tail)
    blocks, tails = _halves(tail)
    ok = pc.match_substring_regex(tails, _TAIL).to_numpy(zero_copy_only=False)
    bad_line = ~ok
    values = np.full(len(line_text), np.nan)
    if ok.any():
        good = pc.utf8_trim(tails.filter(pa.array(ok)), " \t")
        try:
            values[ok] = pc.cast(good, pa.float64()).to_numpy()
        except pa.ArrowInvalid:  # a form Arrow reads differently: float() as parse does
            values[ok] = np.array(good.to_pylist(), np.float64)
    name_dict = pc.dictionary_encode(names)
    uniq = name_dict.dictionary.to_pylist()
    clean = np.array([exposition._is_clean_name(n) for n in uniq], bool)
    name_codes = name_dict.indices.to_numpy()
    bad_line |= ~clean[name_codes]
    set_dict = pc.dictionary_encode(blocks)
    sets, refused = _label_sets(set_dict.dictionary)
    set_codes = set_dict.indices.to_numpy()
    bad_line |= refused[set_codes]
    bad[line_text[bad_line]] = True
    return _Cols(bad, line_text, np.array(uniq, object), name_codes, sets, set_codes, values)


class _Cols(NamedTuple):
    bad: np.ndarray  # per text: a line refuses this path
    line_text: np.ndarray  # per line kept: its text
    names: np.ndarray  # object array of the distinct names
    name_codes: np.ndarray  # per line: into names
    sets: list[LabelSet]  # the distinct label blocks' labels (``()`` when refused)
    set_codes: np.ndarray  # per line: into sets
    values: np.ndarray  # float64 per line


def _drop(
    keep: np.ndarray | None, bad: np.ndarray, line_text: np.ndarray, *arrays: pa.Array
) -> tuple[Any, ...]:
    """``line_text`` and ``arrays`` without the lines ``keep`` leaves out (None: keep all),
    their texts marked in ``bad`` (``parse`` will say why)."""
    if keep is None:
        return (line_text, *arrays)
    bad[line_text[~keep]] = True
    mask = pa.array(keep)
    return (line_text[keep], *(a.filter(mask) for a in arrays))


def _split_keep(lines: pa.Array, sep: str, reverse: bool) -> tuple[pa.Array, np.ndarray | None]:
    split = pc.split_pattern(lines, sep, max_splits=1, reverse=reverse)
    two = np.diff(split.offsets.to_numpy()) == 2
    return split, None if two.all() else two


def _halves(split: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The first and second parts of lists of two."""
    parts = split.flatten()
    return parts.take(pa.array(np.arange(0, len(parts), 2))), parts.take(
        pa.array(np.arange(1, len(parts), 2))
    )


def _label_sets(blocks: pa.Array) -> tuple[list[LabelSet], np.ndarray]:
    """Each distinct block's labels (``()`` when refused) and which were refused: remembered,
    else parsed (``_parse_blocks``) and remembered."""
    texts = blocks.to_pylist()
    got = [_blocks.get(b, _UNSEEN) for b in texts]
    new = [j for j, g in enumerate(got) if g is _UNSEEN]
    if new:
        parsed = _parse_blocks(blocks.take(pa.array(new, pa.int64())), [texts[j] for j in new])
        for j, labels in zip(new, parsed, strict=True):
            got[j] = labels
            _blocks.put(texts[j], labels)
    refused = np.fromiter((g is None for g in got), bool, len(got))
    return [g or () for g in got], refused  # type: ignore[misc]


def _parse_blocks(blocks: pa.Array, texts: list[str]) -> list[LabelSet | None]:
    """Labels of blocks never seen (None: refused), as ``exposition._labels`` reads them. The
    blocks exporters write (``a="b",c="d"``, no escapes, no repeated or reserved names) are
    split in Arrow at their quotes, all at once (a 16,384-node fleet's first round has 393 K
    of them); any other goes to ``exposition._labels`` alone, which says why it is refused."""
    out: list[LabelSet | None] = [None] * len(texts)
    short = pc.less_equal(pc.binary_length(blocks), exposition.MAX_LABEL_BLOCK)
    plain = pc.and_(pc.match_substring_regex(blocks, _PLAIN_BLOCK), short)
    plain = plain.to_numpy(zero_copy_only=False)
    alone = ~plain
    which = np.flatnonzero(plain)
    if len(which):
        pieces = pc.split_pattern(blocks.filter(pa.array(plain)), '"')
        counts = np.diff(pieces.offsets.to_numpy())  # 2 per pair and one after the last quote
        pos = np.arange(counts.sum()) - np.repeat(pieces.offsets.to_numpy()[:-1], counts)
        last = pos == np.repeat(counts - 1, counts)
        flat = pieces.flatten()
        name_of = pc.dictionary_encode(
            pc.utf8_trim(flat.filter(pa.array((pos % 2 == 0) & ~last)), ",=")
        )
        names = [sys.intern(n) for n in name_of.dictionary.to_pylist()]
        value_of = pc.dictionary_encode(flat.filter(pa.array(pos % 2 == 1)))
        values = value_of.dictionary.to_pylist()
        n_code, v_code = name_of.indices.to_numpy(), value_of.indices.to_numpy()
        pair_code = n_code.astype(np.int64) * len(values) + v_code
        uniq, pair_of = np.unique(pair_code, return_inverse=True)
        pairs = [(names[c // len(values)], values[c % len(values)]) for c in uniq.tolist()]
        per = (counts - 1) // 2
        block_of = np.repeat(np.arange(len(which)), per)
        seen_twice = np.bincount(block_of, minlength=len(which)) != np.bincount(
            np.unique(block_of * len(names) + n_code) // len(names), minlength=len(which)
        )
        reserved = np.array([n[:2] == "__" for n in names], bool)
        odd = seen_twice | (
            np.bincount(block_of, weights=reserved[n_code], minlength=len(which)) > 0
        )
        ordered = list(map(pairs.__getitem__, pair_of.tolist()))
        ends = np.cumsum(per).tolist()
        for k, (j, end, n) in enumerate(zip(which.tolist(), ends, per.tolist(), strict=True)):
            if not odd[k]:
                out[j] = tuple(ordered[end - n : end])
        alone[which[odd]] = True
    for j in np.flatnonzero(alone).tolist():
        labels = exposition._labels(texts[j])
        out[j] = None if isinstance(labels, str) else labels
    return out


def _local_sets(
    line_text: np.ndarray, codes: np.ndarray, n_texts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line its label set's id within its text (numbered in order of first appearance, as
    ``parse`` numbers them); per text where its sets start in the order; the round's set codes
    in that order (text by text)."""
    if not len(codes):
        return np.empty(0, np.int32), np.zeros(n_texts + 1, np.int64), np.empty(0, np.int64)
    key = line_text * (int(codes.max()) + 1) + codes
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # lines are text by text: so are first lines
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    set_text = line_text[first[order]]
    set_bounds = np.searchsorted(set_text, np.arange(n_texts + 1))
    local = rank[inverse] - set_bounds[line_text]
    return local.astype(np.int32), set_bounds, codes[first[order]]


def _comments(lines: pa.Array, line_text: np.ndarray, n_texts: int) -> list[str]:
    """Each text's ``#`` lines joined by newlines (as ``parse`` hands them on)."""
    offsets = np.searchsorted(line_text, np.arange(n_texts + 1)).astype(np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), lines)
    joined = pc.binary_join(lists, pa.scalar("\n", pa.large_string()))
    return joined.to_pylist()
