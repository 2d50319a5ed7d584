"""The replay engine as a fleet of NVIDIA dcgm-exporter endpoints on 127.0.0.1.

Three layers, each usable alone:

* ``exporter_values`` and ``render_host`` (pure): one host's latest per-GPU sample becomes the
  text dcgm-exporter serves on ``:9400/metrics``, in its exact format: ``# HELP``/``# TYPE`` per
  family in the counters-file order, labels in the exporter's order (``gpu``, ``UUID``,
  ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``, then
  attributes such as ``hpc_job``), int64 fields as integers and double fields with 6 decimals
  (Go's ``%f``), and ``DCGM_EXP_XID_ERRORS_COUNT`` over a 5-minute window.
* ``ExporterSimulation``: advances a ``Synthesizer`` tick by tick in memory (no store) and keeps
  every host's latest sample, the cumulative counters the synthesiser does not keep, and recent
  XIDs.
* ``ExporterFarm``: one asyncio event loop with one listening socket per host (``/metrics``,
  ``/health``), paced live at a speed. A node in repair refuses connections (it is powered off
  or rebooting) or, with ``repair="503"``, answers 503 like an exporter that lost its GPUs.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, cached_property

import numpy as np
import pandas as pd

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.errors import FactoryFloorError
from telemetry.reference import GPU_MODELS, GpuModel, dcgm_fields, xids
from telemetry.replay.runner import run_id_for
from telemetry.replay.scenarios import Scenario
from telemetry.replay.synth import Synthesizer
from telemetry.replay.timeline import Timeline, simulate

XID_WINDOW_S = 300.0  # dcgm-exporter's default window for DCGM_EXP_XID_ERRORS_COUNT
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"
EXPORTER_INTERVAL_S = 30.0  # dcgm-exporter collects every 30 s by default
_DOUBLE_UNITS = frozenset({"W", "ratio 0-1"})  # DCGM_FT_DOUBLE fields; every other one is int64

# Fields the synthesiser does not produce, derived from the load (util / 100) it does produce.
NVLINK_BYTES_PER_S = 120e9  # per GPU at full load: tensor- and pipeline-parallel traffic
PCIE_RX_BYTES_PER_S = 1.2e8  # host -> GPU at full load: input batches
PCIE_TX_BYTES_PER_S = 4.0e7  # GPU -> host at full load: metrics, logs
PCIE_IDLE_BYTES_PER_S = 1.0e6  # driver and DCGM polling
DRAM_PER_TENSOR, DRAM_PER_LOAD = 0.6, 0.05  # HBM activity tracks the matmul pipes
PCIE_REPLAYS_PER_FALL_OFF_BUS = 25  # retries recorded around an XID 79
UNCORRECTABLE_XIDS = frozenset({48, 94, 95, 140})  # double-bit / uncorrectable ECC -> row remap
CORRECTABLE_XIDS = frozenset({63})  # row remapping recorded
REMAP_FAILURE_XIDS = frozenset({64})


class ExporterError(FactoryFloorError):
    """An exporter endpoint could not be served (port in use, too many ports)."""


@dataclass(frozen=True)
class Family:
    field: str
    prom_type: str  # gauge | counter
    help: str
    double: bool  # printed with 6 decimals; otherwise an integer


@cache
def families() -> tuple[Family, ...]:
    """The exporter's default metric families in counters-file order, then the XID count."""
    fields = dcgm_fields()
    chosen = [f for f in fields.values() if f.default and f.prom_type != "label"]
    chosen.append(fields[XID_COUNT])
    return tuple(Family(f.field, f.prom_type, f.help, f.unit in _DOUBLE_UNITS) for f in chosen)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class GpuLabels:
    """The identity labels dcgm-exporter puts on every sample of one GPU."""

    gpu: int
    uuid: str
    pci_bus_id: str
    device: str
    model_name: str
    hostname: str
    driver_version: str
    hpc_job: str | None = None

    @cached_property
    def base(self) -> str:
        """Labels up to ``DCGM_FI_DRIVER_VERSION``; sorted labels such as ``xid`` follow."""
        pairs = (
            ("gpu", str(self.gpu)),
            ("UUID", self.uuid),
            ("pci_bus_id", self.pci_bus_id),
            ("device", self.device),
            ("modelName", self.model_name),
            ("Hostname", self.hostname),
            ("DCGM_FI_DRIVER_VERSION", self.driver_version),
        )
        return ",".join(f'{k}="{_esc(v)}"' for k, v in pairs)

    @cached_property
    def attrs(self) -> str:
        """Attribute labels, after every other label (only ``hpc_job`` here)."""
        return f',hpc_job="{_esc(self.hpc_job)}"' if self.hpc_job else ""


_INVENTORY = ("gpu", "uuid", "pci_bus_id", "device", "model", "host", "driver_version", "hpc_job")


def gpu_labels(gpus: pd.DataFrame, with_job: bool = True) -> list[GpuLabels]:
    """``GpuLabels`` for inventory rows (the store's ``gpus`` table); ``with_job=False`` drops
    ``hpc_job`` (a node outside the job). Raises ValueError naming a missing column."""
    missing = [c for c in _INVENTORY if c not in gpus.columns]
    if missing:
        raise ValueError(f"gpus inventory lacks column(s) {', '.join(missing)}")
    rows = gpus[list(_INVENTORY)].itertuples(index=False, name=None)
    return [
        GpuLabels(int(g), u, p, d, m, h, v, (j or None) if with_job and pd.notna(j) else None)
        for g, u, p, d, m, h, v, j in rows
    ]


@dataclass(frozen=True)
class GpuCounters:
    """Cumulative per-GPU state the synthesiser does not keep (arrays, one entry per GPU)."""

    nvlink_bytes: np.ndarray  # bytes over NVLink since the node last booted
    pcie_replays: np.ndarray  # PCIe retries since the node last booted
    correctable_rows: np.ndarray  # HBM rows remapped for correctable errors (lifetime)
    uncorrectable_rows: np.ndarray  # HBM rows remapped for uncorrectable errors (lifetime)
    remap_failure: np.ndarray  # 1 once a row remap failed (XID 64)

    @classmethod
    def zeros(cls, n: int) -> GpuCounters:
        return cls(*(np.zeros(n, dtype=np.float64) for _ in range(5)))


def _columns(cols: Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    out = {}
    for c in SAMPLE_COLUMNS:
        if c.name not in cols:
            raise ValueError(f"sample lacks column {c.name!r} ({c.field})")
        out[c.name] = np.asarray(cols[c.name], dtype=np.float64)
    lengths = {len(a) for a in out.values()}
    if len(lengths) > 1:
        raise ValueError(f"sample columns differ in length: {sorted(lengths)}")
    return out


def exporter_values(
    cols: Mapping[str, Sequence[float]], model: GpuModel, counters: GpuCounters | None = None
) -> dict[str, np.ndarray]:
    """Every default dcgm-exporter field for a set of GPUs, keyed by field name.

    ``cols`` holds the synthesiser's columns (``SAMPLE_COLUMNS``: util %, °C, W, MHz, MiB, tensor
    ratio, energy mJ, last XID). The other fields follow from those: GR engine active = util / 100;
    DRAM active from the tensor pipe and load; memory copy util = 100 x DRAM active; PCIe bytes/s
    and NVLink bytes from the load; memory clock and reserved framebuffer from ``model``; encoder,
    decoder and vGPU license 0; cumulative counters (NVLink bytes, PCIe retries, remapped rows)
    from ``counters`` (zeros if None). Int64 fields come back as int64 arrays (rounded), doubles
    as float64. Raises ValueError naming a missing column, or on unequal lengths.
    """
    c = _columns(cols)
    n = len(c["util_pct"])
    k = counters or GpuCounters.zeros(n)
    if len(k.nvlink_bytes) != n:
        raise ValueError(f"counters for {len(k.nvlink_bytes)} GPUs, sample for {n}")
    load = np.clip(c["util_pct"] / 100.0, 0.0, 1.0)
    dram = np.clip(DRAM_PER_TENSOR * c["tensor_active"] + DRAM_PER_LOAD * load, 0.0, 1.0)
    out = {col.field: c[col.name] for col in SAMPLE_COLUMNS}
    out |= {
        "DCGM_FI_DEV_MEM_CLOCK": np.full(n, model.mem_clock_mhz),
        "DCGM_FI_DEV_FB_RESERVED": model.memory_mib - c["fb_used_mib"] - c["fb_free_mib"],
        "DCGM_FI_DEV_MEM_COPY_UTIL": 100.0 * dram,
        "DCGM_FI_DEV_ENC_UTIL": np.zeros(n),
        "DCGM_FI_DEV_DEC_UTIL": np.zeros(n),
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": np.zeros(n),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": load,
        "DCGM_FI_PROF_DRAM_ACTIVE": dram,
        "DCGM_FI_PROF_PCIE_RX_BYTES": PCIE_IDLE_BYTES_PER_S + PCIE_RX_BYTES_PER_S * load,
        "DCGM_FI_PROF_PCIE_TX_BYTES": PCIE_IDLE_BYTES_PER_S + PCIE_TX_BYTES_PER_S * load,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": k.pcie_replays,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": k.nvlink_bytes,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": k.correctable_rows,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": k.uncorrectable_rows,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": k.remap_failure,
    }
    return {
        f.field: out[f.field].astype(np.float64)
        if f.double
        else np.rint(out[f.field]).astype(np.int64)
        for f in families()
        if f.field != XID_COUNT
    }


def _xid_msg(code: int) -> str:
    if code == 0:
        return "No Error"
    x = xids().get(code)
    return x.message if x else "Unknown Error"


def _value_lines(f: Family, gpus: Sequence[GpuLabels], vals: list[float]) -> list[str]:
    name = f.field
    if name == XID_LAST:
        return [
            f'{name}{{{g.base},err_code="{v}",err_msg="{_esc(_xid_msg(v))}"{g.attrs}}} {v}'
            for g, v in zip(gpus, map(int, vals), strict=True)
        ]
    fmt = "%f" if f.double else "%d"
    return [
        f"{name}{{{g.base}{g.attrs}}} {fmt % v}"
        for g, v in zip(gpus, vals, strict=True)
        if v == v  # a NaN is a value the exporter could not read: it skips the sample
    ]


def _xid_count_lines(
    gpus: Sequence[GpuLabels], counts: Sequence[Mapping[int, int]], window_s: float
) -> list[str]:
    """One sample per XID seen in the window; a GPU without any gets one zero sample."""
    win = f'window_size_in_ms="{round(window_s * 1000)}"'
    lines = []
    for g, per_xid in zip(gpus, counts, strict=True):
        if not per_xid:
            lines.append(f"{XID_COUNT}{{{g.base},{win}{g.attrs}}} 0")
        for x, n in sorted(per_xid.items()):
            lines.append(f'{XID_COUNT}{{{g.base},{win},xid="{x}"{g.attrs}}} {n}')
    return lines


def render_host(
    gpus: Sequence[GpuLabels],
    values: Mapping[str, Sequence[float]],
    xid_counts: Sequence[Mapping[int, int]] | None = None,
    window_s: float = XID_WINDOW_S,
) -> str:
    """dcgm-exporter text for one host: ``values`` maps each field of ``families()`` (see
    ``exporter_values``) to one value per GPU of ``gpus``; ``xid_counts`` holds, per GPU, the
    XIDs seen in the last ``window_s`` seconds and how often. Raises ValueError naming a
    missing field or one whose length differs from the number of GPUs."""
    counts = list(xid_counts) if xid_counts is not None else [{} for _ in gpus]
    lines: list[str] = []
    for f in families():
        lines += (f"# HELP {f.field} {f.help}", f"# TYPE {f.field} {f.prom_type}")
        if f.field == XID_COUNT:
            vals: Sequence[object] = counts
        elif f.field not in values:
            raise ValueError(f"no values for field {f.field}")
        else:
            vals = values[f.field]
        if len(vals) != len(gpus):
            raise ValueError(f"{f.field}: {len(vals)} values for {len(gpus)} GPUs")
        if f.field == XID_COUNT:
            lines += _xid_count_lines(gpus, counts, window_s)
        else:
            seq = vals.tolist() if isinstance(vals, np.ndarray) else list(vals)
            lines += _value_lines(f, gpus, seq)
    return "\n".join(lines) + "\n"


def render_sample(
    samples: pd.DataFrame, gpus: pd.DataFrame, xid_counts: Sequence[Mapping[int, int]] | None = None
) -> str:
    """dcgm-exporter text for one host from its latest ``gpu_samples`` rows and its ``gpus``
    inventory rows (joined on ``gpu_id``). Counters the synthesiser does not keep start at 0.
    Raises ValueError on a missing column, an unknown GPU model or a GPU without a sample."""
    inv = gpus.sort_values("gpu")
    rows = samples.set_index("gpu_id").reindex(inv["gpu_id"])
    if rows[SAMPLE_COLUMNS[0].name].isna().any():
        raise ValueError("every GPU of the host needs a sample row")
    models = {m.name: m for m in GPU_MODELS.values()}
    name = str(inv["model"].iloc[0])
    if name not in models:
        raise ValueError(f"unknown GPU model {name!r}")
    values = exporter_values({c: rows[c].to_numpy() for c in rows.columns}, models[name])
    return render_host(gpu_labels(inv), values, xid_counts)


def drain_after_detection(tl: Timeline) -> Timeline:
    """A drained node keeps its exporter up until the failure is detected (it shows the XID
    meanwhile); the timeline drains it at the failure itself."""
    detect = {(i.t, i.node): i.detect_s for i in tl.interruptions if i.node_lost}
    moved = [
        (t + detect.get((t, node), 0.0), node, role) if role == "repair" else (t, node, role)
        for t, node, role in tl.role_changes
    ]
    return replace(tl, role_changes=sorted(moved))


def exporter_interval(sc: Scenario) -> float:
    """Default sample interval for live exporters: the scenario's, at most the exporter's 30 s."""
    return min(sc.sample_interval_s, EXPORTER_INTERVAL_S)


class ExporterSimulation:
    """A scenario advanced tick by tick in memory, seen as each host's dcgm-exporter would.

    Times are simulated seconds since the scenario start; tick ``k`` is at ``k * interval_s``.
    The first tick is synthesised on construction, so every exporter has data at once.
    """

    def __init__(
        self,
        sc: Scenario,
        seed: int = 0,
        interval_s: float | None = None,
        xid_window_s: float = XID_WINDOW_S,
    ) -> None:
        self.sc, self.seed = sc, seed
        self.interval_s = float(interval_s or exporter_interval(sc))
        if not self.interval_s > 0:
            raise ValueError("sample interval must be positive")
        self.xid_window_s = xid_window_s
        self.timeline = simulate(sc, seed)
        self.run_id = run_id_for(sc, seed)
        self.syn = Synthesizer(
            drain_after_detection(self.timeline), seed, self.interval_s, self.run_id
        )
        self.model = GPU_MODELS[sc.gpu]
        self.gpn, self.n_hosts, n = sc.gpus_per_node, self.syn.n_nodes, self.syn.n_gpus
        self.hostnames = [self.syn.host(i) for i in range(self.n_hosts)]
        inv = self.syn.gpus_frame()
        job, idle = gpu_labels(inv), gpu_labels(inv, with_job=False)
        self._labels = [
            (idle[i * self.gpn : (i + 1) * self.gpn], job[i * self.gpn : (i + 1) * self.gpn])
            for i in range(self.n_hosts)
        ]
        self.latest = {c.name: np.zeros(n) for c in SAMPLE_COLUMNS}
        self.counters = GpuCounters.zeros(n)
        boot = np.random.default_rng([seed, 5]).poisson(0.05, n)  # a few GPUs saw retries
        self.counters.pcie_replays[:] = boot
        self._xid_queue = sorted(
            (i.t, i.node, i.gpu or 0, i.xid) for i in self.timeline.interruptions if i.xid
        )
        self._xid_next = 0
        self._xids: list[list[tuple[float, int, int]]] = [[] for _ in range(self.n_hosts)]
        self.last_tick = int(np.floor(sc.duration_s / self.interval_s + 1e-9))
        self.tick = 0
        self.values: dict[str, np.ndarray] = {}
        self.advance_to(self.interval_s)

    @property
    def t(self) -> float:
        """Simulated seconds of the latest tick."""
        return self.tick * self.interval_s

    @property
    def done(self) -> bool:
        return self.tick >= self.last_tick

    def down(self, node: int) -> bool:
        """Whether ``node`` is in repair (drained: its exporter is unreachable)."""
        return bool(self.syn.roles[node] == 2)

    def advance_to(self, t_s: float) -> int:
        """Synthesise every tick up to ``t_s`` (at most the run's end); returns how many."""
        last = min(int(np.floor(t_s / self.interval_s + 1e-9)), self.last_tick)
        batch = max(1, 1_000_000 // self.syn.n_gpus)
        start = self.tick
        while self.tick < last:
            ks = np.arange(self.tick + 1, min(last, self.tick + batch) + 1)
            self._apply(ks * self.interval_s)
            self.tick = int(ks[-1])
        if self.tick > start:
            self.values = exporter_values(self.latest, self.model, self.counters)
        return self.tick - start

    def _apply(self, ticks: np.ndarray) -> None:
        was_down = self.syn.roles == 2
        table, _ = self.syn.samples(ticks)
        back = np.repeat(was_down & (self.syn.roles != 2), self.gpn)
        self.counters.nvlink_bytes[back] = 0.0  # the node rebooted during repair
        self.counters.pcie_replays[back] = 0.0
        gid = table["gpu_id"].to_numpy()
        if len(gid):
            ts = table["ts"].to_numpy()
            last = ts == ts[-1]
            for c in SAMPLE_COLUMNS:
                self.latest[c.name][gid[last]] = table[c.name].to_numpy()[last]
            util = table["util_pct"].to_numpy().astype(np.float64)
            busy = np.bincount(gid, weights=util, minlength=self.syn.n_gpus) / 100.0
            self.counters.nvlink_bytes[:] += busy * NVLINK_BYTES_PER_S * self.interval_s
        self._take_xids(float(ticks[-1]))

    def _take_xids(self, t1: float) -> None:
        q, k = self._xid_queue, self.counters
        while self._xid_next < len(q) and q[self._xid_next][0] <= t1:
            t, node, gpu, xid = q[self._xid_next]
            self._xid_next += 1
            self._xids[node].append((t, gpu, xid))
            g = node * self.gpn + gpu
            k.pcie_replays[g] += PCIE_REPLAYS_PER_FALL_OFF_BUS if xid == 79 else 0
            k.uncorrectable_rows[g] += xid in UNCORRECTABLE_XIDS
            k.correctable_rows[g] += xid in CORRECTABLE_XIDS
            k.remap_failure[g] = max(k.remap_failure[g], xid in REMAP_FAILURE_XIDS)

    def xid_counts(self, node: int) -> list[Counter[int]]:
        """Per GPU of ``node``: the XIDs seen in the window ending at the latest tick."""
        out: list[Counter[int]] = [Counter() for _ in range(self.gpn)]
        events = self._xids[node]
        lo = bisect_right(events, (self.t - self.xid_window_s, self.gpn, 1 << 30))
        for t, gpu, xid in events[lo:]:
            if t <= self.t:
                out[gpu][xid] += 1
        return out

    def render(self, node: int) -> str | None:
        """The host's ``/metrics`` text at the latest tick, or None while it is in repair."""
        if self.down(node):
            return None
        sl = slice(node * self.gpn, (node + 1) * self.gpn)
        labels = self._labels[node][int(self.syn.roles[node] == 0)]
        values = {f: a[sl] for f, a in self.values.items()}
        return render_host(labels, values, self.xid_counts(node), self.xid_window_s)


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_HEAD = 16384


class _Protocol(asyncio.Protocol):
    """HTTP/1.x for one host's endpoint: GET/HEAD, keep-alive, no request bodies."""

    def __init__(self, farm: ExporterFarm, node: int) -> None:
        self.farm, self.node, self.buf = farm, node, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.farm._conns[self.node].add(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.farm._conns[self.node].discard(self.transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None and not self.transport.is_closing():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self._send(431, b"HTTP/1.1", b"GET", "text/plain", b"", False)
                return
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            self._answer(head)

    def _answer(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._send(400, b"HTTP/1.1", b"GET", "text/plain", b"bad request\n", False)
            return
        method, target, version = parts
        conn = b""
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"connection":
                conn = value.strip().lower()
        keep = conn != b"close" if version == b"HTTP/1.1" else conn == b"keep-alive"
        if method not in (b"GET", b"HEAD"):
            self._send(405, version, method, "text/plain", b"method not allowed\n", False)
            return
        path = target.split(b"?", 1)[0].decode("latin-1")
        status, ctype, body = self.farm.respond(self.node, path)
        self._send(status, version, method, ctype, body, keep)

    def _send(
        self, status: int, version: bytes, method: bytes, ctype: str, body: bytes, keep: bool
    ) -> None:
        assert self.transport is not None
        head = (
            f"{version.decode()} {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep else 'close'}"
            "\r\n\r\n"
        ).encode()
        self.transport.write(head if method == b"HEAD" else head + body)
        if not keep:
            self.transport.close()


class ExporterFarm:
    """Every host of an ``ExporterSimulation`` as a dcgm-exporter on its own port.

    ``base_port`` N gives host i port N + i; 0 lets the OS pick a free port per host (see
    ``ports`` after ``start``). One event loop serves every socket; call the coroutines from it.
    """

    def __init__(
        self,
        sim: ExporterSimulation,
        base_port: int = 9400,
        host: str = "127.0.0.1",
        repair: str = "refuse",
    ) -> None:
        if repair not in ("refuse", "503"):
            raise ValueError(f"repair must be 'refuse' or '503', not {repair!r}")
        if base_port and base_port + sim.n_hosts - 1 > 65535:
            raise ExporterError(
                f"base port {base_port}: {sim.n_hosts} nodes need ports up to "
                f"{base_port + sim.n_hosts - 1} (the last TCP port is 65535)"
            )
        self.sim, self.host, self.repair = sim, host, repair
        self.ports = [base_port + i if base_port else 0 for i in range(sim.n_hosts)]
        self.requests = 0
        self._servers: dict[int, asyncio.Server] = {}
        self._conns: list[set[asyncio.Transport]] = [set() for _ in range(sim.n_hosts)]

    def respond(self, node: int, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET on ``path`` of ``node``'s exporter."""
        self.requests += 1
        text = self.sim.render(node) if path == "/metrics" else None
        up = not self.sim.down(node)
        if path == "/metrics":
            return (200, _METRICS_TYPE, text.encode()) if text else (503, "text/plain", b"")
        if path == "/health":
            return (200, "text/plain", b"OK") if up else (503, "text/plain", b"KO")
        return 404, "text/plain; charset=utf-8", b"404 page not found\n"

    async def _listen(self, node: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.ports[node]))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ExporterError(
                f"cannot listen on {self.host}:{self.ports[node]} for {self.sim.hostnames[node]}:"
                f" {exc.strerror or exc}"
            ) from None
        self.ports[node] = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self._servers[node] = await loop.create_server(lambda: _Protocol(self, node), sock=sock)

    def _unlisten(self, node: int) -> None:
        self._servers.pop(node).close()
        for tr in list(self._conns[node]):
            tr.abort()  # the node went away: open keep-alive connections are reset

    async def start(self) -> None:
        """Open one listening socket per host, then close those of hosts in repair."""
        _raise_fd_limit(2 * self.sim.n_hosts + 256)
        try:
            for node in range(self.sim.n_hosts):
                await self._listen(node)
        except ExporterError:
            await self.close()
            raise
        await self.sync()

    async def sync(self) -> None:
        """Match listeners to node states: a node in repair refuses connections (in "refuse"
        mode); a repaired node listens again. A port taken meanwhile is retried next tick."""
        if self.repair != "refuse":
            return
        for node in range(self.sim.n_hosts):
            down, listening = self.sim.down(node), node in self._servers
            if down and listening:
                self._unlisten(node)
            elif not down and not listening:
                try:
                    await self._listen(node)
                except ExporterError:
                    pass

    async def step_to(self, t_s: float) -> int:
        """Advance the simulation to ``t_s`` simulated seconds; returns the ticks synthesised."""
        n = self.sim.advance_to(t_s)
        await self.sync()
        return n

    async def run(self, speed: float, stop: asyncio.Event | None = None) -> None:
        """Advance live at ``speed`` simulated seconds per wall second until the run ends or
        ``stop`` is set; if synthesis falls behind, the next step catches up."""
        if not speed > 0:
            raise ValueError("speed must be positive (simulated seconds per wall second)")
        loop, stop = asyncio.get_running_loop(), stop or asyncio.Event()
        wall0, sim0 = loop.time(), self.sim.t
        while not self.sim.done and not stop.is_set():
            due = wall0 + (self.sim.t + self.sim.interval_s - sim0) / speed
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(due - loop.time(), 0.0))
            except TimeoutError:
                await self.step_to(sim0 + (loop.time() - wall0) * speed)

    async def close(self) -> None:
        for node in list(self._servers):
            self._unlisten(node)

    def targets(self) -> list[dict[str, object]]:
        """Prometheus ``file_sd`` groups: every host, reachable or in repair."""
        labels = {
            "scenario": self.sim.sc.name,
            "run_id": self.sim.run_id,
            "simulated": "true",
        }
        return [{"targets": [f"{self.host}:{p}" for p in self.ports], "labels": labels}]

    def write_targets(self, path: str) -> None:
        """Write ``targets()`` as file_sd JSON atomically (a reader never sees half a file)."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.targets(), fh, indent=1)
        os.replace(tmp, path)


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        top = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(top, soft), hard))


def serve_exporters(
    farm: ExporterFarm,
    speed: float,
    targets_file: str | None = None,
    ready: Callable[[ExporterFarm], None] | None = None,
) -> None:
    """Serve ``farm`` live at ``speed`` until the run ends, SIGINT or SIGTERM (blocking). Once
    every host listens, ``ready`` is called, then ``targets_file`` is written (so its appearance
    tells a scraper that everything is up)."""
    asyncio.run(_serve(farm, speed, targets_file, ready))


async def _serve(
    farm: ExporterFarm,
    speed: float,
    targets_file: str | None,
    ready: Callable[[ExporterFarm], None] | None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (RuntimeError, ValueError):  # not the main thread
            pass
    await farm.start()
    try:
        if ready is not None:
            ready(farm)
        if targets_file:
            farm.write_targets(targets_file)
        await farm.run(speed, stop)
    finally:
        await farm.close()
