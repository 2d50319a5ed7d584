"""Text logs read for real: files written here, in each format a cluster produces."""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from telemetry import signals as sig
from telemetry.collect.logs import textlogs
from telemetry.collect.logs.importers import ImportFileError
from telemetry.collect.logs.logline import PREFILTER, PREFILTER_RE, host_from_filename, pci_key
from telemetry.collect.logs.textlogs import LogParser, parse_file

ROOT = Path(__file__).resolve().parent.parent


def _iter(it: int, loss: str = "2.345678E+00", ts: str | None = "2024-05-01 12:00:03",
          nan_iters: int = 0, grad: str = "0.876") -> str:
    head = f"[{ts}] " if ts else " "
    return (
        f"{head}iteration {it:8d}/  500000 | consumed samples: {it * 4096:12d} | elapsed time per "
        f"iteration (ms): 5123.4 | learning rate: 2.999E-04 | global batch size:  4096 | lm loss:"
        f" {loss} | loss scale: 1.0 | grad norm: {grad} | number of skipped iterations:   0 | "
        f"number of nan iterations: {nan_iters:3d} |"
    )


def _write(path: Path, lines: list[str] | bytes) -> Path:
    path.write_bytes(lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode())
    return path


def _line_of(origin: str) -> int:
    return int(origin.rsplit(":", 1)[1])


# -- training progress -------------------------------------------------------------------------
def test_megatron_iterations_checkpoints_and_context_times(tmp_path: Path) -> None:
    log = _write(tmp_path / "slurm-81234.out", [
        "using world size: 4096",  # 1: no time
        _iter(100, ts="2024-05-01 12:00:03.250000"),
        "[2024-05-01 12:05:00] saving checkpoint at iteration     100 to /ckpt/x in torch_dist "
        "format",
        "  [2024-05-01 12:05:09.500000] successfully saved checkpoint from iteration     100 to "
        "/ckpt/x [ t 1/8, gtp_remat 1/1, p 1/16 ]",
        _iter(101, ts=None),  # 5: takes 12:05:09.5 from line 4
        "successfully saved checkpoint at iteration     101 to /ckpt/x",  # older Megatron
        " loading distributed checkpoint from /ckpt/x at iteration 100",
        "  successfully loaded checkpoint from /ckpt/x [ t 1/1, p 1/1 ] at iteration 100",
    ])
    scan = parse_file(log, run="atlas-70b")
    assert scan.metrics == [
        {"run": "atlas-70b", "ts": datetime(2024, 5, 1, 12, 0, 3, 250000), "step": 100,
         "loss": 2.345678, "lr": 2.999e-4, "grad_norm": 0.876},
        {"run": "atlas-70b", "ts": datetime(2024, 5, 1, 12, 5, 9, 500000), "step": 101,
         "loss": 2.345678, "lr": 2.999e-4, "grad_norm": 0.876},
    ]
    assert scan.metric_origins == [f"{log}:2", f"{log}:5"]
    assert scan.counts["metrics_ts_from_context"] == 1
    events = [(e.kind, e.step, e.path, _line_of(e.origin)) for e in scan.checkpoint_events]
    assert events == [("save_start", 100, "/ckpt/x", 3), ("save_end", 100, "/ckpt/x", 4),
                      ("save_end", 101, "/ckpt/x", 6), ("load", 100, "/ckpt/x", 7),
                      ("load_end", 100, "/ckpt/x", 8)]  # the load's finish: its time measured
    assert scan.checkpoint_events[0].ts == datetime(2024, 5, 1, 12, 5)
    assert scan.lines == 8 and scan.unrecognised == 1 and scan.bad == []
    berlin = parse_file(log, tz="Europe/Berlin")  # summer: UTC+2
    assert [m["ts"] for m in berlin.metrics] == [datetime(2024, 5, 1, 10, 0, 3, 250000),
                                                datetime(2024, 5, 1, 10, 5, 9, 500000)]


def test_nan_loss_is_a_signal_and_the_metric_stays_without_it(tmp_path: Path) -> None:
    log = _write(tmp_path / "train.log", [
        _iter(7, loss="nan", grad="nan"),
        _iter(8, nan_iters=2),
        "[titan] 2025-02-03 10:00:00,123 - root - INFO - step:  9  loss:    inf  memory: 33.12GiB"
        "(41.86%)  tps: 6,123  tflops: 250.1  mfu: 25.29%",
        "{'loss': nan, 'grad_norm': 1.05, 'learning_rate': 4.9e-05, 'epoch': 0.12, 'step': 10}",
        "WARNING: found NaN in local grad norm in backward pass",
    ])
    scan = parse_file(log)
    assert [m["step"] for m in scan.metrics] == [7, 8, 9, 10]
    assert "loss" not in scan.metrics[0] and "grad_norm" not in scan.metrics[0]
    assert scan.metrics[0]["lr"] == 2.999e-4  # what was finite is kept
    assert scan.metrics[1]["loss"] == 2.345678
    assert "loss" not in scan.metrics[2] and scan.metrics[2]["tokens_per_s"] == 6123
    assert "loss" not in scan.metrics[3] and scan.metrics[3]["grad_norm"] == 1.05
    nans = [s for s in scan.signals if s.kind == sig.NAN_LOSS]
    assert [_line_of(s.origin) for s in nans] == [1, 2, 3, 4, 5]
    assert "2 NaN iteration" in nans[1].detail
    assert scan.counts[sig.NAN_LOSS] == 5


def test_torchtitan_with_colours_rank_prefix_and_checkpoints(tmp_path: Path) -> None:
    red, green, reset = "\x1b[31m", "\x1b[32m", "\x1b[39m"
    log = _write(tmp_path / "titan.log", [
        "[rank0]:[titan] 2025-02-03 10:00:00,123 - root - INFO - Loading the checkpoint from "
        "./outputs/checkpoint/step-100.",
        "[rank0]:[titan] 2025-02-03 10:00:01,500 - root - INFO - Finished loading the checkpoint "
        "in 1.38 seconds.",
        f"[rank0]:[titan] 2025-02-03 10:00:10,000 - root - INFO - {red}step: 110  {green}loss:  "
        f"7.8912  grad_norm:  1.2345  memory: 33.12GiB(41.86%)  tps: 6,123  tflops: 250.1  mfu: "
        f"25.29%{reset}",
        "[rank0]:[titan] 2025-02-03 10:00:11,000 - root - INFO - validate step: 110  loss: 7.9  "
        "memory: 33.12GiB(41.86%)  tps: 9,000",
        "[rank0]:[titan] 2025-02-03 10:00:12,000 - root - INFO - Saving the checkpoint (or staging"
        " if async is enabled).",
        "[rank0]:[titan] 2025-02-03 10:00:15,210 - root - INFO - Finished saving the checkpoint "
        "(or staging if async is enabled)in 3.21 seconds.",
        "[rank0]:[titan] 2025-02-03 10:00:16,000 - root - INFO - Loading the checkpoint at step "
        "120.",
        f"[rank0]:[titan] 2025-02-03 10:00:20,000 - root - INFO - {red}step: 130  {green}loss:  "
        f"7.5  memory: 33.12GiB(41.86%)  tps: 6,200  tflops: 250.1  mfu: N/A{reset}",
    ])
    scan = parse_file(log)
    assert scan.metrics == [
        {"ts": datetime(2025, 2, 3, 10, 0, 10), "step": 110, "loss": 7.8912, "grad_norm": 1.2345,
         "tokens_per_s": 6123.0, "mfu": pytest.approx(0.2529)},
        {"ts": datetime(2025, 2, 3, 10, 0, 20), "step": 130, "loss": 7.5, "tokens_per_s": 6200.0},
    ]
    events = [(e.kind, e.step, e.path, e.ts) for e in scan.checkpoint_events]
    assert events == [
        ("load", 100, "./outputs/checkpoint/step-100", datetime(2025, 2, 3, 10, 0, 0, 123000)),
        ("load_end", None, None, datetime(2025, 2, 3, 10, 0, 1, 500000)),  # restore: 1.377 s
        ("save_start", None, None, datetime(2025, 2, 3, 10, 0, 12)),
        ("save_end", None, None, datetime(2025, 2, 3, 10, 0, 15, 210000)),
        ("load", 120, None, datetime(2025, 2, 3, 10, 0, 16)),
    ]
    assert "\x1b" not in scan.checkpoint_events[0].line
    assert scan.unrecognised == 1  # the validation line is not training progress


def test_hugging_face_dicts_take_the_step_from_the_progress_bar(tmp_path: Path) -> None:
    bar = " 12%|█▏        | {n}/1000 [01:00<07:20,  2.00it/s]"
    log = _write(tmp_path / "hf.log", [
        "[INFO|trainer.py:2134] 2024-06-01 08:00:00,000 >> ***** Running training *****",
        "{'loss': 2.0, 'learning_rate': 5e-05, 'epoch': 0.01}",  # 2: no step known yet
        "\r".join([bar.format(n=9), bar.format(n=10), " " * 40, "{'loss': 2.1234, 'grad_norm': "
                   "1.05, 'learning_rate': 4.9e-05, 'epoch': 0.12, 'num_input_tokens_seen': "
                   "40960}"]),
        bar.format(n=19) + "\r" + bar.format(n=20),
        "[INFO|trainer.py:3000] 2024-06-01 08:10:00,000 >> Saving model checkpoint to "
        "out/checkpoint-20",
        "{'loss': 1.9, 'learning_rate': 4.8e-05, 'epoch': 0.2}",
        "{'eval_loss': 1.8, 'eval_runtime': 3.2, 'epoch': 0.2}",
        "{'loss': 1.7, 'learning_rate': 4.7e-05, 'epoch': 0.3, 'step': 30}",
        "{'train_runtime': 1234.5, 'train_samples_per_second': 9.9, 'train_loss': 1.9, "
        "'epoch': 1.0}",
        "Loading model from out/checkpoint-20.",
    ])
    scan = parse_file(log)
    assert scan.metrics == [
        {"ts": datetime(2024, 6, 1, 8), "step": 10, "loss": 2.1234, "grad_norm": 1.05,
         "lr": 4.9e-05, "tokens": 40960},
        {"ts": datetime(2024, 6, 1, 8, 10), "step": 20, "loss": 1.9, "lr": 4.8e-05},
        {"ts": datetime(2024, 6, 1, 8, 10), "step": 30, "loss": 1.7, "lr": 4.7e-05},
    ]
    assert [(b.origin, b.reason.split(" (")[0]) for b in scan.bad] == [
        (f"{log}:2", "training log dict without a step")]
    assert [(e.kind, e.step, e.path) for e in scan.checkpoint_events] == [
        ("save_start", 20, "out/checkpoint-20"), ("load", 20, "out/checkpoint-20")]
    assert scan.counts["hf_summary_dicts"] == 1 and scan.counts["hf_eval_dicts"] == 1


# -- failures in a job log ---------------------------------------------------------------------
JOB_FAILURES = [
    "[2024-05-01 12:00:00] start",  # 1
    "node-7:1234:5678 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.7<0>",
    "node-7:1234:5678 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<41234> with "
    "status=12 opcode=0 len=0 vendor err 129 (Recv)",
    "node-8:99:101 [5] NCCL WARN Cuda failure 'out of memory'",
    "[rank3]:[E0501 12:10:00.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",  # 5
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "pretrain_gpt.py", line 312, in <module>',
    "[rank0]: iteration done",  # another rank's line in between
    "[rank3]:     pretrain(provider)",
    "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered",  # 10
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "RuntimeError: CUDA error: unspecified launch failure",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "srun: error: node-7: task 3: Killed",  # 15
    "srun: error: node-9: tasks 0-7: Exited with exit code 1",
    "srun: error: Node failure on node-12",
    "slurmstepd: error: *** JOB 81234 ON node-7 CANCELLED AT 2024-05-01T12:20:00 DUE TO NODE "
    "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    "slurmstepd: error: *** STEP 81234.0 ON node-7 CANCELLED AT 2024-05-01T12:21:00 DUE TO TIME "
    "LIMIT ***",
    "slurmstepd: error: *** JOB 81234 ON node-3 CANCELLED AT 2024-05-01T12:22:00 DUE TO "
    "PREEMPTION ***",  # 20
    "slurmstepd: error: *** JOB 81234 ON node-3 CANCELLED AT 2024-05-01T12:23:00 ***",
]


def test_failure_signatures_in_a_job_log(tmp_path: Path) -> None:
    scan = parse_file(_write(tmp_path / "slurm-81234.out", JOB_FAILURES), year_hint=2024)
    got = [(_line_of(s.origin), s.kind, s.host, s.gpu) for s in scan.signals]
    assert got == [
        (3, sig.IB_ERROR, "node-7", 3),
        (4, sig.CUDA_OOM, "node-8", 5),
        (5, sig.NCCL_TIMEOUT, None, None),  # a job log names no node: host unknown
        (10, sig.TRACEBACK, None, None),
        (10, sig.CUDA_ILLEGAL_ADDRESS, None, None),
        (11, sig.NCCL_ERROR, None, None),
        (12, sig.CUDA_ECC, None, None),
        (13, sig.CUDA_LAUNCH_FAILURE, None, None),
        (14, sig.CUDA_OOM, None, None),
        (15, sig.SLURM_TASK_KILLED, "node-7", None),
        (16, sig.SLURM_TASK_KILLED, "node-9", None),
        (17, sig.SLURM_NODE_FAILURE, "node-12", None),
        (18, sig.SLURM_NODE_FAILURE, "node-7", None),
        (19, sig.SLURM_TIME_LIMIT, "node-7", None),
        (20, sig.SLURM_PREEMPTED, "node-3", None),
        (21, sig.SLURM_CANCELLED, "node-3", None),
    ]
    by_line = {_line_of(s.origin): s for s in scan.signals if s.kind != sig.CUDA_ILLEGAL_ADDRESS}
    assert by_line[5].ts == datetime(2024, 5, 1, 12, 10, 0, 123456)
    assert by_line[10].detail == ("RuntimeError: CUDA error: an illegal memory access was "
                                  "encountered")
    assert by_line[10].ts == datetime(2024, 5, 1, 12, 10, 0, 123456)  # from line 5
    assert by_line[15].detail == "task 3: Killed"
    assert by_line[18].ts == datetime(2024, 5, 1, 12, 20)
    assert by_line[18].detail == "JOB 81234 CANCELLED DUE TO NODE FAILURE"
    assert all(s.source == "log" for s in scan.signals)
    assert scan.counts[sig.TRACEBACK] == 1 and scan.counts["signals"] == 16


def test_a_traceback_is_one_signal_at_its_exception_line(tmp_path: Path) -> None:
    log = _write(tmp_path / "job.err", [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "    main()",
        "    ^^^^^^",
        '  File "train.py", line 2, in main',
        "    raise ValueError('bad shard 17')",
        "ValueError: bad shard 17",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "KeyboardInterrupt",
        "Traceback (most recent call last):",  # cut off: the process was killed mid-print
        '  File "train.py", line 9, in <module>',
    ])
    scan = parse_file(log)
    assert [(s.kind, s.detail, _line_of(s.origin)) for s in scan.signals] == [
        (sig.TRACEBACK, "ValueError: bad shard 17", 7),
        (sig.TRACEBACK, "KeyboardInterrupt", 13),
        # the file ends inside the third: a failure at its first line, of a kind not there
        (sig.TRACEBACK_CUT, "traceback cut off before its exception line", 14),
    ]
    assert scan.counts["tracebacks_unfinished"] == 1
    assert all(s.ts is None for s in scan.signals) and scan.counts["untimed_signals"] == 3


# -- kernel logs -------------------------------------------------------------------------------
def test_xid_in_syslog_journal_and_dmesg_formats(tmp_path: Path) -> None:
    lines = [
        "Mar  5 10:20:30 node-7 kernel: [123.456] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, "
        "name=python, GPU has fallen off the bus.",
        "2024-03-05T10:21:30+0100 node-8 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, An "
        "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
        "Mar 05 10:22:30 node-9 kernel: NVRM: Xid (PCI:0000:86:00): 94, Contained: SM (0x1).",
        "[Tue Mar  5 10:23:30 2024] NVRM: Xid (PCI:0000:86:00): 13, Graphics SM Warp Exception",
        "[  123.456789] NVRM: Xid (PCI:0000:3b:00): 31, pid=1, Ch 00000010, MMU Fault",
        "Mar  5 10:24:00 node-7 kernel: mlx5_core 0000:5e:00.0 ib0: Link down",
        "Mar  5 10:25:00 node-7 systemd[1]: Started Session 4 of user root.",
    ]
    log = _write(tmp_path / "node-7-kern.log", lines)
    scan = parse_file(log, year_hint=2024, gpu_by_pci={"00000000:3B:00.0": 2})
    got = [(s.ts, s.kind, s.host, s.gpu, s.xid, s.source) for s in scan.signals]
    assert got == [
        (datetime(2024, 3, 5, 10, 20, 30), sig.XID, "node-7", 2, 79, "kernel"),
        (datetime(2024, 3, 5, 9, 21, 30), sig.XID, "node-8", 2, 48, "kernel"),  # its own offset
        (datetime(2024, 3, 5, 10, 22, 30), sig.XID, "node-9", None, 94, "kernel"),
        (datetime(2024, 3, 5, 10, 23, 30), sig.XID, "node-7", None, 13, "kernel"),  # file name
        (None, sig.XID, "node-7", 2, 31, "kernel"),  # seconds since boot: no wall time
        (datetime(2024, 3, 5, 10, 24), sig.IB_ERROR, "node-7", None, None, "kernel"),
    ]
    assert scan.signals[0].detail == "Xid 79: pid=1234, name=python, GPU has fallen off the bus."
    assert scan.counts["untimed_signals"] == 1 and scan.unrecognised == 1


def test_time_zone_and_the_year_of_year_less_lines(tmp_path: Path) -> None:
    log = _write(tmp_path / "kern.log", [
        "Dec 31 23:59:58 node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off.",
        "Jan  1 00:00:02 node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off.",
        "2024-01-01T00:00:03Z node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off.",
    ])
    utc = parse_file(log, year_hint=2023)
    assert [s.ts for s in utc.signals] == [datetime(2023, 12, 31, 23, 59, 58),
                                          datetime(2024, 1, 1, 0, 0, 2),
                                          datetime(2024, 1, 1, 0, 0, 3)]
    assert [s.host for s in utc.signals] == ["node-7"] * 3  # from the line: kern.log names none
    berlin = parse_file(log, year_hint=2023, tz="Europe/Berlin")  # UTC+1 in winter
    assert [s.ts for s in berlin.signals] == [datetime(2023, 12, 31, 22, 59, 58),
                                             datetime(2023, 12, 31, 23, 0, 2),
                                             datetime(2024, 1, 1, 0, 0, 3)]  # had its zone
    with pytest.raises(ValueError, match="unknown time zone"):
        LogParser("x", tz="Mars/Olympus")


def test_host_from_the_line_the_hint_or_the_file_name(tmp_path: Path) -> None:
    assert host_from_filename("/var/log/nodes/node-7-kern.log") == "node-7"
    assert host_from_filename("node-7.dmesg.txt") == "node-7"
    assert host_from_filename("dmesg-gpu012.cluster.log.1") == "gpu012.cluster"
    assert host_from_filename("node-7_kernel_2024-03-05.log.gz") == "node-7"
    for name in ("kern.log", "kern.log.2.gz", "syslog", "slurm-81234.out", "train.log"):
        assert host_from_filename(name) is None, name
    # (#56) logs gathered one folder per node, named only for what they are
    assert host_from_filename("/sos/node-7/kern.log") == "node-7"
    assert host_from_filename("bundle/dgx-h100-017/dmesg.txt") == "dgx-h100-017"
    for name in ("/var/log/kern.log", "/scratch/job-81234/dmesg.txt", "x/2026-03-01/syslog",
                 "logs/run3/kern.log", "node-7/train.log"):
        assert host_from_filename(name) is None, name
    lines = ["[Tue Mar  5 10:23:30 2024] NVRM: Xid (PCI:0000:86:00): 13, Graphics Exception",
             "Mar  5 10:24:00 node-3 kernel: NVRM: Xid (PCI:0000:86:00): 13, Graphics Exception"]
    named = parse_file(_write(tmp_path / "node-7-kern.log", lines))
    assert [s.host for s in named.signals] == ["node-7", "node-3"]  # the line wins
    hinted = parse_file(_write(tmp_path / "dmesg.txt", lines), host="gpu-44")
    assert [s.host for s in hinted.signals] == ["gpu-44", "node-3"]
    assert [s.host for s in parse_file(tmp_path / "dmesg.txt").signals] == [None, "node-3"]
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == "0000:3b:00"


# -- streaming ---------------------------------------------------------------------------------
def _mixed_lines() -> list[str]:
    out = []
    for it in range(1, 61):
        out.append(_iter(it, ts=None if it % 3 else f"2024-05-01 12:{it // 60:02d}:{it % 60:02d}"))
        out.append(f"2024-05-01 12:00:{it % 60:02d},000 - INFO - loaded shard {it}")
        if it % 20 == 0:
            out += JOB_FAILURES[4:11]
            out.append(f"saving checkpoint at iteration {it:7d} to /ckpt/x")
    return out


def _summary(metrics, origins, events, signals) -> tuple:
    return (metrics, origins, [(e.kind, e.step, e.ts, e.origin) for e in events],
            [(s.kind, s.ts, s.origin, s.detail) for s in signals])


def test_line_by_line_block_and_file_reading_agree(tmp_path: Path) -> None:
    lines = _mixed_lines() + [_iter(61, loss="1.0e999", ts="2024-05-01 12:01:01")]
    log = _write(tmp_path / "slurm-1.out", lines)
    whole = parse_file(log, year_hint=2024)
    assert len(whole.metrics) == 61 and whole.counts[sig.TRACEBACK] == 3
    assert "loss" not in whole.metrics[-1] and whole.counts[sig.NAN_LOSS] == 1
    one = LogParser(log, year_hint=2024)
    for n, line in enumerate(lines, start=1):  # the Python prefilter path
        one.feed(line, n)
    one.finish()
    blocks = LogParser(log, year_hint=2024)
    data = log.read_bytes()
    used = 0
    for cut in (5000, 5001, 17000, len(data)):  # uneven blocks, split mid-line
        used += blocks.feed_block(data[used:cut])
    assert used == len(data)
    for p in (one, blocks):
        assert p.lines == whole.lines and p.unrecognised == whole.unrecognised
        assert p.unread == whole.unread and len(p.unread) == min(5, whole.unrecognised)
        assert _summary(p.metrics, p.metric_origins, p.checkpoint_events, p.signals) == _summary(
            whole.metrics, whole.metric_origins, whole.checkpoint_events, whole.signals)


def test_tailing_across_rotation_and_truncation(tmp_path: Path) -> None:
    live = tmp_path / "slurm-9.out"
    parser = LogParser(live, keep=False)
    _write(live, [_iter(1), _iter(2)])
    with open(live, "ab") as fh:
        fh.write(_iter(3).encode()[:50])  # a line being written
    data = live.read_bytes()
    used = parser.feed_block(data)
    assert data[used:] == _iter(3).encode()[:50]
    first = parser.drain()
    assert [m["step"] for m in first.metrics] == [1, 2] and parser.drain().metrics == []
    with open(live, "ab") as fh:
        fh.write(_iter(3).encode()[50:] + b"\n")
    parser.feed_block(live.read_bytes()[used:])
    second = parser.drain()
    assert [m["step"] for m in second.metrics] == [3] and second.metric_origins == [f"{live}:3"]
    os.rename(live, tmp_path / "slurm-9.out.1")  # rotated: a new file starts at line 1
    _write(live, ["srun: error: node-7: task 0: Killed", _iter(4)])
    parser.feed_block(live.read_bytes(), 1)
    batch = parser.drain()
    assert [m["step"] for m in batch.metrics] == [4] and batch.metric_origins == [f"{live}:2"]
    assert [(s.kind, s.origin) for s in batch.signals] == [("slurm_task_killed", f"{live}:1")]
    assert parser.metrics == [] and parser.signals == []  # keep=False: drained results released
    assert parser.counts["metrics"] == 4


def test_on_batch_streams_a_file_and_start_line_skips(tmp_path: Path) -> None:
    lines = _mixed_lines()
    log = _write(tmp_path / "slurm-2.out", lines)
    batches: list[textlogs.LogBatch] = []
    scan = parse_file(log, year_hint=2024, on_batch=batches.append)
    assert scan.metrics == [] and sum(len(b.metrics) for b in batches) == 60
    assert scan.counts["metrics"] == 60 and scan.lines == len(lines)
    later = parse_file(log, year_hint=2024, start_line=len(lines) - 9)
    assert later.lines == 10 and _line_of(later.metric_origins[0]) > len(lines) - 10


# -- bad input ---------------------------------------------------------------------------------
def test_non_utf8_bytes_are_replaced_counted_and_the_rest_read(tmp_path: Path) -> None:
    data = (b"plain line\n"
            + b"caf\xe9 latin-1 \xff\xfe noise\n"
            + _iter(5).replace("iteration", "iteration").encode()[:-1] + b" \xc3\x28 |\n"
            + "ünïcödé is fine\n".encode())
    scan = parse_file(_write(tmp_path / "mixed.log", data))
    assert scan.lines == 4 and scan.counts["replaced_lines"] == 2
    assert [b.origin.rsplit(":", 1)[1] for b in scan.bad] == ["2", "3"]
    assert all("not UTF-8" in b.reason for b in scan.bad)
    assert [m["step"] for m in scan.metrics] == [5]
    assert scan.unrecognised == 3


def test_unknown_lines_are_counted_never_an_error(tmp_path: Path) -> None:
    noise = ["", "   ", "hello", "{not a dict", "99%|", "iteration", "\t\x00\x07", "] [ : |"]
    scan = parse_file(_write(tmp_path / "noise.log", noise * 50))
    assert scan.lines == 400 and scan.unrecognised == 400
    assert scan.metrics == [] and scan.signals == [] and scan.bad == []


def test_a_hostile_line_is_read_by_its_tail(tmp_path: Path) -> None:
    big = b"\x1b[31m\x00\x01garbage\x7f" * 700_000  # ~10 MB, control characters, no newline
    tail = b" NCCL WARN remote process exited"
    log = _write(tmp_path / "hostile.log", _iter(1).encode() + b"\n" + big + tail + b"\n"
                 + _iter(2).encode() + b"\n" + big)  # and one more at the end, unterminated
    scan = parse_file(log)
    assert scan.lines == 4
    assert [m["step"] for m in scan.metrics] == [1, 2]
    assert scan.metric_origins == [f"{log}:1", f"{log}:3"]
    assert [(s.kind, _line_of(s.origin)) for s in scan.signals] == [(sig.NCCL_ERROR, 2)]
    line = scan.signals[0].line
    assert len(line) <= sig.MAX_LINE_CHARS and not any(ord(c) < 32 for c in line)
    assert scan.counts["long_lines"] == 2
    assert [(_line_of(b.origin), b.reason.split(":")[0]) for b in scan.bad] == [
        (2, f"line of {len(big) + len(tail):,} bytes"), (4, f"line of {len(big):,} bytes")]


def test_unreadable_paths_raise_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImportFileError, match="no such file"):
        parse_file(tmp_path / "missing.log")
    with pytest.raises(ImportFileError, match="is a directory"):
        parse_file(tmp_path)


def test_signals_table_columns_and_sample_logs() -> None:
    logs = ROOT / "sample_data" / "logs"
    job = parse_file(logs / "slurm-81234.out", year_hint=2024, run="atlas-70b")
    kern = parse_file(logs / "node-7-kern.log", year_hint=2024)
    assert job.metrics and job.checkpoint_events and job.bad == []
    assert {s.kind for s in kern.signals} == {sig.XID}
    frame = sig.signals_frame(job.signals + kern.signals, "atlas-70b")
    assert tuple(frame.columns) == sig.SIGNAL_COLUMNS
    assert set(frame["kind"]) <= set(sig.SIGNAL_KINDS) and (frame["run_id"] == "atlas-70b").all()


def test_the_two_prefilters_agree() -> None:
    """Blocks are filtered by RE2 (pyarrow), single lines by Python's re: same lines pass."""
    texts = [_iter(3), _iter(4, loss="nan", ts=None), *JOB_FAILURES, *_mixed_lines()]
    for path in (ROOT / "sample_data" / "logs").iterdir():
        texts += path.read_text().splitlines()
    texts += ["WARNING: Loss is NaN", "found inf in grads", "loss = -inf", "nanoseconds", "info",
              "step:  7  loss: 1", "validate step: 3", "Saving the checkpoint.", "99%|##| 9/10 [",
              "Loading model from out/checkpoint-3.", "mlx5_core ib0: Link is Down", "ünï"]
    re2 = pc.match_substring_regex(pa.array(texts, pa.large_string()), PREFILTER).to_pylist()
    assert re2 == [PREFILTER_RE.search(t) is not None for t in texts]
    assert sum(re2) > len(texts) // 3 and not all(re2)


@pytest.mark.parametrize(
    ("lines", "world"),
    [
        # Megatron-LM arguments.py, rank 0 (recent and older wordings), and its arguments block
        (["using world size: 64, data-parallel size: 8, context-parallel size: 1, hierarchical "
          "context-parallel sizes: None, tensor-model-parallel size: 8, pipeline-model-parallel "
          "size: 1"], 64),
        (["using world size: 16, data-parallel size: 2, context-parallel size: 1 "
          "tensor-model-parallel size: 8, pipeline-model-parallel size: 1 "], 16),
        (["------------------------ arguments ------------------------",
          "  world_size ...................................... 2048",
          "  seq_length ...................................... 4096"], 2048),
        # No world size stated: NCCL's communicator lines say how many ranks there are
        (["gpu-node-3:4242:4301 [1] NCCL INFO comm 0x5581 rank 9 nranks 32 cudaDev 1 nvmlDev 1 "
          "busId 1b000 commId 0x7d7f - Init COMPLETE",
          "gpu-node-3:4242:4301 [1] NCCL INFO comm 0x5599 rank 1 nranks 8 cudaDev 1 nvmlDev 1 "
          "busId 1b000 commId 0x11aa - Init COMPLETE"], 32),
        (["starting Megatron-LM", "hello world_size of nothing"], None),
    ],
)
def test_the_jobs_world_size_from_its_log(tmp_path: Path, lines: list[str], world: int) -> None:
    """The GPUs a job has, as its log states them (#37, 3): what GPU-hours and cost need."""
    log = tmp_path / "slurm-1.out"
    _write(log, lines)
    parser = LogParser(log, keep=False)
    parser.feed_block(log.read_bytes(), 1, final=True)
    assert parser.world_size == world


_IT = " [2026-03-01 10:00:0{k}.5] iteration {k:8d}/  500000 | "
_MEGATRON_SHAPES = [
    "consumed samples: 4096 | elapsed time per iteration (ms): 5123.4 | learning rate: "
    "3.0E-04 | global batch size:  4096 | lm loss: 2.5E+00 | loss scale: 1.0 | grad norm: "
    "0.900 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "lm loss: 2.5E+00 | learning rate: 3.0E-04 | number of nan iterations: 0 | grad norm: 1.5 |",
    "grad norm: 1.5 | lm loss: 2.5E+00 | number of nan iterations: 0 |",
    "lm loss: 1.0 | lm loss: 2.0 | consumed samples: 7 | number of nan iterations: 0 |",
    "consumed samples: x | consumed samples: 9 | lm loss: 1.0 | number of nan iterations: 0 |",
    "lm loss: 1.0 | number of nan iterations: 2 | grad norm: 3.0 | number of nan iterations: 0 |",
    "lm loss: 1.0 | learning rate: 1e9999 | number of nan iterations: 0 |",
    "consumed tokens: 8192 | lm loss: 1.0 | number of nan iterations: 0 |",
    "lm loss: nan | number of nan iterations: 0 |",
]


@pytest.mark.parametrize("without", ["", "consumed tokens", "consumed samples", "grad norm",
                                     "learning rate", "lm loss"])
def test_megatron_columns_read_alike_without_the_fields_a_block_lacks(without: str) -> None:
    """logfast leaves out of its regex the fields whose text is not in the block (each costs
    a scan of every line); the lines taken and their values are the full regex's."""
    from telemetry.collect.logs import logfast

    lines = [_IT.format(k=k) + s for k, s in enumerate(_MEGATRON_SHAPES)]
    if without:
        lines = [ln for ln in lines if f"| {without}: " not in ln]
    block = ("\n".join(lines) + "\n").encode()
    field = {"": None, "consumed tokens": "tokens", "consumed samples": "samples",
             "grad norm": "grad_norm", "learning rate": "lr", "lm loss": "loss"}[without]
    gone = logfast._pattern(block)[1]
    assert (field in gone) if field else gone == []
    arr = pa.array(lines, pa.large_string())
    fast, full = logfast.megatron_columns(arr, within=block), logfast.megatron_columns(arr)
    if full is None:
        assert fast is None
        return
    assert fast is not None and fast[0].tolist() == full[0].tolist() and fast[1] == full[1]


def test_points_kept_as_columns_equal_the_records_path(tmp_path: Path) -> None:
    """A long-lived reader (``keep=False``: import, follow) keeps a block's column-wise
    Megatron points as columns (``LogBatch.metric_columns``, #56: no dict per point); they
    are the points ``parse_file``'s records give, tokens from ``seq_length`` included, and a
    block with an Inf loss or a restart still goes the records way."""
    from benchmarks.logs import write_log
    from telemetry.collect.logs.textlogs import LogParser, parse_file

    body, log = tmp_path / "body.log", tmp_path / "megatron.log"
    write_log(body, 20, "mixed")
    with open(log, "w", encoding="utf-8") as fh:  # the sizes, then points that need the lines
        fh.write("    seq_length ...................................... 4096\n")
        fh.write(body.read_text(encoding="utf-8"))
        fh.write(" [2026-04-01 00:00:00.000000] iteration   900001/  900002 | consumed samples:"
                 " 4096 | lm loss: 1e999 | number of nan iterations:   0 |\n")
    keys = ("ts", "step", "loss", "lr", "grad_norm", "tokens")
    want = [tuple(m.get(k) for k in keys) for m in parse_file(log, run="r").metrics]
    parser = LogParser(log, run="r", keep=False)
    got, columnwise = [], 0
    data, at = log.read_bytes(), 0
    while at < len(data):  # as the reader feeds it: 8 MiB, then the rest of a line goes on
        at += parser.feed_block(data[at : at + (8 << 20)], final=at + (8 << 20) >= len(data))
        batch = parser.drain()
        got += [tuple(m.get(k) for k in keys) for m in batch.metrics]
        for chunk in batch.metric_columns:
            columnwise += len(chunk["step"])
            got += list(zip(*(chunk[k] for k in keys), strict=True))
    assert columnwise > len(want) // 2  # the path under test was taken ...
    assert all(r[5] is not None for r in want)  # ... with tokens from the samples
    assert sorted(got, key=lambda r: (r[1], r[0])) == sorted(want, key=lambda r: (r[1], r[0]))


def test_a_block_with_context_timed_lines_keeps_its_points_as_columns(tmp_path: Path) -> None:
    """A block holding lines timed by context (an untimed traceback after a progress line)
    keeps its column-wise points as columns too (#56: a third of a 1 GiB log's blocks went the
    records way for them), and such a line takes the time of the progress point before it
    (``_lift``: another process's older stamp is not when it happened) exactly as
    ``parse_file``'s records path gives it."""
    from benchmarks.logs import _iteration

    rng, t0 = random.Random(3), datetime(2026, 3, 1, 0, 1)
    lines = [_iteration(it, t0 + timedelta(seconds=5 * it), rng) for it in range(1, 40)]
    lines += ["2026-03-01 00:00:30,123 - megatron.core.datasets - INFO - loaded shard 3",
              "Traceback (most recent call last):",
              '  File "/workspace/megatron/pretrain_gpt.py", line 312, in <module>',
              "RuntimeError: CUDA error: an illegal memory access was encountered"]
    lines += [_iteration(it, t0 + timedelta(seconds=5 * it), rng) for it in range(40, 60)]
    log = tmp_path / "megatron.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole = parse_file(log, run="r")
    assert whole.counts["ts_from_paced_progress"] >= 1  # the lift under test happens here
    parser = LogParser(log, run="r", keep=False)
    parser.feed_block(log.read_bytes(), final=True)
    batch = parser.drain()
    assert not batch.metrics and len(batch.metric_columns[0]["step"]) == 59  # kept as columns
    assert batch.signals == whole.signals and batch.signals
    assert batch.signals[0].ts == t0 + timedelta(seconds=5 * 39)
