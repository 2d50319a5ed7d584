"""A whole round parsed in Arrow (``parse_round``) reads every text as ``parse`` does: the dcgm
fixtures, generated and mutated text, rounds mixing good and bad scrapes; and it takes the
vectorised path for what exporters write, remembering only the last round's label blocks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.ingest import exposition, roundparse
from telemetry.ingest.exposition import BLANK_MIN, Scrape, parse
from telemetry.ingest.roundparse import parse_round
from tests.test_exposition import CLEAN, FIXTURES, HYPOTHESIS, exposition_text, fixture, mutated

pytestmark = pytest.mark.slow  # Hypothesis rounds: left out of `make test-fast`

# numbers as exporters (and fuzzers) write them, with the spaces and tabs the format allows
NUMBER = (
    r"[ \t]{0,2}[+-]?([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][+-]?[0-9]{1,3})?[ \t]{0,2}"
)
EVERY_FIXTURE = sorted(p.name for p in FIXTURES.glob("*.txt"))


def same(got: Scrape, want: Scrape) -> None:
    assert got.names == want.names
    assert [got.label_sets[i] for i in got.label_ids] == [
        want.label_sets[i] for i in want.label_ids
    ]
    assert got.label_sets == want.label_sets  # numbered alike: first appearance
    assert np.array_equal(got.label_ids, want.label_ids)
    assert got.values.dtype == np.float64
    assert np.array_equal(got.values, want.values, equal_nan=True)
    if want.timestamps_ms is None:
        assert got.timestamps_ms is None
    else:
        assert np.array_equal(got.timestamps_ms, want.timestamps_ms, equal_nan=True)
    assert dict(got.families) == dict(want.families)
    assert dict(got.family_of) == dict(want.family_of)
    assert dict(got.helps) == dict(want.helps)
    assert got.errors == want.errors
    assert got.blanks == want.blanks


def same_round(texts: list[str]) -> list[Scrape]:
    got = parse_round(texts)
    assert len(got) == len(texts)
    for g, t in zip(got, texts, strict=True):
        same(g, parse(t))
    return got


def host(name: str, gpus: int = 2) -> str:
    """A dcgm-exporter body of ``gpus`` GPUs on host ``name`` (labels as the exporter writes)."""
    out = [
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
    ]
    blocks = [
        f'gpu="{g}",UUID="GPU-{name}-{g}",device="nvidia{g}",Hostname="{name}"' for g in range(gpus)
    ]
    for field, value in (("DCGM_FI_DEV_GPU_TEMP", "41"), ("DCGM_FI_DEV_POWER_USAGE", "310.5")):
        out += [f"{field}{{{b}}} {value}" for b in blocks]
    return "\n".join(out) + "\n"


def test_every_fixture_in_one_round() -> None:
    texts = [fixture(n) for n in EVERY_FIXTURE]
    scrapes = same_round(texts)
    bad = scrapes[EVERY_FIXTURE.index("bad_lines.txt")]
    assert bad.errors  # the bad lines are reported with their line numbers, as parse reports


@pytest.mark.parametrize("name", CLEAN)
def test_clean_fixtures_take_the_vectorised_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(roundparse, "parse", lambda t, **_: calls.append(t) or parse(t))
    scrapes = parse_round([fixture(name), host("a"), fixture(name)])
    assert calls == [] and all(len(s) for s in scrapes)


def test_a_bad_scrape_is_parsed_alone_and_the_rest_of_the_round_stays_fast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(roundparse, "parse", lambda t, **kw: calls.append(t) or parse(t, **kw))
    odd = [
        "up 1\n",  # no label block
        'x{a="1"} 1 1700000000000\n',  # a timestamp
        'x{a="1"} 1\r\n',  # CRLF
        'x{a="1" 1\n',  # not closed
        "x{a=1} 1\n",  # malformed labels
        "x{} 0x10\n",  # not a number
        "# TYPE x nonsense\nx{} 1\n",  # a bad TYPE line
        "",
    ]
    texts = [host("a")] + odd + [host("b")]
    got = same_round(texts)
    assert calls == odd  # each odd text once, the dcgm ones not at all
    assert len(got[0]) == len(got[-1]) == 4


def test_blank_sentinels_and_special_values() -> None:
    text = (
        'x{gpu="0"} 9223372036854775794\nx{gpu="1"} +Inf\nx{gpu="2"} -inf\n'
        'x{gpu="3"} NaN\nx{gpu="4"} 1e400\nx{gpu="5"} .5\nx{gpu="6"} 5.\nx{gpu="7"}  \t7 \n'
        'x{gpu="8"} 4.9e-324\nx{gpu="9"} -0\n'
    )
    (s,) = same_round([text])
    assert s.blanks == 1 and np.isnan(s.values[0]) and s.values[1] == np.inf
    assert parse_round([text], blank_min=1.0)[0].blanks == parse(text, blank_min=1.0).blanks


def test_text_arrow_cannot_hold_is_parsed_as_parse_does() -> None:
    same_round([host("a"), 'x{a="\ud800"} 1\n', host("b")])  # a lone surrogate


def test_label_blocks_are_parsed_once_while_the_fleet_shows_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    blocks = roundparse._parse_blocks
    monkeypatch.setattr(
        roundparse, "_parse_blocks", lambda a, texts: parsed.extend(texts) or blocks(a, texts)
    )
    roundparse.clear_cache()
    fleet = [host(h) for h in "abcd"]
    parse_round(fleet)
    assert len(parsed) == 8  # 4 hosts x 2 GPUs
    parse_round(fleet)
    parse_round(fleet[:2])  # a round in parts, as a daemon per target group sends them
    parse_round(fleet[2:])
    assert len(parsed) == 8  # none parsed again
    for _ in range(3):
        parse_round([host("e")])  # the fleet changes: the memory holds at most twice its peak
    assert len(parsed) == 10 and len(roundparse._blocks) <= 2 * 8
    broken = 'x{gpu="0",gpu="1"} 1\n'  # a duplicate label: refused, and remembered so
    for _ in range(2):
        (s,) = same_round([broken])
        assert s.errors and "duplicate label name" in s.errors[0].reason


def labels_alone(block: str) -> object:
    got = exposition._labels(block)
    return None if isinstance(got, str) else got


BLOCKS = [
    'gpu="0",UUID="GPU-1",Hostname="a"',
    'gpu="0",UUID="GPU-1",Hostname="a",',  # a trailing comma
    'a="",b=""',  # empty values
    'a="1",a="2"',  # a repeated name: refused
    '__name__="x",a="1"',  # a reserved name: refused
    'a="é ünïcode",b="x y"',
    'a="with \\"escaped\\" quotes",b="1"',  # escapes: not plain, read alone
    'a = "1"',  # spaces: read alone
    'a="1",,b="2"',
    "",
    'a="' + "x" * 5000 + '"',  # longer than MAX_LABEL_BLOCK: refused
    '9a="1"',
]


def test_blocks_split_at_once_read_as_alone() -> None:
    got = roundparse._parse_blocks(pa.array(BLOCKS, pa.large_string()), BLOCKS)
    assert got == [labels_alone(b) for b in BLOCKS]
    assert got[0] == (("gpu", "0"), ("UUID", "GPU-1"), ("Hostname", "a")) and got[3] is None


@HYPOTHESIS
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True),
                st.text(max_size=8).filter(
                    lambda v: '"' not in v and "\\" not in v and "\n" not in v
                ),
            ),
            min_size=1,
            max_size=5,
        ).map(lambda pairs: ",".join(f'{k}="{v}"' for k, v in pairs)),
        max_size=6,
    )
)
def test_generated_blocks_split_at_once_read_as_alone(blocks: list[str]) -> None:
    arrow = pa.array(blocks, pa.large_string())
    assert roundparse._parse_blocks(arrow, blocks) == [labels_alone(b) for b in blocks]


def test_memory_of_a_fleet_larger_than_the_fixed_cache_follows_it() -> None:
    memory = exposition.Generations()
    for _ in range(3):
        for k in range(exposition.BLOCK_CACHE + 10):  # more than parse()'s LRU holds
            if memory.get(k) is None:
                memory.put(k, k)
        memory.turn()
    assert len(memory) == exposition.BLOCK_CACHE + 10
    assert memory.get(5) == 5 and memory.get(-1) is None


def test_an_empty_round() -> None:
    assert parse_round([]) == []


@HYPOTHESIS
@given(st.lists(exposition_text(), max_size=4))
def test_generated_rounds_read_as_parse_reads_them(texts: list[str]) -> None:
    same_round(texts + [host("h")])


@HYPOTHESIS
@given(st.lists(mutated(), min_size=1, max_size=3))
def test_mutated_rounds_read_as_parse_reads_them(texts: list[str]) -> None:
    same_round([host("h")] + texts)


@HYPOTHESIS
@given(
    st.from_regex(NUMBER, fullmatch=True)
    | st.sampled_from(["inf", "+Inf", "-INFINITY", "nan", "+NaN", "-nan", "1_0", "0x1", "1e", "e1"])
)
def test_every_value_reads_as_float_reads_it(value: str) -> None:
    text = f'x{{gpu="0"}} {value}\ny{{gpu="0"}} {value}\n'
    (s,) = same_round([text])
    if not s.errors and np.isfinite(s.values).all() and abs(s.values[0]) < BLANK_MIN:
        assert s.values[0] == float(value)  # bit for bit: Arrow's reading is float()'s
