"""Writes scrape rounds into the store: GPU inventory, samples, extra fields, XID events and
target health, one atomic batch per round.

GPUs are keyed by (host, gpu index, MIG instance); a GPU seen for the first time gets the next
``gpu_id`` (and its host the next ``node_id``), with its target's labels (``rack``...) applied
and kept current after (``telemetry.ingest.inventory``). XIDs become events when the
exporter's sticky last-XID gauge changes to a non-zero value, or when
``DCGM_EXP_XID_ERRORS_COUNT{xid=...}`` grows (a repeat of the same XID is invisible to the
gauge but counted there).

An extra field whose sample carries labels beyond the GPU key and attribution is stored under
its series name, ``FIELD{label="value",...}`` (labels in exposition order, Prometheus escaping),
so those labels survive (``xid``, ``err_code``, ``window_size_in_ms``, NVLink ``link``...).

A target is stale when it answers but its last ``stale_after`` scrapes carried identical sample
values (a hung DCGM behind a live exporter); ``targets.stale`` records it, and each round also
stores the digest of the values and the count of unchanged rounds, so the count carries over a
restart and across ``ingest --once`` runs from cron (rounds older than ``STALE_HORIZON_S`` are
not continued).

State is committed only with the round: if the store append fails, the id maps are reloaded from
the store and the XID and staleness state stay as they were before the round. A round older than
the newest one written (a late backlog) is stored and judged against the newest state but does
not replace it, as a restarted sink (which loads the newest stored state) would not either.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa

from telemetry.catalog import MAX_XID, SAMPLE_COLUMNS
from telemetry.ingest.dcgm_rows import GpuRows, round_rows
from telemetry.ingest.exposition import LabelSet, Scrape
from telemetry.ingest.inventory import GpuIdKey, Inventory
from telemetry.ingest.roundparse import parse_round
from telemetry.ingest.targets import Fetch
from telemetry.store import Store

XID_COUNT_FIELD = "DCGM_EXP_XID_ERRORS_COUNT"
XID_WINDOW_S = 300.0  # dcgm-exporter's default window when a sample has no window_size_in_ms
XID_LOOKBACK_H = (1, 24, 7 * 24, 0)  # windows for the last XID gauge at startup (0: all)
XID_STATE_HORIZON_S = 3600.0  # XID counts older than this are never compared against
STALE_HORIZON_S = 3600.0  # a stored unchanged count older than this starts over
STALE_AFTER = 4  # identical scrapes in a row that make a target stale (exporters collect
# every 30 s by default, so at a 15 s scrape interval two identical scrapes in a row are normal)


@dataclass(frozen=True)
class RoundReport:
    ts: datetime
    targets: int
    up: int
    samples: int  # GPU-sample rows written
    extras: int
    xid_events: int
    rejected_lines: int
    stale: int = 0  # targets up whose last ``stale_after`` scrapes were identical
    # the round's ``targets`` rows: each target's verdict (up, error, samples...)
    health: pd.DataFrame | None = field(default=None, compare=False, repr=False)


@dataclass
class _XidState:
    """Last XID gauge per gpu_id (NaN: never seen) and the XID counts per (gpu_id, xid) as
    (count, ts seen) from each GPU's latest round."""

    last: np.ndarray = field(default_factory=lambda: np.full(0, np.nan))
    counts: dict[tuple[int, int], tuple[float, datetime]] = field(default_factory=dict)


class StoreSink:
    """Owns the mapping from exporter identities to store ids for one store."""

    def __init__(self, store: Store, stale_after: int = STALE_AFTER, into_replay: bool = False):
        """``into_replay`` lets scrapes land in a replay store (load tests: the replay's own
        simulated exporters scraped into its store); the store stays marked simulated."""
        if stale_after < 2:
            raise ValueError("stale_after must be at least 2 scrapes")
        self.store = store
        self.stale_after = stale_after
        meta = store.meta()
        # a replay's source, simulated flag and sample interval are kept (``into_replay``)
        self._owns_meta = not (meta.get("source") == "replay" and into_replay)
        if self._owns_meta and meta.get("source") not in (None, "ingest"):
            raise ValueError(
                f"store {store.path} holds {meta.get('source')} data; ingest into its own store"
            )
        if self._owns_meta and meta.get("source") is None:
            store.set_meta({"source": "ingest", "simulated": "false"})
        stored = meta.get("sample_interval_s")  # as stored: the rounds' cadence
        self._interval = None if stored is None else float(stored)
        self.gpu_ids: dict[GpuIdKey, int] = {}
        self.node_ids: dict[str, int] = {}
        self._load_ids()
        self.inventory = Inventory(store)  # stored rack, role and attribution, kept current
        self._xid = _XidState(last=self._load_last_xid())
        self._xid_counts_loaded = False
        # target -> (values digest, unchanged rounds), loaded with the first round's time
        self._seen: dict[str, tuple[int, int]] = {}
        self._newest: datetime | None = None  # the newest round this sink wrote

    def _follow_cadence(self, interval_s: float | None) -> None:
        new = self._owns_meta and interval_s and interval_s > 0 and interval_s != self._interval
        if new:  # the store's sample interval (rollup levels, "now") is its rounds' own
            self.store.set_meta({"sample_interval_s": str(float(interval_s))})  # type: ignore[arg-type]
            self._interval = float(interval_s)  # type: ignore[arg-type]

    # -- state from the store --------------------------------------------------------------
    def _load_ids(self) -> None:
        rows = self.store.rows("SELECT host, gpu, coalesce(mig_instance, ''), gpu_id FROM gpus")
        self.gpu_ids = {(h, int(g), m): int(i) for h, g, m, i in rows}
        self.node_ids = dict(self.store.rows("SELECT host, node_id FROM nodes"))

    def _load_last_xid(self) -> np.ndarray:
        """Each GPU's last stored XID gauge (NaN: none). Looked up in growing windows before
        the newest sample, each only for the GPUs whose gauge was not in the windows before: a
        fleet that reports reads the last hour (tens of ms), not the whole history (seconds on
        a 54-day store); only GPUs without a gauge for longer than a week (silent, or scraped
        from exporters that do not export the field) cost a scan of everything. A sample
        without the gauge does not end the search: the last value is the last one stored,
        as for a running daemon, so a restart does not see an old XID as new."""
        last = np.full(max(self.gpu_ids.values(), default=-1) + 1, np.nan)
        newest = self.store.scalar("SELECT max(ts) FROM gpu_samples")
        if newest is None:
            return last
        found = np.zeros(len(last), dtype=bool)
        for hours in XID_LOOKBACK_H:
            pending = np.flatnonzero(~found).tolist()
            rows = self.store.rows(
                """SELECT gpu_id, arg_max(xid_last, ts) FROM gpu_samples
                   WHERE ts >= ? AND xid_last IS NOT NULL
                     AND (? OR list_contains(?::INTEGER[], gpu_id))
                   GROUP BY gpu_id""",
                [
                    newest - timedelta(hours=hours) if hours else datetime.min,
                    hours == XID_LOOKBACK_H[0],  # the first window: every GPU
                    pending,
                ],
            )
            for g, x in rows:
                if 0 <= g < len(last):
                    found[g] = True
                    last[g] = x
            if found.all():
                break
        return last

    def _load_xid_counts(self, now: datetime) -> dict[tuple[int, int], tuple[float, datetime]]:
        """Each GPU's XID counts in its latest stored round within the horizon before ``now``
        (counts older than that have left any exporter's window)."""
        rows = self.store.rows(
            """WITH recent AS (
                 SELECT gpu_id, ts, field, value FROM gpu_samples_extra WHERE ts >= ?),
               latest AS (SELECT gpu_id, max(ts) AS ts FROM recent GROUP BY gpu_id)
               SELECT r.gpu_id, regexp_extract(r.field, '[{,]xid="([0-9]+)"', 1), r.value, r.ts
               FROM recent r JOIN latest USING (gpu_id, ts)
               WHERE starts_with(r.field, ?) AND r.value > 0""",
            [now - timedelta(seconds=XID_STATE_HORIZON_S), XID_COUNT_FIELD + "{"],
        )
        return {(int(g), int(x)): (float(v), t) for g, x, v, t in rows if x}

    def _load_seen(self, now: datetime) -> dict[str, tuple[int, int]]:
        """Each target's last stored values digest and unchanged count, if it answered within
        ``STALE_HORIZON_S`` before ``now``."""
        rows = self.store.rows(
            """SELECT target, arg_max(up, ts), arg_max(digest, ts), arg_max(unchanged, ts)
               FROM targets WHERE ts >= ? AND ts < ? GROUP BY target""",
            [now - timedelta(seconds=STALE_HORIZON_S), now],
        )
        # Only a target whose latest scrape answered continues its count: one that was down
        # last starts afresh when it answers, as it would in a running daemon.
        return {t: (int(d), int(u or 0)) for t, ok, d, u in rows if ok and d is not None}

    # -- a round ---------------------------------------------------------------------------
    def write(
        self, ts: datetime, fetches: list[Fetch], batch_id: str | None = None,
        interval_s: float = 0, once: bool = False,
    ) -> RoundReport:  # fmt: skip
        """Parse every successful fetch and append the round in one transaction; ``interval_s``
        is its cadence (``Round.interval_s``), which the store's sample interval follows. With
        ``batch_id`` it is stored at most once, with ``once`` without the (series, time) stored
        (``Store.append_many``). Raises what the store raises (``DuplicateBatchError``...); the
        round is then not stored and the sink's state is as before, so the next can be written."""
        self._follow_cadence(interval_s)
        if not self._xid_counts_loaded:
            self._xid.counts = self._load_xid_counts(ts)
            self._seen = self._load_seen(ts)
            self._xid_counts_loaded = True
        up = [f for f in fetches if f.text is not None]
        scrapes = parse_round([f.text or "" for f in up])
        rows = round_rows(scrapes, [f.target.host for f in up])
        late = self._newest is not None and ts < self._newest  # its labels are not news
        got = self.inventory.take(
            rows, [f.target.labels for f in up], self.gpu_ids, self.node_ids, late
        )
        ids, nodes, gpus = got.ids, got.nodes, got.gpus
        xid_state, xid_events = self._xids(ts, rows, ids)
        seen = self._staleness(fetches, up, scrapes)
        health = self._health(ts, fetches, scrapes, rows, seen)
        batch: dict[str, pa.Table | pd.DataFrame] = {}
        if nodes.num_rows:
            batch["nodes"] = nodes
        if gpus.num_rows:
            batch["gpus"] = gpus
        extras = _extras(ts, rows, ids)
        if len(rows):
            batch["gpu_samples"] = _samples(ts, rows, ids)
            batch["gpu_samples_extra"] = extras
            batch["xid_events"] = xid_events
        batch["targets"] = health
        self.inventory.apply(self.store, got.changes)  # observed, whatever becomes of the round
        try:
            self.store.append_many(batch, batch_id=batch_id, kind="scrape", once=once)
        except BaseException:
            self._load_ids()  # new ids of this round were rolled back with it
            raise
        self.gpu_ids.update(got.new_keys)
        self.inventory.learn(nodes, gpus)
        self.node_ids.update(
            zip(nodes["host"].to_pylist(), nodes["node_id"].to_pylist(), strict=True)
        )
        if self._newest is None or ts >= self._newest:  # a late round leaves newer state be
            self._xid, self._seen, self._newest = xid_state, seen, ts
        return RoundReport(
            ts=ts,
            targets=len(fetches),
            up=int(health["up"].sum()),
            samples=len(rows),
            extras=extras.num_rows,
            xid_events=len(xid_events),
            rejected_lines=sum(len(s.errors) for s in scrapes) + int(rows.rejected_values.sum()),
            stale=int(health["stale"].sum()),
            health=health,
        )

    # -- pieces ----------------------------------------------------------------------------
    def _xids(self, ts: datetime, rows: GpuRows, ids: np.ndarray) -> tuple[_XidState, pd.DataFrame]:
        """The XID state after this round and its new XID events."""
        events: dict[tuple[int, int], None] = {}
        gauge = rows.columns["xid_last"]
        last = self._xid.last
        if len(ids) and ids.max() >= len(last):
            last = np.concatenate([last, np.full(int(ids.max()) + 1 - len(last), np.nan)])
        else:
            last = last.copy()
        seen = ~np.isnan(gauge)
        prev = last[ids]
        for i in np.flatnonzero(seen & (gauge > 0) & (gauge != prev)):  # NaN prev: never seen
            events[(int(i), int(gauge[i]))] = None
        last[ids[seen]] = gauge[seen]
        counts = self._xid_counts(ts, rows, ids, events)
        frame = pd.DataFrame(
            {
                "ts": pd.Series([pd.Timestamp(ts)] * len(events), dtype="datetime64[us]"),
                "host": [rows.host[i] for i, _ in events],
                "gpu": pd.Series([int(rows.gpu[i]) for i, _ in events], dtype="int16"),
                "xid": pd.Series([x for _, x in events], dtype="int16"),
                "run_id": pd.Series([None] * len(events), dtype="object"),
                "source": ["dcgm-exporter"] * len(events),
            }
        )
        return _XidState(last, counts), frame

    def _xid_counts(
        self,
        ts: datetime,
        rows: GpuRows,
        ids: np.ndarray,
        events: dict[tuple[int, int], None],
    ) -> dict[tuple[int, int], tuple[float, datetime]]:
        """The counts after this round; adds an event per count that grew. A GPU that reported
        this round keeps only the counts it reported (an XID that left the window is gone, so
        its next occurrence counts from zero again); a remembered count older than its window
        is compared as zero."""
        reported = set(ids.tolist())
        counts = {k: v for k, v in self._xid.counts.items() if k[0] not in reported}
        if XID_COUNT_FIELD not in rows.extra_fields:
            return counts
        fid = rows.extra_fields.index(XID_COUNT_FIELD)
        hits = (rows.extra_field_id == fid) & (rows.extra_value > 0)  # NaN: not a count
        for j in np.flatnonzero(hits):  # only rows with an XID in the window: few
            labels = dict(rows.extra_label_sets[rows.extra_label_id[j]])
            code = labels.get("xid", "")
            if not (code.isascii() and code.isdigit() and int(code) <= MAX_XID):
                continue  # not an XID code (the label is the exporter's, but not trusted)
            row, value = int(rows.extra_row[j]), float(rows.extra_value[j])
            key = (int(ids[row]), int(code))
            before, when = self._xid.counts.get(key, (0.0, ts))
            if (ts - when).total_seconds() > _window_s(labels):
                before = 0.0
            if value > before:  # a new XID within the exporter's window
                events.setdefault((row, int(code)), None)
            counts[key] = (value, ts)
        return counts

    def _staleness(
        self, fetches: list[Fetch], up: list[Fetch], scrapes: list[Scrape]
    ) -> dict[str, tuple[int, int]]:
        """Per answering target: a digest of its sample values and for how many rounds in a
        row it has not changed (targets that did not answer start over). Targets this round
        does not carry keep theirs: a round split per target group (``wire.encode_parts``)
        arrives as parts of the same time, each carrying some of the targets."""
        here = {f.target.url for f in fetches}
        seen = {url: v for url, v in self._seen.items() if url not in here}
        for f, s in zip(up, scrapes, strict=True):
            # stable across processes (``hash`` of bytes is salted per process)
            digest = int.from_bytes(
                hashlib.blake2b(s.values.tobytes(), digest_size=8).digest(), "little", signed=True
            )
            before = self._seen.get(f.target.url)
            unchanged = before[1] + 1 if before and before[0] == digest and len(s) else 0
            seen[f.target.url] = (digest, unchanged)
        return seen

    def _health(
        self,
        ts: datetime,
        fetches: list[Fetch],
        scrapes: list[Scrape],
        rows: GpuRows,
        seen: dict[str, tuple[int, int]],
    ) -> pd.DataFrame:
        stored = _stored_per_scrape(rows, len(scrapes))
        keyed = _keyed_per_scrape(rows, scrapes)
        records = []
        k = 0
        for f in fetches:
            samples, rejected, err, stale = 0, 0, f.error, False
            digest, unchanged = None, None
            if f.text is not None:
                samples = int(stored[k])
                rejected = len(scrapes[k].errors) + int(rows.rejected_values[k])
                err = None if keyed[k] else "no GPU samples in the scrape"
                if err and rejected:  # the count tells an exporter's garbage from an idle node
                    err += f" ({rejected} lines rejected)"
                digest, unchanged = seen[f.target.url]
                stale = err is None and unchanged + 1 >= self.stale_after
                k += 1
            records.append(
                (f.target.url, err is None, f.duration_s, samples, rejected, err, stale)
                + (digest, unchanged)
            )
        df = pd.DataFrame(
            records,
            columns=[
                *("target", "up", "duration_s", "samples", "rejected_lines", "error", "stale"),
                *("digest", "unchanged"),
            ],
        )
        df.insert(0, "ts", pd.Series([pd.Timestamp(ts)] * len(df), dtype="datetime64[us]"))
        return df.astype(
            {
                "up": bool,
                "stale": bool,
                "samples": "int32",
                "rejected_lines": "int32",
                "digest": "Int64",
                "unchanged": "Int32",
            }
        )


def _window_s(labels: dict[str, str]) -> float:
    ms = labels.get("window_size_in_ms", "")
    return int(ms) / 1000.0 if ms.isascii() and ms.isdigit() else XID_WINDOW_S


def _samples(ts: datetime, rows: GpuRows, ids: np.ndarray) -> pa.Table:
    n = len(ids)
    cols: dict[str, pa.Array] = {
        "ts": pa.array(np.full(n, np.datetime64(ts, "us"))),
        "gpu_id": pa.array(ids, pa.int32()),
    }
    for c in SAMPLE_COLUMNS:
        t = pa.float64() if c.kind == "counter" else pa.float32()
        cols[c.name] = pa.array(rows.columns[c.name], t, from_pandas=True)  # NaN -> null
    return pa.table(cols)


def _extras(ts: datetime, rows: GpuRows, ids: np.ndarray) -> pa.Table:
    """ts, gpu_id, field (the series name when the sample has labels of its own), value."""
    n = len(rows.extra_row)
    return pa.table(
        {
            "ts": pa.array(np.full(n, np.datetime64(ts, "us"))),
            "gpu_id": pa.array(ids[rows.extra_row] if len(ids) else np.empty(0, np.int32)),
            "field": _series_names(rows),
            "value": pa.array(rows.extra_value, pa.float64(), from_pandas=True),
        }
    )


def _series_names(rows: GpuRows) -> pa.DictionaryArray:
    """Each extra's field, with ``{labels}`` appended when it has labels beyond key and
    attribution; dictionary-encoded (a round has a few dozen distinct names)."""
    names = list(rows.extra_fields)
    codes = rows.extra_field_id.astype(np.int32)
    labelled = np.flatnonzero(rows.extra_label_id)
    if len(labelled):
        combo = rows.extra_field_id[labelled].astype(np.int64) * len(rows.extra_label_sets)
        combo += rows.extra_label_id[labelled]
        uniq, inverse = np.unique(combo, return_inverse=True)
        n_sets = len(rows.extra_label_sets)
        names += [
            f"{rows.extra_fields[u // n_sets]}{_block(rows.extra_label_sets[u % n_sets])}"
            for u in uniq.tolist()
        ]
        codes = codes.copy()
        codes[labelled] = len(rows.extra_fields) + inverse.astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(names))


def _block(labels: LabelSet) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels) + "}"


def _stored_per_scrape(rows: GpuRows, n_scrapes: int) -> np.ndarray:
    """Samples stored per scrape: reported column values plus extra fields of the rows it
    brought (a GPU row belongs to the first scrape that reported it)."""
    if not len(rows):
        return np.zeros(n_scrapes, np.int64)
    reported = np.zeros(len(rows), np.int64)
    for v in rows.columns.values():
        reported += ~np.isnan(v)
    reported += np.bincount(rows.extra_row, minlength=len(rows))
    return np.bincount(rows.scrape, weights=reported, minlength=n_scrapes).astype(np.int64)


def _keyed_per_scrape(rows: GpuRows, scrapes: list[Scrape]) -> np.ndarray:
    """Samples with a GPU key per scrape (``unkeyed`` indexes the round's samples in order)."""
    sizes = np.array([len(s) for s in scrapes], np.int64)
    starts = np.cumsum(sizes) - sizes
    unkeyed = np.bincount(
        np.searchsorted(starts, rows.unkeyed, side="right") - 1, minlength=len(scrapes)
    )
    return sizes - unkeyed[: len(scrapes)]
