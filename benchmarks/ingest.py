"""Ingest benchmark: dcgm-exporter text to columnar batches, against prometheus_client, same run.

    .venv/bin/python benchmarks/ingest.py                  # 2,048 hosts x 8 GPUs, default counters
    .venv/bin/python benchmarks/ingest.py --hosts 256      # a quicker look

Renders one dcgm-exporter scrape per host (the exporter's default counters, with # HELP/# TYPE,
labels in its order, doubles with 6 decimals), then parses every scrape one call per target as
the daemon does, and prints samples per second for:

* prometheus_client's ``text_string_to_metric_families`` (the reference, parse only);
* ``telemetry.collect.exposition.parse``, first round (label-block cache cold: every host new)
  and a later round (cache warm: the same targets again, the steady state of a scrape loop);
* parse every scrape, then ``round_rows`` and the round's two Arrow tables (the store's batch).

Target (issue #4): parse >= 500 K samples/s and >= 20x the reference on one core.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from telemetry.collect import exposition  # noqa: E402
from telemetry.reference import dcgm_fields  # noqa: E402

GPUS_PER_HOST = 8
PCI = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]  # a DGX H100's GPU buses
_DOUBLE_UNITS = ("W", "ratio 0-1")  # DCGM double fields, printed with %f; the rest are int64


def _value(field: str, unit: str, rng: random.Random) -> str:
    if unit in _DOUBLE_UNITS:
        scale = 700.0 if unit == "W" else 1.0
        return f"{rng.random() * scale:.6f}"
    if "ENERGY" in field or "BANDWIDTH" in field or "PCIE_" in field:
        return str(rng.randrange(10**9, 10**13))
    return str(rng.randrange(0, 2000))


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


def ours_to_arrow(texts: list[str]) -> int:
    """A round as the store gets it: every scrape parsed, then one batch and its two tables."""
    rows = exposition.round_rows([exposition.parse(t) for t in texts])
    rows.table()
    rows.extras_table()
    return rows.samples


def end_to_end(texts: list[str], store_dir: str | None) -> tuple[float, int] | None:
    """TODO(issue #4, store side): exposition text -> committed rows in a Store, one batch per
    round, on one core. Return (seconds, samples) and ``main`` prints it beside the parse rates;
    None means not measured yet."""
    return None


def best(fn: Callable[[Any], int], items: list[Any], rounds: int, cold: bool = False) -> float:
    """Fewest CPU seconds over ``rounds`` runs (the machine's other load only ever adds time);
    ``cold`` forgets the parser's caches before each run, as for targets never seen before."""
    times = []
    for _ in range(rounds):
        if cold:
            exposition.clear_caches()
        times.append(timed(fn, items)[0])
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2048, help="8-GPU hosts (default 2,048)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of ours; the best is reported")
    ap.add_argument("--ref-rounds", type=int, default=2, help="runs of the reference")
    ap.add_argument("--dir", default=None, help="where the end-to-end store goes (TODO)")
    args = ap.parse_args()
    texts = fleet(args.hosts)
    mib = sum(len(t) for t in texts) / 2**20
    n = timed(ours, texts)[1]
    cold_s = best(ours, texts, args.rounds, cold=True)
    warm_s = best(ours, texts, args.rounds)
    arrow_cold_s = best(ours_to_arrow, [texts], args.rounds, cold=True)
    arrow_warm_s = best(ours_to_arrow, [texts], args.rounds)
    ref_s = best(reference, texts, args.ref_rounds)
    assert timed(reference, texts[:1])[1] * len(texts) == n
    print(
        f"fleet                     {args.hosts:,} hosts x {GPUS_PER_HOST} GPUs = "
        f"{args.hosts * GPUS_PER_HOST:,} GPUs, default counters"
    )
    print(f"scrape round              {n:,} samples in {len(texts):,} scrapes ({mib:.1f} MiB)")
    print(f"prometheus_client         {ref_s:8.3f} s  {n / ref_s:>10,.0f} samples/s  (reference)")
    for label, s in (
        ("parse, cold cache", cold_s),
        ("parse, warm cache", warm_s),
        ("+ round_rows + Arrow, cold", arrow_cold_s),
        ("+ round_rows + Arrow, warm", arrow_warm_s),
    ):
        print(f"{label:<26}{s:8.3f} s  {n / s:>10,.0f} samples/s  {ref_s / s:5.1f}x reference")
    e2e = end_to_end(texts, args.dir)
    if e2e is None:
        print("end to end (store)        not measured yet (TODO in benchmarks/ingest.py)")
    else:
        s, rows = e2e
        print(
            f"end to end (store)        {s:8.3f} s  {rows / s:>10,.0f} samples/s  "
            f"{ref_s / s * rows / n:5.1f}x reference"
        )
    met = "met" if n / cold_s >= 500_000 and ref_s / cold_s >= 20 else "MISSED"
    print(f"target                    parse >= 500,000 samples/s and >= 20x reference: {met}")


if __name__ == "__main__":
    main()
