"""Logs that hold only a failure (issue #56, the corpus's refusals): PyTorch's c10 time stamps
with an unpadded month, year-less times given the year of the file's modification time (or
``--year``), a log with no wall-clock time at all imported with a note instead of refused,
and failure lines without a single progress line as ONE interruption whose culprit is named
only where a line places it. Every input line is verbatim from a public issue thread
(tests/corpus/labels.toml gives each thread)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from telemetry import signals as sig
from telemetry.collect.logs import logline as ll
from telemetry.collect.logs.textlogs import parse_file
from tests.conftest import cli
from tests.corpus.score import CORPUS

# pytorch/basicsr-737: three ranks' NCCL watchdog timeouts, c10's "E626" (June 26), no year
WATCHDOG = [
    "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
    "NumelOut=9801523, Timeout(ms)=600000) ran for 600030 milliseconds before timing out.",
    "[rank0]:[E626 06:24:44.159932949 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
    "NumelOut=9801523, Timeout(ms)=600000) ran for 600049 milliseconds before timing out.",
    "[rank2]:[E626 06:24:44.163004115 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
    "NumelOut=9801523, Timeout(ms)=600000) ran for 600054 milliseconds before timing out.",
]
# kernel/pop-3363: an XID 79 in a journal-format kernel log (syslog's year-less time)
XID79 = [
    "Apr 29 19:24:11 EVE kernel: NVRM: GPU at PCI:0000:01:00: "
    "GPU-ccdb674e-0f5b-c678-9099-59940ccd0641",
    "Apr 29 19:24:11 EVE kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
]
# slurm/canu-1052: the job ran out of time, with no progress line of its own
TIME_LIMIT = [
    "Current # sequences loaded and processed from file: 35000...",
    "slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT 2018-08-19T16:30:21 DUE TO "
    "TIME LIMIT ***",
]
# pytorch/funasr-2006: older PyTorch prints no time at all ("[E ProcessGroupNCCL.cpp:1537]")
NO_CLOCK = [
    "[rank14]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 14] Timeout at NCCL work: 15734, last "
    "enqueued NCCL work: 15735, last completed NCCL work: 15733.",
    "[rank14]:[E ProcessGroupNCCL.cpp:1414] [PG 1 Rank 14] Process group watchdog thread "
    "terminated with exception: [Rank 14] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=15734, OpType=ALLREDUCE, NumelIn=220084533, NumelOut=220084533, "
    "Timeout(ms)=600000) ran for 600098 milliseconds before timing out.",
]


def _write(path: Path, lines: list[str], mtime: datetime | None = None) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if mtime is not None:
        t = (mtime - datetime(1970, 1, 1)).total_seconds()
        os.utime(path, (t, t))
    return path


def _interruptions(store: Path) -> list[dict]:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)["runs"]
    return [i for run in runs for i in run["interruptions"].get("list", [])]


def test_c10_stamp_with_an_unpadded_month_is_read(tmp_path: Path) -> None:
    """c10 prints month * 100 + day: ``E626`` is June 26 (the old reader wanted ``E0626``)."""
    scan = parse_file(_write(tmp_path / "job.log", WATCHDOG), year_hint=2024)
    assert [s.ts for s in scan.signals] == [
        datetime(2024, 6, 26, 6, 24, 44, 903881),
        datetime(2024, 6, 26, 6, 24, 44, 159932),
        datetime(2024, 6, 26, 6, 24, 44, 163004),
    ]
    assert [s.rank for s in scan.signals] == [1, 0, 2]
    assert "untimed_signals" not in scan.counts


def test_a_year_less_time_is_not_after_the_files_modification_time(tmp_path: Path) -> None:
    """As syslog readers do: April 29 in a file last written on 2026-01-05 is April 2025,
    and the import says which year it gave; ``--year`` gives another."""
    log = _write(tmp_path / "kern.log", XID79, mtime=datetime(2026, 1, 5, 12))
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", str(log))
    assert r.returncode == 0, r.stderr
    assert ("times without a year read as in 2025 (the latest year not after the file's "
            "modification time, 2026-01-05)") in r.stdout, r.stdout  # fmt: skip
    assert [i["ts"] for i in _interruptions(store)] == ["2025-04-29T19:24:11"]
    other = tmp_path / "t.duckdb"
    r = cli("import", "--store", str(other), "--run", "r", "--year", "2023", str(log))
    assert r.returncode == 0, r.stderr
    assert "times without a year read as in 2023 (--year)" in r.stdout, r.stdout
    assert [i["ts"] for i in _interruptions(other)] == ["2023-04-29T19:24:11"]
    r = cli("import", "--store", str(other), "--run", "r", "--year", "23", str(log))
    assert r.returncode == 1 and "--year 23: give a four-digit year" in r.stderr, r.stderr


def test_a_log_without_wall_clock_time_is_one_interruption_at_a_time_unknown(
    tmp_path: Path,
) -> None:
    """No time on any line: its signals are read and stored with no time, the import says the
    log has no wall-clock time and exits 0, and the stop they show is ONE interruption whose
    time is null ("time unknown"), its cause the watchdog's, no culprit; no time is invented
    (neither the interruption's nor its evidence's, nor a wall time or MTBF of 0)."""
    log = _write(tmp_path / "job.log", NO_CLOCK)
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", str(log))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert (f"2 signal lines without a wall-clock time (the log gives no date, or only seconds "
            f"since boot): stored with no time, at {log}:1, {log}:2") in r.stdout, r.stdout
    [i] = _interruptions(store)
    assert (i["ts"], i["end_ts"]) == (None, None)
    assert i["component"] == "NCCL Watchdog Timeouts"
    assert (i["rank"], i["host"]) == (None, None)
    assert "time unknown" in i["description"] and "culprit unknown" in i["description"]
    assert [e["ts"] for e in i["evidence"]] == [None, None]
    s = cli("summary", "--store", str(store), "--json")
    [run] = json.loads(s.stdout)["runs"]
    assert (run["wall_hours"], run["mtbf_hours"], run["state"]) == (None, None, "stopped")


def test_failure_lines_without_progress_are_one_interruption(tmp_path: Path) -> None:
    """Three ranks' watchdog timeouts and no progress line: ONE interruption at the first
    line's time, a watchdog timeout, steps and lost work unknown (null, never 0), and no
    culprit (a timed-out rank is a rank that waited), with the candidates listed."""
    log = _write(tmp_path / "job.log", WATCHDOG)
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", "--year", "2024", str(log))
    assert r.returncode == 0, r.stderr
    assert "run r: 1 interruption(s) inferred" in r.stdout, r.stdout
    [i] = _interruptions(store)
    assert i["ts"] == "2024-06-26T06:24:44.159932"
    assert i["component"] == "NCCL Watchdog Timeouts"
    assert (i["rank"], i["host"], i["gpu"]) == (None, None, None)
    assert (i["lost_steps"], i["restored_step"], i["end_ts"]) == (None, None, None)
    assert "culprit unknown" in i["description"]
    assert "candidates: rank 0, rank 1, rank 2" in i["description"]
    assert {e["kind"] for e in i["evidence"]} == {sig.NCCL_TIMEOUT}


def test_a_hardware_line_places_the_culprit_and_a_time_limit_is_planned(tmp_path: Path) -> None:
    """An XID 79 names its host (the journal's field); Slurm's time limit is planned work,
    nobody's fault: no culprit."""
    store = tmp_path / "s.duckdb"
    log = _write(tmp_path / "kern.log", XID79)
    r = cli("import", "--store", str(store), "--run", "x", "--year", "2025", str(log))
    assert r.returncode == 0, r.stderr
    [x] = _interruptions(store)
    assert (x["component"], x["host"], x["xid"], x["ts"]) == (
        "Faulty GPU", "EVE", 79, "2025-04-29T19:24:11")
    other = tmp_path / "t.duckdb"
    r = cli("import", "--store", str(other), "--run", "t",
            str(_write(tmp_path / "slurm-3884617.out", TIME_LIMIT)))  # fmt: skip
    assert r.returncode == 0, r.stderr
    [t] = _interruptions(other)
    assert (t["component"], t["planned"], t["host"], t["rank"]) == (
        "Planned maintenance", True, None, None)
    assert t["ts"] == "2018-08-19T16:30:21"


def test_a_blocking_wait_timeout_and_sallocs_node_failure_are_recognised(tmp_path: Path) -> None:
    """transformers/diffusers-12422: under TORCH_NCCL_BLOCKING_WAIT the timeout is "timed out
    in blocking wait"; slurm/soperator-854: salloc names the node it lost as srun does."""
    lines = [
        "[rank3]:[E1002 18:16:40.711756918 ProcessGroupNCCL.cpp:756] [Rank 3] Work "
        "WorkNCCL(SeqNum=2521, OpType=ALLREDUCE, NumelIn=160672064, NumelOut=160672064, "
        "Timeout(ms)=600000) timed out in blocking wait.",
        "salloc: error: Node failure on worker-1",
    ]
    scan = parse_file(_write(tmp_path / "job.log", lines), year_hint=2025)
    got = [(s.ts, s.kind, s.host, s.rank) for s in scan.signals]
    assert got == [
        (datetime(2025, 10, 2, 18, 16, 40, 711756), sig.NCCL_TIMEOUT, None, 3),
        (datetime(2025, 10, 2, 18, 16, 40, 711756), sig.SLURM_NODE_FAILURE, "worker-1", None),
    ]


def test_deepspeeds_and_slurmctlds_teardown_lines_are_recognised(tmp_path: Path) -> None:
    """deepspeed/deepspeed-3160: the launcher killing its workers; slurm/arjuna-137:
    slurmctld's record of the job's tasks signalled. Teardown: a stop, never a cause."""
    lines = [
        "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80",
        "[2022-05-27T11:37:57.377] _job_complete: JobId=127441 WTERMSIG 9",
    ]
    scan = parse_file(_write(tmp_path / "job.log", lines))
    got = [(s.ts, s.kind, s.rank, s.detail) for s in scan.signals]
    assert got == [
        (datetime(2023, 4, 7, 13, 9, 33, 201000), sig.LAUNCHER_SIGNAL, None,
         "launcher killed pid 80 (DeepSpeed)"),
        (datetime(2022, 5, 27, 11, 37, 57, 377000), sig.SLURM_TASK_KILLED, None,
         "JobId=127441 ended by signal 9 (slurmctld)"),
    ]  # fmt: skip
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", str(_write(tmp_path / "ds.log",
                                                                       lines[:1])))  # fmt: skip
    assert r.returncode == 0, r.stderr
    [i] = _interruptions(store)
    assert (i["component"], i["rank"], i["host"]) == ("Unknown", None, None)
    assert "the launcher or Slurm ended it; no failure line says why" in i["description"]


# pytorch/flux-40: one rank's CUDA error, the only rank the excerpt shows
ILLEGAL = ("[rank0]:[E907 22:34:22.823452114 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) "
           "Rank 0] Process group watchdog thread terminated with exception: CUDA error: an "
           "illegal memory access was encountered")  # fmt: skip


def test_a_ranks_own_error_names_it_only_beside_ranks_without_one(tmp_path: Path) -> None:
    """Alone, rank 0's CUDA error cannot tell whether every rank hit the same error: the
    cause, no culprit. Beside other ranks that only timed out waiting (basicsr-737's lines,
    the rank numbers moved so that rank 0 is the one that did not wait), it is the culprit."""
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", "--year", "2024",
            str(_write(tmp_path / "one.log", [ILLEGAL])))  # fmt: skip
    assert r.returncode == 0, r.stderr
    [i] = _interruptions(store)
    assert (i["component"], i["rank"]) == ("Software Bug", None)
    assert "culprit unknown (no line places the fault on one rank or host)" in i["description"]
    waited = [w.replace("E626 06:24:44", "E907 22:44:22").replace("[rank0]", "[rank3]")
              .replace("[Rank 0]", "[Rank 3]") for w in WATCHDOG]  # fmt: skip
    other = tmp_path / "t.duckdb"
    r = cli("import", "--store", str(other), "--run", "r", "--year", "2024",
            str(_write(tmp_path / "all.log", [ILLEGAL, *waited])))  # fmt: skip
    assert r.returncode == 0, r.stderr
    [i] = _interruptions(other)
    assert (i["component"], i["rank"], i["ts"]) == ("Software Bug", 0, "2024-09-07T22:34:22.823452")


# lightning/lightning-8139 (a DDP misuse NCCL refuses; the broken pipes are the peers after it)
NCCL_USAGE = [
    "  RuntimeError: NCCL error in: /opt/conda/conda-bld/pytorch_1614378062065/work/torch/lib/"
    "c10d/ProcessGroupNCCL.cpp:825, invalid usage, NCCL version 2.7.8",
    "  ncclInvalidUsage: This usually reflects invalid usage of NCCL library (such as too many "
    "async ops, too many collectives at once, mixing streams in a group, etc).",
    "  vm1:7389:7453 [0] include/socket.h:421 NCCL WARN Call to recv failed : Broken pipe",
]
# megatron/nccl-653: NCCL_ALGO=CollNet on a fabric without it, every rank, srun --label
NO_ALGORITHM = [
    "201: :41367:41367 [1] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available",
    "202: :41368:41368 [2] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available",
]
# nccl/nccl-1653: a CUDA call failing inside NCCL's init, 'unknown error'
CUDA_999 = [
    "DESKTOP-1CE5APL:1689:2800 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'",
    "ncclUnhandledCudaError: Call to CUDA function failed.",
]


def test_nccls_usage_errors_are_the_programs_and_a_cuda_failure_is_no_network_fault(
    tmp_path: Path,
) -> None:
    """NCCL's ``invalid usage`` and ``no algorithm/protocol available`` say it was called or
    configured wrongly: a Software Bug, whatever broken pipes follow; a ``Cuda failure 999``
    it reports is a CUDA call that failed, cause unknown. Both were read as the network."""
    want = {"usage": (NCCL_USAGE, "Software Bug"), "algo": (NO_ALGORITHM, "Software Bug"),
            "cuda": (CUDA_999, "Unknown")}  # fmt: skip
    for name, (lines, component) in want.items():
        store = tmp_path / f"{name}.duckdb"
        r = cli("import", "--store", str(store), "--run", "r",
                str(_write(tmp_path / f"{name}.log", lines)))  # fmt: skip
        assert r.returncode == 0, r.stderr
        [i] = _interruptions(store)
        assert i["component"] == component, (name, i["description"])
        assert (i["rank"], i["host"]) == (None, None), name  # every rank's, or no rank's


def _one(tmp_path: Path, name: str, lines: list[str]) -> dict:
    """The one interruption a log of ``lines`` (named ``name``, no host in it) imports as."""
    store = tmp_path / f"{name}.duckdb"
    r = cli("import", "--store", str(store), "--run", "r",
            str(_write(tmp_path / f"{name}.log", lines)))  # fmt: skip
    assert r.returncode == 0, (name, r.stdout, r.stderr)
    [i] = _interruptions(store)
    return i


def test_the_nvidia_drivers_gpu_faults_without_an_xid_code_are_hardware(tmp_path: Path) -> None:
    """The driver's "fallen off the bus" (nvsentinel-155, plain dmesg wrapped over lines), the
    GSP heartbeat timeout (bazzite-4449: ``journalctl --no-hostname -k``, pasted indented),
    "RmInitAdapter failed!" (pai-4344) and an XID 45 "caused by previous Xid 149"
    (ogkm-1150) are the GPU's faults; none was recognised, or XID 45 was never a cause."""
    cases = {
        "offbus": (["[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
                    "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
                    "               NVRM: fallen off the bus and is not responding to commands."],
                   "Faulty GPU"),
        "gsp": (["     Mar 21 21:42:01 kernel: NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat "
                 "timed out"], "GPU System Processor"),
        "init": (["[   38.773115] NVRM: RmInitAdapter failed! (0x26:0xffff:1127)"], "Faulty GPU"),
        "xid45": (["kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch "
                   "00000001 caused by previous Xid 149"], "Faulty GPU"),
    }  # fmt: skip
    for name, (lines, component) in cases.items():
        i = _one(tmp_path, name, lines)
        assert i["component"] == component, (name, i["description"])
        assert i["host"] is None, name  # no line names the node, nor does the file's name
    assert _one(tmp_path, "gsp2", cases["gsp"][0])["ts"].endswith("21:42:01")  # its own time


def test_failure_lines_in_pasted_shapes_are_read(tmp_path: Path) -> None:
    """A rank's error printed onto a tqdm bar (axolotl-1473), a watchdog timeout the terminal
    wrapped mid-word (open-r1-620) and the flight recorder's dump signal (prime-rl-3186)."""
    bar = (" 94%|" + "\u2588" * 20 + "     | 837/888 [9:42:50<34:08, 40.17s/it][rank7]:[E "
           "ProcessGroupNCCL.cpp:1182] [Rank 7] NCCL watchdog thread terminated with exception: "
           "CUDA error: an illegal memory access was encountered")  # fmt: skip
    assert _one(tmp_path, "bar", [bar])["component"] == "Software Bug"
    wrapped = [
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread "
        "terminated with exception: [Rank 3] Watchdog caught colle",
        "ctive operation timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=112, "
        "NumelOut=112, Timeout(ms)=1800000) ran for 1800011 millisecond",
    ]
    dump = ["[rank0]:[E804 23:05:54.817424543 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID "
            "0(default_pg) Rank 0] Received a dump signal due to a collective timeout from  "
            "rank 13 and we will try our best to dump the debug info."]  # fmt: skip
    for name, lines in (("wrapped", wrapped), ("dump", dump)):
        i = _one(tmp_path, name, lines)
        assert i["component"] == "NCCL Watchdog Timeouts", name
        assert (i["rank"], i["host"]) == (None, None), name  # a rank that waited


# pytorch/kohya-1434: the traceback's bare error, then rank 1's watchdog saying the same
ECC_TWINS = [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: "
    "CUDA error: uncorrectable ECC error encountered",
]
# pytorch/cppo-6: torchrun's summary, one worker SIGKILLed and no other failure
ALONE = [
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-05-21_15:43:03",
    "  host      : mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -9 (pid: 14750)",
    "  error_file: <N/A>",
    "  traceback : Signal 9 (SIGKILL) received by PID 14750",
]
# lightning/litdata-340: a log shipper joined each summary entry onto one line
JOINED = [
    f"  | 2024-08-23T22:22:58.879Z | [{r}]: time : 2024-08-23_22:22:58 host : algo-2 rank : {r} "
    f"(local_rank: {r}) exitcode : -6 (pid: {187 + r}) error_file: <N/A> traceback : Signal 6 "
    f"(SIGABRT) received by PID {187 + r}"
    for r in (2, 3)
]


def test_a_rank_is_placed_by_its_own_line_and_only_then(tmp_path: Path) -> None:
    """The ECC error's bare traceback line and rank 1's own line of it: rank 1, by its own
    hardware line. torchrun's summary with <NO_OTHER_FAILURES>: the SIGKILLed rank 0 and its
    host (the launcher says no other worker failed). Entries joined on one line are read, and
    two ranks that both aborted name neither."""
    ecc = _one(tmp_path, "ecc", ECC_TWINS)
    assert (ecc["component"], ecc["rank"]) == ("GPU HBM3 Memory", 1)
    alone = _one(tmp_path, "alone", ALONE)
    assert (alone["rank"], alone["host"]) == (0, ALONE[6].split(": ")[1])
    assert alone["component"] == "Unknown"  # nothing says what sent the SIGKILL (the label's)
    joined = _one(tmp_path, "joined", JOINED)
    assert joined["component"] == "Software Bug"
    assert (joined["rank"], joined["host"]) == (None, None)
    assert "candidates: rank 2, rank 3" in joined["description"], joined["description"]


# kernel/gpu-operator-523: kubelet's journal line, nvidia-container-cli's driver RPC timed out
DRIVER_TIMEOUT = [
    "May 05 14:13:15 ip-10-51-52-158.us-west-2.compute.internal kubelet[33460]: "
    "nvidia-container-cli: detection error: driver error: timed out: unknown",
]


def test_nvidia_container_clis_driver_timeout_is_the_hosts_gpu(tmp_path: Path) -> None:
    """libnvidia-container's helper asked NVML and the driver never answered (error.c's
    error_set_rpc: "driver error: timed out", "driver rpc error: timed out" in later
    versions): the GPU of the journal line's host, at a confidence that says it is not sure
    (the thread's maintainer: "might be due to the faulty GPU"). The import refused it."""
    log = _write(tmp_path / "kubelet.log", DRIVER_TIMEOUT)
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", "--year", "2023", str(log))
    assert r.returncode == 0, (r.stdout, r.stderr)
    [i] = _interruptions(store)
    assert (i["component"], i["host"], i["rank"]) == (
        "Faulty GPU", "ip-10-51-52-158.us-west-2.compute.internal", None)
    assert i["ts"] == "2023-05-05T14:13:15"
    assert i["confidence"] < 0.8  # a hung driver alone is possible
    later = "nvidia-container-cli.real: initialization error: driver rpc error: timed out"
    assert ll.failure(later)[0] == sig.GPU_DRIVER_TIMEOUT
    assert ll.failure("nvidia-container-cli: initialization error: load library failed: "
                      "libnvidia-ml.so.1: cannot open shared object file") is None


# kernel/trixie-55: the admins' syslog of cn110, python crashed inside libcuda three times
DRIVER_CRASH = (CORPUS / "kernel/trixie-55-libcuda-segfault-cn110.log").read_text(
    "utf-8").splitlines()


def test_a_crash_inside_libcuda_is_its_hosts_gpu(tmp_path: Path) -> None:
    """The kernel's ``segfault at ... in libcuda.so...[...]`` (arch/x86/mm/fault.c): a process
    crashed in the NVIDIA driver's library on the line's host, whose GPU was then replaced
    (ai4d-iasc/trixie#55). The host is named, at a confidence that says the GPU is not sure
    (a driver bug crashes there too); the import found nothing before."""
    log = _write(tmp_path / "messages", DRIVER_CRASH)
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r", "--year", "2019", str(log))
    assert r.returncode == 0, (r.stdout, r.stderr)
    [i] = _interruptions(store)
    assert (i["component"], i["host"], i["rank"], i["ts"]) == (
        "Faulty GPU", "cn110", None, "2019-03-24T09:53:55")
    assert i["confidence"] < 0.5
    crash = ll.failure  # the other forms the kernel writes; any other library is not the GPU's
    assert crash("[Sun Mar 24 09:53:55 2019] python[3551]: segfault at 1378 ip 00007fff859dbeff"
                 " sp 00007fff3b60ce60 error 4 in libcuda.so.418.67[7fff858c5000+dec000] likely"
                 " on CPU 3 (core 3, socket 0)")[0] == sig.GPU_DRIVER_CRASH
    assert crash("traps: pt_main_thread[88] general protection fault ip:7f2b8c1d2e3f "
                 "sp:7ffd1c2b3a40 error:0 in libnvidia-ptxjitcompiler.so.535.104.05"
                 "[7f2b8b000000+1a00000]")[0] == sig.GPU_DRIVER_CRASH
    assert crash("python[3551]: segfault at 0 ip 00007f00 sp 00007f10 error 4 in "
                 "libc.so.6[7f0000+1b0000]") is None


# slurm/e3sm-8699: rank 2047's CUDA error, then HPE Cray MPICH's abort line naming its node
MPICH = (CORPUS / "slurm/e3sm-8699-devices-unavailable-nid004069.log").read_text(
    "utf-8").splitlines()


def test_cray_mpichs_abort_line_gives_its_ranks_node_not_a_culprit(tmp_path: Path) -> None:
    """``MPICH ERROR [Rank R] [job id J] [DATE] [HOST] - Abort(C) ...`` is a rank's exit, which
    every rank whose peer died writes alike: never the cause, and no culprit alone, but the
    node of the rank that wrote it: the CUDA error's rank 2047 is on nid004069. It was an
    unread line before."""
    i = _one(tmp_path, "mpich", MPICH)
    assert [(e["kind"], e["role"], e["rank"], e["host"]) for e in i["evidence"]] == [
        (sig.CUDA_DEVICE_UNAVAILABLE, "cause", 2047, "nid004069"),
        (sig.WORKER_EXIT, "teardown", 2047, "nid004069")]
    forms = {  # as Cray MPICH's builds write it (public issues: LUMI, Perlmutter, Aurora)
        "MPICH ERROR [Rank 1534] [job id 114930.0] [Mon Feb 15 14:58:48 2021] [unknown] "
        "[nid001192] - Abort(672797967) (rank 1534 in comm 0): Fatal error in PMPI_Isend: "
        "Other MPI error, error stack:": "nid001192",
        "MPICH ERROR [Rank 10] [job id 574596a4-9f66-4e0c-bb8f-b964b5cc374a] [Fri Sep 13 "
        "19:01:03 2024] [x3005c0s19b0n0] - Abort(1009328399) (rank 10 in comm 0): Fatal error "
        "in PMPI_Alltoallv: Other MPI error, error stack:": "x3005c0s19b0n0",
        "MPICH ERROR [Rank 0] [job id 339192.2] [Mon Sep  4 13:00:27 2023] [nid001004] - "
        "Abort(407515138) (rank 0 in comm 0):": "nid001004",
        "MPICH ERROR [Rank 202] [job id 22337437.0] [Fri Sep 25 12:09:31 2026] [nid005874]":
            "nid005874",
        "MPICH ERROR [Rank 0] - Abort(1): Internal error": None,
    }
    for line, host in forms.items():
        f = ll.failure(line)
        assert f is not None and (f[0], f[4]) == (sig.WORKER_EXIT, host), line


def test_a_gpu_cuda_cannot_use_places_its_rank_only_where_it_alone_reports_it(
    tmp_path: Path,
) -> None:
    """cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable": the GPU
    the rank was given was held by another process or had failed. Its cause is unknown (most
    public threads are ranks sharing a GPU in exclusive mode), but one rank alone reporting it
    places it: E3SM#8699's rank 2047 on nid004069, the node the reporter found on every failing
    job. When several ranks report it, nobody is named. It was a CUDA error of unknown kind,
    with no culprit."""
    i = _one(tmp_path, "e3sm", MPICH)
    assert (i["component"], i["rank"], i["host"]) == ("Unknown", 2047, "nid004069")
    assert "busy or unavailable" in i["description"] and i["confidence"] < 0.5
    # pytorch#100691's error, as two ranks of one job print it: no rank is the culprit
    both = [f"[rank{r}]: RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or "
            "unavailable" for r in (0, 1)]
    i = _one(tmp_path, "two", both)
    assert (i["component"], i["rank"], i["host"]) == ("Unknown", None, None)
    assert i["culprit_candidates"] == ["rank 0", "rank 1"]
    for line in (  # the forms CUDA's runtime and its callers write (public issues)
        "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
        "THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1518244421288/work/torch/lib/THC/"
        "THCStream.cpp line=40 error=46 : all CUDA-capable devices are busy or unavailable",
        "/ccs/home/merth/pearson/stencil/include/stencil/local_domain.cuh@54: CUDA Runtime "
        "Error(46): all CUDA-capable devices are busy or unavailable",
        "2047: cudaSetDevice(cuda_device_id) error( cudaErrorDevicesUnavailable): CUDA-capable "
        "device(s) is/are busy or unavailable /global/u1/w/whannah/E3SM/E3SM_SRC1/externals/"
        "ekat/extern/kokkos/core/src/Cuda/Kokkos_Cuda_Instance.cpp:544",
    ):
        f = ll.failure(line)
        assert f is not None and f[0] == sig.CUDA_DEVICE_UNAVAILABLE, line


# transformers/trl-3436: rank 2's traceback, the paste cut before its exception line
CUT = (CORPUS / "transformers/trl-3436-fsdp-oom-rank2.log").read_text("utf-8").splitlines()
# transformers/axolotl-1717: rank 0's OOM, then rank 1's traceback cut before its exception
OOM_BESIDE_CUT = [
    "[rank0]: RuntimeError: CUDA error: out of memory",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "<frozen runpy>", line 198, in _run_module_as_main',
    "[rank1]:     fire.Fire(do_cli)",
]


def test_a_traceback_the_log_ends_inside_is_a_failure_of_unknown_kind(tmp_path: Path) -> None:
    """A log that ends inside a traceback shows a failure, not what it was: one interruption
    of unknown cause, no culprit (its rank is a candidate), no time invented. The import
    refused it ("no valid records"). Beside a failure a line does tell (rank 0's OOM), the
    cut one is not the cause and keeps that rank from being named: rank 1 may have failed
    alike, so it is no victim to set rank 0 apart from."""
    i = _one(tmp_path, "cut", CUT)
    assert (i["component"], i["rank"], i["host"], i["ts"]) == ("Unknown", None, None, None)
    assert "culprit unknown" in i["description"] and "rank 2" in i["description"]
    assert [(e["kind"], e["origin"].rsplit(":", 1)[1]) for e in i["evidence"]] == [
        (sig.TRACEBACK_CUT, "1")]
    oom = _one(tmp_path, "oom", OOM_BESIDE_CUT)
    assert (oom["component"], oom["rank"], oom["host"]) == ("Software Bug", None, None)
    assert sig.TRACEBACK_CUT in {e["kind"] for e in oom["evidence"]}
    done = _one(tmp_path, "done", [*CUT, "[rank2]: torch.OutOfMemoryError: CUDA out of memory."])
    assert sig.TRACEBACK_CUT not in {e["kind"] for e in done["evidence"]}


# Slurm's OOM lines (tests/corpus/slurm: knet-30, tusas-149), verbatim
SLURM_OOM_OLD = [
    "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your "
    "processes may have been killed by the cgroup out-of-memory handler.",
    "srun: error: gpu20-15: task 0: Out Of Memory",
    "srun: launch/slurm: _step_signal: Terminating StepId=9411285.0",
    "slurmstepd-gpu20-15: error: *** STEP 9411285.0 ON gpu20-15 CANCELLED AT "
    "2022-05-17T17:58:10 ***",
]
SLURM_OOM_NEW = [
    "slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks have "
    "been OOM Killed.",
    "srun: error: nid001277: tasks 1-3: Out Of Memory",
    "srun: Terminating StepId=440575.0",
    "slurmstepd: error: *** STEP 440575.0 ON nid001277 CANCELLED AT 2023-12-05T07:16:01 ***",
]


def test_slurms_oom_kill_is_the_jobs_memory_on_the_node_srun_names(tmp_path: Path) -> None:
    """slurmstepd's ``Detected N oom-kill event(s) in StepId=...`` (``oom_kill event`` since
    21.08) and srun's ``srun: error: NODE: task N: Out Of Memory``: the cgroup's OOM killer
    struck the job on that node, Slurm's OUT_OF_MEMORY (Software Bug, as the Slurm source
    classes it), its node named (srun's task number is no rank). Untimed, before the timed
    ``CANCELLED AT``, they take its time at the latest; before, nothing was found at all (the
    lines were unread, or left out of the stop for want of a time). A ``slurmstepd-HOST:``
    prefix names HOST, not "slurmstepd-HOST"."""
    for name, lines, host, ts in (
        ("old", SLURM_OOM_OLD, "gpu20-15", "2022-05-17T17:58:10"),
        ("new", SLURM_OOM_NEW, "nid001277", "2023-12-05T07:16:01"),
    ):
        i = _one(tmp_path, name, lines)
        assert (i["component"], i["host"], i["rank"], i["ts"]) == ("Software Bug", host, None, ts)
        assert "out of memory" in i["description"]
    # two nodes out of memory: the job's memory, no node's
    both = SLURM_OOM_NEW[:2] + ["srun: error: nid001278: task 4: Out Of Memory"] + SLURM_OOM_NEW[2:]
    i = _one(tmp_path, "two", both)
    assert (i["component"], i["host"]) == ("Software Bug", None)
    assert {"nid001277", "nid001278"} <= set(i["culprit_candidates"])
    f = ll.failure("slurmstepd: error: Detected 1 oom-kill event(s) in step 12345.batch cgroup. "
                   "Some of your processes may have been killed by the cgroup out-of-memory "
                   "handler.")
    assert f is not None and f[0] == sig.SLURM_OOM
    assert ll.failure("srun: error: c002: task 0: Killed")[0] == sig.SLURM_TASK_KILLED  # type: ignore[index]


def test_nccls_shared_memory_failure_is_the_hosts_setup_not_the_network(tmp_path: Path) -> None:
    """NCCL's ``Call to posix_fallocate failed : No space left on device`` (NVIDIA/nccl#290)
    and ``Error while creating shared memory segment /dev/shm/nccl-...`` (torchtitan#853): a
    /dev/shm too small for its shared-memory transport, a configuration (NCCL's usage class),
    never "Network Switch/Cable" as any NCCL WARN was called."""
    for name in ("nccl/nccl-290-shm-fallocate.log", "torchtitan/torchtitan-853-devshm-segment.log"):
        lines = (CORPUS / name).read_text("utf-8").splitlines()
        i = _one(tmp_path, name.split("/")[0], lines)
        assert (i["component"], i["host"], i["rank"]) == ("Software Bug", None, None), name


def test_an_infiniband_completion_status_is_the_fabrics_only_when_retries_ran_out(
    tmp_path: Path,
) -> None:
    """``NET/IB : Got completion from peer ... with error 4`` (a local protection error: PCIe
    ACS blocking GPUDirect RDMA, NVIDIA/nccl#928) is not the fabric's: cause unknown. Status 12
    (the transport's retries exhausted: nccl#1814) still is the network."""
    i = _one(tmp_path, "e4", (CORPUS / "nccl/nccl-928-ib-error4-acs.log").read_text(
        "utf-8").splitlines())
    assert (i["component"], i["host"], i["rank"]) == ("Unknown", None, None)
    assert "not the fabric" in i["description"]
    i = _one(tmp_path, "e12", (CORPUS / "nccl/nccl-1814-ib-status12-then-5.log").read_text(
        "utf-8").splitlines())
    assert i["component"] == "Network Switch/Cable"


def test_a_lost_tcpstore_and_mp_spawns_teardown_are_read(tmp_path: Path) -> None:
    """c10d's ``[c10d] recvValue failed on SocketImpl(...): Connection reset by peer`` and
    ``While waitForInput, poolFD failed``: a rank lost the job's store (teardown: torch prints
    it at an ordinary exit too, never a cause), and torch.multiprocessing.spawn's ``Terminating
    process P via signal SIGTERM``, the launcher's teardown. A log of only these was refused
    ("no valid records"); now it is a stop whose cause no line says."""
    for name in ("pytorch/diffusionpipe-333-tcpstore-reset.log",
                 "pytorch/recbole-2069-store-poll-spawn.log"):  # fmt: skip
        lines = (CORPUS / name).read_text("utf-8").splitlines()
        i = _one(tmp_path, name.split("-")[0].split("/")[1], lines)
        assert (i["component"], i["host"], i["rank"]) == ("Unknown", None, None), name
        assert "no failure line says why" in i["description"], name
    f = ll.failure("[rank6]:[W729 10:15:17.529361055 TCPStore.cpp:125] [c10d] recvValue failed on "
                   "SocketImpl(fd=76, addr=[localhost]:60950, remote=[localhost]:29500): "
                   "Connection reset by peer")
    assert f is not None and f[0] == sig.STORE_LOST
    f = ll.failure("W0719 18:42:55.168000 131513588901696 torch/multiprocessing/spawn.py:145] "
                   "Terminating process 25364 via signal SIGTERM")
    assert f is not None and f[0] == sig.LAUNCHER_SIGNAL
    assert f[1] == "launcher sent SIGTERM to pid 25364"


def test_the_kernels_older_oom_killer_wording_is_read() -> None:
    """Before Linux 4.19 the OOM killer wrote ``Out of memory: Kill process N (python) score S
    or sacrifice child``, then ``Killed process N (python) total-vm:...`` alone
    (NervanaSystems/deepspeech#48): the second is the kill, as the newer one-line form."""
    f = ll.failure("[3017506.736861] Killed process 25635 (python) total-vm:55518724kB, "
                   "anon-rss:23902876kB, file-rss:154436kB")
    assert f is not None and f[0] == sig.HOST_OOM
    assert f[1] == "Out of memory: Killed process 25635 (python)"
    assert ll.failure("Killed process 1 (x) by me") is None


def test_a_talos_nodes_address_prefix_names_the_xids_host(tmp_path: Path) -> None:
    """``talosctl dmesg`` prints each line after its node's address (``192.168.11.119: kern:
    warning: [...]: NVRM: Xid ... 74``, vllm#40652): the XID's host, which was lost."""
    lines = (CORPUS / "kernel/vllm-40652-xid74-nvlink-talos.log").read_text("utf-8").splitlines()
    i = _one(tmp_path, "talos", lines)
    assert (i["component"], i["host"]) == ("Faulty GPU", "192.168.11.119")


def test_one_ranks_timeout_is_no_proof_the_job_has_two_ranks(tmp_path: Path) -> None:
    """deepspeed#6705: rank 1's watchdog lines alone (pdsh-labelled with its node's address).
    The job has two ranks at least, not exactly: rank 0 is not "missing from the collective",
    and nobody is named."""
    lines = (CORPUS / "deepspeed/deepspeed-6705-pdsh-watchdog.log").read_text("utf-8").splitlines()
    i = _one(tmp_path, "ds", lines)
    assert (i["component"], i["rank"], i["host"]) == ("NCCL Watchdog Timeouts", None, None)


def test_a_job_requeued_by_its_own_handler_is_a_planned_stop(tmp_path: Path) -> None:
    """``*** JOB 608 ON SERVER_NAME CANCELLED AT ... DUE TO JOB REQUEUE ***`` (submitit#1708):
    ``scontrol requeue``, which submitit and Lightning's auto-requeue run on the signal before a
    time limit or preemption. A planned stop of the whole job, nobody's fault; it was a plain
    cancel before, which explains no stop ("unknown")."""
    lines = (CORPUS / "slurm/submitit-1708-job-requeue.log").read_text("utf-8").splitlines()
    i = _one(tmp_path, "requeue", lines)
    assert (i["component"], i["host"], i["rank"]) == ("Planned maintenance", None, None)
    assert i["ts"] == "2022-08-12T02:06:12"
    f = ll.failure("slurmstepd: error: *** JOB 31182239 ON sh-06-34 CANCELLED AT "
                   "2018-11-05T10:35:06 DUE TO JOB REQUEUE ***")
    assert f is not None and (f[0], f[4]) == (sig.SLURM_JOB_REQUEUE, "sh-06-34")


def test_a_watchdogs_cuda_error_of_any_kind_is_read(tmp_path: Path) -> None:
    """``[Rank 3] Process group watchdog thread terminated with exception: CUDA error:
    misaligned address`` (verl#3579) and ``[Rank 7] NCCL watchdog thread terminated with
    exception: CUDA error: unknown error`` (vllm#2682): a log of only these was refused ("no
    valid records"). A misaligned address is a kernel's bad access (a program's, as an illegal
    address); any other CUDA error in c10's or THC's words is a CUDA error of unknown kind."""
    i = _one(tmp_path, "verl", (CORPUS / "pytorch/verl-3579-misaligned-address-rank3.log")
             .read_text("utf-8").splitlines())  # fmt: skip
    assert (i["component"], i["rank"]) == ("Software Bug", None)  # rank 3's lines alone
    assert "rank 3" in i["culprit_candidates"]
    i = _one(tmp_path, "vllm", (CORPUS / "pytorch/vllm-2682-rank7-cuda-unknown-error.log")
             .read_text("utf-8").splitlines())  # fmt: skip
    assert (i["component"], i["rank"]) == ("Unknown", None)
    assert "CUDA error of unknown kind" in i["description"]
    for line in ("THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1591914886554/work/aten/src/"
                 "THC/THCGeneral.cpp line=47 error=999 : unknown error",
                 "RuntimeError: cuda runtime error (999) : unknown error at /pytorch/aten/src/"
                 "THC/THCGeneral.cpp:47"):  # fmt: skip
        f = ll.failure(line)
        assert f is not None and f[0] == sig.CUDA_ERROR, line


def test_a_gpu_nvml_or_pcie_lost_is_its_hosts_gpu(tmp_path: Path) -> None:
    """nvidia-smi's ``Unable to determine the device handle for GPU0000:03:00.0: Unknown Error``
    (returnn#1486) and AER's ``nvidia 0000:03:00.0: AER: can't recover`` after a fatal PCIe
    error on its link (returnn#1500): the GPU out of reach, its host's (Faulty GPU, at a
    confidence below the driver's own "fallen off the bus"). Neither was read: the second log
    was refused. A corrected AER error, the link retrying, is no failure."""
    i = _one(tmp_path, "aer", (CORPUS / "kernel/returnn-1500-aer-uncorrected-fatal.log")
             .read_text("utf-8").splitlines())  # fmt: skip
    assert i["component"] == "Faulty GPU" and i["confidence"] < 0.9
    assert "AER" in i["description"]
    f = ll.failure("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  "
                   "Reboot the system to recover this GPU")
    assert f is not None and f[0] == sig.GPU_UNREACHABLE
    assert ll.failure("[  +0.000005] pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, "
                      "type=Data Link Layer, (Transmitter ID)") is None
