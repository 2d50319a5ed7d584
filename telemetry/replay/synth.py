"""Turns a ``Timeline`` into what collectors would have stored, window by window.

Per-GPU samples are computed for a whole batch of ticks at once with NumPy (a tick is one sample
time for every GPU); training metrics are derived from the timeline's progress stretches. The
synthesiser keeps the state that carries across windows (energy counters, last XID, node roles),
so windows must be requested in time order. Every random draw comes from one seeded generator.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.reference import GPU_MODELS
from telemetry.replay.partials import arrow as _arrow
from telemetry.replay.partials import gpu_buckets, node_tick
from telemetry.replay.timeline import (
    DOWN,
    HUNG,
    RUNNING,
    Timeline,
    nominal_tokens_per_s,
    throughput_factor,
)
from telemetry.store.rollups import gpu_levels_for

_PCI_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
_NOISE_POOL = 1 << 22
_ROLE_CODE = {"job": 0, "spare": 1, "repair": 2}
JOB_ROLE = _ROLE_CODE["job"]


@dataclass(frozen=True)
class Window:
    """Everything that happened in (t0, t1]: each value is ready for ``Store.append``."""

    t0: float
    t1: float
    tables: dict[str, pa.Table | pd.DataFrame]

    @property
    def sample_rows(self) -> int:
        t = self.tables.get("gpu_samples")
        return 0 if t is None else len(t)


def _cum_fraction(intervals: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints of the cumulative time spent inside ``intervals`` (sorted, non-overlapping)."""
    if not intervals:
        return np.array([0.0, 1.0]), np.array([0.0, 0.0])
    xs = np.array(intervals, dtype=float).ravel()
    lens = np.diff(np.array(intervals, dtype=float), axis=1).ravel()
    cum_end = np.cumsum(lens)
    ys = np.empty_like(xs)
    ys[0::2] = cum_end - lens
    ys[1::2] = cum_end
    return xs, ys


class Synthesizer:
    def __init__(self, tl: Timeline, seed: int, interval_s: float, run_id: str) -> None:
        self.tl, self.sc, self.interval_s, self.run_id = tl, tl.scenario, interval_s, run_id
        sc = self.sc
        self.model = GPU_MODELS[sc.gpu]
        self.n_nodes = sc.nodes + sc.spare_nodes
        self.n_gpus = self.n_nodes * sc.gpus_per_node
        rng = np.random.default_rng([seed, 2])
        self.rng = rng
        self.noise = rng.standard_normal(_NOISE_POOL, dtype=np.float32)
        g = self.n_gpus
        # Per-GPU constants: small manufacturing spread, a few stragglers and hot GPUs.
        self.util_ceiling = (98.5 + rng.normal(0, 0.6, g)).clip(95, 100).astype(np.float32)
        self.thermal_r = (1.0 + rng.normal(0, 0.04, g)).astype(np.float32)
        self.clock_factor = np.ones(g, dtype=np.float32)
        job_gpus = sc.nodes * sc.gpus_per_node
        picks = rng.choice(job_gpus, size=sc.stragglers + sc.throttled, replace=False)
        self.stragglers = picks[: sc.stragglers]
        self.throttled = picks[sc.stragglers :]
        self.clock_factor[self.stragglers] = 0.78
        self.thermal_r[self.throttled] = 1.42
        self.clock_factor[self.throttled] = 0.88
        self.mem_job = (self.model.memory_mib * (0.88 + rng.normal(0, 0.01, g))).astype(np.float32)
        self.node_of = np.repeat(np.arange(self.n_nodes), sc.gpus_per_node)
        self.rack_of_node = np.arange(self.n_nodes) // sc.nodes_per_rack
        self.inlet_offset = rng.normal(0, 1.2, self.n_nodes).astype(np.float32)
        # State carried across windows.
        self.energy_mj = rng.uniform(1e9, 5e10, g)
        self.xid_last = np.zeros(g, dtype=np.float32)
        self.roles = self.initial_roles()
        self.role_changes = sorted(tl.role_changes)
        self.role_idx = 0
        self.xs_block, self.ys_block = _cum_fraction(tl.blocking)
        self.state_xs = {
            st: _cum_fraction([(a, b) for a, b, s in tl.states if s == st])
            for st in (RUNNING, HUNG, DOWN)
        }
        self.spikes = self._draw_spikes(rng)
        tl.interruptions.sort(key=lambda i: i.t)
        self.int_t = [i.t for i in tl.interruptions]
        self.ck_end = [c.end for c in tl.checkpoints]
        self.tokens_per_s = nominal_tokens_per_s(sc)
        self.total_steps = sc.duration_s * self.tokens_per_s / sc.tokens_per_step

    def initial_roles(self) -> np.ndarray:
        """Each node's role code at the start: the job's nodes, then the spares."""
        return np.where(np.arange(self.n_nodes) < self.sc.nodes, 0, 1).astype(np.int8)

    def job_spans(self) -> list[tuple[int, float, float | None]]:
        """Each node's spans in the job so far, (node, from, to) in simulated seconds (to None:
        it holds the job now), from the roles it started with and the role changes applied up
        to the last window: a failed node's span ends at its failure, the spare's that
        replaced it starts there."""
        held = {n: 0.0 for n in np.flatnonzero(self.initial_roles() == JOB_ROLE).tolist()}
        spans: list[tuple[int, float, float | None]] = []
        for t, node, role in self.role_changes[: self.role_idx]:
            if _ROLE_CODE[role] == JOB_ROLE:
                held.setdefault(node, t)
            elif node in held:
                spans.append((node, held.pop(node), t))
        return sorted(spans + [(n, t, None) for n, t in held.items()])

    # -- static tables --------------------------------------------------------------------
    def host(self, node: int) -> str:
        return f"{self.sc.gpu.lower()}-{node:04d}"

    def nodes_frame(self) -> pd.DataFrame:
        n = np.arange(self.n_nodes)
        return pd.DataFrame(
            {
                "node_id": n.astype("int32"),
                "host": [self.host(i) for i in n],
                "rack": [f"rack-{r:03d}" for r in self.rack_of_node],
                "role": np.where(n < self.sc.nodes, "job", "spare"),
            }
        )

    def gpus_frame(self) -> pd.DataFrame:
        sc, g = self.sc, np.arange(self.n_gpus)
        urng = np.random.default_rng([int(sc.nodes), 3, len(sc.name)])
        uuids = [f"GPU-{uuid.UUID(bytes=urng.bytes(16), version=4)}" for _ in g]
        idx = g % sc.gpus_per_node
        return pd.DataFrame(
            {
                "gpu_id": g.astype("int32"),
                "node_id": self.node_of.astype("int32"),
                "host": [self.host(int(n)) for n in self.node_of],
                "gpu": idx.astype("int16"),
                "uuid": uuids,
                "model": self.model.name,
                "pci_bus_id": [f"00000000:{_PCI_BUS[i % 8]}:00.0" for i in idx],
                "device": [f"nvidia{i}" for i in idx],
                "driver_version": "550.90.07",
                "mig_profile": None,
                "mig_instance": None,
                "namespace": None,
                "pod": None,
                "container": None,
                "hpc_job": np.where(self.node_of < sc.nodes, self.run_id, None),  # not spares
            }
        )

    # -- per-GPU samples ------------------------------------------------------------------
    def _frac(self, xs: np.ndarray, ys: np.ndarray, t: np.ndarray) -> np.ndarray:
        lo = np.maximum(t - self.interval_s, 0.0)
        span = np.maximum(t - lo, 1e-9)
        return ((np.interp(t, xs, ys) - np.interp(lo, xs, ys)) / span).astype(np.float32)

    def _noise(self, shape: tuple[int, int], scale: float) -> np.ndarray:
        n = shape[0] * shape[1]
        off = int(self.rng.integers(0, _NOISE_POOL - n))
        return self.noise[off : off + n].reshape(shape) * np.float32(scale)

    def _role_matrix(self, ticks: np.ndarray) -> np.ndarray:
        roles = np.repeat(self.roles[None, :], len(ticks), axis=0)
        while (
            self.role_idx < len(self.role_changes)
            and self.role_changes[self.role_idx][0] <= ticks[-1]
        ):
            t, node, role = self.role_changes[self.role_idx]
            roles[np.searchsorted(ticks, t) :, node] = _ROLE_CODE[role]
            self.roles[node] = _ROLE_CODE[role]
            self.role_idx += 1
        return roles

    def samples(self, ticks: np.ndarray) -> tuple[pa.Table, pa.Table]:
        """Per-GPU samples for the tick times (seconds since start), and their per-(tick, node)
        partial sums for the store's rollups. Nodes in repair are silent."""
        tables = self.sample_tables(ticks)
        return tables["gpu_samples"], tables["node_tick"]

    def sample_tables(
        self, ticks: np.ndarray, edges: tuple[float | None, float | None] | None = None
    ) -> dict[str, pa.Table]:
        """``samples``' two tables by name and, given ``edges`` (the ticks just before and
        after these, None at the run's ends), the per-GPU rollup rows of the buckets these
        ticks hold whole (``gpu_buckets``, see ``replay.partials``)."""
        sc, m, k = self.sc, self.model, len(ticks)
        shape = (k, self.n_gpus)
        # Per-node matrices spread to their GPUs with ``np.take``, row-major like everything
        # else here: ``m[:, node_of]`` is laid out column-major, and so was every array made
        # from it, so each column's copy of the rows kept (``sel``) gathered across memory
        # (10 ms a column instead of 1-2: a fifth of a llama3-405b backfill's synthesis).
        roles = self._role_matrix(ticks).take(self.node_of, axis=1)  # (k, gpus)
        in_job = roles == 0
        run = self._frac(*self.state_xs[RUNNING], ticks)[:, None]
        hung = self._frac(*self.state_xs[HUNG], ticks)[:, None]
        block = self._frac(self.xs_block, self.ys_block, ticks)[:, None]
        alive = np.where(in_job, np.minimum(run + hung, 1.0), 0.0)  # training process present
        load = np.where(in_job, run * (1.0 - 0.85 * block) + hung, 0.0).astype(np.float32)
        util = (load * self.util_ceiling + self._noise(shape, 0.8) * load).clip(0, 100)
        util = np.where(
            np.isin(np.arange(self.n_gpus), self.stragglers) & in_job,
            np.minimum(util + 1.0 * load, 100),
            util,
        )
        hour = (ticks / 3600.0 + sc.start.hour) % 24.0
        inlet = 23.0 + 2.0 * np.cos(2 * np.pi * (hour - 15.0) / 24.0)
        inlet = inlet[:, None] + self.inlet_offset[None, :]
        throttle = np.ones((k, self.n_nodes), dtype=np.float32)
        cf = sc.cooling_fault
        if cf is not None:
            hot = (ticks >= cf.start_h * 3600) & (ticks < (cf.start_h + cf.duration_h) * 3600)
            rack = self.rack_of_node == cf.rack
            inlet = inlet + np.outer(hot, rack) * cf.inlet_rise_c
            throttle[np.ix_(hot, rack)] = 0.86
        inlet_g = inlet.take(self.node_of, axis=1).astype(np.float32)
        temp = inlet_g + 8.0 + load * 38.0 * self.thermal_r + self._noise(shape, 0.6)
        over = np.maximum(temp - 87.0, 0.0)  # hardware slowdown pulls hot GPUs back near 87 C
        temp = temp - 0.7 * over
        clock_f = self.clock_factor * throttle.take(self.node_of, axis=1) * (1.0 - 0.02 * over)
        sm_clock = 345.0 + load * (m.max_sm_clock_mhz - 345.0) * clock_f
        sm_clock = np.round(sm_clock / 15.0) * 15.0
        power = 70.0 + load * (m.tdp_w - 110.0) * clock_f + self._noise(shape, 6.0) * (0.3 + load)
        power = np.round(power.clip(55.0, m.tdp_w), 3)  # NVML reads power in milliwatts
        fb_used = np.round(alive * self.mem_job + 1.0)
        fb_free = m.memory_mib - 512.0 - fb_used
        # Profiling fields (``telemetry.utilization``). Work is the running share outside
        # checkpoint stalls; a hung rank keeps a NCCL kernel resident (GPU_UTIL stays high) on
        # a few SMs with few warps while tensor pipes and HBM sit idle. One noise draw serves
        # all four, so the seeded random stream is the same as before they existed.
        work = np.where(in_job, run * (1.0 - 0.85 * block), 0.0).astype(np.float32)
        spin = np.where(in_job, hung, 0.0).astype(np.float32)
        jitter = self._noise(shape, 0.01)
        # Ratios keep 3 decimals: finer is noise no chart shows, and a decimal compresses to
        # half the bytes of a full-precision float in the store (DuckDB's ALP).
        tensor = np.round((work * 0.58 * clock_f + jitter * work).clip(0, 1), 3)
        sm_active = np.round((work * 0.93 + spin * 0.14 + jitter * (work + spin)).clip(0, 1), 3)
        sm_occupancy = np.round((work * 0.24 + spin * 0.02 + 0.5 * jitter * work).clip(0, 1), 3)
        dram = np.round((work * 0.34 * clock_f + spin * 0.01 + 0.8 * jitter * work).clip(0, 1), 3)
        mem_temp = temp + 6.0 + load * 4.0
        energy = self.energy_mj[None, :] + np.cumsum(power * self.interval_s * 1000.0, axis=0)
        # At the exporter's precision (``exporter_text``: DCGM's int64 fields are whole
        # numbers): finer is a figure no exporter sends, and it costs bytes in both the store
        # and a TSDB (a whole number packs into a few bits, noise past it does not).
        energy = np.rint(energy)
        util, temp, mem_temp = np.rint(util), np.rint(temp), np.rint(mem_temp)
        self.energy_mj = energy[-1]
        xid = self._xid_matrix(ticks)
        keep = roles != 2
        ts = np.datetime64(sc.start) + (ticks * 1e6).astype("timedelta64[us]")
        every = bool(keep.all())  # usually no node is in repair: skip the fancy-index copies

        def sel(a: np.ndarray) -> np.ndarray:
            return a.ravel() if every else a[keep]

        ts_col = sel(np.repeat(ts, self.n_gpus).reshape(shape))
        gpu_col = sel(np.broadcast_to(np.arange(self.n_gpus, dtype=np.int32), shape))
        values = {
            "util_pct": util,
            "temp_c": temp,
            "mem_temp_c": mem_temp,
            "power_w": power,
            "sm_clock_mhz": sm_clock,
            "fb_used_mib": fb_used,
            "fb_free_mib": fb_free,
            "tensor_active": tensor,
            "energy_mj": energy,
            "xid_last": xid,
            "sm_active": sm_active,
            "sm_occupancy": sm_occupancy,
            "dram_active": dram,
        }
        cols = {"ts": _arrow(ts_col.view(np.int64), pa.timestamp("us")), "gpu_id": _arrow(gpu_col)}
        for c in SAMPLE_COLUMNS:
            if c.name not in values:  # GR engine active: not simulated, stored as NULL
                continue
            dtype = np.float64 if c.kind == "counter" else np.float32
            cols[c.name] = _arrow(sel(np.asarray(values[c.name], dtype=dtype)))
        out = {
            "gpu_samples": pa.table(cols),
            "node_tick": node_tick(ts, values, keep, self.n_nodes),
        }
        if edges is not None and (levels := gpu_levels_for(self.interval_s)):
            us = [None if e is None else self.abs_us(e) for e in edges]
            whole = gpu_buckets(ts.view(np.int64), values, keep, levels, *us)
            if whole is not None:
                out["gpu_buckets"] = whole
        return out

    def abs_us(self, t: float) -> int:
        """Simulated seconds ``t`` as microseconds since the epoch (the store's timestamps)."""
        start = np.datetime64(self.sc.start, "us").view(np.int64)
        return int(start + np.array(t * 1e6).astype(np.int64))  # as ``sample_tables`` has it

    def _xid_matrix(self, ticks: np.ndarray) -> np.ndarray:
        out = np.repeat(self.xid_last[None, :], len(ticks), axis=0)
        lo = ticks[0] - self.interval_s
        first, last = bisect_right(self.int_t, lo), bisect_right(self.int_t, float(ticks[-1]))
        for it in self.tl.interruptions[first:last]:
            if it.xid is not None:
                g = it.node * self.sc.gpus_per_node + (it.gpu or 0)
                out[np.searchsorted(ticks, it.t) :, g] = it.xid
                self.xid_last[g] = it.xid
        return out

    # -- training metrics -----------------------------------------------------------------
    def _draw_spikes(self, rng: np.random.Generator) -> np.ndarray:
        total = self.sc.duration_s * nominal_tokens_per_s(self.sc) / self.sc.tokens_per_step
        n = max(int(rng.poisson(max(total / 40000.0, 3.0))), 1)
        steps = np.sort(rng.uniform(500, total, n))
        mags = rng.uniform(0.15, 1.2, n)
        return np.stack([steps, mags])

    def loss_parts(self, steps: np.ndarray, attempt: np.ndarray) -> tuple[np.ndarray, ...]:
        """(power law in tokens, relative noise, spike). Spikes are tied to the step (the data),
        so a rolled-back span that is trained again shows them again; noise is per attempt."""
        tokens = steps * self.sc.tokens_per_step
        base = 1.75 + 9.5 * (1.0 + tokens / 2.0e8) ** -0.28
        h = np.sin(steps * 12.9898 + attempt * 78.233) * 43758.5453
        noise = ((h - np.floor(h)) - 0.5) * 0.045
        spike = np.zeros_like(base)
        for s0, mag in self.spikes.T:
            d = steps - s0
            spike += np.where(d >= 0, mag * np.exp(-np.clip(d, 0, None) / 60.0), 0.0)
        return base, noise, spike

    def lr_at(self, steps: np.ndarray) -> np.ndarray:
        warm = 2000.0
        peak = 3e-4 if self.sc.params < 1e11 else 8e-5
        frac = np.clip((steps - warm) / max(self.total_steps - warm, 1.0), 0, 1)
        cos = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac))
        return np.where(steps < warm, peak * steps / warm, peak * cos)

    def metrics(self, t0: float, t1: float) -> pd.DataFrame:
        sc, every = self.sc, self.sc.log_every_steps
        parts = []
        for s in self.tl.stretches:
            if s.t1 <= t0 or s.t0 > t1:
                continue
            w0 = float(self.tl.work_at(s.t0))
            s_end = s.step0 + (float(self.tl.work_at(s.t1)) - w0) / sc.tokens_per_step
            first = np.ceil(s.step0 / every) * every
            steps = np.arange(first, np.floor(s_end) + 1, every)
            if steps.size == 0:
                continue
            ts = self.tl.time_for_work(w0 + (steps - s.step0) * sc.tokens_per_step)
            sel = (ts > t0) & (ts <= t1) & (ts > s.t0)
            if sel.any():
                parts.append((steps[sel], ts[sel], np.full(sel.sum(), s.attempt)))
        if not parts:
            return pd.DataFrame()
        steps = np.concatenate([p[0] for p in parts])
        ts = np.concatenate([p[1] for p in parts])
        attempt = np.concatenate([p[2] for p in parts])
        jitter = np.sin(steps * 91.7 + attempt * 12.3) * 43758.5453  # per-step, repeatable
        tps = self.tokens_per_s * throughput_factor(sc, ts) * (1 + 0.006 * (jitter % 1.0 - 0.5))
        base, noise, spike = self.loss_parts(steps, attempt)
        loss = base * (1.0 + noise) + spike
        grad = 0.25 + 0.6 * np.exp(-steps / 3000.0) + 3.0 * spike + 2.0 * np.abs(noise)
        peak = GPU_MODELS[sc.gpu].bf16_tflops * 1e12
        return pd.DataFrame(
            {
                "run_id": self.run_id,
                "ts": pd.to_datetime(
                    np.datetime64(sc.start) + (ts * 1e6).astype("timedelta64[us]")
                ),
                "step": steps.astype("int64"),
                "tokens": steps * sc.tokens_per_step,
                "loss": loss.astype("float32"),
                "lr": self.lr_at(steps).astype("float32"),
                "grad_norm": grad.astype("float32"),
                "tokens_per_s": tps.astype("float32"),
                "mfu": (tps * 6 * sc.params / (sc.gpus * peak)).astype("float32"),
                "attempt": attempt.astype("int32"),
            }
        )

    # -- events ---------------------------------------------------------------------------
    def abs_time(self, t: float) -> datetime:
        return self.sc.start + timedelta(seconds=float(t))

    def _abs(self, t: float) -> pd.Timestamp:
        return pd.Timestamp(self.sc.start + timedelta(seconds=float(t)))

    def events(self, t0: float, t1: float) -> dict[str, pd.DataFrame]:
        """Interruptions, XID events and checkpoints that became known in (t0, t1]."""
        its = self.tl.interruptions[bisect_right(self.int_t, t0) : bisect_right(self.int_t, t1)]
        cks = self.tl.checkpoints[bisect_right(self.ck_end, t0) : bisect_right(self.ck_end, t1)]
        out: dict[str, pd.DataFrame] = {}
        if its:
            out["interruptions"] = pd.DataFrame(
                [
                    {
                        "run_id": self.run_id,
                        "ts": self._abs(i.t),
                        "host": self.host(i.node),
                        "gpu": i.gpu,
                        "component": i.component,
                        "category": i.category,
                        "xid": i.xid,
                        "planned": i.planned,
                        "node_lost": i.node_lost,
                        "detect_s": i.detect_s,
                        "restart_s": i.restart_s,
                        "recovery": i.recovery,
                        "restored_tier": i.restored_tier,
                        "restored_step": i.restored_step,
                        "lost_steps": i.lost_steps,
                        "rework_s": i.rework_s,
                        "lost_gpu_hours": i.lost_gpu_hours,
                        "description": (
                            "job hung until the NCCL watchdog fired"
                            if i.hang
                            else "node drained, hot spare swapped in"
                            if i.node_lost
                            else ""
                        ),
                        "source": "replay",
                    }
                    for i in its
                ]
            ).astype({"gpu": "Int16", "xid": "Int16"})
            xids = [i for i in its if i.xid is not None]
            if xids:
                out["xid_events"] = pd.DataFrame(
                    [
                        {
                            "ts": self._abs(i.t),
                            "host": self.host(i.node),
                            "gpu": i.gpu or 0,
                            "xid": i.xid,
                            "run_id": self.run_id,
                            "source": "replay",
                        }
                        for i in xids
                    ]
                ).astype({"gpu": "int16", "xid": "int16"})
        if cks:
            out["checkpoints"] = pd.DataFrame(
                [
                    {
                        "run_id": self.run_id,
                        "step": c.step,
                        "tier": c.tier,
                        "start_ts": self._abs(c.start),
                        "end_ts": self._abs(c.end),
                        "bytes": c.bytes,
                        "write_s": c.write_s,
                        "blocking_s": c.blocking_s,
                        "status": c.status,
                    }
                    for c in cks
                ]
            )
        return out

    def window(
        self,
        ticks: np.ndarray,
        t0: float,
        t1: float,
        edges: tuple[float | None, float | None] | None = None,
    ) -> Window:
        """Everything in (t0, t1]; ``edges`` as in ``sample_tables``."""
        tables: dict[str, pa.Table | pd.DataFrame] = {}
        if len(ticks):
            tables.update(self.sample_tables(ticks, edges))
        m = self.metrics(t0, t1)
        if len(m):
            tables["train_metrics"] = m
        tables.update(self.events(t0, t1))
        return Window(t0, t1, tables)
