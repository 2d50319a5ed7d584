"""Values no GPU can report, over real HTTP into a real store: NaN, ±Inf, negative
utilization, 10,000 °C, a 100 KB label, duplicate samples, timestamps far in the future or past
and a stray non-UTF-8 byte in a label (bodies mostly not UTF-8: tests/test_exporter_faults.py).
Policy: a physically impossible value is stored as missing and counted as rejected in the
target's health; a malformed line (a 100 KB label block) is rejected whole and counted; every
valid sample of the same scrape is stored; the sample time is the round's, so an exposition
timestamp far in the past or future cannot misplace data; an invalid byte becomes U+FFFD. A
forwarded round is refused whole when its time is more than a year old or in the future, or
its text is not valid Unicode."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from telemetry.collect.dcgm.scrape import scrape_round
from telemetry.ingest.dcgm_rows import gpu_rows
from telemetry.ingest.exposition import parse
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Fetch, Target
from telemetry.ingest.wire import WireError, decode_round, encode_round
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES, ExporterHandler

LABELS = 'gpu="{g}",UUID="GPU-{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="bad-node"'


def _line(field: str, g: int, value: str, extra: str = "") -> str:
    return f"DCGM_FI_{field}{{{LABELS.format(g=g)}{extra}}} {value}\n"


BAD = (
    _line("DEV_GPU_UTIL", 0, "-5")  # impossible
    + _line("DEV_GPU_TEMP", 0, "10000")  # impossible
    + _line("DEV_POWER_USAGE", 0, "+Inf")  # impossible
    + _line("DEV_SM_CLOCK", 0, "NaN")  # no value: missing, not an error
    + _line("DEV_FB_USED", 0, "-Inf")  # impossible
    + _line("DEV_GPU_UTIL", 1, "97")
    + _line("DEV_GPU_TEMP", 1, "61", "")
    + _line("DEV_GPU_TEMP", 1, "62")  # a duplicate: the last one is kept
    + _line("DEV_POWER_USAGE", 1, "650.5 4102444800000")  # a timestamp in 2100: ignored
    + _line("DEV_SM_CLOCK", 1, "1410 86400000")  # a timestamp in 1970: ignored
    + _line("DEV_FB_USED", 1, "1000", ',pod="' + "p" * 100_000 + '"')  # 100 KB label
)


def test_impossible_values_are_missing_and_counted_valid_ones_stored(
    tmp_path: Path, exporter: str
) -> None:
    ExporterHandler.routes["/impossible-values/metrics"] = BAD
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)
        at = datetime(2026, 3, 1, 12, 0)
        report = sink.write(
            at, scrape_round([Target(f"{exporter}/impossible-values/metrics")], 2.0)
        )
        assert report.up == 1  # the target is up: it sent valid samples too
        got = dict(
            store.rows(
                """SELECT g.gpu, list(struct_pack(u := s.util_pct, t := s.temp_c,
                     p := s.power_w, c := s.sm_clock_mhz, f := s.fb_used_mib))[1]
                   FROM gpu_samples s JOIN gpus g USING (gpu_id) GROUP BY g.gpu"""
            )
        )
        assert got[0] == {"u": None, "t": None, "p": None, "c": None, "f": None}
        assert got[1] == {"u": 97.0, "t": 62.0, "p": 650.5, "c": 1410.0, "f": None}
        # one row per GPU, at the round's time: not year 2100, not 1970
        assert store.rows("SELECT min(ts), max(ts), count(*) FROM gpu_samples") == [(at, at, 2)]
        health = store.rows("SELECT up, rejected_lines, error FROM targets")
        assert health == [(True, 5, None)]  # 4 impossible values + the 100 KB line
        assert store.scalar("SELECT max(length(pod)) FROM gpus") is None


def test_the_parser_names_what_it_refused() -> None:
    scrape = parse(BAD)
    assert len(scrape.errors) == 1
    assert scrape.errors[0].reason.startswith("labels longer than 4,096 characters (100,")
    rows = gpu_rows(scrape)
    assert rows.rejected_values.tolist() == [4] and rows.duplicates == 1
    assert np.isneginf(scrape.values).sum() == 1  # -Inf read as such, then refused as a value
    stamps = scrape.timestamps_ms
    assert stamps is not None  # read (and then not used for placing samples)
    assert sorted(stamps[~np.isnan(stamps)].tolist()) == [86400000, 4102444800000]


def test_mig_slices_get_utilization_from_the_graphics_engine() -> None:
    rows = gpu_rows(parse((DCGM_FIXTURES / "mig.txt").read_text()))
    mig = [i for i, m in enumerate(rows.attribution["mig_instance"]) if m]
    assert mig
    util = rows.columns["util_pct"][mig]
    assert (util >= 0).all() and (util <= 100).all()  # filled, as a percentage


def test_an_impossible_xid_is_refused_not_a_stuck_round(tmp_path: Path, exporter: str) -> None:
    """XID 40000 does not fit the events table: it is rejected, and the round is stored."""
    ExporterHandler.routes["/impossible-xid/metrics"] = (
        _line("DEV_XID_ERRORS", 0, "40000")
        + _line("DEV_GPU_UTIL", 0, "50")
        + "DCGM_EXP_XID_ERRORS_COUNT{"
        + LABELS.format(g=0)
        + ',xid="40000",window_size_in_ms="300000"} 2\n'
    )
    with Store(str(tmp_path / "s.duckdb")) as store:
        report = StoreSink(store).write(
            datetime(2026, 3, 1), scrape_round([Target(f"{exporter}/impossible-xid/metrics")], 2.0)
        )
        assert report.up == 1 and report.xid_events == 0
        assert store.scalar("SELECT util_pct FROM gpu_samples") == 50.0


class RawExporter(http.server.BaseHTTPRequestHandler):
    """Serves ``body`` byte for byte (``ExporterHandler`` encodes its texts as UTF-8, so it
    cannot send an invalid byte)."""

    body = b""

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
def raw_exporter() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RawExporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_a_stray_invalid_byte_in_a_label_is_stored_as_a_replacement_character(
    tmp_path: Path, raw_exporter: str
) -> None:
    """One label value with bytes that are not UTF-8 (a pod name from a buggy controller): the
    bytes become U+FFFD, the line is kept and the text stored is valid UTF-8."""
    text = (
        _line("DEV_GPU_UTIL", 0, "55", ',pod="train-@-7"')
        + _line("DEV_GPU_UTIL", 1, "56", ',pod="train-8"')
        + _line("DEV_GPU_TEMP", 1, "60", ',pod="train-8"')
    )
    RawExporter.body = text.encode().replace(b"@", b"\xff\xfe")
    with Store(str(tmp_path / "s.duckdb")) as store:
        report = StoreSink(store).write(
            datetime(2026, 3, 1), scrape_round([Target(raw_exporter)], 2.0)
        )
        assert (report.up, report.samples, report.rejected_lines) == (1, 2, 0)
        pods = store.rows("SELECT gpu, pod, octet_length(encode(pod)) FROM gpus ORDER BY gpu")
        assert pods == [(0, "train-\ufffd\ufffd-7", 14), (1, "train-8", 7)]
        assert store.scalar("SELECT util_pct FROM gpu_samples_v WHERE gpu = 0") == 55.0


# -- a forwarded round (the wire format) ------------------------------------------------------
NOW = datetime(2026, 3, 1, 12, 0)


def _round(ts: datetime, text: str | None = "exporter_up 1\n", error: str | None = None) -> bytes:
    return encode_round(ts, [Fetch(Target("http://node1:9400/metrics"), text, error, 0.1)], 15.0)


@pytest.mark.parametrize(
    "ts, ok",
    [
        (NOW - timedelta(days=365), True),
        (NOW + timedelta(minutes=30), True),  # clocks a little ahead of the server's
        (NOW - timedelta(days=367), False),
        (datetime(1970, 1, 1), False),
        (NOW + timedelta(hours=2), False),
        (datetime(2100, 1, 1), False),
    ],
)
def test_a_forwarded_round_far_in_the_past_or_future_is_refused(ts: datetime, ok: bool) -> None:
    if ok:
        assert decode_round(_round(ts), now=NOW)[0] == ts
    else:
        with pytest.raises(WireError, match="more than a year old or in the future"):
            decode_round(_round(ts), now=NOW)


@pytest.mark.parametrize("field", ["text", "error"])
def test_a_forwarded_round_with_a_lone_surrogate_is_refused(tmp_path: Path, field: str) -> None:
    """JSON can carry a lone surrogate (``"\\udcff"``), which no store column can hold: before
    this check the round reached the sink and failed there, on every retry."""

    def round_with(char: str) -> bytes:
        value = _line("DEV_GPU_UTIL", 0, "5", f',pod="p{char}"')
        return _round(NOW, value, None) if field == "text" else _round(NOW, None, value)

    with pytest.raises(WireError, match=f"^fetch 0 {field} is not valid Unicode text"):
        decode_round(round_with("\udcff"), now=NOW)
    # What the daemon sends for the same bytes (U+FFFD) is accepted and stored.
    ts, _, fetches = decode_round(round_with("\ufffd"), now=NOW)
    with Store(str(tmp_path / "s.duckdb")) as store:
        assert StoreSink(store).write(ts, fetches).targets == 1
        assert store.scalar("SELECT count(*) FROM targets") == 1
