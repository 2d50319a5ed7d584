"""The failed GPU's identity, as a replacement ticket (an RMA) asks for it: its index on the
node, UUID, PCI bus id, serial number and model, from what the store has. dcgm-exporter's
``gpu``, ``UUID``, ``pci_bus_id`` and ``modelName`` labels are kept in ``gpus``; the kernel's
``NVRM: Xid (PCI:...)`` line names the bus alone. The serial number is in neither (dcgm-exporter
has no such label; DCGM's serial field is a string, which it does not export as a metric).

Each part is a value or None with the reason beside it (``why``): a part that more than one
stored GPU could be is not given, since a wrong UUID on a ticket is worse than none.
"""

from __future__ import annotations

from typing import Any

from telemetry.signals import line_bus, same_bus
from telemetry.store import Store

PARTS = ("index", "uuid", "pci_bus_id", "serial", "model", "scraped")
NO_SERIAL = ("not in the store: dcgm-exporter exports no serial number; "
             "`nvidia-smi -q` on the node prints it")  # fmt: skip


def identity(
    store: Store, host: Any, gpu: Any, lines: list[Any], at: Any = None
) -> dict[str, Any]:
    """The identity of GPU ``gpu`` of ``host`` (either may be None), helped by the PCI bus id
    an evidence line in ``lines`` names: ``{part: value or None}`` for each of ``PARTS``,
    ``why`` ({part: reason}) for each one not known, and ``scraped`` (the GPU's newest sample)
    when that is after ``at``, the failure: ``gpus`` keeps the labels last scraped, so a GPU
    replaced since would show its replacement's UUID."""
    bus = next((b for b in map(line_bus, lines) if b), None)
    out: dict[str, Any] = dict.fromkeys(PARTS)
    why: dict[str, str] = {"serial": NO_SERIAL}
    out["why"] = why
    index = None if gpu is None else int(gpu)
    out["index"], out["pci_bus_id"] = index, bus
    if not isinstance(host, str) or not host:
        for part in ("index", "uuid", "pci_bus_id", "model"):
            if out[part] is None:
                why[part] = "the evidence names no host"
        return out
    if index is None and bus is None:
        for part in ("index", "uuid", "pci_bus_id", "model"):
            why[part] = "the evidence names no GPU"
        return out
    known = store.df(
        """SELECT DISTINCT g.gpu, g.uuid, g.pci_bus_id, g.model, n.ts AS scraped
           FROM gpus g LEFT JOIN gpu_now n USING (gpu_id)
           WHERE g.host = ? AND g.gpu IS NOT NULL""",
        [host],
    ) if store.has_table("gpus") else None
    if known is None or known.empty:
        for part in ("index", "uuid", "pci_bus_id", "model"):
            if out[part] is None:
                why[part] = f"no dcgm-exporter inventory of {host} in the store"
        return out
    rows = [r for r in known.itertuples(index=False)
            if (index is None or int(r.gpu) == index)
            and (bus is None or same_bus(bus, r.pci_bus_id))]  # fmt: skip
    found = {(int(r.gpu), r.uuid, r.pci_bus_id, r.model) for r in rows}
    scraped = max((r.scraped for r in rows if r.scraped is not None and r.scraped == r.scraped),
                  default=None)  # fmt: skip
    if len(found) != 1:
        reason = (f"more than one GPU of {host} in the store matches" if found
                  else f"no GPU of {host} in the store has that index and bus")  # fmt: skip
        for part in ("index", "uuid", "pci_bus_id", "model"):
            if out[part] is None:
                why[part] = reason
        return out
    ((g, uuid, pci, model),) = found
    out |= {"index": g, "uuid": uuid or None, "pci_bus_id": pci or bus, "model": model or None}
    if scraped is not None and at is not None and scraped > at:
        out["scraped"] = scraped
    for part in ("uuid", "model"):
        if out[part] is None:
            why[part] = f"dcgm-exporter did not label it on {host}"
    return out
