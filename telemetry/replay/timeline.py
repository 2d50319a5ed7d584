"""The run-level discrete-event simulation: failures, checkpoints, restores and restarts.

A heap ordered by (time, priority, sequence) drives the run, as in SimPy, so ties resolve
deterministically; one seeded ``numpy.random.Generator`` per run draws everything. The result,
a ``Timeline``, is small (events and piecewise-linear progress), and the telemetry synthesiser
turns it into per-GPU samples and training metrics for any time window.

Times are seconds since the scenario start.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from telemetry.reference import GPU_MODELS, llama3_interruptions
from telemetry.replay.scenarios import Scenario, per_node_day_rates
from telemetry.vocabulary import GPU_CATEGORY, PLANNED_CATEGORY, PLANNED_COMPONENT

RUNNING, HUNG, DOWN = 0, 1, 2

# Per component: probability the failed node is drained (its NVMe copy is then lost), whether
# the job hangs until the NCCL watchdog fires (GPUs spin at 100%) rather than crashing, and the
# XIDs a GPU-caused failure reports (see xid_reference.csv).
_BEHAVIOUR: dict[str, tuple[float, bool, tuple[int, ...]]] = {
    "Faulty GPU": (0.4, False, (79, 79, 74, 46, 62, 143)),
    "GPU HBM3 Memory": (0.3, False, (48, 63, 64, 94, 95)),
    "Software Bug": (0.0, False, ()),
    "Network Switch/Cable": (0.0, True, ()),
    "Host Maintenance": (0.7, False, ()),
    "GPU SRAM Memory": (0.3, False, (94, 95, 140)),
    "GPU System Processor": (0.3, False, (119, 120)),
    "NIC": (1.0, True, ()),
    "NCCL Watchdog Timeouts": (0.0, True, ()),
    "Silent Data Corruption": (1.0, False, ()),
    "GPU Thermal Interface + Sensor": (0.8, False, (79,)),
    "SSD": (1.0, False, ()),
    "Power Supply": (1.0, False, ()),
    "Server Chassis": (1.0, False, ()),
    "IO Expansion Board": (1.0, False, ()),
    "Dependency": (0.0, False, ()),
    "CPU": (1.0, False, ()),
    "System Memory": (1.0, False, ()),
}

# Event priorities: at equal times a failure is handled before a checkpoint starts.
_P_RESUME, _P_FAIL, _P_PLANNED, _P_CKPT_DONE, _P_CKPT = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Interruption:
    t: float
    node: int
    gpu: int | None
    component: str
    category: str
    xid: int | None
    planned: bool
    node_lost: bool
    detect_s: float
    restart_s: float
    recovery: str  # automated | manual
    restored_tier: str  # nvme | pfs | object | none
    restored_step: int
    lost_steps: int
    rework_s: float
    lost_gpu_hours: float
    hang: bool


@dataclass(frozen=True)
class Checkpoint:
    step: int
    tier: str
    start: float
    end: float
    bytes: int
    write_s: float
    blocking_s: float
    status: str  # ok | failed


@dataclass(frozen=True)
class Stretch:
    """A span of time in which the job makes progress at the scenario's throughput."""

    t0: float
    t1: float
    step0: float
    attempt: int


@dataclass
class Timeline:
    scenario: Scenario
    work: np.ndarray  # cumulative tokens the job could train by grid time (see ``grid_s``)
    grid_s: float
    stretches: list[Stretch] = field(default_factory=list)
    states: list[tuple[float, float, int]] = field(default_factory=list)  # (t0, t1, state)
    blocking: list[tuple[float, float]] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    role_changes: list[tuple[float, int, str]] = field(default_factory=list)  # (t, node, role)

    def work_at(self, t: np.ndarray | float) -> np.ndarray:
        """Tokens the job could have trained by time t (linear between grid points)."""
        x = np.clip(np.asarray(t, dtype=float) / self.grid_s, 0, len(self.work) - 1.000001)
        i = x.astype(int)
        return self.work[i] + (x - i) * (self.work[i + 1] - self.work[i])

    def time_for_work(self, w: np.ndarray | float) -> np.ndarray:
        return np.interp(w, self.work, np.arange(len(self.work)) * self.grid_s)


def checkpoint_bytes(params: float) -> int:
    """bf16 weights (2 B/param) + fp32 Adam moments (8 B/param) + ~7% extras (data loader, RNG)."""
    return int(params * 10 * 1.07)


def throughput_factor(sc: Scenario, t: np.ndarray) -> np.ndarray:
    """Relative throughput at time t: mid-day heat costs ``diurnal_amplitude``; a cooling fault
    throttles a rack and the synchronous job runs at the speed of its slowest GPU."""
    hour = (t / 3600.0 + sc.start.hour) % 24.0
    f = 1.0 - sc.diurnal_amplitude * 0.5 * (1.0 + np.cos(2 * np.pi * (hour - 15.0) / 24.0))
    cf = sc.cooling_fault
    if cf is not None:
        inside = (t >= cf.start_h * 3600) & (t < (cf.start_h + cf.duration_h) * 3600)
        f = np.where(inside, f * 0.9, f)
    return f


def nominal_tokens_per_s(sc: Scenario) -> float:
    peak = GPU_MODELS[sc.gpu].bf16_tflops * 1e12
    return sc.gpus * peak * sc.mfu / (6.0 * sc.params)


class _Sim:
    def __init__(self, sc: Scenario, seed: int) -> None:
        self.sc = sc
        self.rng = np.random.default_rng([seed, 1])
        grid_s = 60.0
        t = np.arange(0.0, sc.duration_s + 2 * grid_s, grid_s)
        rate = nominal_tokens_per_s(sc) * throughput_factor(sc, t)
        work = np.concatenate([[0.0], np.cumsum(rate[:-1] * grid_s)])
        self.tl = Timeline(scenario=sc, work=work, grid_s=grid_s)
        self.heap: list[tuple[float, int, int, str, object]] = []
        self.seq = 0
        self.state = RUNNING
        self.state_t = 0.0
        self.ref_t, self.ref_step = 0.0, 0.0  # progress reference point of the running job
        self.attempt = 0
        self.resume_at = 0.0
        self.nvme_count = 0
        self.pfs_count = 0
        self.pending_restore: tuple[str, int] = ("none", 0)
        self.job_nodes = list(range(sc.nodes))
        self.spares = list(range(sc.nodes, sc.nodes + sc.spare_nodes))
        self.nvme_valid_from = 0.0  # NVMe copies older than a node loss are unusable
        self.ckpt_bytes = checkpoint_bytes(sc.params)
        self.by_tier: dict[str, list[Checkpoint]] = {"nvme": [], "pfs": [], "object": []}

    # -- helpers -------------------------------------------------------------------------
    def push(self, t: float, prio: int, kind: str, payload: object = None) -> None:
        heapq.heappush(self.heap, (t, prio, self.seq, kind, payload))
        self.seq += 1

    def lognormal(self, median: float, sigma: float = 0.5) -> float:
        return float(median * np.exp(sigma * self.rng.standard_normal()))

    def step_at(self, t: float) -> float:
        if self.state != RUNNING or t <= self.ref_t:
            return self.ref_step
        w = self.tl.work_at(t) - self.tl.work_at(self.ref_t)
        return self.ref_step + float(w) / self.sc.tokens_per_step

    def set_state(self, t: float, state: int) -> None:
        if t > self.state_t:
            self.tl.states.append((self.state_t, t, self.state))
        self.state, self.state_t = state, t

    def close_stretch(self, t: float) -> None:
        if self.state == RUNNING and t > self.ref_t:
            self.tl.stretches.append(Stretch(self.ref_t, t, self.ref_step, self.attempt))

    # -- arrivals ------------------------------------------------------------------------
    def schedule_failures(self) -> None:
        sc = self.sc
        rates = per_node_day_rates(sc.failure_scale)
        weights = np.ones(sc.nodes + sc.spare_nodes)
        for n in sc.lemon_nodes:
            weights[n] = sc.lemon_factor
        cats = {c.component: c.category for c in llama3_interruptions()}
        comps = list(rates)
        # Per day, whole job; lemon weights decide which node fails, not how often the job does.
        job_rate = np.array([rates[c] for c in comps]) * sc.nodes
        total = job_rate.sum() / 86400.0
        t = 0.0
        while True:
            t += self.rng.exponential(1.0 / total)
            if t >= sc.duration_s:
                break
            comp = comps[int(self.rng.choice(len(comps), p=job_rate / job_rate.sum()))]
            self.push(t, _P_FAIL, "fail", (comp, cats[comp]))
        t = 0.0
        while sc.planned_per_day > 0:
            t += self.rng.exponential(86400.0 / sc.planned_per_day)
            if t >= sc.duration_s:
                break
            self.push(t, _P_PLANNED, "planned", None)
        self.node_weights = weights

    # -- event handlers ------------------------------------------------------------------
    def on_ckpt(self, t: float) -> None:
        if self.state != RUNNING or t < self.resume_at:
            return
        sc, cp = self.sc, self.sc.checkpoint
        step = int(self.step_at(t))
        per_node = self.ckpt_bytes / sc.nodes
        write_s = per_node / (cp.nvme_gbps_per_node * 1e9) + cp.fixed_stall_s
        blocking = write_s if cp.nvme_blocking else cp.fixed_stall_s
        self.add_ckpt(step, "nvme", t, write_s, blocking)
        self.close_stretch(t)
        self.tl.blocking.append((t, t + blocking))
        self.ref_t, self.ref_step = t + blocking, float(step)
        self.nvme_count += 1
        if self.nvme_count % cp.pfs_every == 0:
            pfs_s = self.ckpt_bytes / (cp.pfs_gbps * 1e9)
            self.push(t + write_s, _P_CKPT_DONE, "pfs", step)
            if cp.pfs_blocking:
                self.tl.blocking.append((t + blocking, t + blocking + pfs_s))
                self.ref_t += pfs_s
        self.push(self.ref_t + cp.nvme_interval_s, _P_CKPT, "ckpt", self.attempt)

    def add_ckpt(self, step: int, tier: str, start: float, write_s: float, blocking: float) -> None:
        ok = self.rng.random() >= self.sc.checkpoint.write_failure_p
        status = "ok" if ok else "failed"
        end = start + write_s
        self.record(Checkpoint(step, tier, start, end, self.ckpt_bytes, write_s, blocking, status))

    def record(self, c: Checkpoint) -> None:
        self.tl.checkpoints.append(c)
        self.by_tier[c.tier].append(c)

    def on_copy(self, t: float, tier: str, step: int) -> None:
        cp = self.sc.checkpoint
        bw = cp.pfs_gbps if tier == "pfs" else cp.object_gbps
        write_s = self.ckpt_bytes / (bw * 1e9)
        self.add_ckpt(step, tier, t, write_s, 0.0)
        if tier == "pfs":
            self.pfs_count += 1
            if self.pfs_count % cp.object_every == 0:
                self.push(t + write_s, _P_CKPT_DONE, "object", step)

    def restore_point(self, t: float, node_lost: bool, step_now: int) -> tuple[str, int]:
        """Newest surviving checkpoint at or before ``step_now``; a drained node loses NVMe."""
        best: tuple[int, int, str] = (-1, 0, "none")  # (step, tier preference, tier)
        pref = {"nvme": 3, "pfs": 2, "object": 1}
        for tier, copies in self.by_tier.items():
            if tier == "nvme" and node_lost:
                continue
            for c in reversed(copies):  # newest first; the first usable one is the tier's best
                if c.status != "ok" or c.end > t or c.step > step_now:
                    continue
                if tier == "nvme" and c.start < self.nvme_valid_from:
                    break
                best = max(best, (c.step, pref[tier], tier))
                break
        return (best[2], max(best[0], 0))

    def on_fail(self, t: float, comp: str, cat: str) -> None:
        sc = self.sc
        lost_p, hang, xids = _BEHAVIOUR[comp]
        node = self.pick_node()
        node_lost = bool(self.rng.random() < lost_p)
        gpu = int(self.rng.integers(sc.gpus_per_node)) if cat == GPU_CATEGORY else None
        xid = int(xids[self.rng.integers(len(xids))]) if xids else None
        was_running = self.state == RUNNING
        detect = self.lognormal(sc.hang_detect_median_s if hang else sc.detect_median_s, 0.4)
        if not was_running:
            detect = min(detect, 30.0)  # a relaunch that fails is noticed at once
        restart = self.lognormal(sc.restart_median_s, 0.35)
        manual = bool(self.rng.random() < sc.manual_p)
        if manual:
            restart += self.lognormal(sc.manual_median_h * 3600.0, 0.5)
        if node_lost:
            restart += self.swap_in_spare(t, node)
        step_now = int(self.step_at(t)) if was_running else self.pending_restore[1]
        if node_lost:
            self.nvme_valid_from = t
        tier, restored = self.restore_point(t, node_lost, step_now)
        read_bw = {
            "nvme": sc.checkpoint.nvme_gbps_per_node * sc.nodes,
            "pfs": sc.checkpoint.pfs_gbps,
            "object": sc.checkpoint.object_gbps,
        }
        restart += self.ckpt_bytes / (read_bw.get(tier, 1e9) * 1e9) if tier != "none" else 0.0
        self.pending_restore = (tier, restored)
        lost_steps = max(step_now - restored, 0)
        self.interrupt(t, detect, restart, hang and was_running)
        rework = lost_steps * sc.tokens_per_step / nominal_tokens_per_s(sc)
        self.tl.interruptions.append(
            Interruption(
                t=t,
                node=node,
                gpu=gpu,
                component=comp,
                category=cat,
                xid=xid,
                planned=False,
                node_lost=node_lost,
                detect_s=detect,
                restart_s=restart,
                recovery="manual" if manual else "automated",
                restored_tier=tier,
                restored_step=restored,
                lost_steps=lost_steps,
                rework_s=rework,
                lost_gpu_hours=sc.gpus * (detect + restart + rework) / 3600.0,
                hang=hang,
            )
        )

    def on_planned(self, t: float) -> None:
        sc = self.sc
        if self.state != RUNNING or t < self.resume_at:
            self.push(max(self.resume_at, t) + 600.0, _P_PLANNED, "planned", None)
            return
        # Drain: a blocking checkpoint straight to the PFS, then maintenance, then restore it.
        step = int(self.step_at(t))
        write_s = self.ckpt_bytes / (sc.checkpoint.pfs_gbps * 1e9) + sc.checkpoint.fixed_stall_s
        self.record(
            Checkpoint(step, "pfs", t, t + write_s, self.ckpt_bytes, write_s, write_s, "ok")
        )
        self.close_stretch(t)
        self.tl.blocking.append((t, t + write_s))
        self.ref_t, self.ref_step = t + write_s, float(step)
        down = self.lognormal(sc.planned_down_median_s, 0.5)
        restart = self.lognormal(sc.restart_median_s, 0.35)
        t_stop = t + write_s
        self.pending_restore = ("pfs", step)
        self.interrupt(t_stop, down, restart, False)
        self.tl.interruptions.append(
            Interruption(
                t=t_stop,
                node=int(self.rng.integers(sc.nodes)),
                gpu=None,
                component=PLANNED_COMPONENT,
                category=PLANNED_CATEGORY,
                xid=None,
                planned=True,
                node_lost=False,
                detect_s=down,
                restart_s=restart,
                recovery="automated",
                restored_tier="pfs",
                restored_step=step,
                lost_steps=0,
                rework_s=0.0,
                lost_gpu_hours=sc.gpus * (down + restart) / 3600.0,
                hang=False,
            )
        )

    def interrupt(self, t: float, detect: float, restart: float, hang: bool) -> None:
        self.close_stretch(t)
        if self.state == RUNNING:
            self.set_state(t, HUNG if hang else DOWN)
            if hang:
                self.set_state(t + detect, DOWN)
        resume = max(self.resume_at, t + detect + restart)
        self.resume_at = resume
        self.attempt += 1
        self.push(resume, _P_RESUME, "resume", self.attempt)

    def on_resume(self, t: float, attempt: int) -> None:
        if attempt != self.attempt or self.state == RUNNING:
            return  # superseded by a later interruption
        self.set_state(t, RUNNING)
        self.ref_t, self.ref_step = t, float(self.pending_restore[1])
        self.push(t + self.sc.checkpoint.nvme_interval_s, _P_CKPT, "ckpt", self.attempt)

    def pick_node(self) -> int:
        w = self.node_weights[self.job_nodes]
        return int(self.job_nodes[int(self.rng.choice(len(w), p=w / w.sum()))])

    def swap_in_spare(self, t: float, node: int) -> float:
        """Drain ``node`` for repair and bring a spare in; returns the extra restart time."""
        repair = self.lognormal(self.sc.repair_median_h * 3600.0, 0.6)
        self.tl.role_changes.append((t, node, "repair"))
        self.push(t + repair, _P_RESUME, "repaired", node)
        idx = self.job_nodes.index(node)
        if self.spares:
            spare = self.spares.pop(0)
            self.job_nodes[idx] = spare
            self.tl.role_changes.append((t, spare, "job"))
            return self.lognormal(self.sc.spare_swap_s, 0.3)
        self.job_nodes[idx] = node  # no spare: the job waits for this node's repair
        self.tl.role_changes.append((t + repair, node, "job"))
        return repair

    def on_repaired(self, t: float, node: int) -> None:
        if node not in self.job_nodes:
            self.spares.append(node)
            self.tl.role_changes.append((t, node, "spare"))

    # -- main loop -----------------------------------------------------------------------
    def run(self) -> Timeline:
        sc = self.sc
        self.schedule_failures()
        self.push(sc.checkpoint.nvme_interval_s, _P_CKPT, "ckpt", 0)
        end = sc.duration_s
        while self.heap and self.heap[0][0] < end:
            t, _, _, kind, payload = heapq.heappop(self.heap)
            if kind == "fail":
                comp, cat = payload  # type: ignore[misc]
                self.on_fail(t, comp, cat)
            elif kind == "planned":
                self.on_planned(t)
            elif kind == "ckpt":
                if payload == self.attempt:
                    self.on_ckpt(t)
            elif kind in ("pfs", "object"):
                self.on_copy(t, kind, int(payload))  # type: ignore[arg-type]
            elif kind == "resume":
                self.on_resume(t, int(payload))  # type: ignore[arg-type]
            elif kind == "repaired":
                self.on_repaired(t, int(payload))  # type: ignore[arg-type]
        self.close_stretch(end)
        self.set_state(end, self.state)
        self.tl.states.append((end, end + 1e9, self.state))
        self.tl.checkpoints.sort(key=lambda c: c.end)
        return self.tl


def simulate(sc: Scenario, seed: int) -> Timeline:
    """Run the event simulation of one scenario and seed; same inputs, same timeline."""
    return _Sim(sc, seed).run()
