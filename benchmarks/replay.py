"""Backfill benchmark: the replay engine vs DuckDB's own bulk-insert rate, same rows, same run.

    .venv/bin/python benchmarks/replay.py                 # llama3-405b, 54 days, 5-min samples
    .venv/bin/python benchmarks/replay.py --days 2        # a quicker look
    .venv/bin/python benchmarks/replay.py --json FILE     # also write the key figures to FILE
    .venv/bin/python benchmarks/replay.py --keep PATH     # keep the replayed store at PATH

Prints rows written per second by a full backfill (simulation, synthesis, inserts, rollups) and,
measured in the same run on the same disk, the rate at which DuckDB bulk-inserts the same
number of rows of the same schema from ready-made Arrow batches (the ceiling).
Targets: full backfill under 5 minutes, at >= 40% of the ceiling (issue #2); >= 60% (#16).

``--keep PATH`` replays into PATH (a new file: an existing one is refused, never overwritten)
and leaves it there for other benchmarks (``--store``); the ceiling's temporary store then goes
beside it unless ``--dir`` says otherwise, so both are still measured on the same disk.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import figures  # noqa: E402
from telemetry.replay.runner import replay  # noqa: E402
from telemetry.replay.scenarios import get_scenario  # noqa: E402
from telemetry.replay.synth import Synthesizer  # noqa: E402
from telemetry.replay.timeline import simulate  # noqa: E402
from telemetry.store import Store  # noqa: E402


def ceiling(path: str, rows: int, scenario: str, interval: float) -> tuple[float, int]:
    """Seconds DuckDB takes to insert ``rows`` sample rows from prepared Arrow batches."""
    sc = get_scenario(scenario)
    syn = Synthesizer(simulate(sc.with_overrides(days=0.1), 0), 0, interval, "ceiling")
    ticks = np.arange(1, max(1, 1_000_000 // syn.n_gpus) + 1) * interval
    batch, _ = syn.samples(ticks)
    store = Store(path)
    done = 0
    t0 = time.perf_counter()
    while done < rows:
        part = batch if rows - done >= batch.num_rows else batch.slice(0, rows - done)
        store.append("gpu_samples", part)
        done += part.num_rows
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="llama3-405b")
    ap.add_argument("--days", type=float, help="shorten the scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="where to put the temporary stores")
    ap.add_argument(
        "--keep",
        metavar="PATH",
        help="replay into PATH (a new file) and keep it there instead of deleting it",
    )
    figures.add_argument(ap)
    args = ap.parse_args()
    tmp_dir = args.dir
    if args.keep:
        if os.path.exists(args.keep) or os.path.exists(args.keep + ".wal"):
            ap.error(f"--keep {args.keep}: it already exists; give a new path (never overwritten)")
        parent = os.path.dirname(os.path.abspath(args.keep))
        os.makedirs(parent, exist_ok=True)
        if tmp_dir is None:  # the ceiling on the same disk as the kept store
            tmp_dir = parent
    sc = get_scenario(args.scenario)
    if args.days:
        sc = sc.with_overrides(days=args.days)
    with tempfile.TemporaryDirectory(dir=tmp_dir) as tmp:
        path = args.keep or os.path.join(tmp, "replay.duckdb")
        try:
            store = Store(path)
            t0 = time.perf_counter()
            res = replay(store, sc, args.seed)
            wall = time.perf_counter() - t0
            store.close()
        except BaseException:
            if args.keep:  # a half-replayed store is not one to hand on
                for p in (path, path + ".wal"):
                    if os.path.exists(p):
                        os.remove(p)
            raise
        size_gb = os.path.getsize(path) / 1e9
        if not args.keep:
            os.remove(path)
        c_s, c_rows = ceiling(
            os.path.join(tmp, "ceiling.duckdb"),
            res.sample_rows,
            args.scenario,
            sc.sample_interval_s,
        )
    rate, c_rate = res.sample_rows / wall, c_rows / c_s
    print(
        f"scenario            {sc.name}: {sc.gpus:,} GPUs, {sc.days:g} days, "
        f"{sc.sample_interval_s:g} s samples"
    )
    print(f"rows written        {res.sample_rows:,} GPU samples ({size_gb:.1f} GB store)")
    print(
        f"backfill wall time  {wall:.1f} s   (target < 300 s: {'PASS' if wall < 300 else 'FAIL'})"
    )
    print(f"backfill rate       {rate:,.0f} rows/s (simulation + synthesis + inserts + rollups)")
    print(
        f"ceiling (same run)  {c_rate:,.0f} rows/s: DuckDB bulk insert of {c_rows:,} rows, "
        f"{c_s:.1f} s"
    )
    ratio = rate / c_rate
    print(
        f"ratio               {ratio:.0%} of ceiling (issue 2: >= 40%: "
        f"{'PASS' if ratio >= 0.4 else 'FAIL'}; issue 16: >= 60%: "
        f"{'PASS' if ratio >= 0.6 else 'FAIL'})"
    )
    figures.write(
        args.json,
        {
            "scenario_gpus": sc.gpus,
            "scenario_days": sc.days,
            "sample_interval_s": sc.sample_interval_s,
            "sample_rows": res.sample_rows,
            "store_gb": size_gb,
            "backfill_s": wall,
            "backfill_rows_per_s": rate,
            "baseline_bulk_insert_rows": c_rows,
            "baseline_bulk_insert_s": c_s,
            "baseline_bulk_insert_rows_per_s": c_rate,
            "ratio_backfill_to_baseline": ratio,
        },
    )


if __name__ == "__main__":
    main()
