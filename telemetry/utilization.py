"""Real utilization and workload classes, from DCGM's profiling fields.

``DCGM_FI_DEV_GPU_UTIL`` is the share of time *any* kernel ran: one warp on one SM reads as
100 %, and so does a rank spinning in a NCCL collective while it waits for its peers. The
profiling fields say how much of the GPU works:

- ``SM_ACTIVE``: the share of SM cycles with at least one warp resident (how many SMs have work);
- ``SM_OCCUPANCY``: resident warps over the SM's maximum (whether they have enough to hide
  latency);
- ``PIPE_TENSOR_ACTIVE`` and ``DRAM_ACTIVE``: whether the tensor pipes and HBM are the ones busy.

**Real utilization** (percent) is SM activity weighted by occupancy: ``100 x SM_ACTIVE x
min(1, SM_OCCUPANCY / 0.125)``. Below 8 resident warps of 64 (an occupancy of 1/8, two warps
per scheduler) an SM cannot hide memory latency, so its activity counts in proportion; above
it counts whole, because the GEMM kernels of training run well at 12-25 % occupancy by design
and must not read as wasted. Without ``SM_OCCUPANCY`` it is ``100 x SM_ACTIVE``; without either
(dcgm-exporter's default counters ship neither) ``100 x GR_ENGINE_ACTIVE``, which is time-based
like ``GPU_UTIL`` but exists on MIG slices; without any, ``GPU_UTIL`` itself. Every view says
which basis it used (``Basis``), and each GPU falls back on its own (a mixed fleet is judged per
GPU, never on another GPU's fields).

**Workload class** of a GPU-interval (one sample, or a GPU's 5-minute or hourly bucket: the
means of its fields), first match wins:

1. *unallocated*: GPU_UTIL < 5 % and under 1 GiB of framebuffer used (no process holds it);
2. *idle-but-allocated*: GPU_UTIL < 5 % with a process holding memory;
3. *tensor-bound*: tensor pipe active >= 0.30;
4. *memory-bound*: DRAM active >= 0.40;
5. *communicating*: a kernel resident most of the time (GPU_UTIL >= 50 %), no math (SMs, when
   reported, < 0.30; tensor pipes < 0.05) while NVLink and PCIe move >= 1 GB/s: a collective
   transferring its data (NCCL's kernels hold a few SMs and stream through HBM, so DRAM may
   be busy short of memory-bound);
6. *communication-stalled*: the same kernel resident, SMs, tensor pipes and HBM (< 0.10) nearly
   idle, and the links quiet or not reported: the signature of a rank spinning in a
   collective, waiting for its peers;
7. *busy-but-light*: anything else that runs (small kernels, host-bound input, checkpoint
   stalls).

A GPU-interval without tensor or DRAM activity (no profiling fields) has no class. Link
traffic refines the classes only: it does not enter real utilization (moving bytes is not
computing), and without link fields a communicating rank reads as communication-stalled.

Link traffic is PCIe received + sent (``DCGM_FI_PROF_PCIE_RX/TX_BYTES``, rates in B/s; inter-
node collectives reach the NIC over PCIe) plus the NVLink rate, the per-GPU slope of
dcgm-exporter's cumulative ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` (between adjacent samples on
the raw path; from a bucket's first to its last reading in ``gpu_rollup``; a counter that went
down, after a driver reload, gives no rate).

Constants and SQL expressions only (column names fixed here, never from input), plus the NumPy
twin of the real-utilization expression, which the replay engine uses for its per-node sums
(tests check both agree).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from telemetry.vocabulary import BUSY_PCT, IDLE_PCT

OCCUPANCY_ENOUGH = 0.125  # resident warps / max warps from which an active SM counts whole
ALLOCATED_MIB = 1024.0  # framebuffer a process holds: below it, an idle GPU is unallocated
TENSOR_BOUND = 0.30
MEMORY_BOUND = 0.40
STALLED_SM = 0.30
STALLED_TENSOR = 0.05
STALLED_DRAM = 0.10
LINK_BUSY_BPS = 1e9  # NVLink + PCIe bytes/s from which a rank is moving a collective's data

# Per raw sample (columns of gpu_samples); NULL when the GPU reports no profiling field.
REAL_SQL = (
    f"(100 * coalesce(sm_active * least(1, coalesce(sm_occupancy / {OCCUPANCY_ENOUGH}, 1)),"
    " gr_active))"
)

# The classes, in the order charts stack them, and what each means in a few words.
CLASS_TEXT = {
    "tensor-bound": "tensor pipes active ≥ 30 %",
    "memory-bound": "HBM active ≥ 40 %, tensor pipes less",
    "communicating": "a kernel resident, no math, NVLink/PCIe moving ≥ 1 GB/s "
    "(a collective transferring)",
    "communication-stalled": "a kernel resident, SMs, tensor pipes and HBM nearly idle, links "
    "quiet or not reported (waiting on a collective)",
    "busy-but-light": "running, but neither math nor memory bound",
    "idle-but-allocated": "no kernel, memory held by a process",
    "unallocated": "no kernel, no process memory",
}


def real_np(sm: np.ndarray, occ: np.ndarray) -> np.ndarray:
    """``REAL_SQL`` for arrays of SM activity and occupancy (an occupancy of NaN weighs 1), as
    DuckDB computes it on the stored FLOAT columns: in float32, in the same order. The replay
    engine's per-node sums and per-GPU buckets use it (it simulates no GR engine field)."""
    sm, occ = sm.astype(np.float32, copy=False), occ.astype(np.float32, copy=False)
    weight = np.minimum(np.float32(1), occ / np.float32(OCCUPANCY_ENOUGH))
    return np.float32(100) * (sm * np.where(np.isnan(weight), np.float32(1), weight))


def link_sql(nvlink: str, pcie: str) -> str:
    """Link traffic (B/s) of an interval from its NVLink and PCIe rates; NULL when neither was
    reported. Column names are this package's own, never input."""
    return (
        f"(CASE WHEN {nvlink} IS NOT NULL OR {pcie} IS NOT NULL"
        f" THEN coalesce({nvlink}, 0) + coalesce({pcie}, 0) END)"
    )


# The NVLink rate of each raw sample: the counter's increase since the GPU's previous sample
# over the time between them (a window ``w`` partitioned by GPU, ordered by time).
NVLINK_RATE_SQL = """(CASE WHEN nvlink_bytes >= lag(nvlink_bytes) OVER w
  THEN (nvlink_bytes - lag(nvlink_bytes) OVER w) / nullif(epoch(ts - lag(ts) OVER w), 0) END)"""
# The same over a per-GPU bucket of raw samples (an aggregate): first to last reading.
NVLINK_BUCKET_SQL = """(CASE WHEN arg_max(nvlink_bytes, ts) >= arg_min(nvlink_bytes, ts)
  THEN (arg_max(nvlink_bytes, ts) - arg_min(nvlink_bytes, ts)) / nullif(
    epoch(max(ts) FILTER (WHERE nvlink_bytes IS NOT NULL))
    - epoch(min(ts) FILTER (WHERE nvlink_bytes IS NOT NULL)), 0) END)"""


def class_sql(util: str, fb: str, tensor: str, dram: str, sm: str, link: str) -> str:
    """The workload class of one interval, as a SQL CASE over the named columns (averages of
    GPU_UTIL %, framebuffer MiB, tensor ratio, DRAM ratio, SM-active ratio, link B/s). The
    names are this package's own column names, never input."""
    no_math = (
        f"{util} >= {BUSY_PCT} AND coalesce({sm}, 0) < {STALLED_SM}"
        f" AND coalesce({tensor}, 0) < {STALLED_TENSOR}"
    )
    return f"""CASE
      WHEN {util} IS NULL OR ({tensor} IS NULL AND {dram} IS NULL) THEN NULL
      WHEN {util} < {IDLE_PCT} AND coalesce({fb}, 0) < {ALLOCATED_MIB} THEN 'unallocated'
      WHEN {util} < {IDLE_PCT} THEN 'idle-but-allocated'
      WHEN {tensor} >= {TENSOR_BOUND} THEN 'tensor-bound'
      WHEN {dram} >= {MEMORY_BOUND} THEN 'memory-bound'
      WHEN {no_math} AND {link} >= {LINK_BUSY_BPS} THEN 'communicating'
      WHEN {no_math} AND coalesce({dram}, 0) < {STALLED_DRAM} THEN 'communication-stalled'
      ELSE 'busy-but-light' END"""


# Per-GPU buckets of ``gpu_rollup`` counted per workload class into ``class_rollup`` (how many
# intervals, and how many of them reported SM activity, occupancy, any real-utilization field),
# so the class chart and the basis read a few rows per bucket whatever the fleet size. Run by
# ``telemetry.store.rollups`` for the buckets it rebuilds (``where`` narrows to them) and once by
# ``telemetry.store.schema`` for a store whose per-GPU buckets came before this table.
_ROLLUP_CLASS = class_sql(
    "util_avg", "fb_used_avg", "tensor_avg", "dram_avg", "sm_active_avg",
    link_sql("nvlink_bps", "pcie_bps"),
)  # fmt: skip
CLASS_SQL = f"""INSERT INTO class_rollup
  SELECT bucket_s, ts, {_ROLLUP_CLASS} AS class,
    count(*), count(sm_active_avg), count(sm_occupancy_avg), count(real_avg)
  FROM gpu_rollup {{where}} GROUP BY ALL"""


@dataclass(frozen=True)
class Basis:
    """What "utilization" meant over a range: ``key`` is "sm_occupancy", "sm", "gr" or
    "gpu_util"; ``covered`` GPU-intervals reported a profiling field, of ``total``."""

    key: str
    covered: int
    total: int

    @property
    def label(self) -> str:
        """The basis in a few words, for chart titles."""
        return {
            "sm_occupancy": "SM activity × occupancy",
            "sm": "SM activity",
            "gr": "graphics engine active",
            "gpu_util": "GPU_UTIL",
        }[self.key]

    @property
    def real(self) -> bool:
        return self.key != "gpu_util"

    @property
    def text(self) -> str:
        """A sentence saying the basis and how much of the fleet it covers."""
        if not self.real:
            return "basis GPU_UTIL: no GPU reported DCGM profiling fields in this range"
        part = ""
        if self.covered < self.total:
            share = self.covered / self.total
            part = f" ({100 * share:.0f} % of GPU-time; the rest by GPU_UTIL)"
        return f"basis real utilization: {self.label}{part}"
