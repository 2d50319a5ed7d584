"""A scenario advanced tick by tick in memory, seen as each host's dcgm-exporter would see it.

``ExporterSimulation`` advances a ``Synthesizer`` (no store) and keeps every host's latest
sample, the cumulative counters the synthesiser does not keep (NVLink bytes, PCIe retries,
remapped rows) and recent XIDs; ``render(node)`` gives that host's ``/metrics`` text through
``exporter_text``. Apart from the HTTP farm (``exporters``) so the simulated state can be
stepped and read in tests, and by any other server, without a socket.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import replace

import numpy as np

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.reference import GPU_MODELS
from telemetry.replay.exporter_text import (
    XID_WINDOW_S,
    GpuCounters,
    exporter_values,
    gpu_labels,
    render_host,
)
from telemetry.replay.runner import run_id_for
from telemetry.replay.scenarios import Scenario
from telemetry.replay.synth import Synthesizer
from telemetry.replay.timeline import Timeline, simulate

EXPORTER_INTERVAL_S = 30.0  # dcgm-exporter collects every 30 s by default

# Cumulative counters the synthesiser does not keep, grown from its load and its XIDs.
NVLINK_BYTES_PER_S = 120e9  # per GPU at full load: tensor- and pipeline-parallel traffic
PCIE_REPLAYS_PER_FALL_OFF_BUS = 25  # retries recorded around an XID 79
UNCORRECTABLE_XIDS = frozenset({48, 94, 95, 140})  # double-bit / uncorrectable ECC -> row remap
CORRECTABLE_XIDS = frozenset({63})  # row remapping recorded
REMAP_FAILURE_XIDS = frozenset({64})


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
        self.latest["gr_active"][:] = np.nan  # not simulated (derived from the load on output)
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
                if c.name in table.column_names:
                    self.latest[c.name][gid[last]] = table[c.name].to_numpy()[last]
            # Collectives move data while the SMs work: a hung rank keeps GPU_UTIL at 100 %
            # with its SMs and links nearly idle (communication-stalled, not communicating).
            working = table["sm_active"].to_numpy().astype(np.float64)
            busy = np.bincount(gid, weights=working, minlength=self.syn.n_gpus)
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
