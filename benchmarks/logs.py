"""Text-log import benchmark: ``textlogs.parse_file`` on a realistic Megatron-LM job log.

    .venv/bin/python benchmarks/logs.py            # a 1 GiB log (issue #13's figure)
    .venv/bin/python benchmarks/logs.py --mb 50    # a quick look
    .venv/bin/python benchmarks/logs.py --json FILE    # and its key figures, for compare.py

Writes, in a temporary directory, a job log of ``--mb`` MiB as ``srun`` collects it: one
Megatron iteration line per iteration (log interval 1), and between them what a real job prints
(the timers block every 10 iterations, memory reports, Python logging lines with times, NCCL INFO
chatter, warnings) plus, every ~200,000 lines, a failure (NCCL watchdog timeout, a rank's
traceback, ``srun`` kill, restart with checkpoint load). Also a noise-only and an iteration-only
file (up to 100 MiB each) to show both ends. For each file it prints lines/s and MiB/s of
``parse_file`` (results streamed through ``on_batch``, as an importer of big files uses it) next
to the baseline measured in the same run: plain ``for line in open(path)`` over the same file.
Best of ``--repeat`` runs (other load on the machine only ever adds time). The mixed log is
then imported end to end twice, once: in this process through the cluster source and the store
writer (beside parsing alone), and as a user runs it, ``factoryfloor import --store NEW --run
R FILE`` in its own process (beside the plain read, and with the CPU seconds it used).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import figures  # noqa: E402
from telemetry.collect.logs.textlogs import LogBatch, parse_file  # noqa: E402

START = datetime(2026, 3, 1)
TIMERS = [
    "(min, max) time across ranks (ms):",
    "    forward-backward ...............................: (5012.11, 5013.40)",
    "    forward-compute ................................: (1510.22, 1702.93)",
    "    backward-compute ...............................: (3301.50, 3405.12)",
    "    batch-generator ................................: (2.31, 3.02)",
    "    layernorm-grads-all-reduce .....................: (0.02, 0.03)",
    "    optimizer ......................................: (45.10, 46.21)",
]
NOISE = [
    "[Rank 0] (after {it} iterations) memory (MB) | allocated: 23456.7 | max allocated: "
    "61234.5 | reserved: 70000.0 | max reserved: 70000.0",
    "{ts},123 - megatron.core.datasets - INFO - loaded shard {it} of 65536 from /lustre/data",
    "node-{n}:{pid}:{pid} [{gpu}] NCCL INFO Channel 03/0 : 3[3] -> 4[4] via P2P/IPC/read",
    "/usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:92: UserWarning: None of "
    "the inputs have requires_grad=True. Gradients will be None",
    "{ts},456 - megatron.training.utils - INFO - theoretical memory footprints: weight and "
    "optimizer=61234.50 MB",
]


def _iteration(it: int, ts: datetime, rng: random.Random) -> str:
    loss = 2.0 + 8.0 / (1 + it / 500) + rng.random() * 0.05
    return (
        f" [{ts:%Y-%m-%d %H:%M:%S}.{ts.microsecond:06d}] iteration {it:8d}/  500000 | consumed "
        f"samples: {it * 4096:12d} | elapsed time per iteration (ms): 5123.4 | learning rate: "
        f"{3e-4 * min(1, it / 2000):.6E} | global batch size:  4096 | lm loss: {loss:.6E} | loss "
        f"scale: 1.0 | grad norm: {0.8 + rng.random() * 0.2:.3f} | number of skipped iterations:"
        f"   0 | number of nan iterations:   0 |"
    )


def _failure(it: int, ts: datetime) -> list[str]:
    return [
        f"[rank3]:[E{ts:%m%d %H:%M:%S}.123456 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.",
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/workspace/megatron/pretrain_gpt.py", line 312, in <module>',
        "[rank3]:     pretrain(train_valid_test_datasets_provider, model_provider)",
        "[rank3]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3.",
        "srun: error: node-7: task 3: Killed",
        f" loading distributed checkpoint from /lustre/ckpt at iteration {it - it % 1000}",
        f"  successfully loaded checkpoint from /lustre/ckpt [ t 1/8, p 1/16 ] at iteration "
        f"{it - it % 1000}",
    ]


def write_log(path: Path, mib: float, kind: str, seed: int = 7) -> int:
    """A log of ``mib`` MiB; kind is mixed, noise or iterations. Returns its line count."""
    rng = random.Random(seed)
    target, size, lines, it = int(mib * 2**20), 0, 0, 0
    ts = START
    with open(path, "w", encoding="utf-8") as fh:
        while size < target:
            batch: list[str] = []
            for _ in range(2000):
                it += 1
                ts += timedelta(milliseconds=5123)
                if kind != "noise":
                    batch.append(_iteration(it, ts, rng))
                if kind == "iterations":
                    continue
                if it % 10 == 0:
                    batch += TIMERS
                for _ in range(rng.randint(1, 4)):
                    batch.append(rng.choice(NOISE).format(
                        it=it, ts=f"{ts:%Y-%m-%d %H:%M:%S}", n=rng.randint(0, 2047),
                        pid=rng.randint(1000, 9999), gpu=rng.randint(0, 7)))
                if kind == "mixed" and it % 40000 == 0:
                    batch += _failure(it, ts)
            text = "\n".join(batch) + "\n"
            fh.write(text)
            size += len(text.encode())
            lines += len(batch)
    return lines


def baseline(path: Path) -> float:
    t = time.perf_counter()
    n = 0
    with open(path, encoding="utf-8") as fh:
        for _ in fh:
            n += 1
    return time.perf_counter() - t


def measure(path: Path, repeat: int) -> tuple[float, dict[str, int]]:
    best, counts = float("inf"), {}
    for _ in range(repeat):
        found = [0, 0, 0]

        def take(b: LogBatch, found: list[int] = found) -> None:
            found[0] += len(b.metrics) + sum(len(c["step"]) for c in b.metric_columns)
            found[1] += len(b.signals)
            found[2] += len(b.checkpoint_events)

        t = time.perf_counter()
        scan = parse_file(path, year_hint=START.year, on_batch=take)
        best = min(best, time.perf_counter() - t)
        counts = {"lines": scan.lines, "metrics": found[0], "signals": found[1],
                  "checkpoint events": found[2], "unrecognised": scan.unrecognised}
    return best, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=1024, help="size of the mixed log in MiB")
    ap.add_argument("--repeat", type=int, default=2)
    figures.add_argument(ap)
    args = ap.parse_args()
    figs: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = [("mixed job log", "mixed", args.mb), ("noise only", "noise", min(args.mb, 100)),
                 ("iteration lines only", "iterations", min(args.mb, 100))]
        print(f"{'file':22} {'MiB':>7} {'lines':>11} {'parse lines/s':>14} {'MiB/s':>7} "
              f"{'baseline lines/s':>17} {'ratio':>6}")
        for title, kind, mib in files:
            path = Path(tmp) / f"slurm-{kind}.out"
            lines = write_log(path, mib, kind)
            size = path.stat().st_size / 2**20
            base = min(baseline(path) for _ in range(args.repeat))
            took, counts = measure(path, args.repeat)
            assert counts["lines"] == lines, (counts, lines)
            print(f"{title:22} {size:7.0f} {lines:11,} {lines / took:14,.0f} {size / took:7.1f} "
                  f"{lines / base:17,.0f} {base / took:6.2f}")
            print(f"{'':22} found: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
            figs |= {
                f"{kind}_mib": size,
                f"{kind}_lines": lines,
                f"{kind}_parse_lines_per_s": lines / took,
                f"{kind}_parse_mib_per_s": size / took,
                f"baseline_{kind}_read_lines_per_s": lines / base,
                f"ratio_{kind}_read_over_parse": base / took,
            } | {
                f"{kind}_found_{k.replace(' ', '_')}": v for k, v in counts.items() if k != "lines"
            }
            if kind == "mixed":
                figs |= imported(path, lines, took, Path(tmp))
                figs |= cli_import(path, lines, base, Path(tmp))
            path.unlink()
    # a count of 0 (noise has no metrics, say) is left out: compare.py judges each figure by its
    # ratio to the first run's, and 0 has none (0 vs 0 would read as moved)
    figures.write(args.json, {k: v for k, v in figs.items() if v})


def imported(path: Path, lines: int, parse_s: float, tmp: Path) -> dict[str, float]:
    """End to end, as ``factoryfloor import --run R FILE`` does it: the cluster source read
    into a fresh store (metrics validated and stored, signals, checkpoint lines), then the
    run's interruptions derived. Ratio: against parsing alone, measured above. Returns the
    figures it prints."""
    from telemetry.collect.logs.cluster_source import ClusterSource
    from telemetry.ingest.daemon import collect, collect_overlapped
    from telemetry.ingest.writer import StoreWriter
    from telemetry.store import Store

    store_path = tmp / "import.duckdb"
    with Store(str(store_path)) as store:
        source = ClusterSource(files=[str(path)], run="bench")
        t0 = time.perf_counter()
        written = collect_overlapped(source, StoreWriter(store), datetime(2026, 3, 1))
        took = time.perf_counter() - t0
        source.close()
        derive_s = 0.0
        for w in written:
            if isinstance(w.report, list):
                # the median of 3 (one timing moved 0.58 -> 0.45 s between two runs)
                runs = []
                for _ in range(3):
                    t1 = time.perf_counter()
                    collect(ClusterSource(run="bench", files=[]), StoreWriter(store), START)
                    runs.append(time.perf_counter() - t1)
                derive_s = sorted(runs)[1]
        metrics = store.scalar("SELECT count(*) FROM train_metrics")
        ints = store.scalar("SELECT count(*) FROM interruptions")
    store_path.unlink()
    print(
        f"{'import (end to end)':22} {'':7} {lines:11,} {lines / took:14,.0f} "
        f"{path.stat().st_size / 2**20 / took:7.1f} {'parse only: ':>17}{parse_s / took:6.2f}"
    )
    print(
        f"{'':22} {took:.1f} s: {metrics:,} train_metrics stored, {ints} interruptions "
        f"inferred; a re-derivation over the stored run takes {derive_s:.2f} s"
    )
    return {
        "import_lines_per_s": lines / took,
        "import_mib_per_s": path.stat().st_size / 2**20 / took,
        "ratio_parse_over_import": parse_s / took,
        "import_s": took,
        "import_train_metrics_stored": metrics,
        "import_interruptions_inferred": ints,
        "rederive_s": derive_s,
    }


def cli_import(path: Path, lines: int, base_s: float, tmp: Path) -> dict[str, float]:
    """The import as a user runs it: ``factoryfloor import --store NEW --run R FILE`` in its
    own process (start-up, store creation, the import, its printed account and the derived
    interruptions), timed from outside. Beside it the plain read of the same file (the ratio
    is what other load on the machine changes least) and the CPU seconds the process used."""
    import resource
    import subprocess

    store = tmp / "cli.duckdb"
    cmd = [sys.executable, "-m", "app.cli", "import", "--store", str(store), "--run", "bench",
           str(path)]  # fmt: skip
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"factoryfloor import failed ({done.returncode}): {done.stderr[-2000:]}")
    store.unlink()
    said = next((ln for ln in done.stdout.splitlines() if "interruption(s) inferred" in ln), "")
    print(
        f"{'factoryfloor import':22} {'':7} {lines:11,} {lines / took:14,.0f} "
        f"{path.stat().st_size / 2**20 / took:7.1f} {'plain read: ':>17}{base_s / took:6.3f}"
    )
    print(f"{'':22} {took:.1f} s wall, {cpu:.1f} s CPU (the command, as a user runs it); {said}")
    return {
        "cli_import_s": took,
        "cli_import_cpu_s": cpu,
        "cli_import_lines_per_s": lines / took,
        "ratio_cli_import_read_over_import": base_s / took,
    }


if __name__ == "__main__":
    main()
