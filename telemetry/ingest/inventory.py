"""What the store says a scraped node and GPU are, from the targets file and the exporter, kept
current as they change.

Target labels (Prometheus ``file_sd`` ``labels``, e.g. ``{"rack": "r12"}``) apply to every node
behind the target. The ones with a place in the schema are kept there: ``rack`` and ``role``
in ``nodes``, and ``namespace``, ``pod``, ``container`` and ``hpc_job`` in ``gpus`` where the
exporter does not report them itself (the exporter knows which job holds a GPU now; the file
is written by hand, so its label is only a default). Labels without a place (``cluster``,
``zone``...) are not stored.

An exporter's attribution changes: a new job or pod takes the GPU, a GPU is swapped (new UUID),
the driver is upgraded. The store's ``gpus`` and ``nodes`` rows, written when a GPU is first
seen, are updated when that happens, so the GPUs page shows what runs on a GPU as last scraped.
A target label that is not given leaves the stored value alone (removing ``rack`` from the file
does not forget a node's rack); an exporter label that is gone is gone (the pod ended).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from telemetry.ingest.dcgm_rows import ATTRIBUTION, GpuRows
from telemetry.store import Store

NODE_LABELS = ("rack", "role")  # target labels that are columns of ``nodes``
WORKLOAD_LABELS = ("namespace", "pod", "container", "hpc_job")  # defaults for ``gpus`` columns
DEFAULT_ROLE = "job"  # a scraped node's role unless its target says otherwise
MAX_VALUE = 256  # characters kept of a target label's value
_GPU_COLUMNS = tuple(ATTRIBUTION.values())
GpuIdKey = tuple[str, int, str]  # (host, gpu index, MIG instance or "")


@dataclass(frozen=True)
class Labelled:
    """A round's rows with their target labels applied: per row, the ``gpus`` attribution
    columns (the exporter's value, else the target's for the workload labels) and the
    ``nodes`` columns the target gives (None: not given)."""

    attribution: Mapping[str, list[str | None]]
    node: Mapping[str, list[str | None]]


def label_rows(rows: GpuRows, labels: Sequence[Mapping[str, str]]) -> Labelled:
    """``rows`` (a round of scrapes) with ``labels[i]``, the target labels of scrape ``i``,
    applied to the rows that scrape brought (``GpuRows.scrape``)."""
    per_row = [labels[s] for s in rows.scrape.tolist()] if labels else [{}] * len(rows)
    attribution = {c: list(rows.attribution[c]) for c in _GPU_COLUMNS}
    for label in WORKLOAD_LABELS:
        if any(label in t for t in labels):
            col = attribution[ATTRIBUTION[label]]
            for i, t in enumerate(per_row):
                if col[i] is None and t.get(label):
                    col[i] = t[label][:MAX_VALUE]
    node = {
        c: [(t.get(c) or None) and t[c][:MAX_VALUE] for t in per_row]
        if any(c in t for t in labels)
        else [None] * len(rows)
        for c in NODE_LABELS
    }
    return Labelled(attribution, node)


def register(
    rows: GpuRows, labelled: Labelled, gpu_ids: Mapping[GpuIdKey, int], node_ids: Mapping[str, int]
) -> tuple[np.ndarray, dict[GpuIdKey, int], pa.Table, pa.Table]:
    """gpu_id per row (the known ones from ``gpu_ids``, new GPUs and nodes numbered after the
    known ones), the new GPUs' keys -> ids, and the new nodes' and GPUs' rows, with their
    targets' labels."""
    get = gpu_ids.get
    mig = [v or "" for v in rows.attribution["mig_instance"]]
    keys = list(zip(rows.host, rows.gpu.tolist(), mig, strict=True))
    ids = np.fromiter((get(k, -1) for k in keys), np.int64, len(keys))
    new = np.flatnonzero(ids < 0)
    first_gpu = max(gpu_ids.values(), default=-1) + 1
    ids[new] = first_gpu + np.arange(len(new))
    hosts = [rows.host[i] for i in new]
    first_row: dict[str, int] = {}
    for i in new.tolist():
        first_row.setdefault(rows.host[i], i)
    node_hosts = [h for h in first_row if h not in node_ids]
    rack, role = (labelled.node[c] for c in NODE_LABELS)
    first_node = max(node_ids.values(), default=-1) + 1
    node_of = {h: first_node + j for j, h in enumerate(node_hosts)}
    node_of.update((h, node_ids[h]) for h in hosts if h in node_ids)
    nodes = pa.table(
        {
            "node_id": pa.array(range(first_node, first_node + len(node_hosts)), pa.int32()),
            "host": pa.array(node_hosts, pa.string()),
            "rack": pa.array([rack[first_row[h]] for h in node_hosts], pa.string()),
            "role": pa.array([role[first_row[h]] or DEFAULT_ROLE for h in node_hosts], pa.string()),
        }
    )
    take = pa.array(new, pa.int64())
    gpus = pa.table(
        {
            "gpu_id": pa.array(ids[new], pa.int32()),
            "node_id": pa.array([node_of[h] for h in hosts], pa.int32()),
            "host": pa.array(hosts, pa.string()),
            "gpu": pa.array(rows.gpu[new], pa.int16()),
            **{c: pa.array(labelled.attribution[c], pa.string()).take(take) for c in _GPU_COLUMNS},
        }
    )
    new_keys = {keys[i]: int(ids[i]) for i in new}
    return ids.astype(np.int32), new_keys, nodes, gpus


@dataclass(frozen=True)
class Changes:
    """Stored rows whose values changed: ``nodes`` (host, rack, role; None keeps the stored
    value) and ``gpus`` (gpu_id, then every attribution column)."""

    nodes: list[tuple[str | None, ...]]
    gpus: list[tuple[int | str | None, ...]]

    def __bool__(self) -> bool:
        return bool(self.nodes or self.gpus)

    def tables(self) -> tuple[pa.Table, pa.Table]:
        def table(rows: list[tuple], names: Sequence[str], types: Sequence[pa.DataType]):
            cols = list(zip(*rows, strict=True)) or [()] * len(names)
            return pa.table([pa.array(c, t) for c, t in zip(cols, types, strict=True)], names)

        nodes = table(self.nodes, ("host", *NODE_LABELS), [pa.string()] * 3)
        gpu_types = [pa.int32()] + [pa.string()] * len(_GPU_COLUMNS)
        return nodes, table(self.gpus, ("gpu_id", *_GPU_COLUMNS), gpu_types)


@dataclass(frozen=True)
class Taken:
    """A round's rows placed in the inventory: ``ids`` (gpu_id per row), ``new_keys`` (the new
    GPUs' keys -> ids), the new ``nodes`` and ``gpus`` rows, and ``changes`` of stored rows."""

    ids: np.ndarray
    new_keys: dict[GpuIdKey, int]
    nodes: pa.Table
    gpus: pa.Table
    changes: Changes


class Inventory:
    """The stored ``nodes`` (rack, role) and ``gpus`` (attribution) values of one store, to
    tell a round's values that changed from those that did not without a query per round."""

    def __init__(self, store: Store) -> None:
        self.nodes: dict[str, tuple[str | None, str | None]] = {
            h: (r, o) for h, r, o in store.rows("SELECT host, rack, role FROM nodes")
        }
        cols = ", ".join(_GPU_COLUMNS)  # fixed names, not input
        self.gpus: dict[int, tuple[str | None, ...]] = {
            int(r[0]): tuple(r[1:]) for r in store.rows(f"SELECT gpu_id, {cols} FROM gpus")
        }

    def take(
        self,
        rows: GpuRows,
        labels: Sequence[Mapping[str, str]],
        gpu_ids: Mapping[GpuIdKey, int],
        node_ids: Mapping[str, int],
        late: bool,
    ) -> Taken:
        """A round's ``rows`` with ``labels`` (each scrape's target labels) applied, their ids
        (``register``) and what changed of the stored rows (nothing for a ``late`` round: its
        labels are not news), in one call: the round's rows pass through here once."""
        labelled = label_rows(rows, labels)
        ids, new_keys, nodes, gpus = register(rows, labelled, gpu_ids, node_ids)
        changed = Changes([], []) if late else self.changes(rows, ids, labelled)
        return Taken(ids, new_keys, nodes, gpus, changed)

    def changes(self, rows: GpuRows, ids: np.ndarray, labelled: Labelled) -> Changes:
        """What differs between the round and what is stored, for rows already stored (new
        ones are inserted with their values)."""
        node_rows: dict[str, tuple[str | None, str | None]] = {}
        given = any(any(v is not None for v in labelled.node[c]) for c in NODE_LABELS)
        for i, host in enumerate(rows.host if given else ()):
            known = self.nodes.get(host)
            if known is None or host in node_rows:
                continue
            want = tuple(labelled.node[c][i] for c in NODE_LABELS)
            if any(w is not None and w != k for w, k in zip(want, known, strict=True)):
                node_rows[host] = want  # type: ignore[assignment]
        gpu_rows: list[tuple[int | str | None, ...]] = []
        values = zip(*(labelled.attribution[c] for c in _GPU_COLUMNS), strict=True)
        for gpu_id, now in zip(ids.tolist(), values, strict=True):
            known_gpu = self.gpus.get(gpu_id)
            if known_gpu is not None and known_gpu != now:
                gpu_rows.append((gpu_id, *now))
        return Changes([(h, *v) for h, v in node_rows.items()], gpu_rows)

    def apply(self, store: Store, changes: Changes) -> None:
        """Write ``changes`` in one transaction, then remember them."""
        if not changes:
            return
        sets = ", ".join(f"{c} = u.{c}" for c in _GPU_COLUMNS)  # fixed names, not input
        nodes, gpus = changes.tables()
        with store.transaction() as con:
            if nodes.num_rows:
                con.register("_node_changes", nodes)
                con.execute(
                    """UPDATE nodes SET rack = coalesce(u.rack, nodes.rack),
                                        role = coalesce(u.role, nodes.role)
                       FROM _node_changes u WHERE nodes.host = u.host"""
                )
                con.unregister("_node_changes")
            if gpus.num_rows:
                con.register("_gpu_changes", gpus)
                con.execute(
                    f"UPDATE gpus SET {sets} FROM _gpu_changes u WHERE gpus.gpu_id = u.gpu_id"
                )
                con.unregister("_gpu_changes")
        for host, rack, role in changes.nodes:
            old_rack, old_role = self.nodes[str(host)]
            self.nodes[str(host)] = (rack or old_rack, role or old_role)
        for gpu_id, *values in changes.gpus:
            self.gpus[int(gpu_id)] = tuple(values)  # type: ignore[arg-type]

    def learn(self, nodes: pa.Table, gpus: pa.Table) -> None:
        """Remember rows just inserted (``nodes``: host, rack, role; ``gpus``: gpu_id and the
        attribution columns)."""
        for host, rack, role in zip(
            *(nodes[c].to_pylist() for c in ("host", *NODE_LABELS)), strict=True
        ):
            self.nodes[host] = (rack, role)
        cols = [gpus[c].to_pylist() for c in ("gpu_id", *_GPU_COLUMNS)]
        for gpu_id, *values in zip(*cols, strict=True):
            self.gpus[int(gpu_id)] = tuple(values)
