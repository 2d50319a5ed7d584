"""The text a dcgm-exporter serves, from one host's latest per-GPU sample (pure functions).

``exporter_values`` derives every default dcgm-exporter field from the synthesiser's columns;
``render_host`` prints them in the exporter's exact format: ``# HELP``/``# TYPE`` per family in
the counters-file order, labels in the exporter's order (``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``, then attributes such as
``hpc_job``), int64 fields as integers and double fields with 6 decimals (Go's ``%f``), and
``DCGM_EXP_XID_ERRORS_COUNT`` over a 5-minute window. No clock, no sockets: the simulation
(``exporter_sim``) decides what to show and the farm (``exporters``) serves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np
import pandas as pd

from telemetry.catalog import OPTIONAL_COLUMNS, SAMPLE_COLUMNS
from telemetry.reference import GPU_MODELS, GpuModel, dcgm_fields, xids

XID_WINDOW_S = 300.0  # dcgm-exporter's default window for DCGM_EXP_XID_ERRORS_COUNT
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"
_DOUBLE_UNITS = frozenset({"W", "ratio 0-1"})  # DCGM_FT_DOUBLE fields; every other one is int64

# Fields the synthesiser does not produce, derived from the load (util / 100) it does produce.
PCIE_RX_BYTES_PER_S = 1.2e8  # host -> GPU at full load: input batches
PCIE_TX_BYTES_PER_S = 4.0e7  # GPU -> host at full load: metrics, logs
PCIE_IDLE_BYTES_PER_S = 1.0e6  # driver and DCGM polling
DRAM_PER_TENSOR, DRAM_PER_LOAD = 0.6, 0.05  # HBM activity tracks the matmul pipes (no column)
# The simulated exporters run a counters file with the SM profiling fields uncommented, as
# sites that measure real utilization do (dcgm-exporter ships them commented out).
PROFILING_ENABLED = frozenset({"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY"})


@dataclass(frozen=True)
class Family:
    field: str
    prom_type: str  # gauge | counter
    help: str
    double: bool  # printed with 6 decimals; otherwise an integer


@cache
def families() -> tuple[Family, ...]:
    """The exporter's default metric families plus ``PROFILING_ENABLED``, in counters-file
    order, then the XID count."""
    fields = dcgm_fields()
    chosen = [
        f
        for f in fields.values()
        if (f.default or f.field in PROFILING_ENABLED) and f.prom_type != "label"
    ]
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
        if c.name in cols:
            out[c.name] = np.asarray(cols[c.name], dtype=np.float64)
        elif c.name not in OPTIONAL_COLUMNS:
            raise ValueError(f"sample lacks column {c.name!r} ({c.field})")
    n = len(out["util_pct"])
    for name in OPTIONAL_COLUMNS - set(out):
        out[name] = np.full(n, np.nan)  # not reported: the exporter skips the sample
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
    derived = np.clip(DRAM_PER_TENSOR * c["tensor_active"] + DRAM_PER_LOAD * load, 0.0, 1.0)
    dram = np.where(np.isnan(c["dram_active"]), derived, c["dram_active"])
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
