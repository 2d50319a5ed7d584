"""``factoryfloor import`` after a bad night: a job's log, a node's kernel log and two tiers'
checkpoint directories in, interruptions with their causes, restores and lost work out,
derived from the files alone (tests/cluster_fixture.py tells the story)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.store import Store
from tests.cluster_fixture import RUN, Night, build
from tests.conftest import cli

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Night:
    return build(tmp_path_factory.mktemp("night"))


@pytest.fixture(scope="module")
def imported(night: Night, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("store") / "s.duckdb"
    r = cli(*night.import_args(store))
    assert r.returncode == 0, r.stderr
    return store, r.stdout


def _rows(store: Path, sql: str) -> list[tuple]:
    with Store(str(store), read_only=True) as s:
        return s.rows(sql)


def test_the_command_prints_what_it_found(imported: tuple[Path, str]) -> None:
    _, out = imported
    assert "slurm-81234.out: 708 lines: 660 train_metrics records stored" in out
    assert "ib_error 1" in out and "nccl_timeout 1" in out and "37 checkpoint lines" in out
    assert "node-7-kern.log: 2 lines" in out and "xid 1" in out
    assert "nvme=" in out and ": 11 ok" in out and "1 failed, 5 ok" in out
    assert "run atlas-70b: 2 interruption(s) inferred" in out
    assert "Faulty GPU (GPU, confidence 90%)" in out and "XID 79 on node-7" in out
    # the IB completion error is written by the rank that lost its peer: no culprit named
    assert "Network Switch/Cable (Network" in out and "InfiniBand error; culprit unknown" in out
    assert "candidates: node-3" in out
    assert "--log-tz" not in out  # the log's times agree with its checkpoint files'
    # "3 lines not recognised" listed, each at its file:line, so a user can check them (#37)
    assert "3 lines not recognised" in out and "not recognised (the first 3 of 3):" in out
    assert "slurm-81234.out:1: srun: job 81234 queued and waiting for resources" in out
    assert "node-7-kern.log:1: " in out and "eth0: link up" in out


def test_interruptions_causes_restores_and_lost_steps_are_derived(
    imported: tuple[Path, str],
) -> None:
    store, _ = imported
    rows = _rows(
        store,
        """SELECT component, category, host, xid, restored_step, restored_tier, lost_steps,
                  source, node_lost
           FROM interruptions ORDER BY ts""",
    )
    assert rows == [
        ("Faulty GPU", "GPU", "node-7", 79, 3000, "pfs", 400, "inferred", True),
        ("Network Switch/Cable", "Network", None, None, 5000, "nvme", 200, "inferred", False),
    ]
    (evidence,) = _rows(store, "SELECT evidence FROM interruptions ORDER BY ts LIMIT 1")[0]
    items = json.loads(evidence)
    assert items[0]["role"] == "cause" and items[0]["origin"].endswith("/node-7-kern.log:2")
    assert "NVRM: Xid (PCI:0000:3b:00): 79" in items[0]["line"]
    watchdog = [e for e in items if e["kind"] == "nccl_timeout"]
    assert watchdog and watchdog[0]["role"] == "cascade"  # of the XID 79, ten minutes before


def test_checkpoints_per_tier_with_the_half_written_one_failed(imported: tuple[Path, str]) -> None:
    store, _ = imported
    rows = _rows(
        store,
        """SELECT tier, status, count(*), min(step), max(step) FROM checkpoints
           GROUP BY ALL ORDER BY ALL""",
    )
    assert rows == [("nvme", "ok", 11, 500, 5500), ("pfs", "failed", 1, 6000, 6000),
                    ("pfs", "ok", 5, 1000, 5000)]  # fmt: skip
    kern = _rows(store, "SELECT host, xid, source FROM xid_events")
    assert kern == [("node-7", 79, "kernel")]


def test_importing_the_same_files_again_changes_nothing(
    night: Night, imported: tuple[Path, str]
) -> None:
    store, _ = imported
    counts = """SELECT (SELECT count(*) FROM train_metrics), (SELECT count(*) FROM signals),
                       (SELECT count(*) FROM checkpoints), (SELECT count(*) FROM xid_events),
                       (SELECT count(*) FROM checkpoint_events)"""
    ints = "SELECT * EXCLUDE (evidence) FROM interruptions ORDER BY ts"
    before, before_ints = _rows(store, counts), _rows(store, ints)
    r = cli(*night.import_args(store))
    assert r.returncode == 0 and "already imported: nothing written" in r.stdout
    assert _rows(store, counts) == before and _rows(store, ints) == before_ints


def test_summary_json_reports_the_night(imported: tuple[Path, str]) -> None:
    store, _ = imported
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert run["run_id"] == RUN
    i = run["interruptions"]
    assert i["by_component"] == {"Faulty GPU": 1, "Network Switch/Cable": 1}
    assert i["lost_steps"] == 600 and 0.3 < i["downtime_hours"] < 0.6
    assert run["restores"] == {"nvme": 1, "pfs": 1}
    assert run["checkpoints"]["pfs"]["failed"] == 1 and run["checkpoints"]["nvme"]["failed"] == 0
    assert run["ettr"] is not None and 0.8 < run["ettr"] < 1.0 and run["ettr_basis"] == "steps"
    assert [x["source"] for x in i["list"]] == ["inferred", "inferred"]
    assert i["list"][0]["evidence"][0]["kind"] == "xid"
    # The log states the world size (64): GPU-hours lost are known, 64 x (detection +
    # restart + redoing the lost steps) per failure (#37, 3)
    assert _rows(store, "SELECT gpus FROM runs") == [(64,)]
    lost = [x["lost_gpu_hours"] for x in i["list"]]
    # down to the first redone step (the first line after the restart holds 10 redone steps
    # of 2 s: in the redo, not the downtime; #57, 8), then the lost steps redone
    gpu_failure = 64 * (30 + 1110 + 800) / 3600  # 34.5
    ib_failure = 64 * (15 + 360 + 30 + 400) / 3600  # 14.3
    assert lost == [pytest.approx(gpu_failure, abs=0.01), pytest.approx(ib_failure, abs=0.01)]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--checkpoints", "gpu=/x"], "tier must be one of nvme, pfs, object"),
        (["--checkpoints", "pfs"], "expected TIER=PATH"),
        (["--log-tz", "Mars/Olympus"], "unknown time zone"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(
    night: Night, tmp_path: Path, args: list[str], expected: str
) -> None:
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, *args, str(night.job_log))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1 and expected in lines[0], r.stderr
    assert not store.exists()


def test_a_missing_checkpoint_directory_is_said_and_the_logs_still_import(
    night: Night, tmp_path: Path
) -> None:
    store = tmp_path / "s.duckdb"
    missing = tmp_path / "no-such-dir"
    r = cli("import", "--store", str(store), "--run", RUN, "--checkpoints", f"object={missing}",
            str(night.job_log))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"object={missing}" in r.stdout and "does not exist" in r.stdout
    assert _rows(store, "SELECT count(*) FROM train_metrics") == [(660,)]


def test_times_without_a_zone_follow_log_tz(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "[2026-03-01 09:00:00] iteration       10/  100 | lm loss: 2.5E+00 |\n"
        "[2026-03-01 09:00:20] iteration       20/  100 | lm loss: 2.4E+00 |\n"
    )
    for tz, hour in (("UTC", 9), ("Europe/Berlin", 8)):
        store = tmp_path / f"{hour}.duckdb"
        r = cli("import", "--store", str(store), "--run", "r", "--log-tz", tz, str(log))
        assert r.returncode == 0, r.stderr
        assert _rows(store, "SELECT min(hour(ts)) FROM train_metrics") == [(hour,)]


def test_a_year_less_kernel_log_takes_the_year_of_the_job_log(tmp_path: Path) -> None:
    """The shipped samples: a 2024 job log and a syslog kernel log without years, whose file
    time (its checkout) is another year. Named first, it is still read in the job's year."""
    samples = Path(__file__).resolve().parent.parent / "sample_data" / "logs"
    store = tmp_path / "s.duckdb"
    kern, job = samples / "node-7-kern.log", samples / "slurm-81234.out"
    r = cli("import", "--store", str(store), "--run", "atlas-70b", str(kern), str(job))
    assert r.returncode == 0, r.stderr
    first = _rows(store, "SELECT component, xid, year(ts) FROM interruptions ORDER BY ts LIMIT 1")
    assert first == [("Faulty GPU", 79, 2024)]


def test_a_year_less_kernel_log_imported_on_its_own_takes_the_runs_year(tmp_path: Path) -> None:
    """(#36, 6) The job log first, the node's kernel log a day later by itself: its lines are
    read in the year of the run already stored, not in the year its file was copied."""
    samples = Path(__file__).resolve().parent.parent / "sample_data" / "logs"
    store = tmp_path / "s.duckdb"
    kern, job = samples / "node-7-kern.log", samples / "slurm-81234.out"
    r = cli("import", "--store", str(store), "--run", "atlas-70b", str(job))
    assert r.returncode == 0, r.stderr
    copied = tmp_path / kern.name
    copied.write_bytes(kern.read_bytes())  # its mtime: now, another year than the run's
    r = cli("import", "--store", str(store), "--run", "atlas-70b", str(copied))
    assert r.returncode == 0, r.stderr
    assert _rows(store, "SELECT DISTINCT year(ts) FROM signals WHERE kind = 'xid'") == [(2024,)]
    first = _rows(store, "SELECT component, xid FROM interruptions ORDER BY ts LIMIT 1")
    assert first == [("Faulty GPU", 79)]


def test_log_times_hours_off_the_checkpoint_files_name_log_tz(
    night: Night, tmp_path: Path
) -> None:
    """(#36, 6) The night's job log is in UTC; read as Berlin time (UTC+1 in March) its saves
    finish an hour before the files they wrote: the import says so and names --log-tz."""
    store = tmp_path / "s.duckdb"
    r = cli(*night.import_args(store)[:-2], "--log-tz", "Europe/Berlin", str(night.job_log))
    assert r.returncode == 0, r.stderr
    assert "1 h behind its checkpoint files' times" in r.stdout and "--log-tz ZONE" in r.stdout


def test_checkpoint_directories_alone_and_no_input_at_all(night: Night, tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, "--checkpoints", f"pfs={night.pfs}")
    assert r.returncode == 0, r.stderr
    assert _rows(store, "SELECT status, count(*) FROM checkpoints GROUP BY 1 ORDER BY 1") == [
        ("failed", 1),
        ("ok", 5),
    ]
    r = cli("import", "--store", str(tmp_path / "t.duckdb"))
    assert r.returncode == 1 and "give at least one FILE or --checkpoints" in r.stderr


def test_a_quiet_kernel_log_is_nothing_of_note_not_an_error(tmp_path: Path) -> None:
    """A node's kernel log with no XID or failure line, in the three forms nodes write it
    (rsyslog RFC 3339, BSD syslog, ``dmesg -T``): the import says so and exits 0. A job log of
    nothing recognisable is still an error (its format was not understood)."""
    forms = {
        "node-1-kern.log": "2026-03-01T09:00:00.123456+00:00 node-1 kernel: [   10.000000] "
        "usb 1-1: new high-speed USB device number 2 using xhci_hcd\n",
        "node-2-syslog": "Mar  1 09:00:00 node-2 kernel: EXT4-fs (nvme0n1p1): mounted "
        "filesystem with ordered data mode\n",
        "node-3.dmesg.txt": "[Sun Mar  1 09:00:00 2026] mlx5_core 0000:18:00.0: "
        "mlx5_pcie_event:301: PCIe slot advertised sufficient power (75W).\n",
    }
    store = tmp_path / "s.duckdb"
    for name, line in forms.items():
        (tmp_path / name).write_text(line * 3)
        r = cli("import", "--store", str(store), "--run", "r", str(tmp_path / name))
        assert r.returncode == 0, (name, r.stdout, r.stderr)
        assert f"nothing of note in {tmp_path / name}" in r.stdout, r.stdout
    job = tmp_path / "slurm-1.out"
    job.write_text("hello\nworld\n")
    r = cli("import", "--store", str(store), "--run", "r", str(job))
    assert r.returncode == 1 and "no valid records" in r.stderr


# -- kernel-log XIDs in the forms nodes keep them (issue 56, 4) ----------------------------------
def _job_until_gpu_loss(root: Path, hosts: list[str], lost: str) -> tuple[Path, datetime]:
    """A 64-rank Megatron-LM job (NCCL's communicator lines place each rank) that stops at step
    1,600 when a GPU of ``lost`` fails; Slurm gives up on the node 7 minutes later (slurmstepd's
    ``*** JOB N ON <batch host> CANCELLED AT ... DUE TO NODE FAILURE ***`` and srun's ``Node
    failure on <node>``), and the requeued job loads iteration 1,500. Returns the log and the
    time of the failure (5 s after the last progress line)."""
    from tests.cluster_fixture import _iteration

    t0 = datetime(2026, 3, 1, 9, 0, 0)
    out = [f"{hosts[r // 8]}:{3000 + r}:{3100 + r} [{r % 8}] NCCL INFO comm 0x55d5c8e{r:05x} "
           f"rank {r} nranks 64 cudaDev {r % 8} nvmlDev {r % 8} busId 3a000 commId 0x7c1e9a3b "
           "- Init COMPLETE" for r in range(64)]  # fmt: skip
    out += [_iteration(t0 + timedelta(seconds=2 * s), s) for s in range(10, 1610, 10)]
    failed = t0 + timedelta(seconds=2 * 1600 + 5)
    gone = failed + timedelta(minutes=7)
    out += [f"slurmstepd: error: *** JOB 81234 ON {hosts[0]} CANCELLED AT {gone:%Y-%m-%dT%H:%M:%S}"
            " DUE TO NODE FAILURE ***", f"srun: error: Node failure on {lost}"]  # fmt: skip
    back = gone + timedelta(minutes=5)
    out += [f"[{back:%Y-%m-%d %H:%M:%S}] loading checkpoint from /lustre/ckpt at iteration 1500",
            f"[{back:%Y-%m-%d %H:%M:%S}] successfully loaded checkpoint from /lustre/ckpt "
            "[ t 0/1, p 0/1 ] at iteration 1500"]  # fmt: skip
    out += [_iteration(back + timedelta(seconds=2 * (s - 1500)), s) for s in range(1510, 1700, 10)]
    job = root / "slurm-81234.out"
    job.write_text("\n".join(out) + "\n")
    return job, failed


# NVIDIA's driver line, as pasted from `journalctl -k` (leptonai/gpud#1209, NVIDIA/NVSentinel#155)
_XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."


def _journal_json(at: datetime, host: str, message: str) -> str:
    """One entry of ``journalctl -k -o json``: systemd's JSON export, every value a string,
    ``__REALTIME_TIMESTAMP`` in microseconds since the epoch."""
    us = int((at - datetime(1970, 1, 1)).total_seconds()) * 1_000_000
    return json.dumps({
        "__CURSOR": f"s=6c0b3e5f;i=1a2b;b=9f1d;m={us:x};t={us:x};x=1", "__REALTIME_TIMESTAMP":
        str(us), "__MONOTONIC_TIMESTAMP": "912345678901", "_BOOT_ID": "9f1d0c6e2a8b4d7f",
        "_TRANSPORT": "kernel", "PRIORITY": "4", "SYSLOG_FACILITY": "0", "SYSLOG_IDENTIFIER":
        "kernel", "_MACHINE_ID": "4e1a9b0c", "_HOSTNAME": host, "MESSAGE": message,
    }, separators=(",", ":"))  # fmt: skip


@pytest.mark.parametrize("form", ["journalctl -o json", "dmesg -T in a folder per node"])
def test_an_xid_before_slurms_node_failure_is_the_cause_on_its_host(
    tmp_path: Path, form: str
) -> None:
    """The kernel log of the node that lost a GPU, as it is gathered: ``journalctl -k -o json``
    (its host in ``_HOSTNAME``; before: read as records and refused, so the stop came out as
    Slurm's node failure, "Host Maintenance") or ``dmesg -T`` in a folder named for the node
    (``node-7/kern.log``; before: an XID on no host). The XID, 7 minutes before Slurm's node
    failure, is the cause, on node-7."""
    hosts = [f"node-{i}" for i in range(1, 9)]
    job, failed = _job_until_gpu_loss(tmp_path, hosts, "node-7")
    up = failed - timedelta(hours=1)
    if form == "journalctl -o json":
        kern = tmp_path / "journal.json"
        lines = [_journal_json(up, "node-7", "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"),
                 _journal_json(failed, "node-7", _XID79)]  # fmt: skip
    else:
        kern = tmp_path / "node-7" / "kern.log"
        kern.parent.mkdir()
        lines = [f"[{up:%a %b %e %H:%M:%S %Y}] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
                 f"[{failed:%a %b %e %H:%M:%S %Y}] {_XID79}"]  # fmt: skip
    kern.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, str(job), str(kern))
    assert r.returncode == 0, r.stderr
    rows = _rows(store, "SELECT component, host, xid, node_lost, restored_step FROM interruptions")
    assert rows == [("Faulty GPU", "node-7", 79, True, 1500)]
    assert _rows(store, "SELECT host, xid, source FROM xid_events") == [("node-7", 79, "kernel")]


def test_ecc_xids_in_dmesg_T_name_their_host_gpu_and_uuid(tmp_path: Path) -> None:
    """Uncorrectable-ECC XIDs in ``dmesg -T`` (``dmesg --ctime``: leptonai/gpud#46; the 94 line
    as leptonai/gpud#1174 quotes it), kept as ``dgx-h100-017/dmesg.txt``: the cause names the
    host (before: none) and, since dcgm-exporter told the store that node's GPUs (its ``gpu``,
    ``pci_bus_id`` and ``UUID`` labels, sample_data/dcgm/default_h100.txt), the GPU's index and
    UUID, which an RMA needs."""
    from telemetry.ingest.sink import StoreSink
    from telemetry.ingest.targets import Fetch, Target
    from tests.conftest import DCGM_FIXTURES

    hosts = [f"dgx-h100-{i:03d}" for i in range(10, 18)]
    job, failed = _job_until_gpu_loss(tmp_path, hosts, "dgx-h100-017")
    store = tmp_path / "s.duckdb"
    with Store(str(store)) as s:  # one scrape of the node's dcgm-exporter
        text = (DCGM_FIXTURES / "default_h100.txt").read_text()
        target = Target("http://dgx-h100-017:9400/metrics")
        StoreSink(s).write(failed - timedelta(hours=1), [Fetch(target, text, None, 0.05)])
    at = f"[{failed:%a %b %e %H:%M:%S %Y}]"
    kern = tmp_path / "dgx-h100-017" / "dmesg.txt"
    kern.parent.mkdir()
    kern.write_text(
        f"{at} NVRM: Xid (PCI:0000:3a:00): 94, pid=51234, name=python3, Contained ECC error\n"
        f"{at} NVRM: Xid (PCI:0000:3a:00): 63, pid=51234, name=python3, Row Remapper: New row "
        "(0x00000000004ca2c8) marked for remapping, reset gpu to activate.\n"
    )
    r = cli("import", "--store", str(store), "--run", RUN, str(job), str(kern))
    assert r.returncode == 0, r.stderr
    ((component, host, gpu, xid, desc, evidence),) = _rows(
        store, "SELECT component, host, gpu, xid, description, evidence FROM interruptions")
    assert (component, host, gpu, xid) == ("GPU HBM3 Memory", "dgx-h100-017", 2, 94)
    uuid = "GPU-8a4996ef-b447-c0ce-b484-38b5c41f9dfd"  # GPU 2 at 00000000:3A:00.0
    assert f"XID 94 on dgx-h100-017 GPU 2 ({uuid})" in desc
    cause = json.loads(evidence)[0]
    assert (cause["role"], cause["gpu"], cause["uuid"]) == ("cause", 2, uuid)


def test_a_job_log_without_run_is_refused_and_nothing_is_lost(
    night: Night, tmp_path: Path
) -> None:
    """A loss curve that names no run is no loss curve: before, `import slurm-N.out` without
    `--run` printed "0 train_metrics records stored" and exited 0, the log's progress gone."""
    store = tmp_path / "s.duckdb"
    job_log = next(a for a in night.import_args(store) if a.endswith("slurm-81234.out"))
    r = cli("import", "--store", str(store), job_log)
    assert r.returncode == 1, r.stdout
    assert "its progress lines name no run" in r.stdout and "--run NAME" in r.stdout
    assert "nothing stored from" in r.stderr
    assert _rows(store, "SELECT count(*) FROM train_metrics") == [(0,)]
    assert _rows(store, "SELECT count(*) FROM signals") == [(0,)]
    r = cli("import", "--store", str(store), "--run", RUN, job_log)  # named: all of it
    assert r.returncode == 0, r.stderr
    assert "660 train_metrics records stored" in r.stdout
