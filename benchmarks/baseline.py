"""Same-run baselines for the dashboard benchmark: what this machine does, right now, with no
Factory Floor code in the way, so every figure can be printed as a ratio (issue #40).

- ``duckdb_scan(store)``: a fixed scan and GROUP BY over the store's newest day of GPU
  samples (per GPU: mean utilization, hottest temperature), each run in a fresh read-only
  connection, as a cold callback's statements run; the DuckDB part of a view.
- ``dash_round_trip()``: one empty Dash callback (its input returned as its output) answered
  by the same production server (``app.wsgi``, waitress) over loopback HTTP; the framework's
  part of every callback request.

Both are medians (and p95) of several runs, measured in the run that reports the figures
they divide.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCAN_SQL = """
SELECT gpu_id, avg(util_pct) AS util, max(temp_c) AS temp
FROM gpu_samples
WHERE ts > (SELECT max(ts) FROM gpu_samples) - INTERVAL 1 DAY
GROUP BY gpu_id
"""

# A Dash app with one callback that does nothing but return its input, served by the
# dashboard's own WSGI server (waitress, with the same limits).
_EMPTY_APP = """
import sys
import dash
from dash import Input, Output, html
from app import wsgi

app = dash.Dash(__name__)
app.layout = html.Div([html.Div("x", id="in"), html.Div(id="out")])

@app.callback(Output("out", "children"), Input("in", "children"))
def echo(value):
    return value

wsgi.serve(app.server, "127.0.0.1", int(sys.argv[1]))
"""
_EMPTY_BODY = json.dumps(
    {
        "output": "out.children",
        "outputs": {"id": "out", "property": "children"},
        "inputs": [{"id": "in", "property": "children", "value": "x"}],
        "changedPropIds": ["in.children"],
        "state": [],
    }
).encode()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# The same over the per-GPU hourly rollup, for stores holding no raw samples (the generated
# cluster of ``cluster_store``): its newest day, per GPU.
ROLLUP_SCAN_SQL = """
SELECT gpu_id, avg(util_avg) AS util, max(temp_avg) AS temp
FROM gpu_rollup_3600
WHERE ts > (SELECT max(ts) FROM gpu_rollup_3600) - INTERVAL 1 DAY
GROUP BY gpu_id
"""


def duckdb_scan(store: str, repeat: int = 5, sql: str = SCAN_SQL) -> dict[str, float]:
    """Seconds of ``sql`` (``SCAN_SQL``) over ``store``, a fresh read-only connection each
    time (the connection's opening not counted): ``p50``, ``p95`` and the GPUs it grouped."""
    import duckdb

    times, groups = [], 0
    for _ in range(repeat):
        con = duckdb.connect(store, read_only=True)
        try:
            t0 = time.perf_counter()
            groups = len(con.execute(sql).fetchall())
            times.append(time.perf_counter() - t0)
        finally:
            con.close()
    return {"p50": pct(times, 0.5), "p95": pct(times, 0.95), "groups": groups}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_empty() -> tuple[subprocess.Popen, int, float]:
    """The empty Dash app started: its process, port and seconds until its first answered page."""
    port = _port()
    t_start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _EMPTY_APP, str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
            return proc, port, time.perf_counter() - t_start
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                proc.kill()
                raise RuntimeError(f"the empty Dash app did not start: {err[-500:]}") from None
            time.sleep(0.02)


def dash_round_trip(repeat: int = 50, starts: int = 3) -> dict[str, float]:
    """Seconds of one empty Dash callback request over loopback, after one warm-up request:
    ``p50`` and ``p95``; and ``up``: from the process start to its first answered page (Python,
    Dash and waitress starting, the floor under a dashboard server's start), the median of
    ``starts`` starts (one start moved by a fifth between runs)."""
    ups = []
    for _ in range(starts - 1):
        proc, _port_, up = _start_empty()
        ups.append(up)
        proc.terminate()
        proc.wait(timeout=10)
    proc, port, up = _start_empty()
    ups.append(up)
    url = f"http://127.0.0.1:{port}/_dash-update-component"
    headers = {"Content-Type": "application/json"}
    try:
        times = []
        for k in range(repeat + 1):
            req = urllib.request.Request(url, data=_EMPTY_BODY, headers=headers)
            t0 = time.perf_counter()
            with urllib.request.urlopen(req, timeout=10) as resp:
                body = resp.read()
            if k:  # the first request is the warm-up
                times.append(time.perf_counter() - t0)
        if b'"x"' not in body:
            raise RuntimeError(f"the empty Dash callback answered {body[:200]!r}")
        return {"p50": pct(times, 0.5), "p95": pct(times, 0.95), "up": statistics.median(ups)}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="the dashboard benchmark's same-run baselines")
    ap.add_argument("--store", help="a store to scan (the DuckDB baseline)")
    a = ap.parse_args()
    d = dash_round_trip()
    print(
        f"empty Dash callback over loopback: p50 {d['p50'] * 1e3:.2f} ms, p95 "
        f"{d['p95'] * 1e3:.2f} ms; its server answered {d['up']:.2f} s after its start"
    )
    if a.store:
        s = duckdb_scan(a.store)
        print(f"DuckDB scan + GROUP BY, newest day ({s['groups']:.0f} GPUs): p50 "
              f"{s['p50'] * 1e3:.1f} ms, p95 {s['p95'] * 1e3:.1f} ms")  # fmt: skip
