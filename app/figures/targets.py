"""Scrape-target health for display: the targets that need attention, each with its reason."""

from __future__ import annotations

import pandas as pd

TARGET_COLUMNS = {
    "status": "Status",
    "target": "Target",
    "reason": "Reason",
    "since": "Since (UTC)",
    "last_scrape": "Last scrape (UTC)",
    "duration_ms": "Scrape (ms)",
}


def problem_targets(health: pd.DataFrame) -> pd.DataFrame:
    """The down and stale targets of a ``target_health`` frame, with a reason in words and
    times of day as text (health looks back an hour at most), in the frame's order (down
    first)."""
    bad = health[health["status"].isin(["down", "stale"])]
    out = pd.DataFrame(
        {
            "status": bad["status"],
            "target": bad["target"],
            "reason": [
                (r.error or "down") if r.status == "down" else "same sample values every scrape"
                for r in bad.itertuples()
            ],
            "since": [_hms(t) for t in bad["since"]],
            "last_scrape": [_hms(t) for t in bad["last_scrape"]],
            "duration_ms": (bad["duration_s"] * 1000).round(0),
        }
    )
    return out.reset_index(drop=True)


def _hms(t: object) -> str:
    return "" if t is None or pd.isna(t) else pd.Timestamp(t).strftime("%H:%M:%S")
