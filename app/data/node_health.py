"""Node health for the GPUs page (``telemetry.queries.node_health``): the rules' findings, each
node's drained/down time, the nodes drained now, repair times, and the nodes worth a row of
the timeline (the worst ``SHOWN``)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from app.data.services import bound, store
from telemetry.queries import TimeRange
from telemetry.queries import node_health as nh
from telemetry.queries import offenders as off
from telemetry.queries import xid_sources as xidq
from telemetry.queries.node_health import RULES as RULES  # vocabulary re-export

SHOWN = 30  # timeline rows: the worst nodes


@dataclass(frozen=True)
class Health:
    findings: pd.DataFrame
    states: pd.DataFrame
    drained: pd.DataFrame
    repairs: pd.DataFrame
    hosts: list[str]  # the timeline's rows, worst first
    troubled: int  # nodes with a finding or not in service at some time in the range
    slurm: bool  # Slurm's node states are stored (else "drained now" cannot be known)
    # what the rules judge is stored for the range (an XID source, Slurm's job ends): else
    # "0 findings" would be a figure nothing stored can give
    judged: bool = True


def health(tr: TimeRange) -> Health:
    s = store()
    found = nh.findings(s, tr)
    states = nh.node_states(s, tr)
    bad = states[states["kind"] != "in service"].copy()
    if not bad.empty:
        end = pd.Timestamp(tr.end)
        bad["secs"] = (bad["end_ts"].fillna(end).clip(upper=end)
                        - bad["start_ts"].clip(lower=pd.Timestamp(tr.start))).dt.total_seconds()
    order = list(dict.fromkeys(found["host"].tolist()))  # findings' order: worst first
    if not bad.empty:
        by_time = bad.groupby("host")["secs"].sum().sort_values(ascending=False)
        order += [h for h in by_time.index.tolist() if h not in order]
    judged = bool(len(found)) or nh.has_job_ends(s) or bool(xidq.xid_sources(s, None, tr))
    return Health(found, states, nh.drained_now(s), nh.repairs(states), order[:SHOWN],
                  len(order), nh.has_node_states(s), judged)  # fmt: skip


node_story = bound(nh.node_story)
offenders = bound(off.repeat_offenders)


def offender(host: object) -> dict[str, object] | None:
    """``host``'s culprit history (any case) when it is a repeat offender: ``host``,
    ``incidents``, ``days``; None otherwise."""
    if not isinstance(host, str) or not host:
        return None
    found = {h.lower(): (h, n) for h, n in offenders().items()}.get(host.lower())
    if found is None:
        return None
    return {"host": found[0], "incidents": found[1], "days": off.memory_days()}



memory_days = off.memory_days
memory_min = off.memory_min
