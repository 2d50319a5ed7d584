"""Figures built as plain data (``app.figures.plot``) are what plotly.py would have sent: the
same JSON for the same figure, plotly's keyword paths and merges, typed arrays, and a property
plotly does not know is caught by the check the tests run on every figure."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.io.json import to_json_plotly

from app import figures, ui
from app.figures import gpus as gfig
from app.figures import overview as ofig
from app.figures import plot
from app.figures import training as tfig
from app.figures.failures import interruption_timeline, taxonomy_chart
from telemetry import env, queries
from telemetry.queries import data_extent
from telemetry.queries import failures as failq
from telemetry.queries import gpus as gpuq
from telemetry.queries import overview as overq
from telemetry.queries import training as trainq
from telemetry.store import Store

RUN = "dev-64-s1"


def _sent(fig: plot.Figure) -> dict:
    return json.loads(to_json_plotly(fig.to_plotly_json()))


def _plotly_sent(fig: plot.Figure) -> dict:
    """What plotly.py's own objects send for the same figure."""
    return json.loads(to_json_plotly(go.Figure(fig.to_dict()).to_plotly_json()))


def test_the_store_s_figures_are_sent_as_plotly_sends_them(dev_store: Path) -> None:
    with Store(str(dev_store), read_only=True) as s:
        tr = data_extent(s)
        assert tr is not None
        series = overq.fleet_series(s, tr)
        ints = queries.interruptions(s, RUN, tr)
        heat = gpuq.heatmap(s, tr, "temp")
        runs = trainq.overlay_series(s, RUN, tr, None, "step")
        built = [
            ofig.fleet_timeline(series, ints),
            ofig.power_series(series, ints),
            gfig.heatmap(
                heat.cells, key="temp", label="Temperature", unit="°C", bucket_s=heat.bucket_s,
                nodes_total=heat.nodes_total, nodes_shown=heat.nodes_shown,
            ),
            tfig.loss_figure(
                runs, "step", 0.6, True, trainq.run_events(s, RUN, tr), pd.DataFrame(), 0,
                "plotly_dark",
            ),
            interruption_timeline(failq.timeline(s, RUN, tr), tr.start, tr.end),
            taxonomy_chart(failq.taxonomy(s, RUN, tr, "component"), "component", 0),
            figures.empty("Nothing", "No data in this range"),
        ]  # fmt: skip
    for fig in built:
        ours, theirs = _sent(fig), _plotly_sent(fig)
        assert ours == theirs, fig.layout["title"]["text"]
        assert fig.data or fig.layout.get("annotations")  # something drawn: not vacuous


def test_keywords_are_paths_and_updates_merge_as_in_plotly() -> None:
    fig = plot.Figure().update_layout(
        title={"text": "T", "font": {"size": 14}}, paper_bgcolor="#000", yaxis={"title": "GPUs"}
    )
    fig.update_layout(title_font_color="#fff", title={"subtitle": {"text": "s"}})
    fig.update_layout(yaxis={"title": None})
    assert fig.layout == {
        "title": {"text": "T", "font": {"size": 14, "color": "#fff"}, "subtitle": {"text": "s"}},
        "paper_bgcolor": "#000",
        "yaxis": {},
    }
    assert go.Figure(fig.to_dict()).layout.title.font.color == "#fff"


def test_values_are_sent_as_plotly_js_reads_them() -> None:
    ts = pd.Series(pd.date_range("2026-01-05", periods=3, freq="h"))
    fig = plot.Figure().add_trace(
        plot.Scatter(
            x=ts, y=pd.Series([1.5, np.nan, 3.0]), customdata=pd.DataFrame({"h": ["a", None, "c"]})
        )
    )
    fig.add_trace(plot.Bar(x=[pd.Timestamp("2026-01-05"), None], y=np.array([1, 2])))
    sent = _sent(fig)
    line, bar = sent["data"]
    assert line["x"][0].startswith("2026-01-05T00:00:00") and line["type"] == "scatter"
    assert line["y"]["dtype"] == "f8"  # a typed array, as plotly.py sends numbers
    assert line["customdata"] == [["a"], [None], ["c"]]
    assert bar["x"] == ["2026-01-05T00:00:00", None]
    assert sent["data"] == _plotly_sent(fig)["data"]  # (plotly.py adds its default template)


def test_a_property_plotly_does_not_know_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    typo = plot.Figure().add_trace(plot.Scatter(x=[1, 2], y=[3, 4], colour="red"))
    with pytest.raises(ValueError, match="colour"):
        plot.check(typo)
    monkeypatch.setenv(env.CHECK_FIGURES, "1")  # as the test suite runs every server
    with pytest.raises(ValueError, match="colour"):
        ui._frozen(typo)  # what a page callback's reply goes through
    monkeypatch.setenv(env.CHECK_FIGURES, "0")  # production: sent unchecked, as built
    assert ui._frozen(typo)["data"][0]["colour"] == "red"


def test_the_reporting_line_sits_below_the_top_of_the_under_80_chart() -> None:
    """Plotly's autorange ends at a line's largest value: the GPUs reporting (the whole fleet,
    flat) were drawn on the plot's top edge, where they could not be read."""
    df = pd.DataFrame(
        {
            "ts": pd.date_range("2026-11-27", periods=3, freq="h"),
            "gpus": [64, 64, 56],
            "below": [0, 56, 8],
            "bucket_s": 3600,
        }
    )
    fig = _sent(gfig.below_per_bucket(df, util_pct=80, basis="GPU_UTIL", real=False))
    low, high = fig["layout"]["yaxis"]["range"]
    assert low == 0 and 64 * 1.05 < high < 64 * 1.3


def test_a_window_of_one_instant_still_gets_an_x_range_plotly_can_draw() -> None:
    """A store of one scrape round is a window of one instant: the Overview's time charts
    get 30 s a side instead of an empty range; a longer window gets 1 % a side."""
    t = datetime(2026, 11, 27, 12)
    assert figures.window_range(t, t) == ["2026-11-27 11:59:30", "2026-11-27 12:00:30"]
    day = figures.window_range(t, t + timedelta(days=1))
    assert day == ["2026-11-27 11:45:36", "2026-11-28 12:14:24"]


def test_checkpoint_sizes_read_in_units_people_use() -> None:
    """#37, 4: a small checkpoint read "415069 B"."""
    from app.figures.units import fmt_bytes

    assert [fmt_bytes(b) for b in (415_069, 1_500, 74.9e9, 4.33e12, 12, None)] == [
        "415 kB", "1.5 kB", "74.9 GB", "4.33 TB", "12 B", "–"
    ]  # fmt: skip


def test_a_short_jobs_small_figures_never_read_as_zero() -> None:
    """A 4-rank job lost 0.034 GPU-hours and had one failure in 70 s of wall time: the Failures
    page read "MTBF 0.0 h" and "0.0" GPU-hours lost (with "≈ $0.07" beside it), the Jobs card
    "0.0 GPU-h" beside a row of 0.04, while Checkpoints read the MTBF as "70 s". Every page
    now formats a duration, and GPU-hours, the one way."""
    from app.figures.failures import known
    from app.figures.units import fmt_duration, fmt_gpu_hours

    assert [fmt_gpu_hours(x) for x in (0.034, 0.0004, 0.0, 2.54, 1234.56, None)] == [
        "0.034", "0.0004", "0", "2.5", "1,234.6", "–"
    ]  # fmt: skip
    assert [fmt_duration(s) for s in (70, 0.02 * 3600, 3.4 * 3600, None)] == [
        "70 s", "72 s", "3.4 h", "–"
    ]  # fmt: skip
    assert known(pd.Series([0.034, 0.0, None, 1.26])).tolist() == [0.034, 0.0, "–", 1.3]


def test_a_short_runs_tokens_and_mfu_do_not_read_as_zero() -> None:
    """The exam's 20-step TorchTitan job trained 1.3 M tokens at an MFU of 0.01 % (a CPU):
    the Overview's cards read "0.0 B tokens" and "MFU 0.0 %", zeros for figures it knows."""
    from app.figures.units import fmt_count, fmt_percent

    assert [fmt_count(x) for x in (1310720.0, 2.5e12, 48_000, 512, None)] == [
        "1.3 M", "2,500.0 B", "48.0 K", "512", "–"]  # fmt: skip
    assert [fmt_percent(x) for x in (0.0001, 0.412, 0.0, None)] == [
        "0.01 %", "41.2 %", "0 %", "–"]  # fmt: skip


def test_the_hover_box_is_opaque_and_legible_in_both_themes() -> None:
    """The unified hover box took the figures' transparent paper as its background: its text
    sat on the lines beneath, unreadable in the dark theme (#37). Each theme's box is opaque
    and its text contrasts with it (WCAG AA for normal text: 4.5)."""
    from app.figures import _base

    def lum(hex_: str) -> float:
        rgb = [int(hex_[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    for tpl in ("plotly_dark", "plotly_white"):
        hl = go.Figure(_base("x", template=tpl).to_dict()).layout.hoverlabel  # as sent
        assert hl.bgcolor.startswith("#") and len(hl.bgcolor) == 7, tpl  # no alpha
        a, b = sorted((lum(hl.bgcolor), lum(hl.font.color)))
        assert (b + 0.05) / (a + 0.05) >= 4.5, tpl
