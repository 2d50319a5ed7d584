"""The failed GPU's identity on the incident, for the replacement ticket (issue 57, item 10):
index, UUID, PCI bus id, serial and model from what the store holds (dcgm-exporter's labels,
the kernel line's bus id), each unknown part "–" with its reason, never a guess. Real stores:
a night imported from logs alone, and one whose node's dcgm-exporter was scraped first."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from app.data import incident, services
from app.figures import incident as fig
from telemetry.queries import gpu_identity
from telemetry.store import Store
from tests import cluster_fixture
from tests.conftest import DCGM_FIXTURES, cli
from tests.test_cluster_import import _job_until_gpu_loss

RUN = "atlas-70b"
UUID2 = "GPU-8a4996ef-b447-c0ce-b484-38b5c41f9dfd"  # GPU 2 of dgx-h100-017, at 00000000:3A:00.0


def _scrape(store: Store, at, text: str) -> None:
    from telemetry.ingest.sink import StoreSink
    from telemetry.ingest.targets import Fetch, Target

    StoreSink(store).write(at, [Fetch(Target("http://dgx-h100-017:9400/metrics"), text, None,
                                      0.05)])  # fmt: skip


def _dgx(tmp: Path, scrapes: list[str]) -> tuple[Path, str]:
    """A GPU lost on dgx-h100-017 (ECC XIDs in its dmesg), its exporter scraped before."""
    hosts = [f"dgx-h100-{i:03d}" for i in range(10, 18)]
    job, failed = _job_until_gpu_loss(tmp, hosts, "dgx-h100-017")
    store = tmp / "s.duckdb"
    with Store(str(store)) as s:
        for k, text in enumerate(scrapes):
            _scrape(s, failed - timedelta(hours=2 - k), text)
    at = f"[{failed:%a %b %e %H:%M:%S %Y}]"
    kern = tmp / "dgx-h100-017" / "dmesg.txt"
    kern.parent.mkdir()
    kern.write_text(f"{at} NVRM: Xid (PCI:0000:3a:00): 94, pid=51234, name=python3, "
                    "Contained ECC error\n")  # fmt: skip
    r = cli("import", "--store", str(store), "--run", RUN, str(job), str(kern))
    assert r.returncode == 0, r.stderr
    with Store(str(store), read_only=True) as s:
        ts = s.scalar("SELECT ts FROM interruptions")
    return store, ts.isoformat()


@pytest.fixture
def bind(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    held: list[Store] = []

    def to(path: Path) -> Store:
        s = Store(str(path), read_only=True)
        held.append(s)
        services.bind(s)
        return s

    monkeypatch.setattr(services, "_services", None)
    yield to
    for s in held:
        s.close()


def test_a_scraped_node_names_its_gpu_whole(bind, tmp_path: Path) -> None:
    text = (DCGM_FIXTURES / "default_h100.txt").read_text()
    store, at = _dgx(tmp_path, [text])
    bind(store)
    inc = incident.incident(RUN, at)
    got = inc["gpu_identity"]
    assert (got["index"], got["uuid"], got["pci_bus_id"], got["model"]) == (
        2, UUID2, "00000000:3A:00.0", "NVIDIA H100 80GB HBM3")
    assert got["serial"] is None and "exports no serial" in got["why"]["serial"]
    md = fig.markdown(inc)
    assert (f"- **GPU identity (for the ticket):** Index 2; UUID {UUID2}; PCI bus id "
            "00000000:3A:00.0; Serial – (not in the store") in md


def test_a_gpu_scraped_after_the_failure_says_so(bind, tmp_path: Path) -> None:
    """The store keeps the labels last scraped: a scrape after the failure (here of a GPU 2
    with another UUID, as after a swap) is named with that caveat, and the one scraped before
    it is told plainly."""
    text = (DCGM_FIXTURES / "default_h100.txt").read_text()
    swapped = text.replace(UUID2, "GPU-00000000-1111-2222-3333-444444444444")
    store, at = _dgx(tmp_path, [text, text, text, swapped])  # the last, an hour after it
    bind(store)
    got = incident.incident(RUN, at)["gpu_identity"]
    assert got["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert got["scraped"] is not None
    uuid = dict(fig.identity({"gpu_identity": got}))["UUID"]
    assert uuid.startswith("GPU-00000000-1111-2222-3333-444444444444 (as last scraped, ")
    assert "after the failure: a GPU replaced since would show its replacement's" in uuid


def test_two_stored_gpus_at_one_index_and_bus_name_none(tmp_path: Path) -> None:
    """Two GPUs of one host stored at the same index and bus with different UUIDs (the rule
    alone, on a real store file): which failed the store cannot say, so no UUID is given."""
    with Store(str(tmp_path / "e.duckdb")) as s:
        with s.transaction(["gpus"]) as con:
            for gpu_id, uuid in ((1, "GPU-a"), (2, "GPU-b")):
                con.execute("INSERT INTO gpus (gpu_id, host, gpu, uuid, pci_bus_id) VALUES "
                            "(?, 'n1', 2, ?, '00000000:3A:00.0')", [gpu_id, uuid])  # fmt: skip
        got = gpu_identity.identity(s, "n1", 2, [])
    assert got["uuid"] is None and got["index"] == 2
    assert got["why"]["uuid"] == "more than one GPU of n1 in the store matches"
    assert ("UUID", "– (more than one GPU of n1 in the store matches)") in \
        fig.identity({"gpu_identity": got})


def test_logs_alone_give_the_bus_and_say_why_not_the_rest(bind, tmp_path: Path) -> None:
    night = cluster_fixture.build(tmp_path / "night")
    store = tmp_path / "night.duckdb"
    assert cli(*night.import_args(store)).returncode == 0
    bind(store)
    got = incident.incident(RUN, "2026-03-01T09:53:20")["gpu_identity"]
    assert got["pci_bus_id"] == "0000:3b:00"  # from the kernel's NVRM line, as written
    assert got["index"] is None and got["uuid"] is None and got["model"] is None
    assert got["why"]["uuid"] == "no dcgm-exporter inventory of node-7 in the store"
    parts = dict(fig.identity({"gpu_identity": got}))
    assert parts["Index"] == "– (no dcgm-exporter inventory of node-7 in the store)"
    assert parts["PCI bus id"] == "0000:3b:00"


def test_no_host_or_gpu_named_is_said(tmp_path: Path) -> None:
    with Store(str(tmp_path / "e.duckdb")) as s:
        none = gpu_identity.identity(s, None, None, [])
        assert none["why"]["uuid"] == "the evidence names no host"
        nogpu = gpu_identity.identity(s, "node-3", None, ["NCCL WARN NET/IB : error"])
        assert nogpu["why"]["index"] == "the evidence names no GPU"
