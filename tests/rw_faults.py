"""The remote_write kill drill, shared by ``tests/test_remote_write_kill.py`` and
``benchmarks/reliability.py``: several senders post a cluster's scrapes to ``serve
--accept-ingest`` as Prometheus's shards do (each scrape's series split across shards by hash,
the shards' requests out of order), retrying every request until it is answered 2xx, while the
server is SIGKILLed at random moments and started again on the same store. Then every sample of
every acknowledged request is looked up in the store: stored once, stored twice, or missing.
"""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from telemetry.ingest.remote_write import encode
from telemetry.store import Store
from tests.faults import free_port, spawn, wait_http

INTERVAL_MS = 15_000
FIELDS = {"DCGM_FI_DEV_GPU_TEMP": "temp_c", "DCGM_FI_DEV_POWER_USAGE": "power_w"}


@dataclass
class RwVerdict:
    kills: int
    requests: int  # requests posted
    acked: int  # requests answered 2xx (each retried until it was)
    refused: int  # requests answered 4xx (none expected)
    expected: int  # samples the acknowledged requests carried (GPU fields)
    stored: int  # of those, found in the store
    duplicated: int  # (GPU, time, field) stored more than once
    wrong: int  # stored with another value than was sent
    seconds: float = 0.0

    @property
    def lost(self) -> int:
        return self.expected - self.stored

    @property
    def ok(self) -> bool:
        return (
            self.acked == self.requests
            and self.lost == 0
            and self.duplicated == 0
            and self.wrong == 0
        )


def value(field_name: str, k: int, host: int, gpu: int) -> float:
    """The value a sample carries: which scrape, host and GPU it is can be read back from it."""
    base = 30.0 if field_name == "DCGM_FI_DEV_GPU_TEMP" else 200.0
    return base + (k % 64) + host / 100.0 + gpu / 1000.0


Request = tuple[int, int, bytes, int]  # scrape index, shard, body, GPU samples


def shard_of(host: int, gpu: int, field_index: int, shards: int) -> int:
    return (host + gpu + field_index) % shards


def requests_of(
    scrapes: int, hosts: int, gpus: int, shards: int, t0_ms: int, rng: random.Random
) -> list[Request]:
    """(scrape index, shard, body, GPU samples) per request: each scrape's series split over
    ``shards`` by a hash of the series (as Prometheus shards), then the requests of nearby
    scrapes shuffled (parallel shards deliver out of order)."""
    out: list[Request] = []
    for k in range(scrapes):
        ts = t0_ms + k * INTERVAL_MS
        parts: list[list[Any]] = [[] for _ in range(shards)]
        for h in range(hosts):
            inst = {"instance": f"rw{h}:9400", "job": "dcgm"}
            parts[h % shards].append(({"__name__": "up", **inst}, [(1.0, ts)]))
            for g in range(gpus):
                for i, name in enumerate(FIELDS):
                    labels = {"__name__": name, "gpu": str(g), "Hostname": f"rw{h}", **inst}
                    parts[shard_of(h, g, i, shards)].append((labels, [(value(name, k, h, g), ts)]))
        for shard, part in enumerate(parts):
            gpu_samples = sum(1 for labels, _ in part if labels["__name__"] != "up")
            out.append((k, shard, encode(part), gpu_samples))
    block = shards * 3  # a request may overtake those of the two scrapes before it
    for i in range(0, len(out), block):
        chunk = out[i : i + block]
        rng.shuffle(chunk)
        out[i : i + block] = chunk
    return out


class _Server:
    def __init__(self, store: Path, log: Path) -> None:
        self.store, self.log, self.port = store, log, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["serve", "--store", str(self.store), "--accept-ingest", "--port", str(self.port)]
        self.proc = spawn(args, self.log)
        wait_http(self.url + "/api/v1/health", self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _post(url: str, body: bytes) -> int:
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
    req = urllib.request.Request(url + "/api/v1/write", body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            json.loads(r.read())
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):  # refused, reset, or a reply cut off by the kill
        return 0


def drill(
    tmp: Path,
    requests: int = 200,
    senders: int = 4,
    kills: int = 3,
    hosts: int = 8,
    gpus: int = 4,
    shards: int = 2,
    seed: int = 0,
) -> RwVerdict:
    """Post ``requests`` remote_write requests from ``senders`` threads while the server is
    killed ``kills`` times; account for every sample (see the module's docstring)."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    scrapes = max(requests // shards, 1)
    start_ms = (now_ms - scrapes * INTERVAL_MS - 600_000) // INTERVAL_MS * INTERVAL_MS
    reqs = requests_of(scrapes, hosts, gpus, shards, start_ms, rng)
    srv = _Server(tmp / "rw.duckdb", tmp / "serve.log")
    srv.start()
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(reqs)):
        todo.put(i)
    status: dict[int, int] = {}
    lock = threading.Lock()
    done = threading.Event()

    def send() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            while True:  # a sender retries a request until it is answered (5xx, refused)
                code = _post(srv.url, reqs[i][2])
                if 200 <= code < 500:
                    break
                time.sleep(0.2)
            with lock:
                status[i] = code
                if len(status) == len(reqs):
                    done.set()

    threads = [threading.Thread(target=send, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    marks = sorted(rng.sample(range(len(reqs) // 10, len(reqs) * 9 // 10), kills))
    killed = 0
    for mark in marks:
        while not done.is_set():
            with lock:
                if len(status) >= mark:
                    break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))  # somewhere inside a request, or between two
        srv.kill()
        killed += 1
        srv.start()
    for t in threads:
        t.join(timeout=600)
    srv.stop()
    verdict = _account(srv.store, reqs, status, (hosts, gpus, shards), start_ms)
    verdict.kills, verdict.seconds = killed, time.monotonic() - t0
    return verdict


def _account(
    store: Path,
    reqs: list[Request],
    status: dict[int, int],
    shape: tuple[int, int, int],
    start_ms: int,
) -> RwVerdict:
    hosts, gpus, shards = shape
    acked = [i for i, code in status.items() if 200 <= code < 300]
    with Store(str(store), read_only=True) as s:
        rows = s.rows(
            "SELECT g.host, g.gpu, s.ts, s.temp_c, s.power_w FROM gpu_samples s "
            "JOIN gpus g USING (gpu_id) WHERE g.host LIKE 'rw%'"
        )
    seen: dict[tuple[str, int, int, str], list[float]] = {}
    for host, gpu, ts, temp, power in rows:
        k = (int(ts.replace(tzinfo=UTC).timestamp() * 1000) - start_ms) // INTERVAL_MS
        for col, v in (("temp_c", temp), ("power_w", power)):
            if v is not None:
                seen.setdefault((host, int(gpu), k, col), []).append(float(v))
    expected = stored = duplicated = wrong = 0
    for i in acked:  # every GPU sample of every acknowledged request
        k, shard = reqs[i][0], reqs[i][1]
        for h in range(hosts):
            for g in range(gpus):
                for f, (name, col) in enumerate(FIELDS.items()):
                    if shard_of(h, g, f, shards) != shard:
                        continue
                    expected += 1
                    got = seen.get((f"rw{h}", g, k, col), [])
                    stored += bool(got)
                    duplicated += len(got) > 1
                    wrong += any(abs(v - value(name, k, h, g)) > 1e-3 for v in got)
    return RwVerdict(
        kills=0,
        requests=len(reqs),
        acked=len(acked),
        refused=sum(1 for c in status.values() if 400 <= c < 500),
        expected=expected,
        stored=stored,
        duplicated=duplicated,
        wrong=wrong,
    )
