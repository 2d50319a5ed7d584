"""Goodput benchmark (issue #38): a 54-day llama3-405b run's goodput block, and the Checkpoints
page's goodput day chart callback, cold.

    .venv/bin/python benchmarks/goodput.py                         # builds llama3-405b first
    .venv/bin/python benchmarks/goodput.py --store llama.duckdb    # an existing store
    .venv/bin/python benchmarks/goodput.py --json FILE             # and its figures as JSON

Timed, median and p95 of ``--repeat``:

- **the goodput block** (``metrics.goodput.goodput``, as ``summary --json`` computes it: the
  whole run, its days, slow ranks and energy), two ways: *first after open*, a fresh read-only
  open of the file each time (nothing cached in DuckDB either), and *cold*, the dashboard
  benchmark's rule (issue #16): the store open, every query result forgotten before each call
  (``Store.forget_results``). Target <= 1 s.
- **the day chart's callback** (``app.pages.checkpoints._goodput``: the block over the view,
  the figure, the note and the slow ranks' table), cold by the same rule, replies not kept
  (``FACTORYFLOOR_REPLY_CACHE=0``), in this process (the dashboard benchmark replays the same
  callback over HTTP with the page's other requests). Target p95 <= 100 ms.

Beside them, the same-run baseline (issue #40): ``baseline.SCAN_SQL`` (a DuckDB scan and GROUP
BY of the store's newest day of GPU samples in a fresh connection) and each figure's ratio.
Also printed: whether the categories add up to the window exactly, the run's and every day's.
``--json FILE`` writes the printed figures (``benchmarks/figures.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["FACTORYFLOOR_REPLY_CACHE"] = "0"  # every callback builds its reply

from benchmarks import baseline, figures  # noqa: E402
from benchmarks.dashboard import build  # noqa: E402
from benchmarks.timing import cold, p50_p95  # noqa: E402
from telemetry.store import Store  # noqa: E402


def _adds_up(block: dict) -> str:
    """Whether the categories add up to each window exactly (the run's and every day's)."""
    parts = [block, *block.get("days", [])]
    worst = max(abs(sum(p["seconds"].values()) - p["window_s"]) for p in parts)
    return f"{len(parts)} windows (the run and {len(parts) - 1} days), worst gap {worst:.6f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="an existing llama3-405b store (built if omitted)")
    ap.add_argument("--repeat", type=int, default=15)
    figures.add_argument(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.store or os.path.join(tmp, "llama.duckdb")
        if not args.store:
            build(path, "llama3-405b", None)
        figs = run(path, args.repeat)
    figures.write(args.json, figs)


FRESH_OPENS = 40  # the store opened anew for each (a p95 needs more than a handful)


def run(path: str, repeat: int) -> dict[str, float]:
    """Measure and print; the printed figures by name (``benchmarks/figures.py``)."""
    from telemetry.metrics import goodput as good
    from telemetry.queries import newest_trained_run

    with Store(path, read_only=True) as store:
        run_id = newest_trained_run(store)
        if run_id is None:
            raise SystemExit(f"{path}: no run with training metrics to measure")
        block = good.goodput(store, run_id, energy=True)
    if block is None:
        raise SystemExit(f"{path}: run {run_id} has no progress to date its goodput")
    print(f"run {run_id}: {block['window_s'] / 86400:.1f} days, goodput "
          f"{block['goodput'] * 100:.2f} %; categories add up over {_adds_up(block)}")  # fmt: skip
    scan = baseline.duckdb_scan(path)["p50"] * 1000
    print(f"baseline: DuckDB scan + GROUP BY of the newest day's GPU samples, fresh connection: "
          f"{scan:.1f} ms (p50)")  # fmt: skip

    def whole(store: Store) -> Callable[[], object]:
        return lambda: good.goodput(store, run_id, energy=True)

    fresh = []  # its p95 of 15 is the second slowest open: 111, 162, 117 ms in three runs
    for _ in range(max(repeat, FRESH_OPENS)):
        with Store(path, read_only=True) as store:
            t0 = time.perf_counter()
            whole(store)()
            fresh.append((time.perf_counter() - t0) * 1000)
    from app.data import services
    from app.main import create_app

    with Store(path, read_only=True) as store:
        create_app(store)  # the pages register with an app
        services.bind(services.Services(store=store))
        from app.pages import checkpoints as page

        view = {"run": run_id, "range": "all"}
        cold_block = cold(store, whole(store), repeat)
        cold_chart = cold(store, lambda: page._goodput(view, None, "dark"), repeat)
        fig = page._goodput(view, None, "dark")[0]
    fig = fig if isinstance(fig, dict) else fig.to_plotly_json()
    size = len(json.dumps(fig, default=str)) / 1024
    print(f"{repeat} runs each, ms (p50 / p95, and p95 / scan)")
    rows = [(f"goodput block, first after open ({len(fresh)})", p50_p95(fresh), "1 s"),
            ("goodput block, cold", cold_block, "1 s"),
            ("day chart callback, cold", cold_chart, "100 ms")]  # fmt: skip
    for name, (p50, p95), target in rows:
        print(f"  {name:34s} {p50:8.1f} {p95:8.1f} {p95 / scan:7.2f}x   target <= {target}")
    print(f"  day chart figure: {size:.0f} KB of JSON")
    keys = ("goodput_block_first_after_open", "goodput_block_cold", "day_chart_callback_cold")
    figs = {
        "run_days": block["window_s"] / 86400,
        "goodput_pct": block["goodput"] * 100,
        "categories_windows": 1 + len(block.get("days", [])),
        "baseline_scan_ms": scan,
        "day_chart_figure_kb": size,
    }
    for key, (_, (p50, p95), _) in zip(keys, rows, strict=True):
        figs |= {f"{key}_p50_ms": p50, f"{key}_p95_ms": p95, f"x_scan_{key}_p95": p95 / scan}
    return figs


if __name__ == "__main__":
    main()
