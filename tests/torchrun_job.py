"""A real two-node ``torchrun`` job on this machine (STACK.md, "A real multi-node torchrun job on
one machine"): each node is one torchrun agent as root in its own UTS and mount namespace with
its own hostname, ``NODES`` naming every node on its own loopback address, 4 gloo ranks per
node, c10d rendezvous. Each agent's output goes to one job log under its ``srun --label``
number (``0: ``, ``1: ``), as ``srun --label`` gives it. Attempts run one after the other
(``--max-restarts 0``: the restart is the next launch), the first with a failure
(``torchrun_train.py``), the next from its checkpoint.

``python tests/torchrun_job.py FAIL FAIL_RANK OUT.log`` records one job (kept as the fixtures
in ``tests/fixtures/torchrun/``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

NODES = {"gpu-b03": "127.0.1.3", "gpu-b07": "127.0.1.7"}
PER_NODE = 4
TORCHRUN = Path(sys.executable).parent / "torchrun"
_SCRIPT = Path(__file__).with_name("torchrun_train.py")


def _agent(host: str, port: int, job: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    first = next(iter(NODES))
    cmd = (f"hostname {host} && mount --bind {job}/hosts /etc/hosts && "
           f"mount --bind {job} /srv && cd /srv && exec {TORCHRUN} --nnodes {len(NODES)} "
           f"--nproc-per-node {PER_NODE} --rdzv-backend c10d --rdzv-endpoint {first}:{port} "
           f"--rdzv-id job{port} --max-restarts 0 --tee 3 --log-dir /srv/logs/{host} "
           "/srv/train.py /srv/ckpt")  # fmt: skip
    return subprocess.Popen(
        ["unshare", "--uts", "--mount", "sh", "-c", cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def attempt(job: Path, log: Path, port: int, **fail: str) -> list[int]:
    """One launch of every node; their exit codes. Lines go to ``log`` as they come."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           **{k.upper(): v for k, v in fail.items()}}  # fmt: skip
    lock = threading.Lock()
    procs = [_agent(h, port, job, env) for h in NODES]

    def pump(n: int, p: subprocess.Popen[bytes]) -> None:
        assert p.stdout is not None
        with open(log, "ab") as out:
            for line in p.stdout:
                with lock:
                    out.write(f"{n}: ".encode() + line)
                    out.flush()

    threads = [threading.Thread(target=pump, args=(n, p)) for n, p in enumerate(procs)]
    for t in threads:
        t.start()
    codes = [p.wait(timeout=240) for p in procs]
    for t in threads:
        t.join()
    return codes


def run(log: Path, fail: str, fail_rank: int, port: int = 29611, iters: int = 20) -> Path:
    """The job: a failing attempt, then one from its checkpoint to the end. Returns ``log``."""
    job = Path(tempfile.mkdtemp(prefix="torchrun-job-"))
    try:
        (job / "hosts").write_text(
            "127.0.0.1 localhost\n" + "".join(f"{ip} {h}\n" for h, ip in NODES.items())
        )
        shutil.copy(_SCRIPT, job / "train.py")
        (job / "ckpt").mkdir()
        log.write_bytes(b"")
        attempt(job, log, port, fail=fail, fail_rank=str(fail_rank), iters=str(iters))
        attempt(job, log, port + 1, iters=str(iters))
    finally:
        shutil.rmtree(job, ignore_errors=True)
    return log


if __name__ == "__main__":
    run(Path(sys.argv[3]), sys.argv[1], int(sys.argv[2]))
