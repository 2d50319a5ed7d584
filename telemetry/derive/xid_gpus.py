"""The GPU a kernel-log XID names, as an RMA needs it: its index on the node and its UUID.

The driver names the GPU by PCI bus id only (``NVRM: Xid (PCI:0000:3b:00): 79, ...``). Where
the store knows the node's GPUs (dcgm-exporter's ``gpu``, ``pci_bus_id`` and ``UUID`` labels, kept
in ``gpus`` by the dcgm source), the line's bus id on its host gives the GPU's index, and a GPU
index on a host (from a kernel line, or dcgm-exporter's own XID gauge) gives its UUID. A bus id
or index that matches more than one stored GPU names none: a wrong UUID on an RMA is worse than
none. The UUID is the one last scraped (``gpus`` keeps the current attribution).
"""

from __future__ import annotations

import pandas as pd

from telemetry.signals import XID, line_bus, pci_bus
from telemetry.store import Store


def _gpus(store: Store, hosts: list[str]) -> pd.DataFrame:
    return store.df(
        """SELECT DISTINCT host, gpu, uuid, pci_bus_id FROM gpus
           WHERE host IN (SELECT unnest(?::VARCHAR[])) AND gpu IS NOT NULL""",
        [hosts],
    )


def name_gpus(store: Store, signals: pd.DataFrame, xid_events: pd.DataFrame) -> None:
    """Fill in place: the ``gpu`` of kernel-log XID signals from their line's bus id, and a
    ``uuid`` column on both frames where the host and GPU index name one stored GPU."""
    hosts = sorted({*signals.loc[signals["kind"].eq(XID), "host"].dropna(),
                    *xid_events["host"].dropna()})  # fmt: skip
    known = _gpus(store, hosts) if hosts else pd.DataFrame()
    by_bus: dict[tuple[str, tuple[int, int, int]], set[int]] = {}
    by_gpu: dict[tuple[str, int], set[str]] = {}
    for host, gpu, uuid, pci in known.itertuples(index=False) if len(known) else ():
        if (bus := pci_bus(pci)) is not None:
            by_bus.setdefault((host, bus), set()).add(int(gpu))
        if isinstance(uuid, str) and uuid:
            by_gpu.setdefault((host, int(gpu)), set()).add(uuid)
    for frame in (signals, xid_events):
        frame["uuid"] = None
    if not known.shape[0]:
        return
    xid = signals["kind"].eq(XID) & signals["host"].notna()
    for i in signals.index[xid & signals["gpu"].isna()]:
        bus = line_bus(str(signals.at[i, "line"] or ""))
        got = by_bus.get((signals.at[i, "host"], pci_bus(bus))) if bus else None
        if got and len(got) == 1:
            signals.at[i, "gpu"] = next(iter(got))
    for frame, rows in ((signals, xid), (xid_events, xid_events["host"].notna())):
        for i in frame.index[rows & frame["gpu"].notna()]:
            got = by_gpu.get((frame.at[i, "host"], int(frame.at[i, "gpu"])))
            if got and len(got) == 1:
                frame.at[i, "uuid"] = next(iter(got))
