"""Writes scrape rounds into the store: GPU inventory, samples, extra fields, XID events and
target health, one atomic batch per round.

GPUs are keyed by (host, gpu index, MIG instance); a GPU seen for the first time gets the next
``gpu_id`` (and its host the next ``node_id``). XIDs become events when the exporter's sticky
last-XID gauge changes to a non-zero value, or when ``DCGM_EXP_XID_ERRORS_COUNT{xid=...}`` grows
(a repeat of the same XID is invisible to the gauge but counted there).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
import pyarrow as pa

from telemetry.catalog import SAMPLE_COLUMNS
from telemetry.collect.exposition import GpuRows, gpu_rows, parse
from telemetry.collect.scrape import Fetch
from telemetry.store import Store

XID_COUNT_FIELD = "DCGM_EXP_XID_ERRORS_COUNT"


@dataclass(frozen=True)
class RoundReport:
    ts: datetime
    targets: int
    up: int
    samples: int  # GPU-sample rows written
    extras: int
    xid_events: int
    rejected_lines: int


class StoreSink:
    """Owns the mapping from exporter identities to store ids for one store."""

    def __init__(self, store: Store, interval_s: float) -> None:
        self.store = store
        rows = store.rows("SELECT host, gpu, coalesce(mig_instance, ''), gpu_id FROM gpus")
        self.gpu_ids = {(h, int(g), m): int(i) for h, g, m, i in rows}
        self.node_ids = dict(store.rows("SELECT host, node_id FROM nodes"))
        self.last_xid = {
            int(g): float(x)
            for g, x in store.rows(
                """SELECT gpu_id, arg_max(xid_last, ts) FROM gpu_samples
                   WHERE xid_last IS NOT NULL GROUP BY gpu_id"""
            )
        }
        self.xid_counts: dict[tuple[int, int], float] = {}
        meta = store.meta()
        if meta.get("source") not in (None, "ingest"):
            raise ValueError(
                f"store {store.path} holds {meta.get('source')} data; ingest into its own store"
            )
        store.set_meta(
            {"source": "ingest", "simulated": "false", "sample_interval_s": str(interval_s)}
        )

    def write(self, ts: datetime, fetches: list[Fetch]) -> RoundReport:
        """Parse every successful fetch and append the round in one transaction."""
        parsed: list[tuple[Fetch, GpuRows | None, str | None, int]] = []
        for f in fetches:
            if f.text is None:
                parsed.append((f, None, f.error, 0))
                continue
            scrape = parse(f.text)
            rows = gpu_rows(scrape, host=f.target.host)
            err = None if len(rows) else "no GPU samples in the scrape"
            parsed.append((f, rows, err, len(scrape.errors)))
        new_nodes, new_gpus = self._register([r for _, r, _, _ in parsed if r is not None])
        samples, extras, xids = [], [], []
        for _, rows, _, _ in parsed:
            if rows is not None and len(rows):
                s, e, x = self._frames(ts, rows)
                samples.append(s)
                extras.append(e)
                xids.append(x)
        batch: dict[str, pa.Table | pd.DataFrame] = {}
        if len(new_nodes):
            batch["nodes"] = new_nodes
        if len(new_gpus):
            batch["gpus"] = new_gpus
        if samples:
            batch["gpu_samples"] = pa.concat_tables(samples)
            batch["gpu_samples_extra"] = pd.concat(extras, ignore_index=True)
            batch["xid_events"] = pd.concat(xids, ignore_index=True)
        batch["targets"] = self._health(ts, parsed)
        self.store.append_many(batch)
        self.store.refresh_rollups()
        n_samples = sum(t.num_rows for t in samples)
        return RoundReport(
            ts=ts,
            targets=len(fetches),
            up=sum(1 for _, r, e, _ in parsed if e is None),
            samples=n_samples,
            extras=sum(len(e) for e in extras),
            xid_events=sum(len(x) for x in xids),
            rejected_lines=sum(p[3] for p in parsed),
        )

    # -- pieces ---------------------------------------------------------------------------
    def _register(self, all_rows: list[GpuRows]) -> tuple[pd.DataFrame, pd.DataFrame]:
        nodes, gpus = [], []
        next_node = max(self.node_ids.values(), default=-1) + 1
        next_gpu = max(self.gpu_ids.values(), default=-1) + 1
        for rows in all_rows:
            attr = rows.attribution
            for i, host in enumerate(rows.host):
                if host not in self.node_ids:
                    self.node_ids[host] = next_node
                    nodes.append({"node_id": next_node, "host": host, "rack": None, "role": "job"})
                    next_node += 1
                key = (host, int(rows.gpu[i]), attr["mig_instance"][i] or "")
                if key in self.gpu_ids:
                    continue
                self.gpu_ids[key] = next_gpu
                gpus.append(
                    {
                        "gpu_id": next_gpu,
                        "node_id": self.node_ids[host],
                        "host": host,
                        "gpu": int(rows.gpu[i]),
                        **{c: v[i] for c, v in attr.items()},
                    }
                )
                next_gpu += 1
        node_df = pd.DataFrame(nodes, columns=["node_id", "host", "rack", "role"])
        gpu_cols = [
            "gpu_id",
            "node_id",
            "host",
            "gpu",
            "uuid",
            "model",
            "pci_bus_id",
            "device",
            "driver_version",
            "mig_profile",
            "mig_instance",
            "namespace",
            "pod",
            "container",
            "hpc_job",
        ]
        gpu_df = pd.DataFrame(gpus, columns=gpu_cols)
        return (
            node_df.astype({"node_id": "int32"}),
            gpu_df.astype({"gpu_id": "int32", "node_id": "int32", "gpu": "int16"}),
        )

    def _ids(self, rows: GpuRows) -> np.ndarray:
        mig = rows.attribution["mig_instance"]
        return np.array(
            [
                self.gpu_ids[(h, int(g), mig[i] or "")]
                for i, (h, g) in enumerate(zip(rows.host, rows.gpu, strict=True))
            ],
            dtype=np.int32,
        )

    def _frames(self, ts: datetime, rows: GpuRows) -> tuple[pa.Table, pd.DataFrame, pd.DataFrame]:
        ids = self._ids(rows)
        n = len(ids)
        cols: dict[str, pa.Array] = {
            "ts": pa.array(np.full(n, np.datetime64(ts, "us")), pa.timestamp("us")),
            "gpu_id": pa.array(ids),
        }
        for c in SAMPLE_COLUMNS:
            t = pa.float64() if c.kind == "counter" else pa.float32()
            cols[c.name] = pa.array(rows.columns[c.name], t, from_pandas=True)  # NaN -> null
        samples = pa.table(cols)
        ex = rows.extras_table()
        extras = pd.DataFrame(
            {
                "ts": pd.Timestamp(ts),
                "gpu_id": ids[ex["row"].to_numpy()],
                "field": ex["field"].to_pandas().astype(str),
                "value": ex["value"].to_pandas(),
            }
        )
        return samples, extras, self._xids(ts, rows, ids, ex)

    def _xids(self, ts: datetime, rows: GpuRows, ids: np.ndarray, ex: pa.Table) -> pd.DataFrame:
        events: dict[tuple[int, int], None] = {}
        for i, x in enumerate(rows.columns["xid_last"]):
            if np.isnan(x):
                continue
            gid = int(ids[i])
            if x > 0 and self.last_xid.get(gid) != x:
                events[(i, int(x))] = None
            self.last_xid[gid] = float(x)
        fields = ex["field"].to_pylist()
        for j, f in enumerate(fields):
            value = ex["value"][j].as_py()
            if f != XID_COUNT_FIELD or value is None:
                continue
            code = dict(ex["labels"][j].as_py() or []).get("xid", "")
            if not code.isdigit():
                continue
            row = int(ex["row"][j].as_py())
            key = (int(ids[row]), int(code))
            if value > self.xid_counts.get(key, 0.0):  # a new XID within the exporter's window
                events.setdefault((row, int(code)), None)
            self.xid_counts[key] = float(value)
        return pd.DataFrame(
            [
                {
                    "ts": pd.Timestamp(ts),
                    "host": rows.host[i],
                    "gpu": int(rows.gpu[i]),
                    "xid": x,
                    "run_id": None,
                    "source": "dcgm-exporter",
                }
                for i, x in events
            ],
            columns=["ts", "host", "gpu", "xid", "run_id", "source"],
        ).astype({"gpu": "int16", "xid": "int16"})

    @staticmethod
    def _health(
        ts: datetime, parsed: list[tuple[Fetch, GpuRows | None, str | None, int]]
    ) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "ts": pd.Timestamp(ts),
                    "target": f.target.url,
                    "up": err is None,
                    "duration_s": f.duration_s,
                    "samples": _stored_samples(rows),
                    "rejected_lines": rejected,
                    "error": err,
                }
                for f, rows, err, rejected in parsed
            ],
            columns=["ts", "target", "up", "duration_s", "samples", "rejected_lines", "error"],
        )


def _stored_samples(rows: GpuRows | None) -> int:
    """Samples of one scrape that were stored: reported column values plus extra fields."""
    if rows is None:
        return 0
    reported = sum(int(np.count_nonzero(~np.isnan(v))) for v in rows.columns.values())
    return reported + len(rows.extra_row)
