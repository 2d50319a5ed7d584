"""Reliability benchmark: faults, bad input, load and soak, in one table (issue #5).

    .venv/bin/python benchmarks/reliability.py                  # everything, 50 kill cycles
    .venv/bin/python benchmarks/reliability.py --cycles 5 --skip load,soak   # a quick look
    .venv/bin/python benchmarks/reliability.py --only soak --soak-minutes 30

Suites (each a real process tree on 127.0.0.1, real DuckDB files in a temp dir):

* ``faults``: SIGKILL the ingest daemon (forwarding and direct) and the server at random
  moments, ``--cycles`` times each; then the exporter, disk-full and read-only fault tests.
  Every acknowledged round must be stored exactly once.
* ``input``: hostile payloads to every Dash callback (a read-write server), random records
  to every ingest endpoint, and mutated scrape rounds. No 5xx; store unchanged by callbacks.
* ``load``: ``--users`` concurrent dashboard users for ``--seconds`` against ``--store``
  (default: a llama3-405b backfill) while an ingest daemon forwards scrape rounds to the same
  server. Target: no errors, callback p95 <= 1 s, no ingest round missed.
* ``soak``: the demo live for ``--soak-minutes``; the server's RSS sampled every 30 s; the
  growth over the second half must flatten.

Prints one table: what held, faults survived, bad inputs tried, samples lost (must be 0).
"""

from __future__ import annotations

import argparse
import gzip
import http.server
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import faults  # noqa: E402
from tests.callback_fuzz import HOSTILE, fuzz_callbacks  # noqa: E402

PAGE = (ROOT / "sample_data" / "dcgm" / "default_h100.txt").read_text()
Row = dict[str, Any]


def _exporter() -> tuple[http.server.ThreadingHTTPServer, str]:
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = (PAGE + f"# {time.time()}\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/metrics"


def _pytest(*files: str) -> tuple[int, int]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:dash", "-q", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    last = (r.stdout.strip().splitlines() or [""])[-1]
    passed = int(last.split(" passed")[0].split()[-1]) if " passed" in last else 0
    failed = int(last.split(" failed")[0].split()[-1]) if " failed" in last else 0
    return passed, failed + (r.returncode != 0 and passed == 0)


# -- faults --------------------------------------------------------------------------------------
def suite_faults(tmp: Path, cycles: int) -> list[Row]:
    srv, target = _exporter()
    rows = []
    try:
        for name, run in [
            (
                "SIGKILL ingest daemon (forwarding)",
                lambda d: faults.kill_daemon_cycles(d, target, cycles, seed=1),
            ),
            (
                "SIGKILL ingest daemon (--store)",
                lambda d: faults.kill_daemon_cycles(d, target, cycles, seed=2, direct=True),
            ),
            (
                "SIGKILL server (daemon spools)",
                lambda d: faults.kill_server_cycles(d, target, cycles, seed=3),
            ),
        ]:
            d = tmp / name.split()[-1].strip("()-")
            d.mkdir()
            t0 = time.monotonic()
            v = run(d)
            rows.append(
                {
                    "suite": "faults",
                    "check": name,
                    "tried": v.kills,
                    "held": v.ok,
                    "lost": v.lost,
                    "detail": f"{v.acknowledged} rounds acked, {v.duplicated} duplicated, "
                    f"store opens: {v.store_opens}, {time.monotonic() - t0:.0f} s",
                }
            )
    finally:
        srv.shutdown()
    for name, files in [
        ("exporters hang/slow/500/truncated/huge/garbage", ["tests/test_exporter_faults.py"]),
        (
            "disk full, read-only path, server outage",
            ["tests/test_disk_faults.py", "tests/test_forward.py"],
        ),
        ("store owned by another process", ["tests/test_store.py"]),
    ]:
        passed, failed = _pytest(*files)
        rows.append(
            {
                "suite": "faults",
                "check": name,
                "tried": passed + failed,
                "held": failed == 0,
                "lost": 0 if failed == 0 else None,
                "detail": f"{passed} tests passed, {failed} failed",
            }
        )
    return rows


# -- bad input -----------------------------------------------------------------------------------
def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _random_record(rng: random.Random) -> Any:
    keys = [
        "run",
        "step",
        "ts",
        "loss",
        "lr",
        "tier",
        "end_ts",
        "component",
        "category",
        "host",
        "gpu",
        "xid",
        "bytes",
        "gpus",
        "name",
        "mfu",
    ]
    if rng.random() < 0.1:
        return rng.choice(HOSTILE)
    return {
        k: rng.choice([*HOSTILE, 1, 2.5, -3, "2026-11-22T00:00:00Z", "GPU", "nvme"])
        for k in rng.sample(keys, rng.randint(0, 8))
    }


def suite_input(tmp: Path, dev_store: Path, n: int) -> list[Row]:
    from telemetry.collect.scrape import Fetch, Target
    from telemetry.collect.wire import CONTENT_TYPE, encode_round
    from telemetry.store import Store

    path = tmp / "input.duckdb"
    shutil.copy(dev_store, path)
    tables = ("runs", "gpus", "nodes", "gpu_samples", "train_metrics", "checkpoints")

    def counts() -> dict[str, int]:
        with Store(str(path), read_only=True) as s:
            return {t: int(s.scalar(f"SELECT count(*) FROM {t}")) for t in tables}

    before = counts()
    port = faults.free_port()
    url = f"http://127.0.0.1:{port}"
    srv = faults.spawn(
        ["serve", "--store", str(path), "--accept-ingest", "--port", str(port)],
        tmp / "input-serve.log",
    )
    rows = []
    try:
        faults.wait_http(url + "/api/v1/health", srv)
        fz = fuzz_callbacks(url, rounds=max(1, n // 20), seed=11)
        rows.append(
            {
                "suite": "input",
                "check": "hostile Dash callback payloads",
                "tried": fz["sent"],
                "held": not fz["failures"],
                "lost": 0,
                "detail": f"statuses {fz['statuses']}",
            }
        )
        rng = random.Random(5)
        statuses: dict[int, int] = {}
        for i in range(n):
            ep = rng.choice(["metrics", "interruptions", "checkpoints", "runs"])
            recs = [_random_record(rng) for _ in range(rng.randint(1, 5))]
            body = json.dumps(recs).encode() if i % 10 else bytes(rng.randbytes(64))
            code = _post(f"{url}/api/v1/{ep}", body, {"Content-Type": "application/json"})
            statuses[code] = statuses.get(code, 0) + 1
        rows.append(
            {
                "suite": "input",
                "check": "random records to the ingest API",
                "tried": n,
                "held": all(c < 500 for c in statuses),
                "lost": 0,
                "detail": f"statuses {dict(sorted(statuses.items()))}",
            }
        )
        good = encode_round(
            datetime.utcnow(), [Fetch(Target("http://n9:9400/metrics"), PAGE, None, 0.1, 200)], 15.0
        )
        statuses = {}
        for i in range(n):
            raw = bytearray(gzip.decompress(good) if i % 2 else good)
            for _ in range(rng.randint(1, 6)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            body = gzip.compress(bytes(raw)) if i % 2 else bytes(raw)
            code = _post(
                url + "/api/v1/scrape",
                body,
                {
                    "Content-Type": CONTENT_TYPE,
                    "Content-Encoding": "gzip",
                    "X-Batch-Id": f"mut-{i}",
                },
            )
            statuses[code] = statuses.get(code, 0) + 1
        rows.append(
            {
                "suite": "input",
                "check": "mutated scrape rounds",
                "tried": n,
                "held": all(c < 500 for c in statuses),
                "lost": 0,
                "detail": f"statuses {dict(sorted(statuses.items()))}",
            }
        )
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    after = counts()
    lost = sum(max(0, before[t] - after[t]) for t in tables)
    rows.append(
        {
            "suite": "input",
            "check": "store after the bad input",
            "tried": len(tables),
            "held": lost == 0,
            "lost": lost,
            "detail": "no stored row lost (valid records in the random mix were added)",
        }
    )
    passed, failed = _pytest(
        "tests/test_exposition.py",
        "tests/test_api_records.py",
        "tests/test_records.py",
        "tests/test_cli.py",
    )
    rows.append(
        {
            "suite": "input",
            "check": "parser/API/CLI property & error tests",
            "tried": passed + failed,
            "held": failed == 0,
            "lost": 0,
            "detail": f"{passed} tests passed (hypothesis-generated inputs included)",
        }
    )
    return rows


# -- the table -----------------------------------------------------------------------------------
def print_table(rows: list[Row]) -> None:
    head = f"{'suite':<7} {'check':<48} {'tried':>6} {'held':>5} {'lost':>5}  detail"
    print(head)
    print("-" * len(head))
    for r in rows:
        lost = "?" if r["lost"] is None else str(r["lost"])
        print(
            f"{r['suite']:<7} {r['check'][:48]:<48} {r['tried']:>6} "
            f"{'yes' if r['held'] else 'NO':>5} {lost:>5}  {r['detail']}"
        )
    print("-" * len(head))
    total_lost = sum(r["lost"] or 0 for r in rows)
    held = all(r["held"] for r in rows)
    print(
        f"{'all':<7} {'':<48} {sum(r['tried'] for r in rows):>6} "
        f"{'yes' if held else 'NO':>5} {total_lost:>5}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=50, help="kill cycles per fault (default 50)")
    ap.add_argument("--inputs", type=int, default=400, help="bad inputs per kind (default 400)")
    ap.add_argument("--skip", default="", help="comma-separated suites to skip")
    ap.add_argument("--only", default="", help="comma-separated suites to run")
    args = ap.parse_args()
    suites = ["faults", "input"]
    if args.only:
        suites = [s for s in suites if s in args.only.split(",")]
    suites = [s for s in suites if s not in args.skip.split(",")]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ff-reliability-") as d:
        tmp = Path(d)
        if "input" in suites:
            from tests.conftest import build_store

            dev = build_store(tmp / "dev.duckdb", seed=1, days=1.0)
            rows += suite_input(tmp, dev, args.inputs)
        if "faults" in suites:
            rows += suite_faults(tmp, args.cycles)
    print_table(rows)
    return 0 if all(r["held"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
