"""Values no GPU can report, over real HTTP into a real store: NaN, ±Inf, negative
utilization, 10,000 °C, a 100 KB label, duplicate samples and timestamps (non-UTF-8 bodies:
tests/test_exporter_faults.py).
Policy: a physically impossible value is stored as missing and counted as rejected in the
target's health; a malformed line (a 100 KB label block) is rejected whole and counted; every
valid sample of the same scrape is stored; the sample time is the round's, so an exposition
timestamp far in the past or future cannot misplace data."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from telemetry.collect.exposition import gpu_rows, parse
from telemetry.collect.scrape import Target, scrape_round
from telemetry.collect.sink import StoreSink
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
    + _line("DEV_GPU_UTIL", 1, "97")
    + _line("DEV_GPU_TEMP", 1, "61", "")
    + _line("DEV_GPU_TEMP", 1, "62")  # a duplicate: the last one is kept
    + _line("DEV_POWER_USAGE", 1, "650.5 4102444800000")  # a timestamp in 2100: ignored
    + _line("DEV_FB_USED", 1, "1000", ',pod="' + "p" * 100_000 + '"')  # 100 KB label
)


def test_impossible_values_are_missing_and_counted_valid_ones_stored(
    tmp_path: Path, exporter: str
) -> None:
    ExporterHandler.routes["/impossible-values/metrics"] = BAD
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store, 15.0)
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
        assert got[1] == {"u": 97.0, "t": 62.0, "p": 650.5, "c": None, "f": None}
        assert store.scalar("SELECT max(ts) FROM gpu_samples") == at  # not year 2100
        health = store.rows("SELECT up, rejected_lines, error FROM targets")
        assert health == [(True, 4, None)]  # 3 impossible values + the 100 KB line
        assert store.scalar("SELECT max(length(pod)) FROM gpus") is None


def test_the_parser_names_what_it_refused() -> None:
    scrape = parse(BAD)
    assert len(scrape.errors) == 1
    assert scrape.errors[0].reason.startswith("labels longer than 4,096 characters (100,")
    rows = gpu_rows(scrape)
    assert rows.rejected_values.tolist() == [3] and rows.duplicates == 1


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
        report = StoreSink(store, 15.0).write(
            datetime(2026, 3, 1), scrape_round([Target(f"{exporter}/impossible-xid/metrics")], 2.0)
        )
        assert report.up == 1 and report.xid_events == 0
        assert store.scalar("SELECT util_pct FROM gpu_samples") == 50.0
