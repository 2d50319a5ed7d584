"""A multi-node job's log in which one rank fails and every other rank logs the cascade, as the
frameworks write it: Megatron-LM under torchrun under ``srun --label`` (each line starts with
the node's task number and torchrun's ``[defaultL]:`` tee prefix).

Formats, verbatim in shape (values are this story's):
- NCCL's communicator line, ``host:pid:tid [dev] NCCL INFO comm 0x... rank R nranks N cudaDev
  D nvmlDev D busId B commId 0x... - Init COMPLETE`` (NCCL 2.18+ ``init.cc``);
- Megatron-LM's iteration line with its timestamp (``training.py`` ``training_log``);
- PyTorch's excepthook prefix ``[rankR]: `` on every traceback line (``distributed_c10d.py``:
  ``excepthook_prefix = f"[rank{get_rank()}]"``) and its C++ prefix ``[rankR]:[E218 ...`` from
  ``c10::SetGlobalRank`` (seen in pytorch/pytorch and LlamaFactory issue reports);
- ProcessGroupNCCL's ``[PG ID 0 PG GUID 0(default_pg) Rank R] Process group watchdog thread
  terminated with exception: NCCL error: remote process exited or there was a network error``;
- NCCL's ``NCCL WARN NET/IB : Got completion from peer ... with status=12`` on the peers;
- torchrun's ``Sending process N closing signal SIGTERM``, ``failed (exitcode: 1) local_rank:``
  and its ``ChildFailedError`` summary (``time : 2025-02-18_07:35:14``), which names the rank
  that exited first, not the one that failed first;
- srun's ``srun: error: node-000: task 0: Exited with exit code 1``.

The culprit fails between two progress lines, the job restarts and loads the last checkpoint:
one interruption whose cause must be the culprit's line, with its rank and host.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from tests.cluster_fixture import _iteration  # Megatron-LM's iteration line, with its time

T0 = datetime(2025, 2, 18, 7, 0, 0)
STEP_S = 2.0
LOG_EVERY = 10
RUN = "orion-13b"


def host(node: int) -> str:
    return f"gpu-node-{node:03d}"


def _glog(level: str, t: datetime) -> str:
    return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d}"


def _culprit_lines(kind: str, rank: int, per_node: int, t: datetime) -> list[str]:
    node, local = divmod(rank, per_node)
    pre = f"{node}: [default{local}]:"
    if kind == "oom":
        return [
            f"{pre}[rank{rank}]: Traceback (most recent call last):",
            f'{pre}[rank{rank}]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 245, '
            "in <module>",
            f"{pre}[rank{rank}]:     pretrain(",
            f'{pre}[rank{rank}]:   File "/workspace/Megatron-LM/megatron/training/training.py"'
            ", line 1112, in train_step",
            f"{pre}[rank{rank}]:     losses_reduced = forward_backward_func(",
            f"{pre}[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
            f"allocate 2.00 GiB. GPU {local} has a total capacity of 79.10 GiB of which 1.02 GiB "
            "is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. "
            "Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.30 GiB is reserved "
            "by PyTorch but unallocated.",
        ]
    # an illegal memory access, as the culprit's watchdog thread reports it
    return [
        f"{pre}[rank{rank}]:[{_glog('E', t)} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID "
        f"0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: "
        "CUDA error: an illegal memory access was encountered",
        f"{pre}CUDA kernel errors might be asynchronously reported at some other API call, "
        "so the stacktrace below might be incorrect.",
    ]


def _cascade_lines(rank: int, per_node: int, pid: int, t: datetime) -> list[str]:
    """What one waiting rank logs when a peer went away (about ten lines)."""
    node, local = divmod(rank, per_node)
    pre = f"{node}: [default{local}]:"
    hp = f"{host(node)}:{pid}:{pid + 100} [{local}]"
    peer = f"10.10.{(node + 1) % 250}.{local + 10}<{41000 + rank % 20000}>"
    t1, t2 = t + timedelta(milliseconds=400), t + timedelta(seconds=1)
    return [
        f"{pre}{hp} NCCL WARN NET/IB : Got completion from peer {peer} with status=12 "
        "opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.10.0.1 remoteGids::ffff:10.10.0.2",
        f"{pre}{hp} NCCL INFO transport/net.cc:1298 -> 6",
        f"{pre}{hp} NCCL INFO proxy.cc:694 -> 6",
        f"{pre}[rank{rank}]:[{_glog('E', t1)} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID "
        f"0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: "
        "NCCL error: remote process exited or there was a network error, NCCL version 2.21.5",
        f"{pre}ncclRemoteError: A call failed possibly due to a network error or a remote "
        "process exiting prematurely.",
        f"{pre}[rank{rank}]: Traceback (most recent call last):",
        f'{pre}[rank{rank}]:   File "/workspace/Megatron-LM/megatron/core/distributed/'
        'param_and_grad_buffer.py", line 231, in finish_grad_sync',
        f"{pre}[rank{rank}]:     self.communication_handle.wait()",
        f"{pre}[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or "
        "there was a network error, NCCL version 2.21.5",
        f"{pre}[rank{rank}]:[{_glog('W', t2)} ProcessGroupNCCL.cpp:1250] Warning: "
        "WorkNCCL destructor: work not completed",
    ]


def build(
    path: Path,
    *,
    nodes: int = 2,
    per_node: int = 4,
    culprit: int = 5,
    kind: str = "oom",
    first_steps: int = 400,
    ckpt_step: int = 300,
    nccl_lines: bool = True,
) -> Path:
    """Write the job log at ``path``: progress to ``first_steps``, the culprit's failure, the
    cascade on every other rank, torchrun's teardown, then a restart from ``ckpt_step``.
    Without ``nccl_lines`` no line says which host each rank ran on."""
    world = nodes * per_node
    last = world - 1
    tail = f"{last // per_node}: [default{last % per_node}]:"
    lines: list[str] = []
    for r in range(world if nccl_lines else 0):
        node, local = divmod(r, per_node)
        pid = 20000 + r
        lines.append(
            f"{node}: [default{local}]:{host(node)}:{pid}:{pid + 99} [{local}] NCCL INFO comm "
            f"0x55d5c8e{r:05x} rank {r} nranks {world} cudaDev {local} nvmlDev {local} busId "
            f"{(local + 1) * 0x10000:x} commId 0x7c1e9a3b5d2f4e60 - Init COMPLETE"
        )
    t = T0
    for step in range(LOG_EVERY, first_steps + 1, LOG_EVERY):
        t = T0 + timedelta(seconds=step * STEP_S)
        lines.append(tail + _iteration(t, step))
    fail = t + timedelta(seconds=7)
    lines += _culprit_lines(kind, culprit, per_node, fail)
    cascade_at = fail + timedelta(seconds=3)
    for r in range(world):
        if r != culprit:
            at = cascade_at + timedelta(microseconds=137 * r)
            lines += _cascade_lines(r, per_node, 20000 + r, at)
    down = cascade_at + timedelta(seconds=4)
    for node in range(nodes):
        for local in range(per_node):
            lines.append(
                f"{node}: {_glog('W', down)} 140234 torch/distributed/elastic/multiprocessing/"
                f"api.py:897] Sending process {20000 + node * per_node + local} closing signal "
                "SIGTERM"
            )
    # torchrun on node 0 names the first of ITS ranks to exit: a cascade rank, not the culprit
    lines += [
        f"0: {_glog('E', down)} 140234 torch/distributed/elastic/multiprocessing/api.py:869] "
        f"failed (exitcode: 1) local_rank: 0 (pid: 20000) of binary: /usr/bin/python3",
        "0: Traceback (most recent call last):",
        '0:   File "/usr/local/bin/torchrun", line 8, in <module>',
        "0:     sys.exit(main())",
        "0: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "0: ============================================================",
        "0: pretrain_gpt.py FAILED",
        "0: ------------------------------------------------------------",
        "0: Failures:",
        "0:   <NO_OTHER_FAILURES>",
        "0: ------------------------------------------------------------",
        "0: Root Cause (first observed failure):",
        "0: [0]:",
        f"0:   time      : {down:%Y-%m-%d_%H:%M:%S}",
        f"0:   host      : {host(0)}",
        "0:   rank      : 0 (local_rank: 0)",
        "0:   exitcode  : 1 (pid: 20000)",
        "0:   error_file: <N/A>",
        "0:   traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "0: ============================================================",
        f"srun: error: {host(0)}: task 0: Exited with exit code 1",
        f"srun: error: {host(1)}: task 1: Exited with exit code 1",
    ]
    back = down + timedelta(minutes=6)
    lines.append(
        f"{tail} [{back:%Y-%m-%d %H:%M:%S}] loading checkpoint from /lustre/ckpt/{RUN} at "
        f"iteration {ckpt_step}"
    )
    lines.append(
        f"{tail} [{back:%Y-%m-%d %H:%M:%S}] successfully loaded checkpoint from /lustre/ckpt/"
        f"{RUN} [ t 0/1, p 0/1 ] at iteration {ckpt_step}"
    )
    for i, step in enumerate(range(ckpt_step + LOG_EVERY, ckpt_step + 200, LOG_EVERY), 1):
        lines.append(tail + _iteration(back + timedelta(seconds=30 + i * LOG_EVERY * STEP_S),
                                       step))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
