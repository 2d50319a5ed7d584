"""Slurm poll benchmark: one poll of 10,000 jobs and 2,048 nodes, from recorded outputs.

    .venv/bin/python benchmarks/slurm.py               # 10,000 jobs, 2,048 nodes
    .venv/bin/python benchmarks/slurm.py --jobs 50000
    .venv/bin/python benchmarks/slurm.py --json FILE   # and its figures as JSON

The outputs are made from the recordings of the real test cluster (tests/fixtures/slurm/drained,
``sacct``/``squeue``/``sinfo --json`` and their parsable text forms): each recorded job is
repeated with new ids, names and a node list of 8 nodes until there are ``--jobs`` of them (the
JSON keeps each job's steps, as ``sacct --json`` prints them), the recorded node ``--nodes``
times. The recorded runner answers each command with those bytes, so what is timed is Factory
Floor's side of a poll: reading the bytes, parsing, the changed-rows check, the store's upsert,
and the refresh of runs and signals. Printed (median of ``--repeat`` after one warm-up):

* the first poll into an empty store (every job new) for each form;
* a second poll with nothing changed (the steady state of ``ingest --slurm``);
* the baseline: plain ``json.loads`` of the same sacct/squeue/sinfo JSON bytes.

``--json FILE`` writes these figures and each poll's ratio to the baseline
(``benchmarks/figures.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import figures  # noqa: E402
from telemetry.collect.slurm.slurm_client import SlurmClient, recorded_runner  # noqa: E402
from telemetry.collect.slurm.slurm_source import SlurmSource  # noqa: E402
from telemetry.ingest.daemon import collect  # noqa: E402
from telemetry.ingest.writer import StoreWriter  # noqa: E402
from telemetry.store import Store  # noqa: E402

REC = ROOT / "tests" / "fixtures" / "slurm" / "drained"


def make_outputs(out: Path, jobs: int, nodes: int) -> dict[str, int]:
    """``jobs`` sacct records and ``nodes`` nodes in both forms, from the recordings."""
    acct = json.loads((REC / "sacct.json").read_bytes())
    base = [j for j in acct["jobs"] if j.get("nodes") not in (None, "None assigned")]
    made = []
    for i in range(jobs):
        j = json.loads(json.dumps(base[i % len(base)]))
        j["job_id"], j["name"] = 100000 + i, f"train-{i % 97}"
        j["array"]["job_id"], j["array"]["task_id"] = 0, None
        j["nodes"] = f"gpu[{(i * 8) % nodes:04d}-{(i * 8) % nodes + 7:04d}]"
        made.append(j)
    acct["jobs"] = made
    (out / "sacct.json").write_text(json.dumps(acct))
    lines = []
    for j in made:
        t = j["time"]
        iso = [datetime.utcfromtimestamp(t[k]).isoformat() for k in ("submission", "start", "end")]
        lines.append("|".join([
            str(j["job_id"]), str(j["job_id"]), j["cluster"], j["user"], j["partition"],
            j["nodes"], j["state"]["current"], j["state"]["reason"], "0:0", *iso,
            j.get("account") or "", "billing=8,cpu=8,gres/gpu=64,node=8", j["name"],
        ]))  # fmt: skip
    (out / "sacct.txt").write_text("\n".join(lines) + "\n")
    queue = json.loads((REC / "squeue.json").read_bytes())
    (out / "squeue.json").write_text(json.dumps(queue))
    (out / "squeue.txt").write_bytes((REC / "squeue.txt").read_bytes())
    (out / "reservations.txt").write_bytes((REC / "reservations.txt").read_bytes())
    info = json.loads((REC / "nodes.json").read_bytes())
    node = info["nodes"][0]
    info["nodes"] = [dict(node, name=f"gpu{i:04d}", hostname=f"gpu{i:04d}") for i in range(nodes)]
    (out / "nodes.json").write_text(json.dumps(info))
    text = (REC / "nodes.txt").read_text().strip()
    host = f"NodeName={json.loads((REC / 'cluster.json').read_text())['node']} "
    (out / "nodes.txt").write_text(
        "\n".join(text.replace(host, f"NodeName=gpu{i:04d} ") for i in range(nodes)) + "\n"
    )
    return {p.name: p.stat().st_size for p in out.iterdir()}


def poll(directory: Path, store_path: Path, form: str, again: bool) -> float:
    """Seconds of one poll (a fresh store; ``again``: the second poll, nothing changed)."""
    if store_path.exists():
        os.unlink(store_path)
    with Store(str(store_path)) as store:
        client = SlurmClient(mode=form, runner=recorded_runner(str(directory)))
        src = SlurmSource(client, since=datetime(2020, 1, 1), interval_s=0, follow=True)
        writer = StoreWriter(store)
        t0 = time.perf_counter()
        collect(src, writer, datetime(2026, 11, 25, 10, 0))
        first = time.perf_counter() - t0
        if not again:
            return first
        t0 = time.perf_counter()
        collect(src, writer, datetime(2026, 11, 25, 10, 1))
        return time.perf_counter() - t0


def median(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    return statistics.median(fn() for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=2_048)
    ap.add_argument("--repeat", type=int, default=5)  # of 3, a poll moved by 16 % between runs
    figures.add_argument(ap)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "out"
        d.mkdir()
        sizes = make_outputs(d, a.jobs, a.nodes)
        print(f"{a.jobs:,} jobs, {a.nodes:,} nodes; sacct --json {sizes['sacct.json'] / 1e6:.1f} "
              f"MB, sacct -P {sizes['sacct.txt'] / 1e6:.2f} MB")  # fmt: skip
        db = Path(tmp) / "b.duckdb"
        blobs = [(d / n).read_bytes() for n in ("sacct.json", "squeue.json", "nodes.json")]
        base = median(lambda: _t(blobs), a.repeat)
        figs = {
            "jobs": a.jobs,
            "nodes": a.nodes,
            "sacct_json_mb": sizes["sacct.json"] / 1e6,
            "sacct_text_mb": sizes["sacct.txt"] / 1e6,
            "baseline_json_loads_ms": base * 1000,
        }
        for form in ("json", "text"):
            first = median(lambda f=form: poll(d, db, f, False), a.repeat)
            again = median(lambda f=form: poll(d, db, f, True), a.repeat)
            print(f"  {form:4s} first poll (all new, stored, runs and signals refreshed): "
                  f"{first * 1000:7.0f} ms   second poll (nothing changed): "
                  f"{again * 1000:5.0f} ms")  # fmt: skip
            for key, t in ((f"{form}_first_poll", first), (f"{form}_second_poll", again)):
                figs |= {f"{key}_ms": t * 1000, f"ratio_{key}_json_loads": t / base}
        print(f"  baseline: json.loads of the same sacct+squeue+sinfo JSON: {base * 1000:.0f} ms")
    figures.write(a.json, figs)
    return 0


def _t(blobs: list[bytes]) -> float:
    t0 = time.perf_counter()
    for b in blobs:
        json.loads(b)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
