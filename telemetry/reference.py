"""Reference tables shipped with the package (copied from shared/reference, sources in README).

Loaded once and cached; every vocabulary the product shows (interruption components and
categories, XID meanings, DCGM fields) comes from here, never from string literals elsewhere.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_DIR = Path(__file__).parent / "reference"


def _rows(name: str) -> list[dict[str, str]]:
    with open(_DIR / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@dataclass(frozen=True)
class InterruptionCause:
    component: str
    category: str
    count: int  # interruptions in the 54-day Llama 3 405B snapshot
    pct_printed: float
    pct_of_419: float


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    message: str
    action: str  # NVIDIA's immediate action bucket (RESTART_APP, RESET_GPU, RESTART_BM, ...)
    fatal: bool
    category: str
    hint: str


@cache
def llama3_interruptions() -> tuple[InterruptionCause, ...]:
    """The 18 root-cause rows of Llama 3 405B Table 5 (419 unexpected interruptions)."""
    return tuple(
        InterruptionCause(
            component=r["component"],
            category=r["category"],
            count=int(r["interruption_count"]),
            pct_printed=float(r["pct_of_interruptions_as_printed"]),
            pct_of_419=float(r["pct_recomputed_of_419"]),
        )
        for r in _rows("llama3_interruptions.csv")
    )


LLAMA3_DAYS = 54.0
LLAMA3_NODES = 2048
LLAMA3_PLANNED = 47


@cache
def xids() -> dict[int, Xid]:
    """XID code -> decoded meaning. Ranges such as ``144-150`` expand to every code."""
    out: dict[int, Xid] = {}
    for r in _rows("xid_reference.csv"):
        lo, _, hi = r["xid"].partition("-")
        for code in range(int(lo), int(hi or lo) + 1):
            out[code] = Xid(
                code=code,
                mnemonic=r["mnemonic"],
                message=r["dcgm_exporter_err_msg"],
                action=r["nvidia_immediate_action"],
                fatal=r["fatal_per_nvsentinel"] == "FATAL",
                category=r["ops_category"],
                hint=r["dashboard_hint"],
            )
    return out


@dataclass(frozen=True)
class DcgmField:
    field: str
    prom_type: str  # gauge | counter | label
    default: bool
    unit: str
    help: str


@cache
def dcgm_fields() -> dict[str, DcgmField]:
    """The dcgm-exporter default counters file; the last row wins for duplicated names."""
    out: dict[str, DcgmField] = {}
    for r in _rows("dcgm_exporter_default_counters.csv"):
        out[r["field"]] = DcgmField(
            field=r["field"],
            prom_type=r["prom_type"],
            default=r["enabled_by_default"] == "yes",
            unit=r["unit"],
            help=r["help"],
        )
    return out


@dataclass(frozen=True)
class GpuModel:
    name: str  # as dcgm-exporter's modelName label shows it
    memory_mib: int
    bf16_tflops: float  # dense peak
    tdp_w: float
    max_sm_clock_mhz: float
    mem_clock_mhz: float


GPU_MODELS: dict[str, GpuModel] = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, 989.0, 700.0, 1980.0, 2619.0),
    "A100": GpuModel("NVIDIA A100-SXM4-80GB", 81920, 312.0, 400.0, 1410.0, 1593.0),
    "H200": GpuModel("NVIDIA H200", 143771, 989.0, 700.0, 1980.0, 3201.0),
    "B200": GpuModel("NVIDIA B200", 183359, 2250.0, 1000.0, 1965.0, 3996.0),
}
