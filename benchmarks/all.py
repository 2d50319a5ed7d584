"""Every benchmark, one after another (``make bench``), each printing its figures beside its
same-run baseline, and the run compared with the one before it.

    .venv/bin/python benchmarks/all.py                          # every benchmark, default options
    .venv/bin/python benchmarks/all.py --only dashboard,goodput --store llama.duckdb

Each benchmark's key figures go to ``benchmarks/results/<UTC time>-<commit>/NAME.json`` (its
printed output beside them, ``NAME.txt``). The 54-day llama3-405b store is replayed once, by
the replay benchmark (which times it, ``--keep``), and handed to the dashboard, goodput and
workload benchmarks, which would each replay it again otherwise (``--store`` gives one instead;
it is only read: the dashboard writes its ingest rounds into a copy). At the end the run is
compared with the newest earlier run in ``benchmarks/results/`` (``benchmarks/compare.py``):
which figures moved by more than 20 %. Exit status 1 when a benchmark failed; a figure that
moved is reported, not failed (run it again on a quiet machine to tell noise from a change).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# In ``make bench``'s order: the replay first, as it builds the store the next ones read.
BENCHMARKS = [
    "replay",
    "ingest",
    "dashboard",
    "goodput",
    "workload",
    "logs",
    "ckptscan",
    "slurm",
    "flight_recorder",
    "cascade",
    "exam",
    "live_culprit",
    "corpus",
    "prometheus",  # --quick (128 GPUs x 1 d): the full 1,024 GPUs x 7 d takes ~30 min here
    "tsdb",  # the TSDB-backed setup beside store-only, 1,024 GPUs x 1 d (~1 min here)
]
READS_STORE = {"dashboard", "goodput", "workload"}  # take --store (llama3-405b) instead of a replay
# make bench's own options: the live culprit's every kind takes about 30 min, its quick set 5
DEFAULT_ARGS = {"live_culprit": ["--quick"], "prometheus": ["--quick"]}


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    except OSError:
        return "nogit"
    return (out.stdout.strip() or "nogit") + ("-dirty" if dirty else "")


def _run(name: str, args: list[str], out: Path) -> tuple[int, float]:
    """Run one benchmark, its output shown as it comes and kept in ``out/NAME.txt``."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args]
    cmd += ["--json", str(out / f"{name}.json")]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    with open(out / f"{name}.txt", "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        rc = proc.wait()
    return rc, time.perf_counter() - t0


def _previous(out: Path) -> Path | None:
    """The newest earlier run with figures in it."""
    runs = sorted(
        (d for d in RESULTS.glob("*") if d.is_dir() and d != out and any(d.glob("*.json"))),
        key=lambda d: d.name,
    )
    return runs[-1] if runs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", help=f"comma-separated benchmarks to run (of: {', '.join(BENCHMARKS)})"
    )
    ap.add_argument(
        "--store", help="an existing llama3-405b store for " + ", ".join(sorted(READS_STORE))
    )
    ap.add_argument(
        "--out", help="where the figures go (default: benchmarks/results/<time>-<commit>)"
    )
    a = ap.parse_args()
    names = BENCHMARKS
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = sorted(set(names) - set(BENCHMARKS))
        if unknown:
            ap.error(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    if a.store and not Path(a.store).is_file():
        ap.error(f"--store {a.store}: no such file")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    out = Path(a.out) if a.out else RESULTS / f"{stamp}-{_commit()}"
    out.mkdir(parents=True, exist_ok=True)
    failed, took = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        store = a.store
        for name in names:
            args: list[str] = []
            if name == "replay" and not store and READS_STORE & set(names):
                store = str(Path(tmp) / "llama.duckdb")
                args = ["--keep", store]
            elif name in READS_STORE and store:
                args = ["--store", store]
            args += DEFAULT_ARGS.get(name, [])
            rc, took[name] = _run(name, args, out)
            if rc != 0:
                failed.append(name)
                if name == "replay" and args:  # the store was not built: the next ones build it
                    store = a.store
    print(f"\n=== figures in {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    print("  ".join(f"{n} {s:.0f} s" for n, s in took.items()))
    prev = _previous(out)
    if prev is None:
        print("no earlier run in benchmarks/results/ to compare with")
    else:
        print(f"=== against the run before ({prev.name}):", flush=True)
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "compare.py"), str(prev), str(out)]
        )
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
