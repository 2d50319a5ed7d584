"""The TSDB-backed setup beside the store-only one, the same fleet, one run (docs/scaling.md).

The data: a replayed cluster (``dev-64`` widened to ``--gpus``, ``--days`` ending now, one
sample per ``--interval`` seconds). Store-only (the same-run baseline) keeps every raw row;
TSDB-backed is a copy of it after ``--raw-retention 0`` (raw rows gone once their rollups
closed), beside a real VictoriaMetrics (Debian's ``victoria-metrics``, single node) holding
the drill-down's six per-GPU series (``benchmarks/vm_load.py``, loaded once and flushed).

Timed, each as the dashboard's data layer answers it (``app.data.gpus``, with the store's
result cache emptied before each call; median of ``--repeat``):

- the drill-down (one node's 8 GPUs, four charts) over the last 1 h, 6 h and 24 h: from raw
  rows in the store-only setup; in the TSDB-backed one from VictoriaMetrics (``query_range``,
  six series) where the bucket is finer than the per-GPU rollups, else from those rollups;
- the heatmap (utilization per node) over 1 h and 24 h: ``node_tick`` or ``node_rollup``; and
  the same heatmap asked of VictoriaMetrics (``avg by (Hostname)``), what it would cost
  to read it from the TSDB instead of the store's rollups;
- the bytes each setup keeps on disk.

Run: ``python benchmarks/tsdb.py [--gpus 1024 --days 1 --interval 60]`` (the default; a few
minutes here); ``--quick`` is 128 GPUs x 6 h.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, timedelta
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.data import gpus as data  # noqa: E402
from app.data.services import Services, bind  # noqa: E402
from benchmarks.figures import add_argument as add_json_argument  # noqa: E402
from benchmarks.figures import write as write_figures  # noqa: E402
from benchmarks.prometheus import build_store  # noqa: E402
from benchmarks.vm_load import VictoriaMetrics, load  # noqa: E402
from telemetry.collect.prometheus.prom_client import PromClient  # noqa: E402
from telemetry.collect.prometheus.prom_history import PromHistory  # noqa: E402
from telemetry.queries import TimeRange  # noqa: E402
from telemetry.queries import gpus as gpuq  # noqa: E402
from telemetry.store import Store  # noqa: E402
from telemetry.store.retention import expire  # noqa: E402


def kept_bytes(path: Path, tmp: Path) -> int:
    """The bytes of what a store keeps: the size of a fresh copy of it (a DELETE frees blocks
    for reuse but does not shrink the file, so a store that let its raw rows go is measured
    by what a new file holding the same tables takes)."""
    copy = tmp / f"copy-{path.name}"
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{path}' AS src (READ_ONLY)")
        con.execute(f"ATTACH '{copy}' AS dst")
        con.execute("COPY FROM DATABASE src TO dst")
        con.execute("DETACH dst")
    finally:
        con.close()
    size = copy.stat().st_size
    copy.unlink()
    return size


def panels(store: Store) -> dict[str, Callable[[], object]]:
    """The timed calls over ``store`` (the one bound, with what ``serve`` gives it)."""
    end = store.scalar("SELECT max(ts) FROM node_tick")
    host = store.scalar("SELECT host FROM nodes WHERE role = 'job' ORDER BY node_id LIMIT 1")
    out: dict[str, Callable[[], object]] = {}
    for hours in (1, 6, 24):
        tr = TimeRange(end - timedelta(hours=hours), end)
        out[f"drill-down {hours} h"] = lambda tr=tr: data.node_gpu_series(host, tr)
    for hours in (1, 24):
        tr = TimeRange(end - timedelta(hours=hours), end)
        out[f"heatmap {hours} h"] = lambda tr=tr: gpuq.heatmap(store, tr, "util")
    return out


def alternated(setups: list[Services], repeat: int) -> list[dict[str, float]]:
    """Median seconds of each panel in each setup, the setups taking turns call by call (a
    loaded machine's drift falls on both), each call after the store's result cache emptied."""
    calls = []
    for sv in setups:
        bind(sv)
        calls.append(panels(sv.store))
    times: list[dict[str, list[float]]] = [{name: [] for name in c} for c in calls]
    for name in calls[0]:
        for i in range(repeat + 1):  # the first round: each setup's first statements, not kept
            for k, sv in enumerate(setups):
                bind(sv)
                sv.store.forget_results()
                t0 = time.perf_counter()
                calls[k][name]()
                if i:
                    times[k][name].append(time.perf_counter() - t0)
    return [{name: statistics.median(v) for name, v in t.items()} for t in times]


def vm_heatmap(url: str, end: object, hours: int, repeat: int) -> float:
    """The utilization heatmap asked of VictoriaMetrics: one row per node, 300 columns."""
    client = PromClient(url)
    t1 = end.replace(tzinfo=UTC).timestamp()  # type: ignore[attr-defined]
    step = max(hours * 3600 // 300, 15)
    expr = f"avg by (Hostname) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[{step}s]))"
    times = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        client.query_range(expr, t1 - hours * 3600, t1, step)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--port", type=int, default=19290)
    ap.add_argument("--quick", action="store_true", help="128 GPUs x 6 h (a check)")
    add_json_argument(ap)
    args = ap.parse_args()
    if args.quick:
        args.gpus, args.days = 128, 0.25
    tmp = Path(tempfile.mkdtemp(prefix="fftsdb-"))
    figures: dict[str, float] = {}
    try:
        full, lean = tmp / "store-only.duckdb", tmp / "tsdb-backed.duckdb"
        _, took = build_store(full, args.gpus, args.days, args.interval)
        print(f"replayed {args.gpus:,} GPUs x {args.days:g} d at {args.interval:g} s "
              f"in {took:.1f} s")  # fmt: skip
        shutil.copy(full, lean)
        with Store(str(lean)) as s:
            gone = expire(s, timedelta(0)).total
        with VictoriaMetrics(tmp / "vm-data", args.port) as vm:
            t0 = time.perf_counter()
            n = load(full, vm.url, tmp)
            print(f"{n:,} samples (the drill-down's six series) into VictoriaMetrics in "
                  f"{time.perf_counter() - t0:.1f} s; {gone:,} raw rows left the TSDB-backed "
                  "store (--raw-retention 0)")  # fmt: skip
            print(_compare(full, lean, vm, args, figures))
            time.sleep(5)  # its in-memory parts written out: the bytes it keeps on disk
            sizes = {"store-only": kept_bytes(full, tmp),
                     "TSDB-backed store": kept_bytes(lean, tmp),
                     "VictoriaMetrics": vm.disk_bytes()}  # fmt: skip
        for name, size in sizes.items():
            print(f"  {name:<22} {size / 2**20:10.1f} MiB")
            figures[f"{name.lower().replace(' ', '_').replace('-', '_')}_mib"] = size / 2**20
        write_figures(args.json, figures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _compare(
    full: Path, lean: Path, vm: VictoriaMetrics, args: argparse.Namespace, figures: dict
) -> str:
    with Store(str(full), read_only=True) as a, Store(str(lean), read_only=True) as b:
        assert b.scalar("SELECT count(*) FROM gpu_samples WHERE ts < ?", [b.raw_since()]) == 0
        end = a.scalar("SELECT max(ts) FROM node_tick")
        history = PromHistory([PromClient(vm.url)])
        base, backed = alternated([Services(a), Services(b, history=history)], args.repeat)
    lines = [f"{'panel (cold, median of ' + str(args.repeat) + ')':<38} {'store-only':>12} "
             f"{'TSDB-backed':>12} {'ratio':>7}"]  # fmt: skip
    for name, t0 in base.items():
        t = backed[name]
        key = name.replace(" ", "_").replace("-", "_")
        figures[f"baseline_{key}_ms"], figures[f"{key}_ms"] = t0 * 1e3, t * 1e3
        figures[f"ratio_{key}"] = t / t0
        lines.append(f"{name:<38} {t0 * 1e3:9.1f} ms {t * 1e3:9.1f} ms {t / t0:6.2f}x")
    for hours in (1, 24):
        t = vm_heatmap(vm.url, end, hours, args.repeat)
        figures[f"heatmap_{hours}_h_from_victoriametrics_ms"] = t * 1e3
        lines.append(f"{f'heatmap {hours} h asked of VictoriaMetrics':<38} {'':>12} "
                     f"{t * 1e3:9.1f} ms")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
