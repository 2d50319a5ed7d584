"""``factoryfloor summary``: the reliability figures of every run in a store."""

from __future__ import annotations

import json
import os

from app.settings import Settings
from telemetry.errors import FactoryFloorError


def run(s: Settings) -> int:
    from telemetry.store import open_store
    from telemetry.summary import store_summary

    assert s.store is not None  # the parser requires it
    if not os.path.exists(s.store):
        raise FactoryFloorError(f"store {s.store} does not exist")
    with open_store(s.store, read_only=True) as store:
        summary = store_summary(store)
    if s.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    for r in summary["runs"]:
        i = r["interruptions"]
        gpus = "?" if r["gpus"] is None else f"{r['gpus']:,}"  # an ingested run may not say
        print(
            f"{r['run_id']}: {gpus} GPUs, {r['wall_hours']:.1f} h, ETTR {r['ettr']}, "
            f"MTBF {r['mtbf_hours']} h, MFU {r['mfu']}, {i['unexpected']} unexpected + "
            f"{i['planned']} planned interruptions, {r['lost_gpu_hours']:,.0f} GPU-h lost"
        )
    return 0
