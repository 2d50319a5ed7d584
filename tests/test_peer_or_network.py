"""NCCL's word that a peer went away is not the network's fault by itself (#56: a wrong answer
is worse than "unknown"). ``Call to recv from PEER failed : Broken pipe``, ``Connection closed
by remote peer``, ``remote process exited or there was a network error`` and ncclSystemError
are what every survivor prints when a peer process dies (NVIDIA/nccl#795: the remote rank had
segfaulted), as when a link fails: the cause is unknown, "the peer exited, or the network
failed". The fabric's own errors stay the network's: InfiniBand's completion errors and
libfabric's (aws-ofi-nccl's ``NET/OFI Request ... completed with error``), which the corpus's
nccl-1928 showed only under a ncclRemoteError. The lines are verbatim from the threads."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry import signals as sig
from telemetry.collect.logs import logline as ll
from tests.test_culprit import _import, _interruptions

# NVIDIA/nccl#795 (a remote rank's segfault came first, its lines not in the paste)
PEER_GONE = """\
a100-st-p4d24xlarge-22:183006:183220 [1] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.200.84.247<58355> failed : Broken pipe
a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO misc/socket.cc:535 -> 6
a100-st-p4d24xlarge-22:183006:183220 [1] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute operation Connect from rank 9, retcode 6
a100-st-p4d24xlarge-22:183006:183181 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer a100-st-p4d24xlarge-22.luciodelelis-92732890-0458-4f76-8369-c4fee80b23e7.pcluster<47861>
"""  # noqa: E501
CORPUS = Path(__file__).with_name("corpus")


def _cause(tmp_path: Path, text: str) -> dict:
    log = tmp_path / "job.log"
    log.write_text(text)
    rows = _interruptions(_import(tmp_path, log)[0], "host, rank, component, description")
    assert len(rows) == 1, rows
    return rows[0]


def test_a_peer_gone_is_not_called_the_network(tmp_path: Path) -> None:
    row = _cause(tmp_path, PEER_GONE)
    assert row["component"] == "Unknown", row
    assert "NCCL lost a peer (the peer exited, or the network failed)" in row["description"]
    assert (row["host"], row["rank"]) == (None, None)


@pytest.mark.parametrize("name", ["nccl/nccl-2076-connection-reset.log",
                                  "megatron/megatron-792-distopt-odd-dp.log"])
def test_ncclremoteerror_and_ncclsystemerror_say_unknown(tmp_path: Path, name: str) -> None:
    assert _cause(tmp_path, (CORPUS / name).read_text())["component"] == "Unknown"


def test_the_fabrics_own_error_is_the_network(tmp_path: Path) -> None:
    line = ("[rank3]: NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 113. Error: 2 "
            "(UNDELIVERABLE). Completed length: 0")
    got = ll.failure(line)
    assert got is not None and got[0] == sig.IB_ERROR, got
    row = _cause(tmp_path, (CORPUS / "nccl/nccl-1928-ofi-undeliverable.log").read_text())
    assert row["component"] == "Network Switch/Cable", row
