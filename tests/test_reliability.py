"""The checkpoint-interval and ETTR models against published numbers; the verdicts of
``benchmarks/reliability.py`` (soak RSS slope, pytest runs) on made-up inputs."""

from __future__ import annotations

import math

import pytest

from benchmarks.reliability import parse_pytest, rss_slope_mb_h, soak_verdict
from telemetry import reliability as rel

LLAMA3_MTBF_S = 3.09 * 3600.0  # reference README: 419 unexpected interruptions in 54 days


@pytest.mark.parametrize(
    ("cost_s", "printed_min", "digits"), [(10, 7.9, 1), (60, 19.3, 1), (300, 43, 0)]
)
def test_young_matches_the_reference_examples(
    cost_s: float, printed_min: float, digits: int
) -> None:
    # The README prints "7.9 min", "19.3 min" and "43 min": equal at the printed precision.
    assert round(rel.young_interval_s(cost_s, LLAMA3_MTBF_S) / 60.0, digits) == printed_min


def test_daly_first_order_adds_the_restart_time() -> None:
    assert rel.daly_interval_s(60, LLAMA3_MTBF_S) == rel.young_interval_s(60, LLAMA3_MTBF_S)
    # sqrt(2 * 60 s * (11124 s + 876 s)) = sqrt(1,440,000) = 1200 s
    assert rel.daly_interval_s(60, 11124.0, 876.0) == pytest.approx(1200.0)


@pytest.mark.parametrize(
    ("mtbf_min", "minutes"),
    # Daly (2006), figs. 3-5: dump time 5 min; the model predicts these optima.
    [(24 * 60, 117), (6 * 60, 57), (15, 9.1)],
)
def test_daly_higher_order_matches_the_published_optima(mtbf_min: float, minutes: float) -> None:
    got = rel.daly_higher_order_s(5 * 60.0, mtbf_min * 60.0) / 60.0
    assert round(got, 1 if minutes < 10 else 0) == minutes


def test_daly_higher_order_when_the_write_costs_more_than_two_mtbf() -> None:
    assert rel.daly_higher_order_s(3000.0, 1000.0) == 1000.0
    # For a cheap write it is Young's optimum minus about the write itself.
    young = rel.young_interval_s(10, LLAMA3_MTBF_S)
    assert rel.daly_higher_order_s(10, LLAMA3_MTBF_S) == pytest.approx(young - 10, rel=0.01)


def test_kokolis_mttf_projection_at_16k_gpus() -> None:
    # 6.50 failures per 1000 node-days (RSC-1) at 2,048 nodes: "projected 1.8 h".
    assert rel.job_mtbf_s(2048, 6.5e-3) / 3600.0 == pytest.approx(1.80, abs=0.01)
    assert rel.job_mtbf_s(8, 0.0) == math.inf


def test_failure_rate_round_trips_to_the_mtbf() -> None:
    # Llama 3: 419 unexpected interruptions on 2,048 nodes in 54 days -> MTBF 3.09 h.
    r = rel.failures_per_node_day(419, 2048, 54 * 86400.0)
    assert r == pytest.approx(419 / 2048 / 54)
    assert rel.job_mtbf_s(2048, r) / 3600.0 == pytest.approx(3.09, abs=0.01)


def test_expected_ettr_units() -> None:
    # 1000 nodes x 1/1000 per node-day = one failure a day; a 2 h interval loses 1 h per
    # failure on average (no restart cost, free writes): ETTR = 1 - 1/24.
    assert rel.expected_ettr(1000, 1e-3, 0.0, 7200.0, 0.0) == pytest.approx(1 - 1 / 24)
    # Adding a 10 min restart: 1 - (600 + 3600) / 86400.
    assert rel.expected_ettr(1000, 1e-3, 600.0, 7200.0, 0.0) == pytest.approx(1 - 4200 / 86400)
    # Without failures only the blocking write costs: 300 s of work per 330 s.
    assert rel.expected_ettr(8, 0.0, 600.0, 300.0, 30.0) == pytest.approx(300 / 330)
    # A job that fails faster than it can restart makes no progress, not negative progress.
    assert rel.expected_ettr(2048, 1.0, 3600.0, 600.0, 10.0) == 0.0


def test_ettr_optimum_maximises_the_model_and_is_close_to_young() -> None:
    nodes, r, u0, w = 2048, 419 / 2048 / 54, 300.0, 60.0
    opt = rel.ettr_optimal_interval_s(nodes, r, u0, w)
    best = rel.expected_ettr(nodes, r, u0, opt, w)
    for f in (0.8, 0.95, 1.05, 1.25):
        assert rel.expected_ettr(nodes, r, u0, opt * f, w) < best
    # Like Daly's higher-order form it sits about one write below Young's sqrt(2wM), a little
    # lower still because restarts (u0) leave less time to lose.
    young = rel.young_interval_s(w, rel.job_mtbf_s(nodes, r))
    assert opt == pytest.approx(young - w, rel=0.03)
    assert opt < young
    assert rel.ettr_optimal_interval_s(nodes, 0.0, u0, w) == math.inf


def test_advise_compares_the_configured_interval() -> None:
    r = 419 / 2048 / 54
    long = rel.advise(2048, 16384, r, 300.0, 10.0, 3600.0)
    assert long.young_s == pytest.approx(rel.young_interval_s(10.0, long.mtbf_s or 0))
    assert long.ettr_optimum is not None and long.ettr_optimum > long.ettr_configured
    # The GPU-hours figure is the ETTR gap times the GPUs times 24 h.
    gap = long.ettr_optimum - long.ettr_configured
    assert long.gpu_hours_per_day == pytest.approx(gap * 16384 * 24)
    quiet = rel.advise(8, 64, 0.0, 300.0, 2.0, 300.0)
    assert quiet.young_s is None and quiet.mtbf_s is None
    assert quiet.ettr_configured == pytest.approx(300 / 302)


@pytest.mark.parametrize(
    "call",
    [
        lambda: rel.young_interval_s(-1.0, 3600.0),
        lambda: rel.young_interval_s(10.0, 0.0),
        lambda: rel.expected_ettr(8, 0.1, 0.0, 0.0, 1.0),
        lambda: rel.expected_ettr(0, 0.1, 0.0, 60.0, 1.0),
        lambda: rel.daly_interval_s(10.0, 3600.0, float("nan")),
    ],
)
def test_meaningless_inputs_raise(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        call()


def test_log_grid_spans_the_range() -> None:
    g = rel.log_grid(1.0, 1000.0, 4)
    assert g == pytest.approx([1.0, 10.0, 100.0, 1000.0])


# -- benchmarks/reliability.py's verdicts --------------------------------------------------------
def _rss(minutes: float, start_mb: float, mb_per_min: float, jitter_mb: float = 0.0) -> list:
    """RSS every 30 s: a steady slope plus a +-jitter sawtooth (the GC's and caches' wobble)."""
    n = int(minutes * 2)
    return [
        (i / 2, start_mb + mb_per_min * i / 2 + (jitter_mb if i % 2 else -jitter_mb))
        for i in range(n)
    ]


def test_rss_slope_is_least_squares_in_mb_per_hour() -> None:
    assert rss_slope_mb_h(_rss(20, 300, 0.5)) == pytest.approx(30.0)
    assert rss_slope_mb_h([(0.0, 300.0), (1.0, 301.0), (2.0, 300.0)]) == pytest.approx(0.0)
    assert math.isnan(rss_slope_mb_h([(0.0, 300.0)]))


def test_the_soak_catches_a_leak_that_total_growth_let_through() -> None:
    # 3 MB/min (+45 MB in a 15-min half, under the old 50 MB bound) after a warm-up.
    warm = [(m, 200 + 20 * m) for m, _ in _rss(15, 0, 0)]
    leak = warm + [(m + 15, 500 + 3 * m) for m, _ in _rss(15, 0, 0)]
    v = soak_verdict(leak, 30)
    assert not v.held
    assert v.second_mb_h == pytest.approx(180.0)


def test_the_soak_holds_when_rss_is_flat_after_warming_up() -> None:
    warm = [(m, 200 + 20 * m) for m, _ in _rss(15, 0, 0)]  # caches filling: 1,200 MB/h
    flat = warm + [(m + 15, r) for m, r in _rss(15, 500, 0.1, jitter_mb=3)]  # 6 MB/h, +-3 MB
    v = soak_verdict(flat, 30)
    assert v.held, v
    assert v.first_mb_h == pytest.approx(1200.0)
    # A leak of tens of MB/h is not hidden by that fast warm-up.
    slow_leak = warm + [(m + 15, r) for m, r in _rss(15, 500, 0.5)]  # 30 MB/h
    assert not soak_verdict(slow_leak, 30).held


def test_a_soak_too_short_or_empty_does_not_hold() -> None:
    assert not soak_verdict(_rss(10, 300, 0), 10).held  # halves of 5 minutes
    assert not soak_verdict([], 30).held


@pytest.mark.parametrize(
    ("rc", "summary", "held", "tried"),
    [
        (0, "12 passed in 3.10s", True, 12),
        (0, "12 passed, 3 warnings in 3.10s", True, 12),
        (1, "5 passed, 2 errors in 1.00s", False, 7),  # setup errors
        (1, "4 passed, 1 failed, 1 error in 1.00s", False, 6),
        (2, "1 error in 0.50s", False, 1),  # collection error
        (0, "3 skipped in 0.10s", False, 3),  # nothing checked
        (0, "5 passed, 1 skipped in 1.00s", False, 6),
        (5, "no tests ran in 0.01s", False, 0),
        (1, "", False, 0),  # pytest crashed before its summary
    ],
)
def test_a_pytest_row_holds_only_on_exit_0_with_passes_and_no_skips(
    rc: int, summary: str, held: bool, tried: int
) -> None:
    run = parse_pytest(rc, summary)
    assert (run.held, run.tried) == (held, tried)
