"""Scenarios of the synthetic cluster replay engine.

Each scenario is a documented, frozen description of a cluster and a training run: topology,
GPU model, model size, throughput (MFU), failure processes, checkpoint policy and the telemetry
quirks an SRE expects to see (stragglers, thermally throttled GPUs, lemon nodes, cooling faults).

Failure rates are per node-day, derived from the Llama 3 405B interruption table (419 unexpected
interruptions on 2,048 nodes in 54 days), times a per-scenario scale that the description states.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from telemetry.errors import UnknownScenarioError
from telemetry.reference import LLAMA3_DAYS, LLAMA3_NODES, LLAMA3_PLANNED, llama3_interruptions


@dataclass(frozen=True)
class CheckpointPolicy:
    nvme_interval_s: float = 300.0  # tier 1 every 5 min of training
    pfs_every: int = 6  # every Nth NVMe checkpoint is copied to the parallel filesystem
    object_every: int = 8  # every Nth PFS checkpoint is copied to the object store
    nvme_gbps_per_node: float = 10.0  # GB/s, local write
    pfs_gbps: float = 100.0  # GB/s aggregate share of the parallel filesystem for this job
    object_gbps: float = 20.0  # GB/s aggregate to the object store
    nvme_blocking: bool = True  # the training loop stalls during the NVMe write
    pfs_blocking: bool = False  # PFS and object copies drain asynchronously from NVMe / PFS
    object_blocking: bool = False
    fixed_stall_s: float = 1.0  # barrier + device-to-host copy before a blocking write
    write_failure_p: float = 0.002  # probability that one checkpoint write fails

    def as_dict(self) -> dict[str, float | int | bool]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class CoolingFault:
    rack: int
    start_h: float  # hours after the run starts
    duration_h: float
    inlet_rise_c: float  # inlet temperature rise in the affected rack


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    description: str
    nodes: int
    gpu: str = "H100"
    gpus_per_node: int = 8
    spare_nodes: int = 2
    nodes_per_rack: int = 4
    params: float = 7e9
    tokens_per_step: float = 4 * 1024 * 1024
    mfu: float = 0.41
    days: float = 1.0
    sample_interval_s: float = 10.0  # default per-GPU sample interval
    log_every_steps: int = 1
    failure_scale: float = 1.0  # multiplier on the Llama 3 per-node-day rates
    planned_per_day: float = LLAMA3_PLANNED / LLAMA3_DAYS
    lemon_nodes: tuple[int, ...] = ()
    lemon_factor: float = 1.0  # failure-rate multiplier of a lemon node
    stragglers: int = 1  # GPUs with a degraded SM clock
    throttled: int = 1  # GPUs with a poor thermal interface (run hot, throttle)
    diurnal_amplitude: float = 0.015  # peak-to-trough throughput swing from mid-day heat
    cooling_fault: CoolingFault | None = None
    detect_median_s: float = 75.0  # crash detection (job exits, scheduler notices)
    hang_detect_median_s: float = 600.0  # NCCL watchdog timeout on hangs
    restart_median_s: float = 210.0  # relaunch, NCCL init, checkpoint load
    spare_swap_s: float = 150.0  # extra time to bring a hot spare into the job
    planned_down_median_s: float = 600.0  # rolling upgrade / config change
    manual_p: float = 3 / 419  # share of interruptions needing significant manual work
    manual_median_h: float = 2.0
    repair_median_h: float = 18.0  # a drained node's time in repair before it rejoins as spare
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    start: datetime = datetime(2026, 1, 5, 0, 0, 0)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def duration_s(self) -> float:
        return self.days * 86400.0

    def with_overrides(self, **kw: object) -> Scenario:
        kw = {k: v for k, v in kw.items() if v is not None}
        ckpt = {k: kw.pop(k) for k in list(kw) if k in CheckpointPolicy.__dataclass_fields__}
        sc = replace(self, **kw)  # type: ignore[arg-type]
        if ckpt:
            sc = replace(sc, checkpoint=replace(sc.checkpoint, **ckpt))  # type: ignore[arg-type]
        return sc


def per_node_day_rates(scale: float = 1.0) -> dict[str, float]:
    """Unexpected-interruption rate per node-day for each reference component."""
    denom = LLAMA3_DAYS * LLAMA3_NODES
    return {c.component: scale * c.count / denom for c in llama3_interruptions()}


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="dev-64",
            summary="8 nodes x 8 H100, a 7B run, 1 simulated day (the demo default)",
            description=(
                "A small development cluster: 8 DGX H100 nodes (64 GPUs) plus 2 hot spares train "
                "a 7B-parameter model for one day. Failure rates are the Llama 3 per-node-day "
                "rates x150, so that one day shows a handful of interruptions from the reference "
                "taxonomy; one straggler and one thermally throttled GPU."
            ),
            nodes=8,
            params=7e9,
            tokens_per_step=4 * 1024 * 1024,
            mfu=0.45,
            days=1.0,
            sample_interval_s=10.0,
            log_every_steps=1,
            failure_scale=150.0,
            planned_per_day=1.0,
            spare_nodes=2,
            nodes_per_rack=2,
            repair_median_h=1.5,
            checkpoint=CheckpointPolicy(pfs_gbps=10.0, object_gbps=2.0),
        ),
        Scenario(
            name="llama3-405b",
            summary="2,048 nodes x 8 H100 = 16,384 GPUs, 405B parameters, 54 days",
            description=(
                "The Llama 3 405B pre-training snapshot: 2,048 DGX H100 80GB nodes (16,384 GPUs), "
                "16M-token batches, BF16 MFU about 41% with a 1.5% diurnal swing. Failure "
                "processes per component are calibrated to the Llama 3 paper's Table 5 (419 "
                "unexpected, 47 planned interruptions in 54 days); 1% of nodes are lemons with 4x "
                "the failure rate. 16 hot spares. Default sample interval 5 min."
            ),
            nodes=2048,
            params=405e9,
            tokens_per_step=16 * 1024 * 1024,
            mfu=0.41,
            days=54.0,
            sample_interval_s=300.0,
            log_every_steps=10,
            failure_scale=1.0,
            spare_nodes=16,
            lemon_nodes=tuple(range(7, 2048, 97)),  # 21 nodes, ~1%
            lemon_factor=4.0,
            stragglers=6,
            throttled=12,
            detect_median_s=45.0,
            restart_median_s=150.0,
            checkpoint=CheckpointPolicy(
                nvme_interval_s=300.0,
                pfs_every=6,
                object_every=8,
                pfs_gbps=100.0,
                object_gbps=20.0,
            ),
        ),
        Scenario(
            name="lemon-cooling",
            summary="128 nodes x 8 H100, a 70B run, 14 days, one lemon node and a cooling fault",
            description=(
                "A 1,024-GPU cluster training a 70B model for 14 days at 3x the Llama 3 "
                "per-node failure rate (close to the RSC-1 rate of Kokolis et al.). Node 37 is a "
                "lemon with 40x the failure rate of its peers; on day 4 a cooling fault in rack 3 "
                "raises inlet temperature by 14 C for 8 hours, so its GPUs throttle and the "
                "synchronous job slows down. Checkpoints to PFS every 40 min."
            ),
            nodes=128,
            params=70e9,
            tokens_per_step=8 * 1024 * 1024,
            mfu=0.43,
            days=14.0,
            sample_interval_s=60.0,
            log_every_steps=5,
            failure_scale=3.0,
            planned_per_day=0.5,
            spare_nodes=4,
            lemon_nodes=(37,),
            lemon_factor=40.0,
            stragglers=2,
            throttled=3,
            cooling_fault=CoolingFault(rack=3, start_h=80.0, duration_h=8.0, inlet_rise_c=14.0),
            checkpoint=CheckpointPolicy(
                nvme_interval_s=300.0, pfs_every=8, object_every=6, pfs_gbps=40.0, object_gbps=8.0
            ),
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownScenarioError(name, sorted(SCENARIOS)) from None
