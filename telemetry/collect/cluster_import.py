"""What a real cluster leaves behind, into the store: training and kernel logs (text) and
checkpoint directories per tier, then the interruptions derived from them.

``factoryfloor import`` on text logs and ``--checkpoints TIER=PATH`` lands here, and so does
the live follower (``--logs GLOB`` / ``--checkpoints`` on ``ingest``/``serve``): both store
through ``store_log_scan`` and ``store_checkpoints``, so a file imported once and tailed later
gives the same rows.

- Progress lines become ``train_metrics`` (through ``records.store_records``, the one policy
  for training records); failure lines become ``signals`` with their ``file:line`` and text;
  kernel-log XIDs also become ``xid_events`` (source ``kernel``), so the XID table and the
  bad-node ranking count them beside dcgm-exporter's; checkpoint lines become
  ``checkpoint_events``.
- Every chunk is stored with a batch id made from the content it came from (file digest,
  run, time zone), so importing the same files again writes nothing.
- Checkpoint rows found in directories are stored unless the same (run, step, tier, path,
  status) is already there; a checkpoint deleted later by rotation stays in history.
- After storing, the runs touched are re-derived (``telemetry.derive``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from telemetry.collect import ckptdirs
from telemetry.collect.records import store_records
from telemetry.errors import DuplicateBatchError
from telemetry.signals import XID, Signal, signals_frame
from telemetry.store import Store

CHUNK = 20_000  # records per transaction; fixed, so a re-import finds the same batch ids


@dataclass
class LogReport:
    path: str
    lines: int = 0
    metrics: int = 0
    signals: Counter[str] = field(default_factory=Counter)
    checkpoint_events: int = 0
    unrecognised: int = 0
    duplicate: bool = False  # everything was stored before: nothing written
    problems: list[str] = field(default_factory=list)  # file:line: reason, first few


def _batch(prefix: str, start: int) -> str:
    return f"{prefix}:{start}"


def file_digest(path: str, *parts: object) -> str:
    """Content hash of a file plus what it is imported as: the stem of its batch ids."""
    h = hashlib.sha256("\0".join(str(p) for p in parts).encode())
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()[:32]


def _events_frame(events: Sequence[Any], run_id: str | None) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": pd.to_datetime([e.ts for e in events]),
            "run_id": [run_id] * len(events),
            "kind": [e.kind for e in events],
            "step": pd.array([e.step for e in events], dtype="Int64"),
            "path": [e.path for e in events],
            "origin": [e.origin for e in events],
            "line": [e.line for e in events],
        }
    )


def _xid_frame(signals: Iterable[Signal], run_id: str | None) -> pd.DataFrame:
    rows = [
        (s.ts, s.host, s.gpu, s.xid, run_id, "kernel")
        for s in signals
        if s.kind == XID and s.ts is not None and s.host and s.xid is not None
    ]
    df = pd.DataFrame(rows, columns=["ts", "host", "gpu", "xid", "run_id", "source"])
    df["ts"] = pd.to_datetime(df["ts"])
    return df.astype({"gpu": "Int16", "xid": "Int16"})


def store_log_scan(
    store: Store, scan: Any, run_id: str | None, batch_prefix: str, source: str = "import"
) -> LogReport:
    """Store one parsed log (``textlogs.LogScan`` or an increment of a followed file) under
    batch ids ``batch_prefix:N``; a chunk stored before is skipped whole."""
    rep = LogReport(scan.path, lines=scan.lines, unrecognised=scan.unrecognised)
    rep.problems = [f"{b.origin}: {b.reason}" for b in scan.bad]
    records = []
    for rec in scan.metrics:
        r = {k: v for k, v in rec.items() if v is not None}
        if run_id and r.get("run") is None:
            r["run"] = run_id
        records.append(r)
    duplicates = 0
    for start in range(0, len(records), CHUNK):
        out = store_records(
            store,
            "train_metrics",
            records[start : start + CHUNK],
            batch_id=_batch(batch_prefix + ":m", start),
            source=source,
        )
        rep.metrics += out.stored
        duplicates += out.duplicate
        origins = scan.metric_origins[start : start + CHUNK]
        rep.problems += [f"{origins[r.index]}: {r.reason}" for r in out.rejected]
    timed = [s for s in scan.signals if s.ts is not None]
    rep.signals.update(s.kind for s in timed)
    untimed = len(scan.signals) - len(timed)
    if untimed:
        rep.problems.append(f"{scan.path}: {untimed:,} signal line(s) without a wall-clock time")
    events = [e for e in scan.checkpoint_events if e.ts is not None]
    rep.checkpoint_events = len(events)
    batches: dict[str, pd.DataFrame] = {}
    if timed:
        batches["signals"] = signals_frame(timed, run_id)
        xids = _xid_frame([s for s in timed if s.source == "kernel"], run_id)
        if len(xids):
            batches["xid_events"] = xids
    if events:
        batches["checkpoint_events"] = _events_frame(events, run_id)
    if batches:
        try:
            store.append_many(batches, batch_id=batch_prefix + ":s", kind="log")
        except DuplicateBatchError:
            duplicates += 1
    rep.duplicate = bool(duplicates) and not rep.metrics
    return rep


@dataclass
class CheckpointReport:
    tier: str
    root: str
    found: Counter[str] = field(default_factory=Counter)  # status -> count
    stored: int = 0
    in_progress: int = 0
    problems: list[str] = field(default_factory=list)


def stored_checkpoint_keys(store: Store, run_id: str | None = None) -> set[tuple[Any, ...]]:
    rows = store.rows(
        """SELECT run_id, step, tier, path, status FROM checkpoints
           WHERE path IS NOT NULL AND (? IS NULL OR run_id = ?)""",
        [run_id, run_id],
    )
    return {tuple(r) for r in rows}


def store_checkpoints(
    store: Store, rows: Sequence[ckptdirs.Checkpoint], known: set[tuple[Any, ...]] | None = None
) -> int:
    """Append checkpoint rows not stored yet (by run, step, tier, path, status)."""
    known = stored_checkpoint_keys(store) if known is None else known
    new = [c for c in rows if c.key not in known]
    if new:
        store.append("checkpoints", ckptdirs.frame(new))
        known.update(c.key for c in new)
    return len(new)


def scan_checkpoints(
    store: Store, tier: str, root: str, run_id: str | None, grace_s: float | None = None
) -> CheckpointReport:
    """One scan of a tier's checkpoint directory, stored (``import --checkpoints``)."""
    kw = {} if grace_s is None else {"grace_s": grace_s}
    res = ckptdirs.scan(tier, root, run=run_id, **kw)
    rep = CheckpointReport(tier, root, problems=list(res.problems))
    rep.found.update(c.status for c in res.checkpoints)
    rep.in_progress = len(res.in_progress)
    rep.stored = store_checkpoints(store, res.checkpoints)
    return rep
