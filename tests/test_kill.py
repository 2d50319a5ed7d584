"""SIGKILL at random moments during writes: the daemon (both deployments) and the server.
Every round acknowledged before a kill is in the store exactly once, with all its GPU samples,
and the store opens cleanly afterwards. ``benchmarks/reliability.py`` runs the same drivers
for 100 cycles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import (
    Ack,
    Verdict,
    fleet_exporter,
    kill_daemon_cycles,
    kill_server_cycles,
    samples_lost,
)

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

NODES = 8  # exporters a round scrapes: 64 GPU sample rows when all answer


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[str]]:
    srv, targets = fleet_exporter(NODES)
    yield targets
    srv.shutdown()


def _held(v: Verdict) -> None:
    assert v.store_opens, v
    assert v.acknowledged >= 10, v  # the daemon really ran between the kills
    assert v.expected >= 10 * 8, v  # and its rounds carried GPU samples to look for
    assert (v.lost_rounds, v.lost, v.duplicated) == (0, 0, 0), v
    assert v.ok, v


@pytest.mark.parametrize("direct", [False, True], ids=["forwarding", "direct-store"])
def test_a_killed_daemon_loses_and_duplicates_nothing(
    tmp_path: Path, fleet: list[str], direct: bool
) -> None:
    _held(kill_daemon_cycles(tmp_path, fleet, cycles=5, direct=direct))


def test_a_killed_server_loses_and_duplicates_nothing(tmp_path: Path, fleet: list[str]) -> None:
    v = kill_server_cycles(tmp_path, fleet, cycles=4)
    _held(v)
    # Cycles 1 and 3 wait for a POST and kill inside it (12 of 12 such kills did in trials).
    assert v.mid_write is not None and v.mid_write >= 1, v


def test_missing_gpu_rows_of_an_acknowledged_round_count_as_lost() -> None:
    acked = {"t1": Ack(up=2, gpu_rows=None), "t2": Ack(up=2, gpu_rows=None), "t3": Ack(1, None)}
    # t1 shows 8 GPUs per answering target; t2 kept 10 of its 16 rows; t3 is missing.
    assert samples_lost(acked, {"t1": 16, "t2": 10}) == (40, 6 + 8)
    # A direct daemon logs the rows it stored: that count is the expectation.
    assert samples_lost({"t1": Ack(1, 8)}, {"t1": 7}) == (8, 1)
    # Nothing stored to learn the GPUs per target from: not measurable, not zero.
    assert samples_lost({"t1": Ack(1, None)}, {}) == (0, None)


def test_a_verdict_without_acknowledged_rounds_does_not_hold() -> None:
    crashed = Verdict(5, 0, 0, 0, 0, 0, 0, True)  # a daemon that died on start
    assert not crashed.ok
    assert not Verdict(5, 3, 3, 0, 0, 0, 0, True).ok  # rounds, but no target answered
    assert Verdict(5, 3, 3, 0, 0, 0, 24, True).ok
    assert not Verdict(5, 3, 3, 0, 0, 1, 24, True).ok
