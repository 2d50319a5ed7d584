"""The DCGM field catalog: which exporter field lands in which store column, with units.

Derived from the dcgm-exporter default counters file (``reference.dcgm_fields``). Fields with a
column of their own are the ones every page reads; every other field is kept, as a long row in
``gpu_samples_extra``, so nothing an exporter sends is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from telemetry.reference import dcgm_fields


@dataclass(frozen=True)
class Column:
    name: str  # store column in gpu_samples
    field: str  # dcgm-exporter field name
    unit: str
    kind: str  # gauge | counter
    label: str  # what the dashboard calls it
    valid: tuple[float, float]  # physically possible values; outside is a bad sample, not data


MAX_XID = 32767  # xid_events.xid is a SMALLINT; NVIDIA's catalog ends in the low hundreds

# Order is the column order of gpu_samples after (ts, gpu_id). The valid ranges are generous
# bounds of what any NVIDIA datacenter GPU can report (a 10,000 °C or -5 % reading, or ±Inf, is
# an exporter or driver fault: it is counted as rejected and stored as missing).
SAMPLE_COLUMNS: tuple[Column, ...] = (
    Column("util_pct", "DCGM_FI_DEV_GPU_UTIL", "%", "gauge", "GPU utilization", (0, 100)),
    Column("temp_c", "DCGM_FI_DEV_GPU_TEMP", "°C", "gauge", "GPU temperature", (-40, 150)),
    Column("mem_temp_c", "DCGM_FI_DEV_MEMORY_TEMP", "°C", "gauge", "HBM temperature", (-40, 150)),
    Column("power_w", "DCGM_FI_DEV_POWER_USAGE", "W", "gauge", "Power draw", (0, 5000)),
    Column("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "MHz", "gauge", "SM clock", (0, 10000)),
    Column("fb_used_mib", "DCGM_FI_DEV_FB_USED", "MiB", "gauge", "Framebuffer used", (0, 1e7)),
    Column("fb_free_mib", "DCGM_FI_DEV_FB_FREE", "MiB", "gauge", "Framebuffer free", (0, 1e7)),
    Column(
        "tensor_active",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "ratio",
        "gauge",
        "Tensor pipe active",
        (0, 1),
    ),
    Column(
        "energy_mj",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "mJ",
        "counter",
        "Energy since boot",
        (0, 1e18),
    ),
    Column("xid_last", "DCGM_FI_DEV_XID_ERRORS", "", "gauge", "Last XID", (0, MAX_XID)),
    # Profiling fields behind real utilization and workload classes (``telemetry.utilization``);
    # added after the first release, so they come last (stores gain them by ALTER TABLE).
    Column("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "ratio", "gauge", "SM active", (0, 1)),
    Column("sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY", "ratio", "gauge", "SM occupancy", (0, 1)),
    Column("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "ratio", "gauge", "DRAM active", (0, 1)),
    Column(
        "gr_active",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "ratio",
        "gauge",
        "Graphics engine active",
        (0, 1),
    ),
    # Link traffic, which tells a rank moving a collective's data from one stalled waiting for
    # its peers: PCIe (rates) and NVLink (dcgm-exporter's default cumulative counter, all lanes;
    # its rate is taken per GPU in SQL, ``telemetry.utilization.link_sql``).
    Column("pcie_rx_bps", "DCGM_FI_PROF_PCIE_RX_BYTES", "B/s", "gauge", "PCIe received", (0, 1e12)),
    Column("pcie_tx_bps", "DCGM_FI_PROF_PCIE_TX_BYTES", "B/s", "gauge", "PCIe sent", (0, 1e12)),
    Column(
        "nvlink_bytes",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "B",
        "counter",
        "NVLink bytes since boot",
        (0, 1e22),
    ),
)
# Columns a producer may leave out (stored as NULL): the profiling fields, which dcgm-exporter's
# default counters file partly comments out, and the link counters.
OPTIONAL_COLUMNS = frozenset(
    {"sm_active", "sm_occupancy", "dram_active", "gr_active"}
    | {"pcie_rx_bps", "pcie_tx_bps", "nvlink_bytes"}
)

COLUMN_BY_FIELD: dict[str, Column] = {c.field: c for c in SAMPLE_COLUMNS}
COLUMN_BY_NAME: dict[str, Column] = {c.name: c for c in SAMPLE_COLUMNS}


@cache
def field_rows() -> list[tuple[str, str | None, str, str, str]]:
    """(field, column or None, unit, kind, help) for every known field, for the ``fields`` table."""
    rows = []
    for f in dcgm_fields().values():
        col = COLUMN_BY_FIELD.get(f.field)
        rows.append((f.field, col.name if col else None, f.unit, f.prom_type, f.help))
    return rows
