"""Checkpoints known from the training log only: a save the log reports ("successfully saved
checkpoint from iteration 500 to /lustre/ckpt/run") whose directory is no longer on disk
(rotated away: Megatron-LM and most trainers keep the last few) is still a checkpoint of its
tier, so the cadence, the tier ages and the restores read as the job ran, not as the directory
listing happens to look afterwards.

A logged save becomes a ``checkpoints`` row (``format = 'log'``, no size) when its path lies
under a tier root the run was imported with (``--checkpoints TIER=PATH``, or a scanned
checkpoint's path) and no scanned directory has that tier and step. Its write time is from the
"saving checkpoint" line before it (the same step) to the "successfully saved" line. The rows
are recomputed from the events on every derive, never appended: a directory that appears later
replaces its logged row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from telemetry.derive.restores import _tier_of, checkpoints_frame, events

LOGGED = "log"  # the ``format`` of a checkpoint known from the log only
_MAX_WRITE_NS = 6 * 3600 * 10**9  # a "saving" line further back than this is another save's


def logged_checkpoints(
    run_id: str,
    checkpoints: pd.DataFrame,
    ckpt_events: pd.DataFrame | None,
    roots: Mapping[str, Sequence[str]],
) -> pd.DataFrame:
    """Rows for ``checkpoints`` of the saves the log reports that no scanned directory holds.
    ``checkpoints`` are the scanned rows (step, tier, start_ts, end_ts, status, path)."""
    ends = events(ckpt_events, "save_end")
    cols = ["run_id", "step", "tier", "start_ts", "end_ts", "bytes", "write_s", "blocking_s",
            "status", "path", "format"]  # fmt: skip
    if ends.empty:
        return pd.DataFrame(columns=cols)
    ck = checkpoints_frame(checkpoints)
    have = {(str(t), int(s)) for t, s in zip(ck["tier"], ck["step"], strict=True)}
    starts = events(ckpt_events, "save_start")
    s_ts = starts["ts"].to_numpy(np.int64)
    rows, seen = [], set()
    for e in ends.itertuples():
        tier = _tier_of(e.path, roots, ck)
        if tier is None or e.step is None or (tier, e.step) in have | seen:
            continue
        seen.add((tier, e.step))
        j = int(np.searchsorted(s_ts, e.ts, "right")) - 1
        begin = e.ts
        if j >= 0 and e.ts - s_ts[j] <= _MAX_WRITE_NS and starts["step"].iat[j] in (None, e.step):
            begin = int(s_ts[j])
        rows.append({
            "run_id": run_id, "step": int(e.step), "tier": tier,
            "start_ts": pd.Timestamp(begin), "end_ts": pd.Timestamp(e.ts), "bytes": None,
            # lines stamped with one time (Megatron-LM prints its save lines without a time
            # of their own) do not time the write: unknown, never a 0 s write
            "write_s": (e.ts - begin) / 1e9 if e.ts > begin else None, "blocking_s": None,
            "status": "ok",
            "path": e.path, "format": LOGGED,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=cols)
