"""Where Megatron's (min, max) timers report ends, read as the line path reads it: the next
iteration line, any line that is neither a header nor a (min, max) line, or a (min, max) line
it refuses. Verbatim Megatron-LM lines; the report's time is the iteration line's before it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from telemetry.collect.logs.textlogs import parse_file

IT = (" [2026-03-01 00:00:{s:02d}] iteration {i:8d}/  500000 | consumed samples: {n:12d} | "
      "elapsed time per iteration (ms): 5123.4 | learning rate: 3.000000E-04 | global batch "
      "size:  4096 | lm loss: 2.031529E+00 | loss scale: 1.0 | grad norm: 0.829 | number of "
      "skipped iterations:   0 | number of nan iterations:   0 |")
TIMERS = [
    "(min, max) time across ranks (ms):",
    "    forward-backward ...............................: (5012.11, 5013.40)",
    "    optimizer ......................................: (45.10, 46.21)",
]


def _parse(tmp_path: Path, lines: list[str]):
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return parse_file(path)


def test_the_next_iteration_line_ends_the_report_and_stays_a_progress_point(tmp_path):
    got = _parse(tmp_path, [IT.format(s=1, i=10, n=40960), *TIMERS,
                            IT.format(s=6, i=11, n=45056), *TIMERS])
    assert [(r.metric, r.ts) for r in got.rank_perf] == [
        ("forward-backward", datetime(2026, 3, 1, 0, 0, 1)),
        ("optimizer", datetime(2026, 3, 1, 0, 0, 1)),
        ("forward-backward", datetime(2026, 3, 1, 0, 0, 6)),
        ("optimizer", datetime(2026, 3, 1, 0, 0, 6)),
    ]
    assert [m["step"] for m in got.metrics] == [10, 11]


def test_a_line_ending_in_a_colon_that_is_no_header_ends_the_report(tmp_path):
    got = _parse(tmp_path, [IT.format(s=1, i=10, n=40960), *TIMERS, "Some setting:",
                            "    later-timer ....................................: (1.00, 2.00)"])
    assert [r.metric for r in got.rank_perf] == ["forward-backward", "optimizer"]


def test_a_refused_range_is_said_not_dropped_and_a_header_starts_the_next(tmp_path):
    got = _parse(tmp_path, [IT.format(s=1, i=10, n=40960), *TIMERS[:2],
                            "    optimizer ......................................: (46.21, 45.10)",
                            *TIMERS])
    assert [r.metric for r in got.rank_perf] == ["forward-backward"] * 2 + ["optimizer"]
    assert any("no range" in b.reason for b in got.bad)
