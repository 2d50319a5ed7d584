"""Money (issue 17, part 4): lost GPU-hours, checkpoint stalls and energy at a price per GPU-hour
and per kWh, set on the command line and per run. What a user would notice if it were wrong: a
dollar figure that does not follow from the hours and the price, a run's own price ignored,
a figure without the price it assumed, a malformed price accepted silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.cost import per_day_usd, price_book
from tests.conftest import cli


def _runs(store: Path, *args: str) -> list[dict]:
    r = cli("summary", "--store", str(store), "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["runs"]


def test_the_money_follows_from_the_hours_and_the_prices(dev_store: Path) -> None:
    (run,) = _runs(dev_store)
    c, i = run["cost"], run["interruptions"]
    assert (c["gpu_hour_usd"], c["kwh_usd"], c["prices_from"]) == (2.0, 0.1, "default")
    assert c["lost_usd"] == pytest.approx(run["lost_gpu_hours"] * 2.0, abs=0.1)
    assert c["downtime_usd"] == pytest.approx(i["downtime_hours"] * run["gpus"] * 2.0, abs=0.01)
    assert c["rework_usd"] == pytest.approx(i["rework_hours"] * run["gpus"] * 2.0, abs=0.01)
    # lost GPU-hours are the GPUs' downtime plus rework
    assert c["downtime_usd"] + c["rework_usd"] == pytest.approx(c["lost_usd"], rel=0.01)
    # the checkpoint saves' cost is the goodput's checkpoint_save (#57, 7: one definition)
    save_s = run["goodput"]["seconds"]["checkpoint_save"]
    assert c["checkpoint_blocking_usd"] == run["goodput"]["usd"]["checkpoint_save"]
    assert c["checkpoint_blocking_usd"] == pytest.approx(save_s / 3600 * run["gpus"] * 2.0,
                                                         abs=0.01)  # fmt: skip
    assert c["energy_usd"] == pytest.approx(run["energy"]["kwh"] * 0.1, abs=0.01)
    # the command line's prices, then a run's own
    (priced,) = _runs(dev_store, "--gpu-hour-price", "3", "--kwh-price", "0.25")
    assert priced["cost"]["prices_from"] == "settings"
    assert priced["cost"]["lost_usd"] == pytest.approx(c["lost_usd"] * 1.5, rel=0.001)
    assert priced["cost"]["energy_usd"] == pytest.approx(c["energy_usd"] * 2.5, rel=0.001)
    (own,) = _runs(dev_store, "--gpu-hour-price", "3", "--run-price", f"{run['run_id']}=4/0.5")
    assert (own["cost"]["gpu_hour_usd"], own["cost"]["kwh_usd"]) == (4.0, 0.5)
    assert own["cost"]["prices_from"] == "run"
    text = cli("summary", "--store", str(dev_store), "--run-price", f"{run['run_id']}=4")
    assert "at $4.00/GPU-h, $0.10/kWh (run)" in text.stdout, text.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--run-price", "llama=cheap"], "--run-price 'llama=cheap': use RUN=USD_PER_GPU_HOUR"),
        (["--run-price", "2.5"], "--run-price '2.5': use RUN=USD_PER_GPU_HOUR"),
        (["--gpu-hour-price", "-1"], "'-1' must be 0 or more"),
        (["--kwh-price", "nan"], "'nan' must be 0 or more"),
        (["--run-price", "llama=nan"], "--run-price 'llama=nan': use RUN=USD_PER_GPU_HOUR"),
        (["--run-price", "llama=2/inf"], "--run-price 'llama=2/inf': use RUN="),
    ],
)
def test_a_malformed_price_is_one_line(dev_store: Path, args: list[str], says: str) -> None:
    r = cli("summary", "--store", str(dev_store), *args)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_an_interval_change_in_money_per_day() -> None:
    book = price_book(2.5, None, ["big=3"])
    assert per_day_usd(0.01, 16_384, book.for_run("big")) == pytest.approx(0.01 * 16_384 * 24 * 3)
    assert per_day_usd(-0.01, 16_384, book.for_run("other")) == pytest.approx(-9830.4)
    assert per_day_usd(0.01, None, book.default) is None
