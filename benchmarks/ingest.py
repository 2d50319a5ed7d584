"""Ingest benchmark: dcgm-exporter text to columnar batches, against prometheus_client, same run.

    .venv/bin/python benchmarks/ingest.py                  # 2,048 hosts x 8 GPUs, default counters
    .venv/bin/python benchmarks/ingest.py --hosts 256      # a quicker look
    .venv/bin/python benchmarks/ingest.py --json FILE      # also write the key figures to FILE

Renders one dcgm-exporter scrape per host (the exporter's default counters, with # HELP/# TYPE,
labels in its order, doubles with 6 decimals), then parses every scrape one call per target as
the daemon does, and prints samples per second for:

* prometheus_client's ``text_string_to_metric_families`` (the reference, parse only);
* ``telemetry.ingest.exposition.parse``, first round (label-block cache cold: every host new)
  and a later round (cache warm: the same targets again, the steady state of a scrape loop);
* ``telemetry.ingest.roundparse.parse_round``: the whole round at once in Arrow's kernels,
  as the store's sink parses (cold: no label block remembered; warm: the last round's);
* the round parsed at once, then ``round_rows`` and the round's two Arrow tables (the store's
  batch);
* end to end: ``StoreSink.write`` of the round into a DuckDB file in a temporary directory
  (parse, ``round_rows``, Arrow, one append transaction, rollup refresh), DuckDB on one thread;
  the first round (cold caches, every GPU new), the fastest later round, and the mean of the
  later rounds (the steady state: DuckDB's checkpoints included, which the fastest leaves out);
  and the same mean with no rollup refreshed, the floor under the rollups (not a way to run);

and, last, whole scrape rounds against ``replay llama3-405b --serve-exporters`` (simulated
exporters in a subprocess on 127.0.0.1): concurrent HTTP fetch of ``--hosts`` targets plus the
sink's write, ``--farm-starts`` farms (3) one after another, each scraped ``--farm-rounds``
times (5): each start's first round and the later ones, as medians. The farm shares this
machine's cores with the scraper; real exporters do not.

Targets (issue #4): end to end >= 500 K samples/s and >= 20x the reference on one core, and a
2,048-node round within the 15 s scrape interval. CPU seconds are reported (the best of several
runs: other load on the machine only ever adds time); round times are wall seconds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchmarks import figures  # noqa: E402
from telemetry.collect.dcgm.scrape import load_targets, scrape_round  # noqa: E402
from telemetry.ingest import dcgm_rows, exposition, roundparse  # noqa: E402
from telemetry.ingest.sink import StoreSink  # noqa: E402
from telemetry.ingest.targets import Fetch, Target  # noqa: E402
from telemetry.reference import dcgm_fields  # noqa: E402
from telemetry.replay.scenarios import get_scenario  # noqa: E402
from telemetry.store import Store  # noqa: E402

GPUS_PER_HOST = 8
START = datetime(2026, 3, 1)  # the benchmark stores' first round
PCI = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]  # a DGX H100's GPU buses
_DOUBLE_UNITS = ("W", "ratio 0-1")  # DCGM double fields, printed with %f; the rest are int64


def _value(field: str, unit: str, rng: random.Random) -> str:
    if unit in _DOUBLE_UNITS:
        scale = 700.0 if unit == "W" else 1.0
        return f"{rng.random() * scale:.6f}"
    if "PCIE_" in field and "BYTES" in field:  # rates a PCIe Gen5 x16 link can carry
        return str(rng.randrange(10**9, 64 * 10**9))
    if "ENERGY" in field or "BANDWIDTH" in field or "PCIE_" in field:
        return str(rng.randrange(10**9, 10**13))
    if "CLOCK" in field or "_FB_" in field:
        return str(rng.randrange(0, 2000))
    return str(rng.randrange(0, 100))  # utilizations, temperatures, XIDs: what GPUs report


def render_host(host: str, rng: random.Random) -> str:
    """One dcgm-exporter ``/metrics`` body for an 8-GPU host with the default counters."""
    blocks = [
        f'gpu="{g}",UUID="GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-'
        f'{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}",'
        f'pci_bus_id="00000000:{PCI[g]}:00.0",device="nvidia{g}",'
        f'modelName="NVIDIA H100 80GB HBM3",Hostname="{host}",'
        f'DCGM_FI_DRIVER_VERSION="550.90.07"'
        for g in range(GPUS_PER_HOST)
    ]
    out = []
    for f in dcgm_fields().values():
        if not f.default or f.prom_type == "label":
            continue
        out.append(f"# HELP {f.field} {f.help}\n# TYPE {f.field} {f.prom_type}\n")
        out.extend(f"{f.field}{{{b}}} {_value(f.field, f.unit, rng)}\n" for b in blocks)
    return "".join(out)


def fleet(hosts: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [render_host(f"dgx-h100-{i:04d}", rng) for i in range(hosts)]


def timed(fn: Callable[[Any], int], texts: list[Any]) -> tuple[float, int]:
    """CPU seconds to run ``fn`` on every item (one call per target), and its sample count."""
    t0 = time.process_time()
    n = sum(fn(t) for t in texts)
    return time.process_time() - t0, n


def reference(text: str) -> int:
    return sum(len(m.samples) for m in text_string_to_metric_families(text))


def ours(text: str) -> int:
    return len(exposition.parse(text))


def ours_round(texts: list[str]) -> int:
    """A round parsed at once, in Arrow's kernels (``roundparse``), as the store's sink does."""
    return sum(len(s) for s in roundparse.parse_round(texts))


def ours_to_arrow(texts: list[str]) -> int:
    """A round as the store gets it: parsed at once, then one batch and its two tables."""
    rows = dcgm_rows.round_rows(roundparse.parse_round(texts))
    rows.table()
    rows.extras_table()
    return rows.samples


def end_to_end(
    texts: list[str], store_dir: str | None, rounds: int, rollups: bool = True
) -> tuple[float, float, float, int]:
    """Exposition text -> committed rows, one core: every round goes through ``StoreSink.write``
    (parse, ``round_rows``, Arrow, one ``append_many`` transaction into a DuckDB file, rollup
    refresh) with DuckDB on one thread. Returns CPU seconds of the first round (caches cold,
    every GPU new), of the fastest later round and the mean of the later rounds (the scrape
    loop's steady state: it includes the checkpoints DuckDB makes as its log fills, about one
    round in two at 2,048 nodes), and the samples per round, checked against what the store
    says it took. Without ``rollups`` no rollup is refreshed: not a way to run, but the floor
    under them (parse, rows, one append) that shows what is left for the rollups."""
    clear_caches()
    fetches = [
        Fetch(Target(f"http://dgx-h100-{i:04d}:9400/metrics"), t, None, 0.0)
        for i, t in enumerate(texts)
    ]
    with tempfile.TemporaryDirectory(dir=store_dir, prefix="ingest-bench-") as tmp:
        with Store(os.path.join(tmp, "bench.duckdb")) as store:
            store.cursor().execute("SET threads = 1")
            sink = StoreSink(store)
            if not rollups:
                store.refresh_rollups = lambda *a, **k: None  # type: ignore[method-assign]
            times = []
            for k in range(rounds):
                t0 = time.process_time()
                sink.write(START + timedelta(seconds=15 * k), fetches)
                times.append(time.process_time() - t0)
            stored = store.scalar("SELECT sum(samples) FROM targets WHERE ts = ?", [START])
    later = times[1:] or times
    return times[0], min(later), sum(later) / len(later), int(stored)


def farm_rounds(hosts: int, rounds: int, store_dir: str | None) -> list[tuple[float, float, int]]:
    """Whole scrape rounds against simulated dcgm-exporters over HTTP: ``replay llama3-405b
    --serve-exporters`` in a subprocess (2,064 endpoints on 127.0.0.1; ``--nodes hosts`` when
    more are asked for), the first ``hosts`` of them scraped concurrently, then the round
    written by ``StoreSink`` into a DuckDB file, as the daemon's round does one after the other.
    Returns per round (fetch wall seconds, write wall seconds, targets up)."""
    sc = get_scenario("llama3-405b")
    served = sc.nodes + sc.spare_nodes  # each node an exporter of the farm
    with tempfile.TemporaryDirectory(dir=store_dir, prefix="ingest-farm-") as tmp:
        targets_file = os.path.join(tmp, "targets.json")
        farm = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "replay", "--scenario", "llama3-405b",
             "--days", "1", *(["--nodes", str(hosts)] if hosts > served else []),
             "--serve-exporters", "--exporter-base-port", "0",
             "--targets-file", targets_file, "--no-progress"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not os.path.exists(targets_file):
                if farm.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"exporter farm did not start: {farm.stderr.read()}")  # type: ignore[union-attr]
                time.sleep(0.2)
            targets = load_targets(targets_file)[:hosts]
            out = []
            with Store(os.path.join(tmp, "farm.duckdb")) as store:
                sink = StoreSink(store)
                for k in range(rounds):
                    t0 = time.perf_counter()
                    fetches = scrape_round(targets, timeout_s=10.0)
                    t1 = time.perf_counter()
                    report = sink.write(START + timedelta(seconds=15 * k), fetches)
                    out.append((t1 - t0, time.perf_counter() - t1, report.up))
            return out
        finally:
            farm.terminate()
            farm.wait(timeout=30)


def clear_caches() -> None:
    """Forget what parsing and reshaping remember across rounds, as for targets never seen."""
    exposition.clear_caches()
    roundparse.clear_cache()
    dcgm_rows.clear_caches()


def best(fn: Callable[[Any], int], items: list[Any], rounds: int, cold: bool = False) -> float:
    """Fewest CPU seconds over ``rounds`` runs (the machine's other load only ever adds time);
    ``cold`` forgets the parser's caches before each run, as for targets never seen before."""
    times = []
    for _ in range(rounds):
        if cold:
            clear_caches()
        times.append(timed(fn, items)[0])
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2048, help="8-GPU hosts (default 2,048)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of ours; the best is reported")
    ap.add_argument("--ref-rounds", type=int, default=2, help="runs of the reference")
    ap.add_argument(
        "--store-rounds",
        type=int,
        default=41,
        help="rounds written end to end (default 41: the first, then two whole 5-minute "
        "periods of 15 s rounds, each with its one build of the per-GPU hours)",
    )
    ap.add_argument("--farm-rounds", type=int, default=5, help="scrape rounds (0: skip)")
    ap.add_argument(
        "--farm-starts", type=int, default=3, help="farms started, each for --farm-rounds rounds"
    )
    ap.add_argument(
        "--farm-hosts", type=int, default=None, help="exporters in the farm (default: --hosts)"
    )
    ap.add_argument("--dir", default=None, help="where the benchmark stores go (default: tmp)")
    figures.add_argument(ap)
    args = ap.parse_args()
    if args.farm_starts < 1:
        ap.error("--farm-starts must be at least 1")
    print(f"load average              {_load()} (2 cores shared with other work)")
    texts = fleet(args.hosts)
    mib = sum(len(t) for t in texts) / 2**20
    n = timed(ours, texts)[1]
    cold_s = best(ours, texts, args.rounds, cold=True)
    warm_s = best(ours, texts, args.rounds)
    round_cold_s = best(ours_round, [texts], args.rounds, cold=True)
    round_warm_s = best(ours_round, [texts], args.rounds)
    arrow_cold_s = best(ours_to_arrow, [texts], args.rounds, cold=True)
    arrow_warm_s = best(ours_to_arrow, [texts], args.rounds)
    store_rounds = max(2, args.store_rounds)
    e2e_cold_s, e2e_s, e2e_mean_s, stored = end_to_end(texts, args.dir, store_rounds)
    floor_s = end_to_end(texts, args.dir, store_rounds, rollups=False)[2]
    ref_s = best(reference, texts, args.ref_rounds)
    assert timed(reference, texts[:1])[1] * len(texts) == n
    assert stored == n, f"the store took {stored:,} samples of {n:,}"
    print(
        f"fleet                     {args.hosts:,} hosts x {GPUS_PER_HOST} GPUs = "
        f"{args.hosts * GPUS_PER_HOST:,} GPUs, default counters"
    )
    print(f"scrape round              {n:,} samples in {len(texts):,} scrapes ({mib:.1f} MiB)")
    print(f"prometheus_client         {ref_s:8.3f} s  {n / ref_s:>10,.0f} samples/s  (reference)")
    out: dict[str, float] = {
        "fleet_hosts": args.hosts,
        "fleet_gpus": args.hosts * GPUS_PER_HOST,
        "round_samples": n,
        "round_scrapes": len(texts),
        "round_mib": mib,
        "baseline_prometheus_client_cpu_s": ref_s,
        "baseline_prometheus_client_samples_per_s": n / ref_s,
    }
    for key, label, s in (
        ("parse_cold_cache", "parse, cold cache", cold_s),
        ("parse_warm_cache", "parse, warm cache", warm_s),
        ("parse_round_cold_cache", "parse round, cold cache", round_cold_s),
        ("parse_round_warm_cache", "parse round, warm cache", round_warm_s),
        ("arrow_cold_cache", "+ round_rows + Arrow, cold", arrow_cold_s),
        ("arrow_warm_cache", "+ round_rows + Arrow, warm", arrow_warm_s),
        ("end_to_end_first_round", "end to end, first round", e2e_cold_s),
        ("end_to_end_fastest_round", "end to end, fastest round", e2e_s),
        ("end_to_end_mean", f"end to end, mean of {store_rounds - 1}", e2e_mean_s),
        ("end_to_end_mean_no_rollups", "  the same, no rollups", floor_s),
    ):
        print(f"{label:<26}{s:8.3f} s  {n / s:>10,.0f} samples/s  {ref_s / s:5.1f}x reference")
        out[f"{key}_cpu_s"] = s
        out[f"{key}_samples_per_s"] = n / s
        out[f"ratio_{key}_x_baseline"] = ref_s / s
    out["end_to_end_mean_rounds"] = store_rounds - 1
    out["end_to_end_rollups_share_cpu_s"] = e2e_mean_s - floor_s
    met = "met" if n / e2e_mean_s >= 500_000 and ref_s / e2e_mean_s >= 20 else "MISSED"
    print(f"target                    end to end (mean) >= 500,000 samples/s and >= 20x: {met}")
    met = "met" if n / e2e_mean_s >= 1_000_000 and n / e2e_cold_s >= 800_000 else "MISSED"
    print(f"target (#16)              mean >= 1,000,000 samples/s, first >= 800,000: {met}")
    print(
        f"                          the rollups' share of a round: {e2e_mean_s - floor_s:.3f} s; "
        f"without any, {n / floor_s:,.0f} samples/s"
    )
    if args.farm_rounds:
        hosts = args.farm_hosts or args.hosts
        farms = [farm_rounds(hosts, args.farm_rounds, args.dir) for _ in range(args.farm_starts)]
        farm = [r for one in farms for r in one]
        out["farm_hosts"] = hosts
        for i, one in enumerate(farms):
            for k, (fetch_s, write_s, up) in enumerate(one):
                print(
                    f"farm {i + 1} round {k + 1:<8}{fetch_s + write_s:8.3f} s  (fetch "
                    f"{fetch_s:.2f} s + write {write_s:.2f} s, {up:,}/{hosts:,} targets up)"
                )
        # as figures: the median of each start's first round (the store's tables new) and of
        # the later ones; one later round alone moved by 14 % between runs, and one start's
        # first fetch read 0.77 s where seven others read 0.54-0.59 s
        firsts = [one[0] for one in farms]
        later = [r for one in farms for r in one[1:]] or firsts
        for when, rounds in (("first", firsts), ("later", later)):
            out[f"farm_{when}_round_s"] = statistics.median(f + w for f, w, _ in rounds)
            out[f"farm_{when}_fetch_s"] = statistics.median(f for f, _, _ in rounds)
            out[f"farm_{when}_write_s"] = statistics.median(w for _, w, _ in rounds)
        out["farm_rounds"] = len(farm)
        out["farm_fewest_targets_up"] = min(up for *_, up in farm)
        worst = max(f + w for f, w, _ in farm)
        out["farm_worst_round_s"] = worst
        met = "met" if worst <= 15.0 and all(up == hosts for *_, up in farm) else "MISSED"
        print(f"target                    every {hosts:,}-exporter round within 15 s: {met}")
    print(f"load average              {_load()}")
    figures.write(args.json, out)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
