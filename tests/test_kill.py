"""SIGKILL at random moments during writes: the daemon (both deployments) and the server.
Every round acknowledged before a kill is in the store exactly once, and the store opens
cleanly afterwards. ``benchmarks/reliability.py`` runs the same drivers for 50 cycles."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import kill_daemon_cycles, kill_server_cycles


@pytest.mark.parametrize("direct", [False, True], ids=["forwarding", "direct-store"])
def test_a_killed_daemon_loses_and_duplicates_nothing(
    tmp_path: Path, exporter: str, direct: bool
) -> None:
    v = kill_daemon_cycles(tmp_path, f"{exporter}/default_h100/metrics", cycles=5, direct=direct)
    assert v.store_opens
    assert v.acknowledged >= 10, v  # the daemon really ran between the kills
    assert (v.lost, v.duplicated) == (0, 0), v


def test_a_killed_server_loses_and_duplicates_nothing(tmp_path: Path, exporter: str) -> None:
    v = kill_server_cycles(tmp_path, f"{exporter}/default_h100/metrics", cycles=4)
    assert v.store_opens
    assert v.acknowledged >= 10, v
    assert (v.lost, v.duplicated) == (0, 0), v
