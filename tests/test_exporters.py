"""The replay engine as dcgm-exporter endpoints: the text format, a farm of real HTTP servers on
127.0.0.1 driven through simulated time, XIDs, nodes in repair, and the CLI."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.reference import GPU_MODELS, xids
from telemetry.replay.exporter_sim import UNCORRECTABLE_XIDS, ExporterSimulation
from telemetry.replay.exporter_text import (
    XID_COUNT,
    XID_LAST,
    GpuLabels,
    exporter_values,
    families,
    render_host,
    render_sample,
)
from telemetry.replay.exporters import ExporterFarm
from telemetry.replay.scenarios import get_scenario
from telemetry.replay.synth import Synthesizer
from telemetry.replay.timeline import Interruption, simulate
from telemetry.store import Store
from tests.conftest import ROOT, cli, free_port

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

LABEL_ORDER = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
]
SAMPLE_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
FARM_SEED = 3  # a 64-host dev cluster whose first XIDs come within the first hour


def parse(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample_lines(text: str) -> list[tuple[str, list[tuple[str, str]], str]]:
    """(family, [(label, value) in printed order], printed value) for every sample line."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE_LINE.match(line)
        assert m, line
        out.append((m[1], re.findall(r'(\w+)="([^"]*)"', m[2]), m[3]))
    return out


def value(fams: dict[str, Any], family: str, gpu: int, **labels: str) -> float:
    hits = [
        s.value
        for s in fams[family].samples
        if s.labels["gpu"] == str(gpu) and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (family, gpu, labels, hits)
    return hits[0]


# -- the renderer ------------------------------------------------------------------------------


def test_render_host_prints_the_exporters_exact_lines() -> None:
    g = GpuLabels(
        0, "GPU-x", "00000000:18:00.0", "nvidia0", "NVIDIA H100 80GB HBM3", "n1", "550.90.07", "j7"
    )
    cols = {c.name: [0.0] for c in SAMPLE_COLUMNS}
    cols |= {"util_pct": [97.6], "power_w": [612.5], "temp_c": [71.4], "xid_last": [79.0]}
    cols |= {"tensor_active": [0.5], "energy_mj": [1.5e10], "fb_used_mib": [70000.0]}
    text = render_host([g], exporter_values(cols, GPU_MODELS["H100"]), [{79: 2}])
    ident = (
        'gpu="0",UUID="GPU-x",pci_bus_id="00000000:18:00.0",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="n1",DCGM_FI_DRIVER_VERSION="550.90.07"'
    )
    lines = text.splitlines()
    assert lines[:2] == [
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
    ]
    for expected in (
        f'DCGM_FI_DEV_POWER_USAGE{{{ident},hpc_job="j7"}} 612.500000',
        f'DCGM_FI_DEV_GPU_TEMP{{{ident},hpc_job="j7"}} 71',
        f'DCGM_FI_DEV_GPU_UTIL{{{ident},hpc_job="j7"}} 98',
        f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{ident},hpc_job="j7"}} 15000000000',
        f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{ident},hpc_job="j7"}} 0.976000',
        f'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{ident},hpc_job="j7"}} 0.500000',
        f'{XID_LAST}{{{ident},err_code="79",err_msg="GPU has fallen off the bus",hpc_job="j7"}} 79',
        f'{XID_COUNT}{{{ident},window_size_in_ms="300000",xid="79",hpc_job="j7"}} 2',
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
        f'DCGM_FI_DEV_FB_RESERVED{{{ident},hpc_job="j7"}} {81559 - 70000}',
    ):
        assert expected in lines, expected
    assert text.endswith("\n") and "\n\n" not in text


def test_rendered_synth_sample_round_trips_through_prometheus_client() -> None:
    sc = get_scenario("dev-64")
    syn = Synthesizer(simulate(sc, 1), 1, 10.0, "dev-64-s1")
    syn.samples(np.arange(10.0, 3601.0, 10.0))  # an hour in, so the job is training
    table, _ = syn.samples(np.array([3610.0]))
    gpus = syn.gpus_frame()
    host = gpus[gpus["node_id"] == 2]
    rows = table.to_pandas()
    rows = rows[rows["gpu_id"].isin(host["gpu_id"])]
    text = render_sample(rows, host)

    fams = parse(text)
    assert list(fams) == [f.field for f in families()]
    for f in families():
        assert fams[f.field].type == f.prom_type
        assert fams[f.field].documentation
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0].name.endswith("_total")
    for family, labels, printed in sample_lines(text):
        names = [k for k, _ in labels]
        assert names[:7] == LABEL_ORDER and names[-1] == "hpc_job", names
        assert dict(labels)["Hostname"] == "h100-0002"
        double = next(f.double for f in families() if f.field == family)
        assert re.fullmatch(r"\d+\.\d{6}" if double else r"\d+", printed), (family, printed)
    for _, r in rows.iterrows():
        gpu = int(host.loc[host["gpu_id"] == r["gpu_id"], "gpu"].iloc[0])
        assert value(fams, "DCGM_FI_DEV_GPU_TEMP", gpu) == round(r["temp_c"])
        assert value(fams, "DCGM_FI_DEV_POWER_USAGE", gpu) == pytest.approx(r["power_w"], abs=1e-6)
        assert value(fams, "DCGM_FI_DEV_FB_USED", gpu) == r["fb_used_mib"]
        util = value(fams, "DCGM_FI_DEV_GPU_UTIL", gpu)
        assert util == round(r["util_pct"]) and util > 80  # training
        assert 0 < value(fams, "DCGM_FI_PROF_DRAM_ACTIVE", gpu) < 1
        assert value(fams, XID_COUNT, gpu) == 0


def test_renderer_rejects_bad_input_naming_the_problem() -> None:
    cols = {c.name: [1.0, 2.0] for c in SAMPLE_COLUMNS}
    with pytest.raises(ValueError, match="power_w"):
        exporter_values({k: v for k, v in cols.items() if k != "power_w"}, GPU_MODELS["H100"])
    with pytest.raises(ValueError, match="differ in length"):
        exporter_values(cols | {"temp_c": [1.0]}, GPU_MODELS["H100"])
    g = GpuLabels(0, "GPU-x", "00000000:18:00.0", "nvidia0", "m", "h", "550")
    values = exporter_values(cols, GPU_MODELS["H100"])
    with pytest.raises(ValueError, match="2 values for 1 GPUs"):
        render_host([g], values)
    with pytest.raises(ValueError, match="DCGM_FI_DEV_GPU_UTIL"):
        render_host([g], {k: v[:1] for k, v in values.items() if k != "DCGM_FI_DEV_GPU_UTIL"})


# -- a farm of real HTTP servers ---------------------------------------------------------------


class FarmThread:
    """The farm's event loop on a thread; the test drives simulated time through ``call``."""

    def __init__(self, farm: ExporterFarm) -> None:
        self.farm = farm
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def step_to(self, t_s: float) -> None:
        self.call(self.farm.step_to(t_s))

    def url(self, node: int, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.farm.ports[node]}{path}"

    def get(self, node: int, path: str = "/metrics") -> str:
        with urllib.request.urlopen(self.url(node, path), timeout=10) as r:
            assert r.status == 200
            return r.read().decode()

    def __enter__(self) -> FarmThread:
        self.thread.start()
        self.call(self.farm.start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.farm.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def farm_sim(nodes: int = 62) -> ExporterSimulation:
    """dev-64 widened to ``nodes`` + 2 spares (64 hosts by default)."""
    return ExporterSimulation(get_scenario("dev-64").with_overrides(nodes=nodes), FARM_SEED)


@pytest.fixture
def farm() -> Iterator[FarmThread]:
    with FarmThread(ExporterFarm(farm_sim(), base_port=0)) as ft:
        yield ft


def first_xid(sim: ExporterSimulation, node_lost: bool) -> Interruption:
    hits = [i for i in sim.timeline.interruptions if i.xid and i.node_lost == node_lost]
    assert hits and hits[0].t < 3600, "the seed should give an XID in the first hour"
    return hits[0]


def test_64_hosts_answer_real_http_with_values_that_change(farm: FarmThread) -> None:
    sim = farm.farm.sim
    assert sim.n_hosts == 64 and len(set(farm.farm.ports)) == 64
    farm.step_to(1800.0)

    up = [n for n in range(64) if not sim.down(n)]
    assert 60 <= len(up) < 64  # seed 3 has a node in repair by now
    assert all(refused(farm, n) for n in set(range(64)) - set(up))

    def scrape_all() -> list[dict[str, Any]]:
        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(lambda n: parse(farm.get(n)), up))

    first = scrape_all()
    farm.step_to(1800.0 + 3 * sim.interval_s)
    second = scrape_all()
    changed = 0
    for node, a, b in zip(up, first, second, strict=True):
        hosts = {s.labels["Hostname"] for s in a["DCGM_FI_DEV_GPU_TEMP"].samples}
        assert hosts == {sim.hostnames[node]}
        for gpu in range(8):
            e0 = value(a, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu)
            assert value(b, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu) > e0
            p0, p1 = (value(f, "DCGM_FI_DEV_POWER_USAGE", gpu) for f in (a, b))
            changed += p0 != p1
    assert changed > 0.9 * len(up) * 8
    assert farm.get(5, "/health") == "OK"


def test_http_keep_alive_head_404_and_405(farm: FarmThread) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", farm.farm.ports[0], timeout=10)
    for _ in range(2):  # two requests on one connection
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read()
        assert r.status == 200 and r.getheader("Content-Type").startswith("text/plain")
        assert int(r.getheader("Content-Length")) == len(body) > 10_000
    conn.request("HEAD", "/metrics")
    r = conn.getresponse()
    assert r.status == 200 and r.read() == b""
    conn.request("GET", "/nope")
    r = conn.getresponse()
    assert r.status == 404 and r.read() == b"404 page not found\n"
    conn.request("POST", "/metrics", body=b"")
    assert conn.getresponse().status == 405
    conn.close()


def test_an_xid_appears_on_the_right_host_and_gpu(farm: FarmThread) -> None:
    sim = farm.farm.sim
    it = first_xid(sim, node_lost=False)
    farm.step_to(it.t + sim.interval_s)
    fams = parse(farm.get(it.node))
    gpu, xid = it.gpu or 0, int(it.xid or 0)
    assert value(fams, XID_LAST, gpu) == xid
    (last,) = [s for s in fams[XID_LAST].samples if s.labels["gpu"] == str(gpu)]
    assert last.labels["err_code"] == str(xid) and last.labels["err_msg"] == xids()[xid].message
    assert value(fams, XID_COUNT, gpu, xid=str(xid)) == 1
    with_xid = [s for s in fams[XID_COUNT].samples if "xid" in s.labels]
    assert [(s.labels["gpu"], s.labels["xid"]) for s in with_xid] == [(str(gpu), str(xid))]
    rows = value(fams, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu)
    assert rows == (1 if xid in UNCORRECTABLE_XIDS else 0)
    other = parse(farm.get((it.node + 1) % sim.n_hosts))
    assert all("xid" not in s.labels for s in other[XID_COUNT].samples)

    farm.step_to(it.t + 300.0 + 2 * sim.interval_s)  # out of the 5-minute window
    fams = parse(farm.get(it.node))
    assert all("xid" not in s.labels for s in fams[XID_COUNT].samples)
    assert value(fams, XID_LAST, gpu) == xid  # the last XID never resets


def refused(ft: FarmThread, node: int) -> bool:
    try:
        ft.get(node)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


def test_a_node_in_repair_refuses_connections_until_it_is_repaired(farm: FarmThread) -> None:
    sim = farm.farm.sim
    it = first_xid(sim, node_lost=True)
    assert it.detect_s > sim.interval_s
    farm.step_to(it.t + sim.interval_s)  # failed, not yet detected: the XID shows
    fams = parse(farm.get(it.node))
    assert value(fams, XID_LAST, it.gpu or 0) == it.xid
    nvlink = value(fams, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 0)

    farm.step_to(it.t + it.detect_s + sim.interval_s)  # drained
    assert refused(farm, it.node)
    assert f"127.0.0.1:{farm.farm.ports[it.node]}" in farm.farm.targets()[0]["targets"]
    assert farm.get((it.node + 1) % sim.n_hosts)  # the others still answer

    back = min(t for t, n, role in sim.timeline.role_changes if n == it.node and role != "repair")
    farm.step_to(back + sim.interval_s)
    fams = parse(farm.get(it.node))
    assert value(fams, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 0) < nvlink  # rebooted: reset
    assert all(s.labels.get("hpc_job") is None for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples)


def test_a_node_in_repair_can_answer_503_instead() -> None:
    sim = farm_sim()
    it = first_xid(sim, node_lost=True)
    with FarmThread(ExporterFarm(sim, base_port=0, repair="503")) as ft:
        ft.step_to(it.t + it.detect_s + sim.interval_s)
        for path, body in (("/metrics", b""), ("/health", b"KO")):
            with pytest.raises(urllib.error.HTTPError) as err:
                ft.get(it.node, path)
            assert err.value.code == 503 and err.value.read() == body


# -- the command line ---------------------------------------------------------------------------


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no targets file"
        time.sleep(0.1)


def test_cli_serves_live_exporters_and_fills_the_store_too(tmp_path: Path) -> None:
    targets, store = tmp_path / "targets.json", tmp_path / "s.duckdb"
    args = ["replay", "--scenario", "dev-64", "--serve-exporters", "--speed", "100"]
    args += ["--exporter-base-port", "0", "--targets-file", str(targets), "--store", str(store)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait_for(targets, proc)
        (group,) = json.loads(targets.read_text())
        assert group["labels"] == {"scenario": "dev-64", "run_id": "dev-64-s0", "simulated": "true"}
        assert len(group["targets"]) == 10

        def energy(target: str) -> float:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
                fams = parse(r.read().decode())
            return value(fams, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0)

        before = [energy(t) for t in group["targets"]]
        time.sleep(0.5)  # 50 simulated seconds: five ticks
        after = [energy(t) for t in group["targets"]]
        assert all(b > a for a, b in zip(before, after, strict=True))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "served" in out and "dcgm-exporter endpoints" in err
    with Store(str(store), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM gpu_samples") > 0


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--serve-exporters", "--exporter-base-port", "70000"], "not a TCP port"),
        (["--serve-exporters", "--exporter-base-port", "65530"], "max 65535"),
        (["--serve-exporters", "--backfill"], "cannot --backfill"),
        (["--serve-exporters", "--speed", "0"], "positive"),
        (["--store", "x.duckdb", "--exporter-base-port", "9400"], "need --serve-exporters"),
    ],
)
def test_cli_wrong_exporter_arguments_get_one_line_and_exit_2(
    extra: list[str], expected: str
) -> None:
    r = cli("replay", "--scenario", "dev-64", *extra)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and expected in lines[0], r.stderr


def test_cli_port_in_use_is_one_line_and_exit_1() -> None:
    port = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        r = cli(
            "replay", "--scenario", "dev-64", "--serve-exporters", "--exporter-base-port", str(port)
        )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
