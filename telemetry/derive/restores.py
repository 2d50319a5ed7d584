"""Which step and tier a restart restored, and when checkpoints were being written: the
restore half of the interruption inference (``telemetry.derive.inference`` has the rules in
its module doc). Pure: frames in, plain values out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from telemetry.derive.evidence import column, is_empty, item, opt_int, opt_str, to_ns

TIERS = ("nvme", "pfs", "object")  # fastest first: the restore preference


def checkpoints_frame(checkpoints: pd.DataFrame | None) -> pd.DataFrame:
    """Checkpoint rows as step, tier, start/end (ns), ok, normalised path; sorted."""
    if is_empty(checkpoints):
        return pd.DataFrame({c: [] for c in ("step", "tier", "start", "end", "ok", "path")})
    c = checkpoints[checkpoints["end_ts"].notna() & checkpoints["step"].notna()]  # type: ignore[index]
    end = to_ns(c["end_ts"])
    paths = (opt_str(p) for p in column(c, "path"))
    out = pd.DataFrame(
        {
            "step": c["step"].to_numpy(np.int64),
            "tier": c["tier"].astype(str).to_numpy(object),
            "start": to_ns(c["start_ts"].fillna(c["end_ts"])) if "start_ts" in c else end,
            "end": end,
            "ok": (column(c, "status").fillna("ok").astype(str) == "ok").to_numpy(bool),
            "path": [None if p is None else os.path.normpath(p) for p in paths],
        }
    )
    return out.sort_values(["end", "step", "tier"], kind="mergesort").reset_index(drop=True)


def events(ckpt_events: pd.DataFrame | None, kind: str) -> pd.DataFrame:
    """Checkpoint log events of one kind as ts (ns), step, path, origin, line; by time."""
    cols = ("step", "path", "origin", "line")
    if is_empty(ckpt_events):
        return pd.DataFrame({"ts": np.array([], np.int64)} | {c: [] for c in cols})
    e = ckpt_events[(ckpt_events["kind"] == kind) & ckpt_events["ts"].notna()]  # type: ignore[index]
    conv = {"step": opt_int, "path": opt_str, "origin": opt_str, "line": opt_str}
    data = {c: pd.Series([conv[c](v) for v in column(e, c)], dtype=object) for c in cols}
    out = pd.DataFrame({"ts": to_ns(e["ts"])} | data)
    return out.assign(_p=out["path"].fillna("")).sort_values(["ts", "_p"], kind="mergesort")


def save_spans(ck: pd.DataFrame, ckpt_events: pd.DataFrame | None) -> np.ndarray:
    """(start, end) ns of every checkpoint write: directory rows, and save_start..save_end."""
    spans = [np.column_stack([ck["start"].to_numpy(np.int64), ck["end"].to_numpy(np.int64)])]
    s0 = events(ckpt_events, "save_start")["ts"].to_numpy(np.int64)
    for t in events(ckpt_events, "save_end")["ts"].to_numpy(np.int64):
        j = np.searchsorted(s0, t, "right") - 1
        spans.append(np.array([[s0[j] if j >= 0 else t, t]], np.int64))
    return np.concatenate(spans)


def covered_ns(spans: np.ndarray, a: int, b: int) -> int:
    """Nanoseconds of [a, b] inside the union of ``spans``."""
    total, cur = 0, a
    for s, e in sorted(map(tuple, np.clip(spans[(spans[:, 0] < b) & (spans[:, 1] > a)], a, b))):
        if e > cur:
            total, cur = total + e - max(s, cur), e
    return int(total)


_STEP_IN_PATH = re.compile(r"(?:iter_|checkpoint-|global_step|step[_-]?)0*(\d+)")


def _tier_of(path: str | None, roots: Mapping[str, Sequence[str]], ck: pd.DataFrame) -> str | None:
    """The tier a checkpoint path lives on: its longest tier root, else a scanned checkpoint's."""
    if not path:
        return None
    p = os.path.normpath(path)
    under = [
        (len(r), tier)
        for tier in sorted(roots)
        for r in map(os.path.normpath, roots[tier])
        if p == r or p.startswith(r.rstrip(os.sep) + os.sep)
    ]
    if under:
        return max(under)[1]
    hit = ck.loc[ck["path"] == p, "tier"]
    return str(hit.iat[0]) if len(hit) else None


def _fastest(tiers: Sequence[str]) -> str | None:
    return min(
        set(tiers),
        key=lambda t: (t not in TIERS, TIERS.index(t) if t in TIERS else 0, t),
        default=None,
    )


def _tiers_at(pool: pd.DataFrame, before: pd.DataFrame, step: int) -> tuple[list[str], bool]:
    """Tiers holding ``step``, and whether a newer NVMe copy was passed over (then NVMe was
    lost and is left out)."""
    tiers = pool.loc[pool["step"] == step, "tier"].tolist()
    newer = bool(((before["tier"] == "nvme") & (before["step"] > step)).any())
    if newer and "nvme" in tiers and set(tiers) != {"nvme"}:
        return [t for t in tiers if t != "nvme"], True
    return tiers, newer and "nvme" not in tiers


@dataclass(frozen=True)
class Restore:
    step: int
    tier: str | None
    how: str  # load | checkpoint | estimate
    item: dict[str, Any]  # the evidence item that says so
    nvme_lost: bool = False  # a newer NVMe copy than the restored step was passed over


def restore(
    start: int,
    end: int,
    next_step: int,
    log_every: int,
    node_lost: bool,
    nvme_from: int,
    ck: pd.DataFrame,
    loads: pd.DataFrame,
    roots: Mapping[str, Sequence[str]],
) -> Restore:
    """Restored step and tier (module doc). NVMe copies started before ``nvme_from`` are
    partial: a node was lost since."""
    before = ck[ck["ok"].astype(bool) & (ck["end"] <= end)]
    before = before[(before["tier"] != "nvme") | (before["start"] >= nvme_from)]

    def fits(c: pd.DataFrame) -> bool:
        return bool(len(c)) and int(c["step"].max()) >= next_step - log_every

    cand = before[before["step"] <= next_step]
    if node_lost and not (fits(cand) and not fits(cand[cand["tier"] != "nvme"])):
        cand = cand[cand["tier"] != "nvme"]  # unless only an NVMe copy explains the resume
    lt = loads["ts"].to_numpy(np.int64)
    j = int(np.searchsorted(lt, end, "right")) - 1
    path_tier = None
    if j >= 0 and lt[j] >= start:  # the last load before progress resumed is the one that took
        load = loads.iloc[j]
        path, step = load["path"], load["step"]
        path_tier = _tier_of(path, roots, ck)
        if step is None and path:
            hit = ck.loc[ck["path"] == os.path.normpath(path), "step"]
            m = _STEP_IN_PATH.findall(path)
            step = int(hit.iat[0]) if len(hit) else int(m[-1]) if m else None
        if step is not None:
            line = load["line"] or f"load {path or 'checkpoint'} at step {step:,}"
            it = item(int(load["ts"]), "ckpt_load", origin=load["origin"], line=line)
            at_step, lost = _tiers_at(
                cand if (cand["step"] == step).any() else before, before, step
            )
            return Restore(int(step), path_tier or _fastest(at_step), "load", it, lost)
    if len(cand):
        best = int(cand["step"].max())
        same = cand[cand["step"] == best]
        at_step, lost = _tiers_at(same, before, best)
        tier = path_tier or _fastest(at_step)
        row = same[same["tier"] == tier].iloc[0] if (same["tier"] == tier).any() else same.iloc[0]
        where = f" ({row['path']})" if row["path"] else ""
        line = f"checkpoint at step {best:,} on {row['tier']}{where}, the newest usable one"
        return Restore(
            best, tier, "checkpoint", item(int(row["end"]), "checkpoint", line=line), lost
        )
    est = max(next_step - log_every, 0)
    line = (
        f"no load line or checkpoint: restored step estimated as the first step after the "
        f"restart ({next_step:,}) minus the log interval ({log_every:,})"
    )
    return Restore(est, path_tier, "estimate", item(end, "restore_estimate", line=line))


LOAD_COPY_NS = 30 * 10**9  # one writer's loads of one step this close are copies, not restarts
_WRITER = re.compile(r"(?: *\d+: )?(?:\[(?:rank|default)?\d+\]: ?)*")  # srun/torchrun labels


def restarts(loads: pd.DataFrame, lt: np.ndarray, start: int, end: int) -> int:
    """Restarts in a stop: each rank logs its own load of a restart, so the most loads one
    writer (its srun/torchrun label) logged; a writer's loads of one step within
    ``LOAD_COPY_NS`` are one (unlabelled ranks' copies)."""
    a, b = int(np.searchsorted(lt, start, "left")), int(np.searchsorted(lt, end, "right"))
    last: dict[str, tuple[int, Any]] = {}
    count: dict[str, int] = {}
    for t, step, line in zip(lt[a:b].tolist(), loads["step"].iloc[a:b], loads["line"].iloc[a:b],
                             strict=True):  # fmt: skip
        m = _WRITER.match(line or "")
        who = m.group(0) if m else ""
        prev = last.get(who)
        if prev is None or prev[1] != step or t - prev[0] > LOAD_COPY_NS:
            count[who] = count.get(who, 0) + 1
        last[who] = (t, step)
    return max(count.values(), default=0)
