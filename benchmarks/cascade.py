"""The culprit among 16,384 ranks: a job log in which every rank prints its cascade (about ten
lines each: NCCL's IB warning, ProcessGroupNCCL's "remote process exited", a DistBackendError
traceback) after one rank's CUDA out-of-memory, plus NCCL's communicator line of every rank and
torchrun's teardown (``tests/cascade_fixture.py`` writes it, formats cited there).

Target (#36): imported with ``factoryfloor import`` and the interruption attributed to the right
rank and host in <= 60 s here. Baseline measured in the same run: reading the same file line by
line in Python (``for line in open(path)``), the floor of any reader of it. The import's peak memory
(RSS) is printed too: it grows with the ranks (each rank's host, its signals and their evidence
are kept for the culprit's derivation), not with the log's length.

    .venv/bin/python benchmarks/cascade.py [--nodes 2048] [--per-node 8] [--culprit 9137]
        [--json FILE]    # FILE: the run's key figures, for benchmarks/compare.py
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from benchmarks import figures  # noqa: E402
from tests import cascade_fixture as cf  # noqa: E402


def baseline(path: Path) -> float:
    t = time.perf_counter()
    with open(path, encoding="utf-8") as fh:
        for _ in fh:
            pass
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--culprit", type=int, default=9137)
    figures.add_argument(ap)
    args = ap.parse_args()
    world = args.nodes * args.per_node
    if not 0 <= args.culprit < world:
        ap.error(f"--culprit must be a rank below {world}")
    with tempfile.TemporaryDirectory() as tmp:
        log = cf.build(Path(tmp) / "slurm-81234.out", nodes=args.nodes, per_node=args.per_node,
                       culprit=args.culprit)  # fmt: skip
        lines = sum(1 for _ in open(log, "rb"))
        mib = log.stat().st_size / 2**20
        base = baseline(log)
        store = Path(tmp) / "s.duckdb"
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "import", "--store", str(store), "--run", cf.RUN,
             str(log)],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        took = time.perf_counter() - t
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
        if done.returncode != 0:
            sys.exit(f"import failed: {done.stderr.strip()}")
        with duckdb.connect(str(store), read_only=True) as con:
            got = con.execute("SELECT rank, host, component FROM interruptions").fetchall()
        want = (args.culprit, cf.host(args.culprit // args.per_node))
        right = len(got) == 1 and tuple(got[0][:2]) == want
        print(f"{world:,} ranks, {lines:,} lines, {mib:.1f} MiB")
        print(f"{'':28}{'seconds':>9} {'lines/s':>12} {'ratio':>7}")
        print(f"{'baseline: read lines':28}{base:9.2f} {lines / base:12,.0f} {1:7.1f}")
        print(f"{'factoryfloor import':28}{took:9.2f} {lines / took:12,.0f} {took / base:7.1f}")
        print(f"import's peak memory (RSS): {peak_mib:,.0f} MiB, "
              f"{peak_mib * 2**20 / world:,.0f} bytes per rank")
        print(f"attributed to: {got} (want rank {want[0]} on {want[1]}): "
              f"{'right' if right else 'WRONG'}; target <= 60 s: "
              f"{'met' if took <= 60 and right else 'NOT met'}")  # fmt: skip
        figures.write(
            args.json,
            {
                "ranks": world,
                "log_lines": lines,
                "log_mib": mib,
                "baseline_read_lines_s": base,
                "baseline_read_lines_per_s": lines / base,
                "import_s": took,
                "import_lines_per_s": lines / took,
                "ratio_import_over_read": took / base,
                "attributed_right": int(right),
                "import_peak_rss_mib": peak_mib,
            },
        )
        if not right:
            sys.exit(1)


if __name__ == "__main__":
    main()
