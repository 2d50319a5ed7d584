"""A real multi-rank PyTorch job on the CPU (gloo) for the flight-recorder tests, started with
``torchrun --nproc-per-node N tests/fr_job.py OUT``: every rank runs ``STEPS`` all-reduce and
broadcast pairs, then rank ``CULPRIT`` never calls the next all-reduce (it sleeps, as a rank
stuck in a data loader or a hung kernel would) while the others wait for it until their timeout.
Then each rank dumps its flight recorder as PyTorch does on a watchdog timeout: the pickle
(``nccl_trace_rank_<rank>``, PyTorch's default name) or, with ``FR_JSON=1``, the JSON text of
``_dump_fr_trace_json``. ``TORCH_FR_BUFFER_SIZE`` must be set for gloo to record."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

out = sys.argv[1]
culprit = int(os.environ.get("CULPRIT", "-1"))
steps = int(os.environ.get("STEPS", "5"))
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
t = torch.ones(1024)
for _ in range(steps):
    dist.all_reduce(t)
    dist.broadcast(t, 0)
if rank == culprit:
    time.sleep(float(os.environ.get("WAIT_S", "4")) + 1)  # never calls the all-reduce
else:
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait(timeout=timedelta(seconds=float(os.environ.get("WAIT_S", "4"))))
    except RuntimeError as exc:  # the wait times out: rank `culprit` never arrived
        print(f"rank {rank}: {exc}".splitlines()[0], flush=True)
c10d = torch._C._distributed_c10d
if os.environ.get("FR_JSON") == "1":
    text = c10d._dump_fr_trace_json(True, True)
    with open(os.path.join(out, f"fr_rank_{rank}.json"), "wb") as fh:
        fh.write(text if isinstance(text, bytes) else text.encode())
else:
    with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as fh:
        fh.write(c10d._dump_fr_trace(True, True))
os._exit(0)  # the culprit's pending peers would make a clean shutdown wait
