"""``factoryfloor exclude``: the repeat-offender nodes as a Slurm hostlist for ``sbatch
--exclude=`` (``telemetry.queries.offenders``): nodes named the culprit of an interruption
``--min`` times or more in the last ``--days`` of the store's data, across runs and jobs. A
node that was only ever a victim, or a candidate of an unknown culprit, is never listed.
``--json`` prints the hostlist and each node's reason."""

from __future__ import annotations

import json
import os
import sys

from app.settings import Settings
from telemetry.errors import FactoryFloorError


def run(s: Settings) -> int:
    from telemetry import actions
    from telemetry.hostlist import compress_hostlist
    from telemetry.queries.offenders import node_history
    from telemetry.store import open_store

    assert s.store is not None  # the parser requires it
    table = actions.configure(s.actions_file)
    days = table.days if s.history_days is None else s.history_days
    least = table.min_count if s.min_culprit is None else s.min_culprit
    if not os.path.exists(s.store):
        raise FactoryFloorError(f"store {s.store} does not exist")
    with open_store(s.store, read_only=True) as store:
        df = node_history(store, days, least)
    hosts = df["host"].tolist()
    hostlist = compress_hostlist(hosts) if hosts else ""
    if s.json:
        nodes = [_node(r, days) for r in df.to_dict("records")]
        print(json.dumps({"hostlist": hostlist, "days": days, "min": least, "nodes": nodes},
                         indent=2, default=str))  # fmt: skip
        return 0
    if hosts:
        print(hostlist)
    for r in df.to_dict("records"):
        print(f"{r['host']}: {_reason(r, days)}", file=sys.stderr)
    if not hosts:
        print(f"no node was the culprit {least} or more times in the last {days:g} days of "
              "the store's data", file=sys.stderr)  # fmt: skip
    return 0


def _reason(r: dict, days: float) -> str:
    n = int(r["incidents"])
    last = f"{r['last_ts']:%Y-%m-%d %H:%M} UTC"
    return (f"culprit of {n} interruption{'s' if n != 1 else ''} in the last {days:g} days "
            f"({', '.join(r['causes'])}; runs {', '.join(r['runs'])}; last {last})")  # fmt: skip


def _node(r: dict, days: float) -> dict:
    return {"host": r["host"], "incidents": int(r["incidents"]), "runs": list(r["runs"]),
            "causes": list(r["causes"]), "first": r["first_ts"].isoformat(),
            "last": r["last_ts"].isoformat(), "reason": _reason(r, days)}  # fmt: skip
