"""Factory Floor's store beside a real Prometheus, the same data and the same panels, one run.

The data: a replayed cluster (``dev-64`` widened to ``--gpus``, ``--days`` ending now, one
sample per ``--interval`` seconds) stored by the replay engine, and every sample of every DCGM
field the store holds exported as OpenMetrics and loaded into Prometheus (Debian's 2.x) with
``promtool tsdb create-blocks-from openmetrics``, so both hold the same samples and their bytes
per sample compare like for like (``benchmarks/prom_bytes.py``). Prometheus then serves that
directory on 127.0.0.1 and answers each panel as ``query_range`` (or an instant query), timed
over HTTP; Factory Floor answers it with the query the dashboard's callback runs
(``telemetry.queries``), timed in process on the store with its result cache emptied before
each call, as every new round does (median of ``--repeat``; the HTTP and figure cost of a
callback are measured by ``benchmarks/dashboard.py``).

Panels (PromQL the fair equivalent: every raw sample of the range is read, as the bucket
averages on our side do):

1. fleet average utilization, 7 d: ``avg(avg_over_time(util[step]))``, ~1,500 points;
2. per-node heatmap, 7 d: ``avg by (Hostname) (avg_over_time(util[step]))``, 300 columns;
3. one node's 8 GPUs, 24 h: ``avg_over_time(util{Hostname=h}[step])``, 500 points;
4. top-10 hottest GPUs: ``topk(10, temp)`` at the newest round (our Overview table);
5. GPUs under 80 % per hour, 7 d: ``count(avg_over_time(util[1h]) < 80)`` per hour.

Run: ``python benchmarks/prometheus.py [--gpus 1024 --days 7 --interval 60]`` (the default,
about 15 minutes here); ``--quick`` is 128 GPUs x 1 day (under a minute), ``--no-panels`` the
bytes alone.
``--fleet`` instead measures store size and panel times at 16,384 GPUs x 15 s x 54 days with
raw retention, on a slice and extrapolated (``benchmarks/fleet_scale.py`` says how).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.figures import add_argument as add_json_argument  # noqa: E402
from benchmarks.figures import write as write_figures  # noqa: E402
from benchmarks.fleet_scale import timed  # noqa: E402 (a cold-cache median, shared)
from benchmarks.prom_bytes import load_windows, wait_compacted  # noqa: E402
from benchmarks.prom_bytes import report as bytes_report  # noqa: E402
from telemetry.queries import TimeRange  # noqa: E402
from telemetry.queries.gpu_rollup import gpus_below_per_hour  # noqa: E402
from telemetry.queries.gpus import heatmap, node_gpu_series  # noqa: E402
from telemetry.queries.overview import fleet_series, hottest_gpus  # noqa: E402
from telemetry.replay.runner import replay  # noqa: E402
from telemetry.replay.scenarios import get_scenario  # noqa: E402
from telemetry.store import Store  # noqa: E402


def build_store(path: Path, gpus: int, days: float, interval: float) -> tuple[datetime, float]:
    start = (datetime.utcnow() - timedelta(days=days)).replace(microsecond=0)
    sc = get_scenario("dev-64").with_overrides(nodes=gpus // 8, days=days, start=start)
    t0 = time.perf_counter()
    with Store(str(path)) as store:
        replay(store, sc, 0, interval_s=interval)
    return start, time.perf_counter() - t0


class Prom:
    def __init__(self, data: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        cfg = data.parent / "prom.yml"
        cfg.write_text("global: {scrape_interval: 15s}\n")
        self.proc = subprocess.Popen(
            [shutil.which("prometheus") or "prometheus", f"--config.file={cfg}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=10y", "--query.max-samples=500000000"],
            stdout=subprocess.DEVNULL, stderr=open(data.parent / "prom.log", "w"),
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/-/ready", timeout=2).read()
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("prometheus did not become ready")

    def timed(self, path: str, **params: str) -> tuple[float, int]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=600) as r:
            doc = json.loads(r.read())
        took = time.perf_counter() - t0
        assert doc["status"] == "success", doc
        return took, len(doc["data"]["result"])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--port", type=int, default=19190)
    add_json_argument(ap)
    ap.add_argument("--quick", action="store_true", help="128 GPUs x 1 day (tests, a check)")
    ap.add_argument("--no-panels", action="store_true", help="bytes per sample only")
    ap.add_argument("--fleet", action="store_true", help="the 16,384-GPU extrapolation instead")
    ap.add_argument("--fleet-hours", type=float, default=4.0, help="the 15 s slice's length")
    ap.add_argument("--retention-days", type=float, default=7.0)
    ap.add_argument("--fleet-store", type=Path, help="an existing llama3-405b store (54 d)")
    args = ap.parse_args()
    if args.quick:
        args.gpus, args.days = 128, 1.0
    if args.fleet:
        from benchmarks.fleet_scale import report

        tmp = Path(tempfile.mkdtemp(prefix="fffleet-"))
        try:
            print(report(tmp, args.fleet_hours, args.retention_days, args.fleet_store,
                         args.repeat, not args.no_panels))  # fmt: skip
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="ffprom-"))
    try:
        store = tmp / "ff.duckdb"
        start, took = build_store(store, args.gpus, args.days, args.interval)
        print(f"replayed {args.gpus} GPUs x {args.days:g} d at {args.interval:g} s in {took:.1f} s")
        data = tmp / "prom-data"
        t0 = time.perf_counter()
        n = load_windows(store, tmp, data)
        print(f"{n:,} samples (every stored DCGM field) as OpenMetrics through promtool "
              f"create-blocks-from openmetrics in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        figures: dict[str, float] = {}
        print("\n".join(bytes_report(store, data, n, "2-hour, as promtool writes", figures)))
        prom = Prom(data, args.port)
        try:
            if not args.no_panels:
                print(_table(prom, store, args, figures))
            waited = wait_compacted(data)
        finally:
            prom.close()
        print(f"Prometheus compacted its blocks ({waited:.0f} s, "
              f"{sum(p.is_dir() for p in data.iterdir())} left):")  # fmt: skip
        after = bytes_report(store, data, n, "compacted by Prometheus", figures)
        print(f"{after[1]}\n{after[-1]}")
        write_figures(args.json, figures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _table(
    prom: Prom, store_path: Path, args: argparse.Namespace, figures: dict[str, float]
) -> str:
    with Store(str(store_path), read_only=True) as s:
        end = s.scalar("SELECT max(ts) FROM gpu_samples")
        begin = s.scalar("SELECT min(ts) FROM gpu_samples")
        host = s.scalar("SELECT host FROM gpus ORDER BY gpu_id LIMIT 1")
        week = TimeRange(begin, end)
        day = TimeRange(end - timedelta(days=1), end)
        e, b = end.timestamp() if end.tzinfo else _epoch(end), _epoch(begin)
        d0 = e - 86400
        rows = []

        def fleet() -> None:
            fleet_series(s, week, 1500)

        def heat() -> None:
            heatmap(s, week, "util")

        def node() -> None:
            node_gpu_series(s, host, day, 500)

        def hot() -> None:
            hottest_gpus(s, 10)

        def under() -> None:  # the GPUs page's chart (job nodes), from per-GPU hourly rollups
            gpus_below_per_hour(s, week, 80.0)

        util = "DCGM_FI_DEV_GPU_UTIL"
        step7 = (e - b) / 1500
        panels = [
            ("fleet avg utilization 7 d", fleet, "/api/v1/query_range",
             {"query": f"avg(avg_over_time({util}[{step7:.0f}s]))", "start": b, "end": e,
              "step": step7}),
            ("per-node heatmap 7 d", heat, "/api/v1/query_range",
             {"query": f"avg by (Hostname) (avg_over_time({util}[{(e - b) / 300:.0f}s]))",
              "start": b, "end": e, "step": (e - b) / 300}),
            ("one node's 8 GPUs 24 h", node, "/api/v1/query_range",
             {"query": f'avg_over_time({util}{{Hostname="{host}"}}[{86400 / 500:.0f}s])',
              "start": d0, "end": e, "step": 86400 / 500}),
            ("top-10 hottest GPUs", hot, "/api/v1/query",
             {"query": "topk(10, DCGM_FI_DEV_GPU_TEMP)", "time": e}),
            ("GPUs under 80 % per hour 7 d", under, "/api/v1/query_range",
             {"query": f"count(avg_over_time({util}[1h]) < 80)", "start": b, "end": e,
              "step": 3600}),
        ]  # fmt: skip
        out = [f"| panel ({args.gpus} GPUs x {args.days:g} d, {args.interval:g} s) | Prometheus "
               "| Factory Floor | ratio |", "|---|---|---|---|"]  # fmt: skip
        for name, ours, path, params in panels:
            theirs = statistics.median(
                prom.timed(path, **{k: str(v) for k, v in params.items()})[0]
                for _ in range(args.repeat)
            )
            mine = timed(ours, s, args.repeat)
            rows.append((name, theirs, mine))
            figures[f"x_faster {name}"] = theirs / mine
            out.append(f"| {name} | {theirs * 1000:,.0f} ms | {mine * 1000:,.1f} ms "
                       f"| {theirs / mine:,.1f}x |")  # fmt: skip
        return "\n".join(out)


def _epoch(ts: datetime) -> float:
    from datetime import UTC

    return ts.replace(tzinfo=UTC).timestamp()


if __name__ == "__main__":
    raise SystemExit(main())
