"""``factoryfloor scenarios``: the replay engine's scenarios, as text or JSON."""

from __future__ import annotations

import json

from app.settings import Settings
from telemetry.replay.scenarios import SCENARIOS


def run(s: Settings) -> int:
    if s.json:
        fields = ("name", "summary", "description", "gpus", "days")
        doc = [{f: getattr(sc, f) for f in fields} for sc in SCENARIOS.values()]
        print(json.dumps(doc, indent=2))
        return 0
    for sc in SCENARIOS.values():
        print(f"{sc.name:<14} {sc.summary}\n{'':<14} {sc.description}\n")
    return 0
