"""SIGKILL the server while four senders post remote_write shards out of order: every sample of
every request answered 2xx is in the store once, with the value sent (``tests/rw_faults.py``;
``benchmarks/reliability.py`` runs the same drill longer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rw_faults import drill

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


def test_killed_server_loses_no_acknowledged_remote_write_sample(tmp_path: Path) -> None:
    v = drill(tmp_path, requests=60, senders=4, kills=2, seed=7)
    assert v.kills == 2 and v.refused == 0
    assert v.acked == v.requests
    assert v.expected == 60 * 8 * 4 * 2 // 2  # each request half of a scrape's GPU samples
    assert (v.stored, v.duplicated, v.wrong) == (v.expected, 0, 0), v
