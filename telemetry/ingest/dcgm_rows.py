"""dcgm-exporter scrapes as the store's rows: one row per GPU (or MIG instance).

``round_rows(scrapes)`` reshapes a round of parsed scrapes (``telemetry.ingest.exposition``)
into one row per (host, gpu, MIG instance) with the store's columns, plus every other field as
long (field, value) extras, ready for ``pyarrow`` (``gpu_rows`` for one scrape). This is where
dcgm-exporter's label names (``gpu``, ``Hostname``, ``UUID``, ``GPU_I_ID``, ...) and its field
names are known; the parser beside it knows only the Prometheus text format. Values no GPU can
report are blanked here and counted per scrape (``telemetry.catalog`` has the valid ranges).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.ingest.exposition import Generations, LabelSet, Scrape, label_maps

# dcgm-exporter attribution label -> column of the store's ``gpus`` table.
ATTRIBUTION: dict[str, str] = {
    "UUID": "uuid",
    "modelName": "model",
    "pci_bus_id": "pci_bus_id",
    "device": "device",
    "DCGM_FI_DRIVER_VERSION": "driver_version",
    "GPU_I_PROFILE": "mig_profile",
    "GPU_I_ID": "mig_instance",
    "namespace": "namespace",
    "pod": "pod",
    "container": "container",
    "hpc_job": "hpc_job",
}
_KEY_LABELS = frozenset({"gpu", "Hostname", "hostname"})
_COLUMN_INDEX = {c.field: i for i, c in enumerate(SAMPLE_COLUMNS)}

GpuKey = tuple[str, int, str | None]  # (host, gpu index, MIG instance or None)


@dataclass(frozen=True)
class GpuRows:
    """dcgm-exporter samples as one row per (host, gpu, MIG instance).

    ``columns`` holds the fields that have a store column (``telemetry.catalog``), NaN where a GPU
    did not report one or reported a blank sentinel. Every other field of a keyed sample is an
    extra: (row, field, value, its labels beyond key and attribution, such as ``xid``). Samples
    without a ``gpu`` label or a host (NVSwitch/NVLink entities, exporter metrics) are listed
    in ``unkeyed`` by index (into the scrapes' samples, in order)."""

    host: tuple[str, ...]
    gpu: np.ndarray  # int16 GPU index on its host
    scrape: np.ndarray  # int32 index of the scrape (target) each row first came from
    attribution: Mapping[str, tuple[str | None, ...]]  # gpus column -> value per row (None: absent)
    columns: Mapping[str, np.ndarray]  # gpu_samples column -> float64 per row
    extra_row: np.ndarray  # int32 row of each extra sample
    extra_field_id: np.ndarray  # int32 index into extra_fields
    extra_fields: tuple[str, ...]
    extra_value: np.ndarray  # float64
    extra_label_id: np.ndarray  # int32 index into extra_label_sets (0: no other labels)
    extra_label_sets: tuple[LabelSet, ...]
    unkeyed: np.ndarray  # int64 indices of samples without a GPU key
    samples: int  # samples of the scrapes these rows came from
    duplicates: int  # repeated (row, column) samples; the last one is kept
    rejected_values: np.ndarray  # int64 per scrape: samples blanked as physically impossible

    def __len__(self) -> int:
        return len(self.host)

    def table(self) -> pa.Table:
        """host, gpu, the attribution columns, then the sample columns (null: not reported)."""
        cols: dict[str, pa.Array] = {"host": pa.array(self.host, pa.string())}
        cols["gpu"] = pa.array(self.gpu, pa.int16())
        for name, values in self.attribution.items():
            cols[name] = pa.array(values, pa.string())
        for name, values in self.columns.items():
            cols[name] = pa.array(values, pa.float64(), from_pandas=True)
        return pa.table(cols)

    def extras_table(self) -> pa.Table:
        """row, host, gpu, mig_instance, field, value (null: blank or NaN), labels (map)."""
        rows = pa.array(self.extra_row, pa.int32())
        return pa.table(
            {
                "row": rows,
                "host": pa.array(self.host, pa.string()).take(rows),
                "gpu": pa.array(self.gpu, pa.int16()).take(rows),
                "mig_instance": pa.array(self.attribution["mig_instance"], pa.string()).take(rows),
                "field": pa.DictionaryArray.from_arrays(
                    pa.array(self.extra_field_id, pa.int32()), list(self.extra_fields)
                ),
                "value": pa.array(self.extra_value, pa.float64(), from_pandas=True),
                "labels": label_maps(self.extra_label_sets).take(
                    pa.array(self.extra_label_id, pa.int32())
                ),
            }
        )


def gpu_rows(scrape: Scrape, host: str | None = None) -> GpuRows:
    """One scrape as one row per (host, gpu, GPU_I_ID); see ``round_rows``."""
    return round_rows([scrape], [host])


def round_rows(scrapes: Sequence[Scrape], hosts: Sequence[str | None] | None = None) -> GpuRows:
    """The scrapes of a round (one per target) as one batch: a row per (host, gpu, GPU_I_ID).

    A row's host is its ``Hostname`` label (``hostname`` on newer exporters), else the scrape's
    entry in ``hosts`` (the target's name). A field with a store column goes to ``columns`` unless
    its sample carries labels beyond key and attribution (then it is an extra, so those labels
    are kept). Vectorised over the whole round: NumPy's per-call cost is paid once, not per
    target.
    """
    hosts = list(hosts) if hosts is not None else [None] * len(scrapes)
    keys, row_scrape, set_row, set_extra, extra_sets, attrs = _set_rows(scrapes, hosts)
    _keys.turn()
    offsets = np.cumsum([0] + [len(s.label_sets) for s in scrapes])
    label_ids = _cat([s.label_ids + offsets[i] for i, s in enumerate(scrapes)], np.int64)
    field_id, fields = _field_ids(scrapes)
    values = _cat([s.values for s in scrapes])
    row, extra_id = set_row[label_ids], set_extra[label_ids]
    known = (row >= 0) & (extra_id == 0)
    known &= _field_columns(fields)[field_id] >= 0
    col = _field_columns(fields)[field_id[known]]
    matrix, duplicates = _fill(col, row[known], values[known], len(keys))
    is_extra = (row >= 0) & ~known
    _mig_utilization(matrix)
    rejected = _out_of_range(matrix, np.asarray(row_scrape, np.int64), len(scrapes))
    return GpuRows(
        host=tuple(k[0] for k in keys),
        gpu=np.array([k[1] for k in keys], np.int16),
        scrape=np.array(row_scrape, np.int32),
        attribution=dict(zip(ATTRIBUTION.values(), attrs, strict=True)),
        columns={c.name: matrix[j] for j, c in enumerate(SAMPLE_COLUMNS)},
        extra_row=row[is_extra].astype(np.int32),
        extra_field_id=field_id[is_extra],
        extra_fields=fields,
        extra_value=values[is_extra],
        extra_label_id=extra_id[is_extra].astype(np.int32),
        extra_label_sets=extra_sets,
        unkeyed=np.flatnonzero(row < 0),
        samples=len(field_id),
        duplicates=duplicates,
        rejected_values=rejected,
    )


_UTIL = next(j for j, c in enumerate(SAMPLE_COLUMNS) if c.name == "util_pct")
_GR = next(j for j, c in enumerate(SAMPLE_COLUMNS) if c.name == "gr_active")


def _mig_utilization(matrix: np.ndarray) -> None:
    """MIG slices do not report ``GPU_UTIL``; their utilization is the graphics engine's active
    ratio (``PROF_GR_ENGINE_ACTIVE``, 0-1) as a percentage, as NVIDIA recommends. Filled only
    where ``GPU_UTIL`` is missing, so a full GPU's own value always wins."""
    util, gr = matrix[_UTIL], matrix[_GR]
    gap = np.isnan(util) & ~np.isnan(gr)
    util[gap] = gr[gap] * 100.0


_LO = np.array([c.valid[0] for c in SAMPLE_COLUMNS])[:, None]
_HI = np.array([c.valid[1] for c in SAMPLE_COLUMNS])[:, None]


def _out_of_range(matrix: np.ndarray, row_scrape: np.ndarray, n_scrapes: int) -> np.ndarray:
    """Blank values no GPU can report (``telemetry.catalog``: -5 % utilization, 10,000 °C, ±Inf)
    and count them per scrape, so the target's health says how many were rejected."""
    with np.errstate(invalid="ignore"):
        bad = (matrix < _LO) | (matrix > _HI)  # NaN compares False: missing stays missing
    if not bad.any():
        return np.zeros(n_scrapes, np.int64)
    matrix[bad] = np.nan
    per_row = bad.sum(axis=0)
    return np.bincount(row_scrape, weights=per_row, minlength=n_scrapes).astype(np.int64)


def _field_ids(scrapes: Sequence[Scrape]) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per sample of the round, in order, its index into the round's field names (in order of
    first appearance). Scrapes of one exporter version list the same names in the same order,
    so each distinct sequence of names is coded once."""
    index: dict[str, int] = {}
    done: dict[tuple[str, ...], np.ndarray] = {}
    parts = []
    for s in scrapes:
        codes = done.get(s.names)
        if codes is None:
            put = index.setdefault
            codes = np.fromiter((put(n, len(index)) for n in s.names), np.int32, len(s.names))
            done[s.names] = codes
        parts.append(codes)
    return _cat(parts, np.int32), tuple(index)


def _set_rows(
    scrapes: Sequence[Scrape], hosts: Sequence[str | None]
) -> tuple[list[GpuKey], list[int], np.ndarray, np.ndarray, tuple[LabelSet, ...], list[tuple]]:
    """The rows' keys and scrape; per label set of every scrape, in order, its row (-1 without
    a GPU key) and its extra labels' index; the extra label sets; the attribution columns."""
    rows: dict[GpuKey, int] = {}
    row_scrape: list[int] = []
    attrs: list[tuple[str | None, ...]] = []
    extra_index: dict[LabelSet, int] = {(): 0}
    set_row, set_extra = [], []
    for i, (scrape, host) in enumerate(zip(scrapes, hosts, strict=True)):
        for labels in scrape.label_sets:
            key, attr, rest = _gpu_key(labels, host)
            if key is None:
                set_row.append(-1)
                set_extra.append(0)
                continue
            row = rows.get(key)
            if row is None:
                row = rows[key] = len(rows)
                row_scrape.append(i)
                attrs.append(attr)
            set_row.append(row)
            set_extra.append(extra_index.setdefault(rest, len(extra_index)))
    columns = list(zip(*attrs, strict=True)) if attrs else [()] * len(ATTRIBUTION)
    return (
        list(rows),
        row_scrape,
        np.array(set_row, np.int64),
        np.array(set_extra, np.int64),
        tuple(extra_index),
        columns,
    )


# id(label set) -> (label set, host, _key_of's answer), while the fleet shows it. Keyed by
# identity: the parser hands the same label set object to every round while it remembers the
# block, and hashing a label set (a tuple of pairs, its hash never cached) cost more than the
# rest of the lookup. The entry holds the set itself, so its id cannot pass to another object.
_keys = Generations()


def _gpu_key(labels: LabelSet, host: str | None) -> tuple[GpuKey | None, tuple, LabelSet]:
    """(host, gpu, MIG instance) of a label set, its attribution values, its other labels."""
    got = _keys.get(id(labels))
    if got is None or got[0] is not labels or got[1] != host:  # type: ignore[index]
        got = (labels, host, _key_of(labels, host))
        _keys.put(id(labels), got)
    return got[2]  # type: ignore[index]


def _key_of(labels: LabelSet, host: str | None) -> tuple[GpuKey | None, tuple, LabelSet]:
    found = dict(labels)
    gpu = found.get("gpu", "")
    where = found.get("Hostname") or found.get("hostname") or host
    if not (where and gpu.isascii() and gpu.isdigit() and int(gpu) < 1 << 15):
        return None, (), ()
    attr = tuple(map(found.get, ATTRIBUTION))
    rest = tuple(p for p in labels if p[0] not in _KEY_LABELS and p[0] not in ATTRIBUTION)
    return (where, int(gpu), found.get("GPU_I_ID")), attr, rest


@lru_cache(maxsize=256)
def _field_columns(fields: tuple[str, ...]) -> np.ndarray:
    return np.array([_COLUMN_INDEX.get(f, -1) for f in fields], np.int64)


def _fill(
    col: np.ndarray, row: np.ndarray, values: np.ndarray, n_rows: int
) -> tuple[np.ndarray, int]:
    """(columns x rows) matrix of values, NaN where none; the last of repeated cells wins."""
    size = len(SAMPLE_COLUMNS) * n_rows
    flat = col * n_rows + row
    duplicates = len(flat) - int(np.count_nonzero(np.bincount(flat, minlength=size)))
    if duplicates:  # NumPy does not promise which of repeated indices an assignment keeps
        _, first_from_end = np.unique(flat[::-1], return_index=True)
        keep = len(flat) - 1 - first_from_end
        flat, values = flat[keep], values[keep]
    matrix = np.full(size, np.nan)
    matrix[flat] = values
    return matrix.reshape(len(SAMPLE_COLUMNS), n_rows), duplicates


def clear_caches() -> None:
    """Forget the GPU keys of label sets (for benchmarks; the parser has its own caches)."""
    _keys.clear()


def _cat(arrays: list[np.ndarray], dtype: type = np.float64) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.empty(0, dtype)
