"""Labels from the targets file land where the schema has a place for them (``rack`` and
``role`` of the node, the workload columns of its GPUs when the exporter does not say), and the
stored inventory follows what the exporter reports now (a new pod, a swapped GPU). Real
exporters on 127.0.0.1, a real targets file re-read when it changes, a real store."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.collect.dcgm.scrape import scrape_round
from telemetry.collect.dcgm.scrape_source import ScrapeSource, TargetSource
from telemetry.ingest.daemon import collect
from telemetry.ingest.sink import StoreSink
from telemetry.ingest.targets import Fetch, Target
from telemetry.ingest.wire import decode_round, encode_round
from telemetry.ingest.writer import StoreWriter
from telemetry.queries.gpus import node_info
from telemetry.store import Store
from tests.conftest import DCGM_FIXTURES

T0 = datetime(2026, 3, 1, 12)
DEFAULT = (DCGM_FIXTURES / "default_h100.txt").read_text()
PODS = (DCGM_FIXTURES / "pod_labels.txt").read_text()


class Exporters(http.server.BaseHTTPRequestHandler):
    """``/<name>/metrics`` answers ``pages[name]`` as it is at the time of the request."""

    pages: dict[str, str] = {}

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.pages.get(self.path.split("/")[1], "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def base() -> Iterator[str]:
    Exporters.pages = {
        "a": DEFAULT.replace("dgx-h100-017", "node-a"),
        "b": DEFAULT.replace("dgx-h100-017", "node-b"),
        "k8s": PODS,
    }
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporters)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _write(path: Path, groups: list[dict], bump: int) -> None:
    path.write_text(json.dumps(groups))
    os.utime(path, (1_700_000_000 + bump, 1_700_000_000 + bump))  # a change the reader sees


def _nodes(store: Store) -> dict[str, tuple]:
    return {h: (r, o) for h, r, o in store.rows("SELECT host, rack, role FROM nodes")}


def test_rack_and_role_come_from_the_targets_file_and_follow_its_edits(
    tmp_path: Path, base: str
) -> None:
    f = tmp_path / "targets.json"
    _write(
        f,
        [
            {"targets": [f"{base}/a/metrics"], "labels": {"rack": "r01", "zone": "eu"}},
            {"targets": [f"{base}/b/metrics"], "labels": {"rack": "r02", "role": "spare"}},
        ],
        0,
    )
    source = ScrapeSource(TargetSource([], [str(f)], print), 15.0, 2.0)
    with Store(str(tmp_path / "s.duckdb")) as store:
        writer = StoreWriter(store)
        collect(source, writer, T0)
        assert _nodes(store) == {"node-a": ("r01", "job"), "node-b": ("r02", "spare")}
        info = node_info(store, "node-a")
        assert info is not None and info["rack"] == "r01"  # what the drill-down header reads
        # node-a moves to another rack; node-b's labels leave the file: what it had is kept
        _write(
            f,
            [
                {"targets": [f"{base}/a/metrics"], "labels": {"rack": "r07"}},
                {"targets": [f"{base}/b/metrics"]},
            ],
            1,
        )
        collect(source, writer, T0 + timedelta(seconds=15))
        assert _nodes(store) == {"node-a": ("r07", "job"), "node-b": ("r02", "spare")}
        # the samples of both rounds are there, under the same two nodes and 16 GPUs
        assert store.scalar("SELECT count(*) FROM gpus") == 16
        assert store.scalar("SELECT count(DISTINCT ts) FROM gpu_samples") == 2


def test_workload_follows_the_exporter_and_the_file_fills_what_it_does_not_say(
    tmp_path: Path, base: str
) -> None:
    target = Target(f"http://{base}/k8s/metrics", {"hpc_job": "slurm-81234", "pod": "static"})
    with Store(str(tmp_path / "s.duckdb")) as store:
        sink = StoreSink(store)

        def workload() -> dict[int, tuple]:
            return {
                g: (p, n, c, j)
                for g, p, n, c, j in store.rows(
                    "SELECT gpu, pod, namespace, container, hpc_job FROM gpus"
                )
            }

        sink.write(T0, scrape_round([target], 2.0))
        first = workload()
        assert first[0] == ("llama-70b-worker-3", "llm-training", "pytorch", "slurm-81234")
        assert first[4][0] == "mmlu-eval-7f9c2-0"
        assert first[6] == ("static", None, None, "slurm-81234")  # no pod: the file's default
        # the eval pod ends, a new worker takes GPUs 0-3, GPU 5 is swapped for another
        Exporters.pages["k8s"] = (
            PODS.replace("llama-70b-worker-3", "llama-70b-worker-9")
            .replace(',pod="mmlu-eval-7f9c2-0"', "")
            .replace("GPU-9531985d", "GPU-00000000")
        )
        sink.write(T0 + timedelta(seconds=15), scrape_round([target], 2.0))
        now = workload()
        assert now[0] == ("llama-70b-worker-9", "llm-training", "pytorch", "slurm-81234")
        assert now[4][0] == "static"  # the exporter no longer names a pod
        assert store.scalar("SELECT uuid FROM gpus WHERE gpu = 2").startswith("GPU-00000000")
        assert store.scalar("SELECT count(*) FROM gpus") == 8  # updated, not added
        # a late round (a spool delivered after newer rounds) does not bring old values back
        Exporters.pages["k8s"] = PODS
        sink.write(T0 + timedelta(seconds=5), scrape_round([target], 2.0))
        assert workload() == now
        # what the sink remembers is what is stored (so a round that changes nothing writes
        # nothing): a sink started afresh on the store reads the same
        fresh = StoreSink(store).inventory
        assert (fresh.gpus, fresh.nodes) == (sink.inventory.gpus, sink.inventory.nodes)


def test_labels_travel_with_a_forwarded_round(tmp_path: Path, base: str) -> None:
    fetches = scrape_round([Target(f"http://{base}/a/metrics", {"rack": "r09"})], 2.0)
    ts, interval, got = decode_round(encode_round(T0, fetches, 15.0), now=T0)
    assert isinstance(got[0], Fetch) and got[0].target.labels == {"rack": "r09"}
    with Store(str(tmp_path / "s.duckdb")) as store:
        StoreSink(store).write(ts, got, None, interval)
        assert _nodes(store) == {"node-a": ("r09", "job")}
