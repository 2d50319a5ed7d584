"""The fast exposition parser against the reference (``prometheus_client``), on the dcgm fixtures,
on generated exposition text and on mutated text; and the per-GPU reshaping of a scrape."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.ingest import exposition
from telemetry.ingest.dcgm_rows import GpuRows, gpu_rows, round_rows
from telemetry.ingest.exposition import BLANK_MIN, ParseError, Scrape, parse

pytestmark = pytest.mark.slow  # Hypothesis rounds: left out of `make test-fast`

FIXTURES = Path(__file__).resolve().parent.parent / "sample_data" / "dcgm"
CLEAN = [
    "default_h100.txt",
    "no_type_lines.txt",
    "mig.txt",
    "pod_labels.txt",
    "hostname_lowercase.txt",
    "sentinels.txt",
    "xid.txt",
]
BAD_LINES = [5, 9, 15, 16, 23, 26, 27, 29, 33, 37]  # the malformed lines of bad_lines.txt
DEFAULT_FIELDS = 25  # metrics enabled in dcgm-exporter's default counters file
HYPOTHESIS = settings(
    deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300
)

Key = tuple[str, str, str, frozenset[tuple[str, str]], object, object]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def _value_key(value: float) -> object:
    if math.isnan(value) or (math.isfinite(value) and value >= BLANK_MIN):
        return "nan"
    return value


def reference(text: str) -> Counter[Key]:
    """(family, type, sample name, labels, value, timestamp s) per sample, by prometheus_client."""
    out: Counter[Key] = Counter()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = frozenset(s.labels.items())
            out[(fam.name, fam.type, s.name, labels, _value_key(float(s.value)), s.timestamp)] += 1
    return out


def ours(scrape: Scrape) -> Counter[Key]:
    """The same keys from a Scrape, in the reference's naming: a counter family loses a
    ``_total`` suffix and its samples gain one."""
    out: Counter[Key] = Counter()
    ts = scrape.timestamps_ms
    for i, s in enumerate(scrape.samples()):
        family = scrape.family_of[s.name]
        typ = scrape.families[family]
        name = s.name
        if typ == "counter":
            family = family.removesuffix("_total")
            name = name if name.endswith("_total") else name + "_total"
        stamp = None if ts is None or np.isnan(ts[i]) else int(ts[i]) / 1000
        labels = frozenset(s.labels.items())
        out[(family, typ, name, labels, _value_key(s.value), stamp)] += 1
    return out


# ---- fixtures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CLEAN)
def test_fixture_equals_reference(name: str) -> None:
    text = fixture(name)
    scrape = parse(text)
    assert scrape.errors == ()
    assert ours(scrape) == reference(text)
    assert len(scrape) == sum(reference(text).values())


@pytest.mark.parametrize("name", CLEAN)
def test_clean_fixtures_take_the_fast_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("slow path taken")

    monkeypatch.setattr(exposition, "_slow", refuse)
    assert len(parse(fixture(name))) > 0


def test_default_scrape_has_every_default_counter_typed() -> None:
    scrape = parse(fixture("default_h100.txt"))
    assert len(scrape) == 8 * DEFAULT_FIELDS
    assert len(scrape.families) == DEFAULT_FIELDS
    assert scrape.families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert scrape.families["DCGM_FI_DEV_GPU_TEMP"] == "gauge"
    assert scrape.helps["DCGM_FI_DEV_POWER_USAGE"] == "Power draw (in W)."
    # the counter keeps its name: no `_total` appended, unlike the reference
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in scrape.names
    assert len(scrape.label_sets) == 8
    assert scrape.timestamps_ms is None and scrape.blanks == 0


def test_scrape_without_type_lines_is_all_unknown() -> None:
    scrape = parse(fixture("no_type_lines.txt"))
    assert len(scrape) == 8 * DEFAULT_FIELDS
    assert set(scrape.families.values()) == {"unknown"}
    assert scrape.helps == {}


def test_sentinels_become_nan_and_are_counted() -> None:
    scrape = parse(fixture("sentinels.txt"))
    assert scrape.blanks == 8
    temps = [s.value for s in scrape.samples() if s.name == "DCGM_FI_DEV_MEMORY_TEMP"]
    assert len(temps) == 4 and all(math.isnan(v) for v in temps)
    assert not np.isnan(scrape.values).all()
    assert parse(fixture("sentinels.txt"), blank_min=math.inf).blanks == 0


def test_bad_lines_are_reported_and_the_rest_kept() -> None:
    text = fixture("bad_lines.txt")
    scrape = parse(text)
    assert [e.line for e in scrape.errors] == BAD_LINES
    assert all(isinstance(e, ParseError) and e.reason for e in scrape.errors)
    reasons = dict(scrape.errors)
    assert "'N/A'" in reasons[5] and "duplicate label name 'gpu'" in reasons[33]
    assert "gauges" in reasons[29] and "DCGM-FI-DEV-ENC-UTIL" in reasons[27]
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(text))
    kept = "\n".join(ln for i, ln in enumerate(text.split("\n"), 1) if i not in BAD_LINES)
    assert ours(scrape) == reference(kept)
    assert len(scrape) == 14
    assert scrape.families["DCGM_FI_DEV_FB_FREE"] == "unknown"  # its TYPE line was bad


def test_strict_raises_naming_the_first_bad_line() -> None:
    with pytest.raises(ValueError, match=r"^line 5: invalid value"):
        parse(fixture("bad_lines.txt"), strict=True)
    assert len(parse(fixture("xid.txt"), strict=True)) > 0


# ---- small cases ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'a{b="x\\"y\\\\z\\nw"} 1\n',
        'a 1 1700000000123\nb{c="d"} -Inf -5\n',
        'a{} +Inf\na{ b = "c" , } NaN\n',
        "# TYPE a counter\na 1\n# TYPE b_total counter\nb_total 2\n",
        '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n',
        '# TYPE s summary\ns{quantile="0.5"} 1\ns_sum 3\ns_count 2\n',
        '# HELP a doc with \\\\ and \\n\na{x="}{,="} 1.5e3\r\n\r\n',
        "  a 1\n\ta\t2\t3\n",
        'a{b="1"}2\n',
        "",
    ],
)
def test_small_texts_equal_reference(text: str) -> None:
    scrape = parse(text)
    assert scrape.errors == ()
    assert ours(scrape) == reference(text)


def test_timestamps_and_label_escapes() -> None:
    scrape = parse('a{b="q\\"\\\\\\n"} 1 1700000000123\nc 2\n')
    assert scrape.labels(0) == {"b": 'q"\\\n'}
    assert scrape.timestamps_ms is not None
    assert scrape.timestamps_ms[0] == 1700000000123 and np.isnan(scrape.timestamps_ms[1])


def test_histogram_samples_belong_to_their_family() -> None:
    scrape = parse('# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 3\nh_count 2\nh_total 1\n')
    assert scrape.family_of["h_bucket"] == "h" and scrape.family_of["h_count"] == "h"
    assert scrape.family_of["h_total"] == "h_total"
    assert scrape.families["h"] == "histogram" and scrape.families["h_total"] == "unknown"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('a{b="1",b="2"} 1', "duplicate label name 'b'"),
        ('a{__b="1"} 1', "reserved label name '__b'"),
        ('a{b="1" c="2"} 1', "malformed labels"),
        ("a 1 2 3", "invalid value or timestamp"),
        ("a 0x10", "invalid value"),
        ("a 1 1.5", "invalid value or timestamp"),
        ("a", "no value"),
        ("# TYPE a", "invalid type"),
        ("# TYPE a-b gauge", "invalid metric name"),
        ('a{b="1"', "not closed"),
    ],
)
def test_bad_line_reasons(line: str, reason: str) -> None:
    scrape = parse("ok 1\n" + line + "\nok 2\n")
    assert len(scrape.errors) == 1 and scrape.errors[0].line == 2
    assert reason in scrape.errors[0].reason
    assert list(scrape.values) == [1.0, 2.0]


def test_to_arrow_has_one_row_per_sample() -> None:
    scrape = parse(fixture("xid.txt"))
    table = scrape.to_arrow()
    assert table.num_rows == len(scrape)
    assert table.column_names == ["name", "family", "type", "labels", "value", "timestamp_ms"]
    assert table.column("timestamp_ms").null_count == len(scrape)
    assert table.column("name").to_pylist() == list(scrape.names)
    assert dict(table.column("labels")[0].as_py()) == scrape.labels(0)


# ---- generated exposition text ----------------------------------------------------------------

_metric = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
_label = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,8}", fullmatch=True) | st.sampled_from(
    ["gpu", "UUID", "Hostname", "le", "quantile", "_x"]
)
_number = st.floats(allow_nan=True, allow_infinity=True).map(repr) | st.sampled_from(
    ["+Inf", "-Inf", "NaN", "0", "1e-3", ".5", "7.", "9223372036854775794", "-0"]
)
_value = (
    _number
    | st.integers(-(10**30), 10**30).map(str)
    | st.floats(-1e9, 1e9).map(lambda v: f"{v:.6f}")
)
_timestamp = st.none() | st.integers(-(2**53), 2**53)
_space = st.sampled_from([" ", " ", " ", "  ", "\t", " \t"])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def _labels(draw: st.DrawFn, first: str = "", plain: bool = False) -> str:
    keys = draw(
        st.lists(_label.filter(lambda k: k != "le"), min_size=plain, max_size=4, unique=True)
    )
    pairs = ([first] if first else []) + [
        f'{k}="{_escape(draw(st.text(max_size=12)))}"' for k in keys
    ]
    if not pairs and draw(st.booleans()):
        return ""
    comma = draw(st.sampled_from([",", ",", ", ", " , "]))
    trailing = "," if pairs and draw(st.integers(0, 5)) == 0 else ""
    return "{" + comma.join(pairs) + trailing + "}"


@st.composite
def _sample_line(draw: st.DrawFn, name: str, first_label: str = "", plain: bool = False) -> str:
    """One sample line; ``plain`` ones look like dcgm-exporter's (labels, no timestamp)."""
    labels = draw(_labels(first_label, plain))
    space = " " if plain else draw(_space)
    line = f"{name}{labels}{space}{draw(_value)}"
    ts = None if plain else draw(_timestamp)
    if ts is not None:
        line += f"{draw(_space)}{ts}"
    return line


@st.composite
def _family(draw: st.DrawFn, index: int, plain: bool) -> list[str]:
    name = f"f{index}_" + draw(_metric)
    typ = draw(st.sampled_from(["gauge", "counter", "untyped", "summary", "histogram", None]))
    lines = []
    if draw(st.booleans()):
        doc = _escape(draw(st.text(max_size=20))).replace('\\"', '"').strip()
        lines.append(f"# HELP {name} {doc}".rstrip())
    if typ:
        lines.append(f"# TYPE {name} {typ}")
    n = draw(st.integers(1, 4))
    if typ == "histogram":
        for le in draw(st.lists(_number, min_size=1, max_size=3)):
            lines.append(draw(_sample_line(name + "_bucket", f'le="{le}"', plain)))
        suffixes = ["_sum", "_count"]
    else:
        suffixes = ["", "_sum", "_count"] if typ == "summary" else [""]
    for _ in range(n):
        lines.append(draw(_sample_line(name + draw(st.sampled_from(suffixes)), "", plain)))
    return lines


@st.composite
def exposition_text(draw: st.DrawFn) -> str:
    plain = draw(st.booleans())  # dcgm-like text, which the fast path takes whole
    lines: list[str] = []
    for i in range(draw(st.integers(0, 6))):
        lines += draw(_family(i, plain))
        if draw(st.integers(0, 4)) == 0:
            lines.append(draw(st.sampled_from(["", "# a plain comment", "#", "   "])))
    indent = "" if plain else draw(st.sampled_from(["", "", " ", "\t"]))
    end = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return "".join(indent + ln + end for ln in lines)


def _reference_or_none(text: str) -> Counter[Key] | None:
    try:
        return reference(text)
    except Exception:  # the reference rejects the text (any error it raises)
        return None


@HYPOTHESIS
@given(exposition_text())
def test_generated_text_agrees_with_reference(text: str) -> None:
    expected = _reference_or_none(text)
    assume(expected is not None)
    scrape = parse(text)
    assert scrape.errors == ()
    assert ours(scrape) == expected
    _fast_equals_slow(text)


def _fast_equals_slow(text: str) -> None:
    """Where the fast path takes a text, the strict line-by-line path reads it the same."""
    lines = text.split("\n")
    body = [ln for ln in lines if ln and ln[0] != "#"]
    fast = exposition._fast(body)
    if fast is None:
        return
    slow = exposition._slow(lines, body)
    assert slow.errors == [] and list(fast.names) == list(slow.names)
    assert [fast.label_sets[i] for i in fast.label_ids] == [
        slow.label_sets[i] for i in slow.label_ids
    ]
    assert np.array_equal(
        np.array(fast.values, np.float64), np.array(slow.values, np.float64), equal_nan=True
    )


@settings(deadline=None, database=None, max_examples=50)
@given(exposition_text())
def test_generator_writes_text_the_reference_accepts(text: str) -> None:
    # Guards the test above against vacuity: the generator writes text the reference accepts.
    assert _reference_or_none(text) is not None


# ---- mutated text -----------------------------------------------------------------------------

_ALPHABET = st.sampled_from(list('{}",=\\# \t\n\r.eE+-0123456789_:abcXYZé\x00\x0b\x1c\u2028'))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    base = draw(
        st.sampled_from([fixture("bad_lines.txt"), fixture("mig.txt")[:3000]]) | exposition_text()
    )
    text = list(base)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
        at = draw(st.integers(0, len(text)))
        if op == "insert":
            text.insert(at, draw(_ALPHABET | st.characters()))
        elif op == "delete" and at < len(text):
            del text[at]
        elif op == "replace" and at < len(text):
            text[at] = draw(_ALPHABET)
        elif op == "truncate":
            del text[at:]
    return "".join(text)


def _loose(keys: Counter[Key]) -> Counter[tuple[str, object, object, object]]:
    """Samples without family and type (the reference types a family only where its lines are
    contiguous), and names without a ``_total`` suffix."""
    out: Counter[tuple[str, object, object, object]] = Counter()
    for (_, _, name, labels, value, ts), n in keys.items():
        out[(name.removesuffix("_total"), labels, value, ts)] += n
    return out


def _every_line_accounted_for(lines: list[str], scrape: Scrape) -> None:
    """Each line that is neither blank nor a comment is exactly one sample or one counted
    rejection; comment lines give no sample, blank lines nothing. "Blank" and "comment" are
    judged after ``str.strip()``, as the reference does, so the parser may not widen them."""
    rejected = [e.line for e in scrape.errors]
    assert len(set(rejected)) == len(rejected)  # one reason per line, never two
    content = set()
    for no, line in enumerate(lines, 1):
        kind = "blank" if not line.strip() else "comment" if line.strip()[0] == "#" else "body"
        alone = parse(line)  # a sample's line is read the same out of its scrape
        assert bool(alone.errors) == (no in rejected), (no, line)
        if kind == "body":
            content.add(no)
            assert len(alone) + len(alone.errors) == 1, (no, line)
        else:
            assert len(alone) == 0 and (kind == "comment" or not alone.errors), (no, line)
    assert len(scrape) == len(content - set(rejected))  # none dropped silently, none invented
    # The samples are those of the lines not rejected, in line order.
    kept = [parse(lines[no - 1]) for no in sorted(content - set(rejected))]
    assert list(scrape.names) == [k.names[0] for k in kept]
    assert [scrape.labels(i) for i in range(len(scrape))] == [k.labels(0) for k in kept]
    assert np.array_equal(scrape.values, [k.values[0] for k in kept], equal_nan=True)


@HYPOTHESIS
@given(mutated())
def test_mutated_text_never_crashes_and_never_misreads(text: str) -> None:
    scrape = parse(text)
    n = len(scrape)
    assert scrape.values.shape == (n,) and scrape.label_ids.shape == (n,)
    assert all(0 <= i < len(scrape.label_sets) for i in scrape.label_ids)
    lines = text.split("\n")
    assert all(1 <= e.line <= len(lines) for e in scrape.errors)
    _every_line_accounted_for(lines, scrape)
    if scrape.errors:
        with pytest.raises(ValueError, match=r"^line \d+: "):
            parse(text, strict=True)
    else:
        # Whatever this parser accepts without complaint, the reference reads the same.
        expected = _reference_or_none(text)
        assert expected is not None
        assert _loose(ours(scrape)) == _loose(expected)
    _fast_equals_slow(text)
    gpu_rows(scrape)  # reshaping never fails either


# ---- one row per GPU --------------------------------------------------------------------------


def test_gpu_rows_of_a_default_scrape() -> None:
    rows = gpu_rows(parse(fixture("default_h100.txt")))
    assert len(rows) == 8
    assert set(rows.host) == {"dgx-h100-017"} and list(rows.gpu) == list(range(8))
    assert set(rows.attribution["model"]) == {"NVIDIA H100 80GB HBM3"}
    assert rows.attribution["device"][3] == "nvidia3"
    assert rows.attribution["pod"] == (None,) * 8
    # dcgm-exporter's default counters comment out SM activity and occupancy: those columns
    # are empty, every other one (GR engine and DRAM active included) is filled
    commented_out = {"sm_active", "sm_occupancy"}
    for column in SAMPLE_COLUMNS:
        empty = np.isnan(rows.columns[column.name])
        assert empty.all() if column.name in commented_out else not empty.any(), column.name
    known = len(SAMPLE_COLUMNS) - len(commented_out)
    assert len(rows.extra_value) == 8 * (DEFAULT_FIELDS - known)
    assert rows.extra_label_sets == ((),) and rows.duplicates == 0 and len(rows.unkeyed) == 0
    table = rows.table()
    assert table.num_rows == 8
    assert table.column_names[:3] == ["host", "gpu", "uuid"]
    assert rows.extras_table().num_rows == len(rows.extra_value)


def test_gpu_rows_values_match_the_samples() -> None:
    scrape = parse(fixture("pod_labels.txt"))
    rows = gpu_rows(scrape)
    for s in scrape.samples():
        if s.name == "DCGM_FI_DEV_POWER_USAGE":
            assert rows.columns["power_w"][int(s.labels["gpu"])] == s.value
    assert rows.attribution["pod"][:4] == ("llama-70b-worker-3",) * 4
    assert rows.attribution["namespace"][4] == "research"
    assert rows.attribution["container"][6] is None


def test_gpu_rows_lowercase_hostname_and_slurm_job() -> None:
    rows = gpu_rows(parse(fixture("hostname_lowercase.txt")))
    assert set(rows.host) == {"slurm-h100-0142"}
    assert rows.attribution["hpc_job"][:6] == ("4312877",) * 6
    assert rows.attribution["hpc_job"][6:] == (None, None)


def test_gpu_rows_mig_instances_are_rows_of_their_own() -> None:
    rows = gpu_rows(parse(fixture("mig.txt")))
    keys = list(zip(rows.gpu, rows.attribution["mig_instance"], strict=True))
    assert keys.count((0, None)) == 1 and keys.count((1, None)) == 1
    assert sorted(int(i) for g, i in keys if g == 0 and i) == list(range(7, 14))
    profiles = {p for p in rows.attribution["mig_profile"] if p}
    assert profiles == {"1g.10gb", "3g.40gb"}
    instance = keys.index((0, "7"))
    # GPU_UTIL is absent on MIG: a slice's utilization is its graphics engine's active ratio
    gr = next(
        float(ln.rsplit(" ", 1)[1])
        for ln in fixture("mig.txt").splitlines()
        if ln.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{") and 'GPU_I_ID="7"' in ln
    )
    assert rows.columns["util_pct"][instance] == pytest.approx(100 * gr)
    assert np.isnan(rows.columns["util_pct"][keys.index((1, None))])  # the parent GPU: none
    assert not np.isnan(rows.columns["fb_used_mib"][instance])
    assert np.isnan(rows.columns["temp_c"][instance])  # device fields stay on the GPU row


def test_gpu_rows_keep_xid_labels_on_extras() -> None:
    rows = gpu_rows(parse(fixture("xid.txt")))
    assert rows.columns["xid_last"][5] == 79 and rows.columns["xid_last"][2] == 48
    extras = rows.extras_table().to_pylist()
    xids = [e for e in extras if e["field"] == "DCGM_EXP_XID_ERRORS_COUNT" and e["value"] > 0]
    got = {(e["gpu"], dict(e["labels"])["xid"], e["value"]) for e in xids}
    assert got == {(2, "48", 2.0), (2, "63", 1.0), (5, "79", 1.0)}
    msg = next(dict(e["labels"])["err_msg"] for e in xids if e["gpu"] == 5)
    assert msg == "GPU has fallen off the bus"


def test_gpu_rows_sentinels_are_null_in_the_table() -> None:
    rows = gpu_rows(parse(fixture("sentinels.txt")))
    table = rows.table()
    assert table.column("mem_temp_c").null_count == 4
    assert table.column("temp_c").null_count == 0
    assert table.column("dram_active").null_count == 1  # a blank DRAM_ACTIVE has a column now
    assert rows.extras_table().column("value").null_count == 3


def test_gpu_rows_unkeyed_duplicates_and_fallback_host() -> None:
    text = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\n'
        'DCGM_FI_DEV_NVSWITCH_TEMP{nvswitch="0",hostname="h"} 30\n'
        "exporter_up 1\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="x",Hostname="h"} 1\n'
    )
    scrape = parse(text)
    assert list(gpu_rows(scrape).unkeyed) == [0, 1, 2, 3, 4]
    rows = gpu_rows(scrape, host="node-9")
    assert rows.host == ("node-9",) and rows.columns["temp_c"][0] == 41
    assert rows.duplicates == 1 and list(rows.unkeyed) == [2, 3, 4]


def test_gpu_rows_of_an_empty_scrape() -> None:
    rows = gpu_rows(parse(""))
    assert len(rows) == 0 and rows.table().num_rows == 0 and rows.extras_table().num_rows == 0


def test_label_keys_are_interned() -> None:
    a = parse(fixture("default_h100.txt"))
    b = parse(re.sub("dgx-h100-017", "dgx-h100-999", fixture("default_h100.txt")))
    assert a.label_sets[0][0][0] is b.label_sets[0][0][0]


def test_round_rows_equal_the_scrapes_rows_one_after_another() -> None:
    names = ["xid.txt", "mig.txt", "default_h100.txt", "sentinels.txt"]
    scrapes = [parse(fixture(n)) for n in names]
    scrapes.append(parse('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\nexporter_up 1\n'))
    hosts = [None, None, None, None, "node-9"]
    parts = [gpu_rows(s, h) for s, h in zip(scrapes, hosts, strict=True)]
    rows = round_rows(scrapes, hosts)
    assert len(rows) == sum(len(p) for p in parts)
    assert rows.samples == sum(len(s) for s in scrapes)
    assert rows.table().to_pylist() == [r for p in parts for r in p.table().to_pylist()]

    def extras(part: GpuRows) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "row"} for r in part.extras_table().to_pylist()]

    assert extras(rows) == [r for p in parts for r in extras(p)]
    assert rows.extras_table().column("row").to_pylist()[-1] == len(rows) - 2
    assert list(rows.unkeyed) == [rows.samples - 1]
    assert list(rows.scrape) == [i for i, p in enumerate(parts) for _ in range(len(p))]
    assert round_rows([]).table().num_rows == 0
