"""``factoryfloor demo``: a fresh store, a scenario replayed live into it, the dashboard on
127.0.0.1 (what ``make demo`` runs)."""

from __future__ import annotations

import os

from app.commands.common import check_bind, check_port_free
from app.commands.serve import serve_dashboard
from app.settings import Settings
from telemetry.replay.scenarios import get_scenario


def run(s: Settings) -> int:
    from telemetry.store import open_store

    assert s.store is not None and s.scenario is not None  # both have defaults
    check_bind(s.host, s.allow_remote)
    check_port_free(s.host, s.port)
    # The demo starts from an empty store, but it only deletes a Factory Floor store nobody
    # else has open: opening it first refuses a store another process owns (a running demo
    # would go on writing into an unlinked file) and a file that is not ours.
    if os.path.exists(s.store):
        open_store(s.store).close()
    for suffix in ("", ".wal"):
        if os.path.exists(s.store + suffix):
            os.remove(s.store + suffix)
    return serve_dashboard(s, get_scenario(s.scenario))
