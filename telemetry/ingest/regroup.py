"""Prometheus series regrouped into exporter pages: one ``Fetch`` per ``instance``, as if
its dcgm-exporter had been scraped. The Prometheus-API source (``collect.prometheus``) and the
remote_write receiver (``rw_receiver``) both make their rounds with it, so the round sink cannot
tell them from a scrape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from telemetry.ingest.dcgm_rows import ATTRIBUTION
from telemetry.ingest.targets import Fetch, Target, normalise

META = ("up", "scrape_duration_seconds")


def _naive(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


# -- one instant of the server, regrouped per exporter ----------------------------------------
@dataclass
class Snapshot:
    """What the server holds at one instant: per ``instance``, its exporter's lines; per
    instance of a DCGM job, its ``up``, scrape duration and job."""

    lines: dict[str, list[str]] = field(default_factory=dict)
    up: dict[str, float] = field(default_factory=dict)
    duration: dict[str, float] = field(default_factory=dict)
    job: dict[str, str] = field(default_factory=dict)
    samples: int = 0


class Regrouper:
    """Turns the server's series (labels with ``instance``, ``job`` and target labels) back
    into exporter lines. Remembers per instance which labels its target adds (those of its
    ``up`` series) and which jobs carry DCGM series (their other targets are exporters too)."""

    def __init__(self) -> None:
        self.added: dict[str, frozenset[str]] = {}  # instance -> labels its target adds
        self.jobs: set[str] = set()
        self._blocks: dict[tuple[Any, ...], tuple[str, str]] = {}

    def meta(self, snap: Snapshot, name: str, labels: Mapping[str, str], value: float) -> None:
        inst = labels.get("instance", "")
        if name == "up":
            snap.up[inst] = value
            snap.job[inst] = labels.get("job", "")
            self.added[inst] = frozenset(k for k in labels if k not in ATTRIBUTION)
        else:
            snap.duration[inst] = value

    def prefix(self, name: str, labels: tuple[tuple[str, str], ...]) -> tuple[str, str]:
        """(instance, ``name{labels}`` as the exporter printed it) of one series."""
        d = dict(labels)
        inst = d.get("instance", "")
        added = self.added.get(inst, frozenset(("instance", "job")))
        key = (name, labels, added)
        hit = self._blocks.get(key)
        if hit is None:
            self.jobs.add(d.get("job", ""))
            kept = ",".join(f'{k}="{_escape(v)}"' for k, v in labels if k not in added)
            hit = (inst, f"{name}{{{kept}}} " if kept else f"{name} ")
            if len(self._blocks) > 1 << 18:
                self._blocks.clear()
            self._blocks[key] = hit
        return hit

    def fetches(self, snap: Snapshot, errors: Mapping[tuple[str, str], str]) -> list[Fetch]:
        """One ``Fetch`` per exporter: its page, or why it is down."""
        wanted = set(snap.lines) | {i for i, j in snap.job.items() if j in self.jobs}
        out = []
        for inst in sorted(wanted):
            target = Target(_target_url(inst))
            up = snap.up.get(inst, 1.0)
            took = snap.duration.get(inst, 0.0)
            took = took if math.isfinite(took) else 0.0
            if up == 1.0 or (inst in snap.lines and inst not in snap.up):
                text = "\n".join(snap.lines.get(inst, ())) + "\n"
                out.append(Fetch(target, text, None, took, 200))
            else:
                why = errors.get((inst, snap.job.get(inst, ""))) or "up == 0"
                out.append(Fetch(target, None, f"down in Prometheus: {why}"[:300], took))
        return out


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _target_url(instance: str) -> str:
    try:
        return normalise(instance)
    except ValueError:
        return f"prometheus-instance:{instance}"
